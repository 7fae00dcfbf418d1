"""The runners of MLX plans: a prepared or kept call at a pytree x (or one array with a
Constant), with has_aux, or of derivative, second_derivative, hessian and jacobian
runs MLX's own call, without the general path. Each test proves the runner answered
(the general path made to fail), and compares with MLX's own transforms of a flat
function or a closed form."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di

mx = pytest.importorskip("mlx.core")

B = di.AutoMLX()
TOL = 2e-6  # float32
X = mx.array([0.3, -0.7, 1.1])
V = mx.array([1.0, 0.5, -2.0])
W = mx.array([0.7, -1.3, 0.4])
TREE = {"a": X, "b": (mx.array(2.0), mx.array([0.5, 1.5]))}
TREE_V = {"a": V, "b": (mx.array(0.3), mx.array([0.2, -1.0]))}


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


def _close(got, want):
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        if isinstance(a, dict):
            a = _flat(a)
        assert type(a) is mx.array
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=TOL, atol=TOL)


def _run(monkeypatch, op, f, x, *args, prepared, **kw):
    """``op`` twice by its runner (after a first call that keeps the plan)."""
    family = op.split("_and_")[-1].replace("gradient_", "").replace("derivative_", "")
    family = {"second_derivative": "second_derivative"}.get(family, family)
    prep = getattr(di, f"prepare_{family}")(f, B, x, *args, **kw) if prepared else None
    call = getattr(di, op)
    call(f, B, x, *args, prep=prep, **kw)
    _general_path_fails(monkeypatch)
    call(f, B, x, *args, prep=prep, **kw)
    return call(f, B, x, *args, prep=prep, **kw)


# ---- a pytree x: the leaves runners -------------------------------------------------
def tree_loss(d):
    return (mx.sin(d["a"]) * d["b"][0]).sum() + (d["b"][1] ** 3).sum() * d["a"][0]


def tree_field(d):
    return mx.sin(d["a"]) * d["b"][0] + d["b"][1].sum() * d["a"]


def _flat(d):
    return mx.concatenate([d["a"].reshape(-1), d["b"][0].reshape(-1), d["b"][1].reshape(-1)])


def _tree(z):
    return {"a": z[:3], "b": (z[3], z[4:])}


def _tree_own(op):
    """MLX's own transforms of the flat function (the Hessian by reverse over reverse:
    MLX has no JVP of scatter, the pullback of indexing)."""
    loss, field, z, v = (
        (lambda z: tree_loss(_tree(z))),
        (lambda z: tree_field(_tree(z))),
        _flat(TREE),
        _flat(TREE_V),
    )
    y, g = mx.value_and_grad(loss)(z)
    hv = mx.vjp(mx.grad(loss), [z], [v])[1][0]
    (yf,), (jv,) = mx.jvp(field, [z], [v])
    wj = mx.vjp(field, [z], [W])[1][0]
    return {
        "gradient": (g,),
        "value_and_gradient": (y, g),
        "hvp": (hv,),
        "gradient_and_hvp": (g, hv),
        "value_gradient_and_hvp": (y, g, hv),
        "jvp": (jv,),
        "value_and_jvp": (yf, jv),
        "vjp": (wj,),
        "value_and_vjp": (yf, wj),
    }[op]


TREE_OPS = {
    "gradient": (tree_loss, ()),
    "value_and_gradient": (tree_loss, ()),
    "hvp": (tree_loss, (TREE_V,)),
    "gradient_and_hvp": (tree_loss, (TREE_V,)),
    "value_gradient_and_hvp": (tree_loss, (TREE_V,)),
    "jvp": (tree_field, (TREE_V,)),
    "value_and_jvp": (tree_field, (TREE_V,)),
    "vjp": (tree_field, (W,)),
    "value_and_vjp": (tree_field, (W,)),
}


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("op", list(TREE_OPS))
def test_a_pytree_x_by_the_runner(monkeypatch, op, prepared):
    f, args = TREE_OPS[op]
    _close(_run(monkeypatch, op, f, TREE, *args, prepared=prepared), _tree_own(op))


@pytest.mark.parametrize("prepared", [True, False])
def test_a_constant_by_the_runner(monkeypatch, prepared):
    def f(x, c):
        return (mx.sin(x) * c).sum()

    c = di.Constant(mx.array(2.0))
    got = _run(monkeypatch, "value_and_gradient", f, X, c, prepared=prepared)
    _close(got, ((mx.sin(X) * 2).sum(), 2 * mx.cos(X)))


# ---- has_aux -----------------------------------------------------------------------
def aux_loss(x):
    return (mx.sin(x) * x).sum(), {"cos": mx.cos(x), "n": 3}


def aux_field(x):
    return mx.sin(x) * x, mx.cos(x)


AUX_OPS = {
    "value_and_gradient": (aux_loss, (), lambda: mx.value_and_grad(lambda x: aux_loss(x)[0])(X)),
    "gradient_and_hvp": (
        aux_loss,
        (V,),
        lambda: (X.sin() + X * X.cos(), (2 * X.cos() - X * X.sin()) * V),
    ),
    "value_and_jvp": (aux_field, (V,), lambda: (X.sin() * X, (X.cos() * X + X.sin()) * V)),
    "value_and_vjp": (aux_field, (W,), lambda: (X.sin() * X, (X.cos() * X + X.sin()) * W)),
}


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("op", list(AUX_OPS))
def test_has_aux_by_the_runner(monkeypatch, op, prepared):
    f, args, want = AUX_OPS[op]
    got, aux = _run(monkeypatch, op, f, X, *args, prepared=prepared, has_aux=True)
    _close(got, want())
    want_aux = f(X)[1]
    if isinstance(want_aux, dict):
        assert aux["n"] == 3
        want_aux, aux = want_aux["cos"], aux["cos"]
    assert type(aux) is mx.array
    np.testing.assert_allclose(np.asarray(aux), np.asarray(want_aux), rtol=TOL)


# ---- derivative, second_derivative, hessian, jacobian -------------------------------
def scalar_field(x):
    return mx.stack([mx.sin(x) * x, x**3])


def _scalar_own(x):
    x = float(x)
    y = [np.sin(x) * x, x**3]
    d = [np.cos(x) * x + np.sin(x), 3 * x**2]
    d2 = [2 * np.cos(x) - x * np.sin(x), 6 * x]
    return y, d, d2


@pytest.mark.parametrize("kind", ["mlx", "numpy", "float"])
@pytest.mark.parametrize(
    "op",
    [
        "derivative",
        "value_and_derivative",
        "second_derivative",
        "value_derivative_and_second_derivative",
    ],
)
def test_derivatives_by_the_runner(monkeypatch, op, kind):
    x = {"mlx": mx.array(0.4), "numpy": np.array(0.4, dtype=np.float32), "float": 0.4}[kind]
    got = _run(monkeypatch, op, scalar_field, x, prepared=kind != "float")
    got = got if isinstance(got, tuple) else (got,)
    y, d, d2 = _scalar_own(0.4)
    want = {"derivative": (d,), "value_and_derivative": (y, d), "second_derivative": (d2,)}
    want = want.get(op, (y, d, d2))
    for a, b in zip(got, want, strict=True):
        assert type(a) is {"mlx": mx.array, "numpy": np.ndarray, "float": np.ndarray}[kind]
        np.testing.assert_allclose(np.asarray(a), b, rtol=TOL, atol=TOL)


def test_second_derivative_of_an_f_that_writes_into_an_array():
    """MLX has no JVP of scatter: the runner fails once, and every call is the general
    path's (reverse over reverse), with the right result."""

    def f(x):
        z = mx.zeros((2,), dtype=x.dtype)
        z[0] = x
        return (z**3).sum()

    for _ in range(3):
        got = di.value_derivative_and_second_derivative(f, B, mx.array(0.4))
        np.testing.assert_allclose([float(a) for a in got], [0.064, 0.48, 2.4], rtol=TOL)


