"""The hardening promises not covered elsewhere (docs/promises.md lists them all):
odd leaves, None leaves, aliasing, mutating f, dtypes on every operator, kinks,
empty inputs, strict torch conversions, leaks, missing frameworks, no network."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest
from helpers import HAVE, native, to_numpy, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])


# ------------------------------------------------------------- odd leaves
def test_object_and_bool_leaves_name_path_and_dtype(backend):
    with pytest.raises(TypeError, match=r"x\['o'\].*object"):
        di.gradient(lambda d: d["a"].sum(), backend, {"a": X, "o": np.array([1, "s"], object)})
    with pytest.raises(TypeError, match=r"x\[1\].*bool"):
        di.gradient(lambda t: t[0].sum(), backend, (native(backend, X), native(backend, X > 0)))


def test_none_leaves_stay_none_in_lists_and_products(backend):
    x = [native(backend, X), None]
    g = di.gradient(lambda v: (v[0] ** 2).sum(), backend, x)
    assert g[1] is None
    np.testing.assert_allclose(to_numpy(g[0]), 2 * X, rtol=1e-6)
    t = di.jvp(lambda v: v[0] * 2, backend, x, [native(backend, X), None])
    np.testing.assert_allclose(to_numpy(t), 2 * X, rtol=1e-6)
    w = di.vjp(lambda v: v[0] * 2, backend, x, native(backend, X))
    assert w[1] is None


# ------------------------------------------------------------- aliasing
def test_aliased_leaves_get_their_own_partials(backend):
    a = native(backend, X)
    g = di.gradient(lambda t: (t[0] * t[1] ** 2).sum(), backend, (a, a))  # (a, a): one object
    np.testing.assert_allclose(to_numpy(g[0]), X**2, rtol=1e-6)
    np.testing.assert_allclose(to_numpy(g[1]), 2 * X * X, rtol=1e-6)
    w = native(backend, np.array([[1.0, 2.0], [3.0, 4.0]]))
    tied = {"enc": w, "dec": w}  # tied weights: each slot its own derivative
    v = native(backend, np.array([1.0, -1.0]))
    g = di.gradient(lambda p: ((p["dec"] @ (p["enc"] @ v)) ** 2).sum() / 2, backend, tied)
    W, V = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, -1.0])
    h = W @ V
    r = W @ h
    np.testing.assert_allclose(to_numpy(g["dec"]), np.outer(r, h), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(g["enc"]), np.outer(W.T @ r, V), rtol=1e-6)


# ------------------------------------------------------------- mutating f
def _mutating(backend):
    name = backend.framework
    if name == "torch":
        return lambda x: x.mul_(2)
    if name == "jax":
        return lambda x: x.at[0].set(5.0)  # jax arrays cannot change: a functional update
    if name == "autograd":
        import autograd.numpy as anp

        return lambda x: anp.concatenate([x[:1] * 0 + 5.0, x[1:]])

    def f(x):
        x[0] = 5.0  # finite differences hand f copies
        return x

    return f


@pytest.mark.parametrize("op", ["gradient", "jvp", "vjp", "jacobian", "hessian"])
def test_mutating_f_leaves_the_callers_x_unchanged(backend, op):
    x = native(backend, X)
    before = to_numpy(x).copy()
    v = native(backend, np.ones(3))
    f = _mutating(backend)
    calls = {
        "gradient": lambda: di.gradient(lambda x: f(x).sum(), backend, x),
        "jvp": lambda: di.jvp(f, backend, x, v),
        "vjp": lambda: di.vjp(f, backend, x, native(backend, X)),
        "jacobian": lambda: di.jacobian(f, backend, x),
        "hessian": lambda: di.hessian(lambda x: (f(x) ** 3).sum(), backend, x),
    }
    # f on a copy: torch's f is 2x; the others replace x[0] by 5, so d f/dx = diag(0, 1, 1)
    torch_f = backend.framework == "torch"
    d = np.full(3, 2.0) if torch_f else np.array([0.0, 1.0, 1.0])
    want = {
        "gradient": d,
        "jvp": d,
        "vjp": d * X,
        "jacobian": np.diag(d),
        "hessian": np.diag(48 * X if torch_f else np.array([0.0, 6 * X[1], 6 * X[2]])),
    }[op]
    try:
        got = calls[op]()
    except ValueError as err:  # torch's autograd refuses in-place ops on its leaves
        assert torch_f and "changes its input in place" in str(err)
    else:
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(to_numpy(x), before)
    np.testing.assert_array_equal(to_numpy(v), np.ones(3))


# ------------------------------------------------------------- dtypes
def test_float32_in_float32_out_on_every_operator(backend):
    ns, x = xp(backend), native(backend, X.astype(np.float32))
    f = lambda x: (ns.sin(x) * x).sum()  # noqa: E731
    v = native(backend, np.ones(3, np.float32))
    xb = native(backend, np.ones((2, 3), np.float32))
    outs = [
        di.value_and_gradient(f, backend, x),
        di.gradient_and_hvp(f, backend, x, v),
        di.hvp(f, backend, x, di.Tangents(v, v)),
        di.value_gradient_and_hessian(f, backend, x),
        di.hessian(f, backend, x, chunk_size=2),
        di.jacobian(ns.sin, backend, x, chunk_size=2),
        di.value_and_jvp(ns.sin, backend, x, di.Tangents(v, v)),
        di.value_and_vjp(ns.sin, backend, x, v),
        di.value_derivative_and_second_derivative(ns.sin, backend, x[0]),
        di.value_and_batched_jacobian(ns.sin, backend, xb),
    ]
    for out in outs:
        for leaf in _leaves(out):
            assert to_numpy(leaf).dtype == np.float32, (out, backend)
    # and the values, in float32: AD to float32 rounding; finite differences in float32
    # carry their step error (first order ~1e-4, second order by differences ~1e-2)
    fd = backend.framework == "finite_differences"
    x64 = X.astype(np.float32).astype(np.float64)
    grad = np.cos(x64) * x64 + np.sin(x64)
    hess = np.diag(2 * np.cos(x64) - np.sin(x64) * x64)
    np.testing.assert_allclose(to_numpy(outs[0][1]), grad, rtol=1e-3 if fd else 1e-5)
    np.testing.assert_allclose(to_numpy(outs[3][2]), hess, atol=3e-2 if fd else 1e-5)
    np.testing.assert_allclose(to_numpy(outs[4]), hess, atol=3e-2 if fd else 1e-5)


def _leaves(out):
    if isinstance(out, tuple | list):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def test_mixed_dtypes_keep_their_own(backend):
    x = {"a": native(backend, X.astype(np.float32)), "b": native(backend, X)}
    ns = xp(backend)
    cast = (lambda a: a.double()) if backend.framework == "torch" else (lambda a: a * 1.0)
    if backend.framework == "jax":
        cast = lambda a: a.astype("float64")  # noqa: E731
    if backend.framework in ("autograd", "finite_differences"):
        cast = lambda a: a.astype(np.float64)  # noqa: E731
    g = di.gradient(lambda d: (ns.sin(cast(d["a"])) * d["b"]).sum(), backend, x)
    assert to_numpy(g["a"]).dtype == np.float32 and to_numpy(g["b"]).dtype == np.float64
    fd = backend.framework == "finite_differences"  # float32 steps: ~1e-4; AD: rounding
    np.testing.assert_allclose(to_numpy(g["a"]), np.cos(X) * X, rtol=1e-3 if fd else 1e-6)
    np.testing.assert_allclose(to_numpy(g["b"]), np.sin(X.astype(np.float32)), rtol=1e-6)


# ------------------------------------------------------------- kinks
def _native_grad(backend, f, x):
    name = backend.framework
    if name == "jax":
        import jax

        return np.asarray(jax.grad(f)(x))
    if name == "torch":
        import torch

        xg = x.detach().requires_grad_()
        return torch.autograd.grad(f(xg), xg)[0].numpy()
    import autograd

    return autograd.grad(f)(x)


@pytest.mark.parametrize("kink", ["abs", "sqrt", "norm"])
def test_kinks_pass_the_frameworks_own_value_through(ad_backend, kink):
    ns = xp(ad_backend)
    f = {
        "abs": lambda x: ns.abs(x).sum(),
        "sqrt": lambda x: ns.sqrt(x).sum(),
        "norm": lambda x: ns.sqrt((x**2).sum()),
    }[kink]
    x = native(ad_backend, np.zeros(2))
    with np.errstate(all="ignore"):
        ours = to_numpy(di.gradient(f, ad_backend, x))
        theirs = _native_grad(ad_backend, f, x)
    np.testing.assert_array_equal(ours, theirs)  # nan == nan here, inf == inf


def test_kinks_on_finite_differences_are_as_documented():
    b, x = di.AutoFiniteDifferences(), np.zeros(2)
    with np.errstate(all="ignore"):
        assert (di.gradient(lambda x: np.abs(x).sum(), b, x) == 0).all()
        assert np.isnan(di.gradient(lambda x: np.sqrt(x).sum(), b, x)).all()
        assert (di.gradient(lambda x: np.sqrt((x**2).sum()), b, x) == 0).all()


# ------------------------------------------------------------- empty inputs
def test_size_zero_leaves_give_size_zero_results(backend):
    e = native(backend, np.zeros((0, 2)))
    x = {"e": e, "a": native(backend, X)}
    g = di.gradient(lambda d: (d["a"] ** 2).sum() + d["e"].sum(), backend, x)
    assert to_numpy(g["e"]).shape == (0, 2)
    np.testing.assert_allclose(to_numpy(g["a"]), 2 * X, rtol=1e-6)
    w = di.vjp(lambda v: v * 2, backend, e, native(backend, np.zeros((0, 2))))
    assert to_numpy(w).shape == (0, 2) and not np.isnan(to_numpy(w)).any()
    h = di.hvp(lambda v: (v**2).sum(), backend, e, e)
    assert to_numpy(h).shape == (0, 2)


@pytest.mark.parametrize("empty", [{}, (), []], ids=["dict", "tuple", "list"])
def test_empty_pytrees_give_empty_gradients(backend, empty):
    one = native(backend, np.array(2.0))
    y, g = di.value_and_gradient(lambda x: one * 1.0, backend, empty)
    assert g == empty and type(g) is type(empty)
    assert float(to_numpy(y)) == 2.0


# ------------------------------------------------------------- strict torch
@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("convert", ["float", "item"])
def test_strict_turns_torch_scalar_conversions_into_errors(convert):
    import torch

    x = torch.tensor(X)
    to_py = float if convert == "float" else (lambda t: t.item())
    f = lambda x: to_py(x.sum()) * x.sum()  # noqa: E731
    with di.options(strict=True):
        with pytest.raises(TypeError, match=f"carries the derivative with Tensor.*{convert}"):
            di.gradient(f, di.AutoTorch(), x)
        with pytest.raises(TypeError, match="drops the derivative"):
            di.jvp(lambda x: f(x) * x, di.AutoTorch(), x, x)
        g = di.gradient(lambda x: (x**2).sum(), di.AutoTorch(), x)  # others unaffected
    np.testing.assert_allclose(g.numpy(), 2 * X)


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("convert", ["float", "item", "tolist", "numpy"])
def test_torch_scalar_conversions_are_errors_by_default(convert):
    """Defect class 6 of the oracle issue: a derivative dropped by a conversion to a number
    is an error without strict (JAX and autograd raise on the same f); a detached value
    (torch's stop_gradient) is not; the check runs on f's first call only."""
    import torch

    from diffiface.backends.torch import impl as _torch

    x = torch.tensor(X)
    to_py = {
        "float": float,
        "item": lambda t: t.item(),
        "tolist": lambda t: sum(t.reshape(1).tolist()),
        "numpy": lambda t: float(t.numpy()),
    }[convert]
    f = lambda x: to_py(x.sum()) * x.sum()  # noqa: E731
    for op in (di.gradient, di.hessian):
        with pytest.raises(TypeError, match="drops the derivative"):
            op(f, di.AutoTorch(), x)
    with pytest.raises(TypeError, match="drops the derivative"):
        di.vjp(lambda x: f(x) * x, di.AutoTorch(), x, x)
    stop = lambda x: to_py(x.sum().detach()) * x.sum()  # noqa: E731
    np.testing.assert_allclose(di.gradient(stop, di.AutoTorch(), x).numpy(), np.full(3, X.sum()))
    entered = []
    real = _torch._NoScalars.__enter__
    _torch._NoScalars.__enter__ = lambda self: entered.append(1) or real(self)
    try:
        di.gradient(stop, di.AutoTorch(), x)  # already checked: no mode on the hot path
    finally:
        _torch._NoScalars.__enter__ = real
    assert entered == []


# ------------------------------------------------------------- leaks
@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
def test_closures_over_large_arrays_are_freed():
    import jax.numpy as jnp

    big = np.ones(1_000_000)
    alive = weakref.ref(big)

    def make(big):
        return lambda x: (x * jnp.asarray(big[:3])).sum()

    f = make(big)
    del big
    di.gradient(f, di.AutoJax(), jnp.asarray(X))
    di.hessian(f, di.AutoJax(), jnp.asarray(X))
    prep = di.prepare_gradient(f, di.AutoJax(), jnp.asarray(X))
    assert alive() is not None
    del f, prep
    gc.collect()
    assert alive() is None


# ------------------------------------------------------------- frameworks
@pytest.mark.parametrize(
    ("module", "backend", "extra"),
    [("jax", "AutoJax", "jax"), ("autograd", "AutoAutograd", "autograd")],
)
def test_missing_framework_names_the_extra(module, backend, extra):
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "import numpy as np, diffiface as di\n"
        "try:\n"
        f"    di.gradient(lambda x: x.sum(), di.{backend}(), np.ones(2))\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"FrameworkMissingError {backend}() needs {module}" in out.stdout
    assert f'pip install "diffiface[{extra}]"' in out.stdout


def test_import_opens_no_network_connection():
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('network')\n"
        "socket.socket = refuse; socket.create_connection = refuse\n"
        "import numpy as np, diffiface as di\n"
        "print(di.gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(), np.ones(2)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[2. 2.]" in out.stdout


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_prepared_torch_jvp_leaves_the_callers_x_unchanged():
    import torch

    x, v = torch.tensor(X), torch.ones(3, dtype=torch.float64)
    f = lambda x: x.mul_(2)  # noqa: E731
    prep = di.prepare_jvp(f, di.AutoTorch(), x, v)
    np.testing.assert_allclose(di.jvp(f, di.AutoTorch(), x, v, prep=prep).numpy(), 2 * np.ones(3))
    np.testing.assert_array_equal(x.numpy(), X)
    np.testing.assert_array_equal(v.numpy(), np.ones(3))  # the tangent too
