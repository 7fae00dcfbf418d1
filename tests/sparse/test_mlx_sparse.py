"""AutoSparse(AutoMLX()): sparse Jacobians and Hessians of MLX functions, from the
global detector (the NumPy tracer, for an f written with the Array API), the local
detector or a given pattern. An f that calls mx.* on x (or mixes x with an mx.array)
gets a clear error or a sound pattern from the global detector, never a small one. MLX
has no sparse type: the result is a scipy.sparse.csr_array, or with dense=True an
mx.array. Every result is checked against its closed form or MLX's own derivative."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import diffiface as di

mx = pytest.importorskip("mlx.core")
array_namespace = pytest.importorskip("array_api_compat").array_namespace

X = np.linspace(0.1, 1.0, 6)


def _f(x):
    return mx.sin(x) * x + mx.concatenate([x[1:] * x[:-1], mx.zeros((1,), dtype=x.dtype)])


def _jac(x):
    j = np.diag(np.cos(x) * x + np.sin(x))
    j[np.arange(5), np.arange(1, 6)] += x[:-1]
    j[np.arange(5), np.arange(5)] += x[1:]
    return j


def _g(x):
    return (mx.sin(x) * x).sum() + (x[1:] * x[:-1]).sum()


def _hess(x):
    h = np.diag(2 * np.cos(x) - x * np.sin(x))
    h[np.arange(5), np.arange(1, 6)] = h[np.arange(1, 6), np.arange(5)] = 1.0
    return h


def _local(**kw):
    return di.AutoSparse(di.AutoMLX(), sparsity_detector="local", **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dense", [False, True])
def test_jacobian_and_hessian_against_closed_forms(dtype, dense):
    x = mx.array(X, dtype=mx.float32 if dtype == np.float32 else mx.float64)
    tol = 2e-6 if dtype == np.float32 else 1e-6  # (MLX's float64 sin and cos: float32-accurate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", di.SparsityWarning)  # (the local pattern's notice)
        J = di.jacobian(_f, _local(dense=dense), x)
        y, g, H = di.value_gradient_and_hessian(_g, _local(dense=dense), x)
    want = mx.array if dense else sp.csr_array
    assert type(J) is want and type(H) is want
    J, H = (np.asarray(J), np.asarray(H)) if dense else (J.toarray(), H.toarray())
    assert J.dtype == dtype and H.dtype == dtype
    np.testing.assert_allclose(J, _jac(X), rtol=tol, atol=tol)
    np.testing.assert_allclose(H, _hess(X), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(g), np.asarray(mx.grad(_g)(x)), rtol=tol, atol=tol)
    np.testing.assert_allclose(float(y), float(_g(x)), rtol=tol)


def test_a_given_pattern_and_strict():
    x = mx.array(X.astype(np.float32))
    pattern = sp.csr_array(_jac(X) != 0)
    backend = di.AutoSparse(di.AutoMLX(), sparsity_detector=pattern, strict=True)
    J = di.jacobian(_f, backend, x)
    np.testing.assert_allclose(J.toarray(), _jac(X), rtol=2e-6, atol=2e-6)
    assert J.nnz == pattern.nnz


def _f_api(x):  # _f, written with the Array API
    xp = array_namespace(x)
    return xp.sin(x) * x + xp.concat([x[1:] * x[:-1], xp.zeros((1,), dtype=x.dtype)])


def _g_api(x):  # _g, written with the Array API
    xp = array_namespace(x)
    return xp.sum(xp.sin(x) * x) + xp.sum(x[1:] * x[:-1])


@pytest.mark.parametrize("prepared", [False, True], ids=["unprep", "prep"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_global_detector_by_default(dtype, prepared):
    """The default detector, no SparsityWarning (warnings are errors here): the exact
    patterns and values of the closed forms, in x's dtype."""
    x = mx.array(X, dtype=mx.float32 if dtype == np.float32 else mx.float64)
    tol = 2e-6 if dtype == np.float32 else 1e-6
    backend = di.AutoSparse(di.AutoMLX())
    if prepared:
        jp = di.prepare_jacobian(_f_api, backend, x)
        hp = di.prepare_hessian(_g_api, backend, x)
        J, H = di.jacobian(_f_api, backend, x, prep=jp), di.hessian(_g_api, backend, x, prep=hp)
    else:
        J, H = di.jacobian(_f_api, backend, x), di.hessian(_g_api, backend, x)
    assert J.dtype == dtype and H.dtype == dtype
    np.testing.assert_array_equal(J.toarray() != 0, _jac(X) != 0)
    np.testing.assert_array_equal(H.toarray() != 0, _hess(X) != 0)
    np.testing.assert_allclose(J.toarray(), _jac(X), rtol=tol, atol=tol)
    np.testing.assert_allclose(H.toarray(), _hess(X), rtol=tol, atol=tol)