def field(x):
    return mx.sin(x) * x


def loss(x):
    return (mx.sin(x) * x).sum() + x[0] * x[1]


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize(
    "op", ["hessian", "value_gradient_and_hessian", "jacobian", "value_and_jacobian"]
)
def test_hessian_and_jacobian_by_the_runner(monkeypatch, op, prepared):
    x = np.asarray(X)
    if "hessian" in op:
        h = np.diag(2 * np.cos(x) - x * np.sin(x))
        h[0, 1] = h[1, 0] = 1.0
        y, g = float(loss(X)), np.sin(x) + x * np.cos(x) + np.array([x[1], x[0], 0.0])
        want = (h,) if op == "hessian" else (y, g, h)
        got = _run(monkeypatch, op, loss, X, prepared=prepared)
    else:
        j = np.diag(np.cos(x) * x + np.sin(x))
        want = (j,) if op == "jacobian" else (np.sin(x) * x, j)
        got = _run(monkeypatch, op, field, X, prepared=prepared)
    _close(got, want)


# ---- a pytree output: the trees runners ---------------------------------------------
def tree_out(x):
    return {"s": mx.sin(x) * x, "p": (x[:2] ** 2, mx.cos(x).sum())}


def _tree_out_own():
    """(f(x), J v, wᵀ J, J) in closed form, each in f's output structure."""
    x, v = np.asarray(X), np.asarray(V)
    ds = np.diag(np.cos(x) * x + np.sin(x))
    dp0 = np.zeros((2, 3))
    dp0[[0, 1], [0, 1]] = 2 * x[:2]
    dp1 = -np.sin(x)
    y = {"s": np.sin(x) * x, "p": (x[:2] ** 2, np.cos(x).sum())}
    w = {"s": np.asarray(W), "p": (np.array([0.2, 0.5]), 1.5)}
    jv = {"s": ds @ v, "p": (dp0 @ v, dp1 @ v)}
    wj = w["s"] @ ds + w["p"][0] @ dp0 + w["p"][1] * dp1
    return y, jv, wj, {"s": ds, "p": (dp0, dp1)}


def _tree_close(got, want):
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want)
        for k in want:
            _tree_close(got[k], want[k])
    elif isinstance(want, tuple):
        assert type(got) is tuple and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _tree_close(a, b)
    else:
        assert type(got) is mx.array
        np.testing.assert_allclose(np.asarray(got), want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize(
    "op", ["jvp", "value_and_jvp", "vjp", "value_and_vjp", "jacobian", "value_and_jacobian"]
)
def test_a_pytree_output_by_the_runner(monkeypatch, op, prepared):
    y, jv, wj, jac = _tree_out_own()
    w = {"s": W, "p": (mx.array([0.2, 0.5]), mx.array(1.5))}
    args = {"jvp": (V,), "vjp": (w,)}.get(op.removeprefix("value_and_"), ())
    want = {"jvp": jv, "vjp": wj, "jacobian": jac}[op.removeprefix("value_and_")]
    got = _run(monkeypatch, op, tree_out, X, *args, prepared=prepared)
    _tree_close(got, (y, want) if op.startswith("value") else want)


@pytest.mark.parametrize("mode", [None, "reverse"])
def test_a_pytree_output_jacobian_at_a_matrix_x(monkeypatch, mode):
    """Columns (an output larger than x) or rows, each leaf's Jacobian shaped
    ``leaf.shape + x.shape``, against closed forms."""
    xm = mx.array([[0.3, -0.7], [1.1, 0.4]])
    b = di.AutoMLX(mode=mode)

    def f(x):
        return {"a": mx.sin(x) * x, "b": (x**2).sum(), "c": mx.cos(x[0])}

    prep = di.prepare_jacobian(f, b, xm)
    di.jacobian(f, b, xm, prep=prep)
    _general_path_fails(monkeypatch)
    got = di.jacobian(f, b, xm, prep=prep)
    x = np.asarray(xm, dtype=np.float64)
    da = np.diag((np.cos(x) * x + np.sin(x)).ravel()).reshape(2, 2, 2, 2)
    dc = np.zeros((2, 2, 2))
    dc[0, 0, 0], dc[1, 0, 1] = -np.sin(x[0, 0]), -np.sin(x[0, 1])
    _tree_close(got, {"a": da, "b": 2 * x, "c": dc})


def per_sample(x):
    return mx.sin(x) * x[:, :1]


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("op", ["batched_jacobian", "value_and_batched_jacobian"])
def test_batched_jacobian_by_the_runner(monkeypatch, op, prepared):
    xb = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    jac = np.zeros((4, 3, 3))
    for i, row in enumerate(xb):
        jac[i] = np.diag(np.cos(row) * row[0])
        jac[i][:, 0] += np.sin(row)
    want = (np.sin(xb) * xb[:, :1], jac) if op.startswith("value") else (jac,)
    _close(_run(monkeypatch, op, per_sample, mx.array(xb), prepared=prepared), want)


def test_an_outer_mlx_pass_through_a_constant_of_the_leaves_runner():
    """The leaves runner passes the Constant to MLX's call as it is: an outer mx.grad
    through it gets its derivative on every warm call (d/dc of c² sum cos x)."""

    def f(d, c):
        return (mx.sin(d["a"]) * c * c).sum()

    def outer(c):
        return di.gradient(f, B, {"a": X}, di.Constant(c))["a"].sum()

    for _ in range(3):
        got = float(mx.grad(outer)(mx.array(1.5)))
        np.testing.assert_allclose(got, 2 * 1.5 * np.cos(np.asarray(X)).sum(), rtol=TOL)


# ---- what f closes over: read anew on every prepared call ----------------------------
def _closing_over():
    """f closing over an array ``a`` and a cell ``s``: (f, rebind s, MLX's own call)."""
    a = mx.array([1.0, 2.0, -1.0])
    s = mx.array(2.0)

    def loss(x):
        x = x["a"] if isinstance(x, dict) else x
        return (a * s * mx.sin(x)).sum()

    def field(x):
        x = x["a"] if isinstance(x, dict) else x
        return a * s * mx.sin(x)

    def rebind():
        nonlocal s
        s = mx.array(-3.0)

    return a, loss, field, rebind


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("op", ["gradient", "jvp", "vjp", "hvp"])
def test_prepared_calls_see_an_array_written_in_place_and_a_rebound_cell(op, tree):
    """diffiface never compiles f (mx.compile would keep ``a`` and ``s`` as traced):
    after ``a[0] = 5`` and ``s`` rebound, a prepared call follows, as MLX's own does."""
    a, loss, field, rebind = _closing_over()
    f = loss if op in ("gradient", "hvp") else field
    wrap = (lambda v: {"a": v}) if tree else (lambda v: v)
    args = (wrap(X),) if op == "gradient" else (wrap(X), W if op == "vjp" else wrap(V))
    prep = getattr(di, f"prepare_{op}")(f, B, *args)
    own = {
        "gradient": lambda: mx.grad(loss)(X),
        "jvp": lambda: mx.jvp(field, [X], [V])[1][0],
        "vjp": lambda: mx.vjp(field, [X], [W])[1][0],
        "hvp": lambda: mx.vjp(mx.grad(loss), [X], [V])[1][0],
    }[op]
    for change in (lambda: None, lambda: a.__setitem__(0, 5.0), rebind):
        change()
        got = getattr(di, op)(f, B, *args, prep=prep)
        _close(got["a"] if isinstance(got, dict) else got, (own(),))