def _scaled(x, a):
    xp = array_namespace(x)
    return xp.tanh(a["m"] @ x) * x


@pytest.mark.parametrize("kind", ["mlx", "numpy"])
def test_an_mlx_constant_reaches_f_as_numpy(kind):
    """di.Constant of an mx.array (in a dict): the pattern of a NumPy constant, and the
    values of the closed form (J = diag(tanh(Ax)) + diag(x) (1 - tanh^2(Ax)) A)."""
    a = np.eye(6, k=1) + np.diag(np.linspace(1.0, 2.0, 6))
    a[0, 4] = 0.5
    x = mx.array(X.astype(np.float32))
    c = {"m": mx.array(a.astype(np.float32)) if kind == "mlx" else a.astype(np.float32)}
    J = di.jacobian(_scaled, di.AutoSparse(di.AutoMLX()), x, di.Constant(c))
    t = np.tanh(a @ X)
    want = np.diag(t) + (X * (1 - t**2))[:, None] * a
    np.testing.assert_array_equal(J.toarray() != 0, want != 0)
    np.testing.assert_allclose(J.toarray(), want, rtol=2e-6, atol=2e-6)


C = np.array([0.0, 1.0, -2.0, 0.5, 3.0, 0.0], np.float32)
M = (np.eye(6, k=1) + np.eye(6)).astype(np.float32)


def _mixed(form):
    """f calling mx.* on x or combining x with a closed-over mx.array, by form."""
    c, m = mx.array(C), mx.array(M)
    xp = array_namespace  # (of x: NumPy's, under the detector)
    return {
        "mx.sin(x)": lambda x: mx.sin(x) * x,
        "mx.sum(x)": lambda x: mx.sum(x) * x,
        "mx.stack": lambda x: mx.stack([x, x])[0],
        "mx.where": lambda x: mx.where(x > 0, x, 0.0),
        "x * c": lambda x: x * c,
        "c * x": lambda x: c * x,
        "x + c[0]": lambda x: x + c[0],
        "m @ x": lambda x: m @ x,
        "x @ m": lambda x: x @ m,
        "xp.multiply(c, x)": lambda x: xp(x).multiply(c, x),
        "xp.where(x > 0, x, c)": lambda x: xp(x).where(x > 0, x, c),
        "xp.concat([x, c])": lambda x: xp(x).concat([x * x[0], c]),
        "float(c[1]) * x": lambda x: float(c[1]) * x,
        "mx.zeros out": lambda x: mx.zeros((6,)) + c,
    }[form]


FORMS = ["mx.sin(x)", "mx.sum(x)", "mx.stack", "mx.where", "x * c", "c * x", "x + c[0]",
         "m @ x", "x @ m", "xp.multiply(c, x)", "xp.where(x > 0, x, c)", "xp.concat([x, c])",
         "float(c[1]) * x", "mx.zeros out"]  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_mlx_calls_give_a_clear_error_or_a_sound_pattern(form):
    """Never a pattern that misses a nonzero of MLX's own dense Jacobian (at three
    points); where MLX refuses the traced x, the error names the fixes."""
    f, backend = _mixed(form), di.AutoSparse(di.AutoMLX())
    x = mx.array(X.astype(np.float32))
    try:
        got = di.sparsity_pattern(f, backend, x).toarray()
    except di.DiffifaceTypeError as exc:
        msg = str(exc)
        assert msg.startswith(f"sparsity_pattern(f, {backend!r}, x): sparsity detection"), msg
        assert "array_namespace(x)" in msg and "sparsity_detector='local'" in msg, msg
        return
    rng = np.random.default_rng(1)
    for _ in range(3):
        at = mx.array(rng.uniform(-1.0, 1.0, 6).astype(np.float32))
        dense = np.asarray(di.jacobian(f, di.AutoMLX(), at)).reshape(-1, 6)
        assert not ((dense != 0) & ~got).any(), form


def test_an_mlx_function_is_a_clear_error_for_both_operators():
    """_f and _g call mx.sin on x: the global detector names the fixes, for the Jacobian
    and the Hessian; the local detector serves them (test above)."""
    x = mx.array(X.astype(np.float32))
    backend = di.AutoSparse(di.AutoMLX())
    for op, f in ((di.jacobian, _f), (di.hessian, _g)):
        with pytest.raises(di.DiffifaceTypeError) as err:
            op(f, backend, x)
        msg = str(err.value)
        assert msg.startswith(f"{op.__name__}(f, {backend!r}, x): sparsity detection"), msg
        assert "mlx.core" in msg and "array_namespace(x)" in msg, msg
        assert "sparsity_detector='local'" in msg, msg


def test_an_outer_mlx_pass_through_a_dense_result():
    """dense=True keeps the result an mx.array: an outer mx.grad differentiates it."""
    x = mx.array(X.astype(np.float32))

    def trace_of_hessian(x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", di.SparsityWarning)
            return mx.trace(di.hessian(_g, _local(dense=True), x))

    got = np.asarray(mx.grad(trace_of_hessian)(x))
    want = -3 * np.sin(X) - X * np.cos(X)  # d/dx of 2 cos x - x sin x
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["jax", "torch", "mlx"])
def test_strict_takes_float32_rounding_on_every_framework(name):
    """strict=True compared the random product with a float64 tolerance (1e-9): every
    float32 Jacobian failed it with "a nonzero outside the pattern" (found with MLX)."""
    pytest.importorskip(name)
    backend = {"jax": di.AutoJax(), "torch": di.AutoTorch(), "mlx": di.AutoMLX()}[name]
    x32 = X.astype(np.float32)
    x = {
        "jax": lambda: __import__("jax.numpy").numpy.asarray(x32),
        "torch": lambda: __import__("torch").from_numpy(x32),
        "mlx": lambda: mx.array(x32),
    }[name]()
    ns = {
        "jax": lambda: __import__("jax.numpy").numpy,
        "torch": lambda: __import__("torch"),
        "mlx": lambda: mx,
    }[name]()
    f = lambda x: ns.sin(x) * x * 3.7  # noqa: E731
    sparse = di.AutoSparse(backend, sparsity_detector=sp.eye_array(6, format="csr"), strict=True)
    J = di.jacobian(f, sparse, x)
    J = J.todense() if name == "jax" else J.to_dense() if name == "torch" else J.toarray()
    want = np.diag(3.7 * (np.cos(x32) * x32 + np.sin(x32)))
    np.testing.assert_allclose(np.asarray(J), want, rtol=2e-6, atol=2e-6)


def _h(x, s):
    xp = array_namespace(x)
    return xp.sin(x * s) * x[0]


def _h_jac(s):  # d/dx of sin(s x) x0
    j = np.diag(s * np.cos(s * X) * X[0])
    j[:, 0] += np.sin(s * X)
    return j


def test_a_context_traced_by_mx_vmap():
    """The global detector needs a context's values: under mx.vmap (or mx.compile) an
    unprepared call is a clear error naming the fix, and a plan prepared outside
    serves every s (a dense result, summed, against the closed form)."""
    x, backend = mx.array(X.astype(np.float32)), di.AutoSparse(di.AutoMLX(), dense=True)
    s = mx.array(np.array([0.7, 1.3], np.float32))
    with pytest.raises(di.DiffifaceValueError) as err:
        mx.vmap(lambda s: mx.sum(di.jacobian(_h, backend, x, di.Constant(s))))(s)
    msg = str(err.value)
    assert msg.startswith(f"jacobian(f, {backend!r}, x): sparsity detection"), msg
    assert "outer MLX transform" in msg and "Prepare outside" in msg, msg
    prep = di.prepare_jacobian(_h, backend, x, di.Constant(s[0]))
    got = mx.vmap(lambda s: mx.sum(di.jacobian(_h, backend, x, di.Constant(s), prep=prep)))(s)
    want = [_h_jac(v).sum() for v in (0.7, 1.3)]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
