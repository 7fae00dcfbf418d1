"""MLX across frameworks: differentiate_with both ways, operators on MLX arrays with
other backends (and other arrays with AutoMLX), and second_order(outer, inner) with
MLX on one side.

References: the same math in JAX (float64) and, for finite differences outside, the
closed form. MLX's float64 sin and cos are float32-accurate (relative errors up to
1.1e-7 measured on mlx 0.32.4): an MLX inner backend is held to 1e-6 on sin; the
finite-differences cases use polynomials, where MLX's float64 is exact enough for
differences of differences (1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di

mx = pytest.importorskip("mlx.core")
jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")
jnp = jax.numpy

X0 = np.linspace(0.1, 1.0, 4)
V0 = np.array([1.0, -0.5, 0.25, 2.0])
NS = {"jax": jnp, "torch": torch, "autograd": anp, "fd": np, "mlx": mx}
BACKENDS = {
    "jax": di.AutoJax(),
    "torch": di.AutoTorch(),
    "autograd": di.AutoAutograd(),
    "fd": di.AutoFiniteDifferences(),
    "mlx": di.AutoMLX(),
}


def _f(xp):
    return lambda x: xp.sin(x) * xp.sum(x**2)


def _loss(xp, inner):
    return lambda x: xp.sum(inner(x) ** 3)


REF_GRAD = np.asarray(jax.grad(_loss(jnp, _f(jnp)))(X0))
REF_HESS = np.asarray(jax.hessian(_loss(jnp, _f(jnp)))(X0))


def _mx(a):
    return mx.array(np.asarray(a), dtype=mx.float64)


def _close(got, want, tol):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol * np.abs(want).max())


# ---- copies --------------------------------------------------------------------------------------
def test_mlx_arrays_leave_without_a_copy_and_enter_with_one():
    """Out of MLX: a NumPy view of MLX's buffer, which JAX's jit, torch and NumPy take as
    it is (same pointers). Into MLX: one copy, because mlx 0.32 cannot wrap CPU memory
    it did not allocate (if it learns to, this test says so)."""
    from diffiface.backends.autograd.bridge import to_numpy
    from diffiface.backends.jax.bridge import Kit as JaxKit
    from diffiface.backends.mlx.bridge import Kit as MLXKit
    from diffiface.backends.torch.bridge import to_torch

    a = mx.arange(1000, dtype=mx.float32)
    view = np.asarray(a)
    ptr = view.ctypes.data
    assert np.asarray(a).ctypes.data == ptr  # the buffer protocol: a view, every time
    assert JaxKit.to_inner(view).ctypes.data == ptr
    assert to_torch(view).data_ptr() == ptr
    assert torch.from_dlpack(a).data_ptr() == ptr
    assert to_numpy(a).ctypes.data == ptr
    with pytest.raises(ValueError, match="without a copy"):
        mx.from_dlpack(np.ones(3, np.float32), copy=False)
    got = MLXKit.to_inner(np.ones(3))  # float64 stays float64 (mx.from_dlpack: float32)
    assert got.dtype == mx.float64
    node_out = MLXKit.compile(lambda x: (mx.sin(x),))(mx.zeros(1000, dtype=mx.float32))
    assert isinstance(node_out[0], np.ndarray)  # outputs leave as views too
    from diffiface.backends.mlx.bridge import view

    ones = view(mx.broadcast_to(mx.array(1.0), (5,)))  # (stride 0 in MLX) made dense
    assert ones.strides == (4,) and np.array_equal(ones, np.ones(5))


# ---- MLX inside other frameworks' transforms -----------------------------------------------------
@pytest.mark.parametrize("outer", ["jax", "torch", "autograd"])
def test_a_bridged_mlx_function_inside_every_order_of_the_outer_framework(outer):
    b = di.differentiate_with(_f(mx), di.AutoMLX())
    loss = _loss(NS[outer], b)
    if outer == "jax":
        g, h = jax.jit(jax.grad(loss))(X0), jax.jit(jax.hessian(loss))(X0)
        rr = jax.jacrev(jax.jacrev(loss))(X0)
        t = jax.jvp(loss, (X0,), (V0,))[1]
        batch = jax.vmap(jax.grad(loss))(jnp.stack([X0, 2 * X0]))
        _close(batch[1], np.asarray(jax.grad(_loss(jnp, _f(jnp)))(2 * X0)), 1e-6)
    elif outer == "torch":
        x = torch.tensor(X0)
        g, h = torch.func.grad(loss)(x), torch.func.hessian(loss)(x)
        rr = torch.func.jacrev(torch.func.jacrev(loss))(x)
        t = torch.func.jvp(loss, (x,), (torch.tensor(V0),))[1]
        xg = x.clone().requires_grad_()
        (g2,) = torch.autograd.grad(loss(xg), xg, create_graph=True)
        (h2,) = torch.autograd.grad(g2 @ torch.tensor(V0), xg)  # double backward: H v
        _close(h2, REF_HESS @ V0, 1e-6)
    else:
        from autograd.core import make_jvp

        g, h = autograd.grad(loss)(X0), autograd.hessian(loss)(X0)
        rr = autograd.jacobian(autograd.grad(loss))(X0)
        t = make_jvp(loss, X0)(V0)[1]
    _close(g, REF_GRAD, 1e-6)
    _close(h, REF_HESS, 1e-6)
    _close(rr, REF_HESS, 1e-6)
    _close(t, REF_GRAD @ V0, 1e-6)


# ---- other frameworks inside MLX's transforms ----------------------------------------------------
@pytest.mark.parametrize("inner", ["jax", "torch", "autograd", "fd"])
def test_mlx_transforms_compose_over_a_bridged_call(inner):
    """mx.grad, mx.value_and_grad, mx.jvp, mx.vjp, mx.vmap and their nestings: forward
    over reverse and reverse over reverse."""
    tol1, tol2 = (1e-6, 1e-4) if inner == "fd" else (1e-10, 1e-10)
    loss = _loss(mx, di.differentiate_with(_f(NS[inner]), BACKENDS[inner]))
    x, v = _mx(X0), _mx(V0)
    val, g = mx.value_and_grad(loss)(x)
    assert float(val) == pytest.approx(float(_loss(jnp, _f(jnp))(X0)), rel=1e-12)
    _close(g, REF_GRAD, tol1)
    _close(mx.jvp(loss, [x], [v])[1][0], REF_GRAD @ V0, tol1)
    _close(mx.vjp(lambda x: [loss(x)], [x], [_mx(2.0)])[1][0], 2 * REF_GRAD, tol1)
    _close(mx.jvp(mx.grad(loss), [x], [v])[1][0], REF_HESS @ V0, tol2)  # forward over reverse
    _close(mx.vjp(mx.grad(loss), [x], [v])[1][0], REF_HESS @ V0, tol2)  # reverse over reverse
    _close(mx.grad(lambda x: mx.grad(loss)(x) @ v)(x), REF_HESS @ V0, tol2)
    eye = mx.eye(4, dtype=mx.float64)
    _close(mx.vmap(lambda e: mx.jvp(mx.grad(loss), [x], [e])[1][0])(eye), REF_HESS, tol2)
    batch = mx.vmap(mx.grad(loss))(mx.stack([x, x]))
    _close(batch, np.stack([REF_GRAD, REF_GRAD]), tol1)


def test_a_bridged_call_under_mx_compile_is_nan_not_a_silent_zero():
    """mx.compile traces f on placeholders, which hold no values to hand to another
    framework: the placeholder outputs it keeps are NaN (mx.vmap, which also runs f on
    placeholders first, then calls the batching rule, which computes the values)."""
    b = di.differentiate_with(lambda x: torch.sin(x), di.AutoTorch())
    x = _mx(X0)
    assert np.isnan(np.asarray(mx.compile(lambda x: b(x).sum())(x)))
    _close(mx.vmap(b)(mx.stack([x, x])), np.sin(np.stack([X0, X0])), 1e-12)


def test_pytrees_and_several_outputs_cross_into_mlx():
    def model(p, x):
        return {"y": torch.tanh(p["w"] * x), "s": (p["w"] ** 2).sum()}

    b = di.differentiate_with(model, di.AutoTorch())
    w, x = _mx(X0), _mx(V0)

    def loss(w):
        out = b({"w": w}, x)
        return out["y"].sum() + out["s"]

    assert set(b({"w": w}, x)) == {"y", "s"}
    want = V0 / np.cosh(X0 * V0) ** 2 + 2 * X0  # d/dw [Σ tanh(w x) + Σ w²]
    _close(mx.grad(loss)(w), want, 1e-12)


# ---- operators on another framework's arrays -----------------------------------------------------
@pytest.mark.parametrize("other", ["jax", "torch", "autograd", "fd"])
def test_operators_cross_between_mlx_arrays_and_other_backends(other):
    """MLX arrays into another backend come back as MLX arrays, differentiable by an
    outer mx.grad; the other framework's arrays into AutoMLX come back as its own."""
    tol = 1e-6 if other == "fd" else 1e-12
    x = _mx(X0)
    g = di.gradient(lambda t: (t**3).sum(), BACKENDS[other], x)
    assert isinstance(g, mx.array)
    _close(g, 3 * X0**2, tol)
    outer = mx.grad(lambda t: di.gradient(lambda s: (s**3).sum(), BACKENDS[other], t).sum())(x)
    if other != "fd":  # (finite differences do not differentiate again)
        _close(outer, 6 * X0, 1e-12)
    native = {"jax": jnp.asarray, "torch": torch.tensor, "autograd": np.asarray, "fd": np.asarray}
    xo = native[other](X0)
    h = di.hessian(lambda t: (t**3).sum(), di.AutoMLX(), xo)
    assert type(h) is type(xo) or (other == "jax" and isinstance(h, jax.Array))
    _close(h, np.diag(6 * X0), 1e-12)


def test_hvp_of_a_loss_that_calls_a_bridged_function():
    """An hvp by AutoMLX through a torch function, and by AutoJax through an MLX one."""
    tb = di.differentiate_with(_f(torch), di.AutoTorch())
    hv = di.hvp(_loss(mx, tb), di.AutoMLX(), _mx(X0), _mx(V0))
    assert isinstance(hv, mx.array)
    _close(hv, REF_HESS @ V0, 1e-10)
    mb = di.differentiate_with(_f(mx), di.AutoMLX())
    for b in (di.AutoJax(mode="forward"), di.AutoJax(mode="reverse"), di.AutoTorch()):
        x, v = (jnp.asarray(X0), jnp.asarray(V0)) if b.framework == "jax" else (X0, V0)
        _close(di.hvp(_loss(NS[b.framework], mb), b, x, v), REF_HESS @ V0, 1e-6)


# ---- second_order(outer, inner) with MLX on one side ---------------------------------------------
def _poly(xp):
    """x₀² x₁ + Σ x³: exact in float64 on every framework."""
    return lambda x: x[0] ** 2 * x[1] + xp.sum(x**3)


def _poly_hess(x):
    h = np.diag(6 * x)
    h[0, 0] += 2 * x[1]
    h[0, 1] += 2 * x[0]
    h[1, 0] += 2 * x[0]
    return h


OUTERS = {
    "jax-forward": di.AutoJax(mode="forward"),
    "jax-reverse": di.AutoJax(mode="reverse"),
    "torch": di.AutoTorch(),
    "autograd": di.AutoAutograd(),
    "fd": di.AutoFiniteDifferences(),
}


@pytest.mark.parametrize("outer", list(OUTERS))
def test_second_order_with_mlx_inside(outer):
    b = di.second_order(OUTERS[outer], di.AutoMLX())
    tol = 1e-6 if outer == "fd" else 1e-12
    f, x, v = _poly(mx), _mx(X0), _mx(V0)
    hv = di.hvp(f, b, x, v)
    assert isinstance(hv, mx.array)
    _close(hv, _poly_hess(X0) @ V0, tol)
    g, h = di.gradient_and_hvp(f, b, X0, V0)  # NumPy in, NumPy out
    assert isinstance(h, np.ndarray)
    _close(h, _poly_hess(X0) @ V0, tol)
    y, g, h = di.value_gradient_and_hessian(f, b, x)
    assert isinstance(h, mx.array)
    _close(y, float(_poly(np)(X0)), 1e-12)
    _close(g, 3 * X0**2 + np.array([2 * X0[0] * X0[1], X0[0] ** 2, 0, 0]), 1e-12)
    _close(h, _poly_hess(X0), tol)


@pytest.mark.parametrize("inner", ["jax", "torch", "autograd", "fd"])
def test_second_order_with_mlx_outside(inner):
    b = di.second_order(di.AutoMLX(), BACKENDS[inner])
    tol = 1e-6 if inner == "fd" else 1e-12
    f, x = _poly(NS[inner]), _mx(X0)
    hv = di.hvp(f, b, x, _mx(V0))
    assert isinstance(hv, mx.array)
    _close(hv, _poly_hess(X0) @ V0, tol)
    h = di.hessian(f, b, X0)
    assert isinstance(h, np.ndarray)
    _close(h, _poly_hess(X0), tol)
    d2 = di.second_derivative(lambda t: NS[inner].sin(t) * t, b, np.array(0.5))
    _close(d2, -np.sin(0.5) * 0.5 + 2 * np.cos(0.5), 1e-6 if inner == "fd" else 1e-12)


# ---- nested rules across the bridge --------------------------------------------------------------
def _model(xp):
    return lambda x, p: xp.sum(xp.tanh(p["W"] @ x + p["b"]) ** 2)


RNG = np.random.default_rng(0)
W, B, XS = RNG.normal(size=(5, 3)), RNG.normal(size=5), RNG.normal(size=3)


def _reference_nested():
    def loss(x, p):
        return (jax.grad(_model(jnp))(x, p) ** 2).sum()

    return jax.grad(loss, argnums=(0, 1))(jnp.asarray(XS), {"W": W, "b": B})


@pytest.mark.parametrize("strategy", ["auto", "forward_over_reverse", "reverse_over_reverse"])
def test_mlx_inner_gradient_of_fixed_params_inside_jax_and_torch_losses(strategy):
    def loss(x, p):
        g = di.gradient(di.FixedParams(_model(mx), p, strategy), di.AutoMLX(), x)
        return (g**2).sum()

    rx, rp = _reference_nested()
    gx, gp = jax.grad(loss, argnums=(0, 1))(jnp.asarray(XS), {"W": W, "b": B})
    _close(gx, rx, 1e-10)
    _close(gp["W"], rp["W"], 1e-10)
    x = torch.tensor(XS, requires_grad=True)
    p = {"W": torch.tensor(W, requires_grad=True), "b": torch.tensor(B, requires_grad=True)}
    gx, gw, gb = torch.autograd.grad(loss(x, p), [x, p["W"], p["b"]])
    _close(gx, rx, 1e-10)
    _close(gw, rp["W"], 1e-10)
    _close(gb, rp["b"], 1e-10)


@pytest.mark.parametrize("inner", ["jax", "torch", "autograd"])
def test_other_inner_gradients_of_fixed_params_inside_an_mlx_loss(inner):
    def loss(x, p):
        g = di.gradient(di.FixedParams(_model(NS[inner]), p), BACKENDS[inner], x)
        return (g**2).sum()

    rx, rp = _reference_nested()
    gx, gp = mx.grad(loss, argnums=(0, 1))(_mx(XS), {"W": _mx(W), "b": _mx(B)})
    _close(gx, rx, 1e-10)
    _close(gp["W"], rp["W"], 1e-10)
    _close(gp["b"], rp["b"], 1e-10)


def test_a_bridged_mlx_function_and_its_nodes_die_with_it():
    import gc
    import weakref

    def one(k):
        f = lambda x: (mx.sin(k * x) ** 2).sum()  # noqa: E731
        g = jax.grad(di.differentiate_with(f, di.AutoMLX()))(jnp.asarray(X0))
        _close(g, k * np.sin(2 * k * X0), 1e-6)
        h = mx.grad(lambda x: di.differentiate_with(_f(torch), di.AutoTorch())(x).sum())(_mx(X0))
        _close(h, np.cos(X0) * np.sum(X0**2) + 2 * X0 * np.sin(X0).sum(), 1e-12)
        return weakref.ref(f)

    refs = [one(1.0 + 0.1 * k) for k in range(4)]
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("inner", ["jax", "torch"])
def test_a_constant_cotangent_differentiated_forward_inside_mlx(inner):
    """mx.jvp of mx.grad of a sum: the cotangent of the bridged call is the sum's
    constant ones, which MLX's forward pass gives no tangent (None)."""
    b = di.differentiate_with(lambda x: NS[inner].tanh(x) ** 2, BACKENDS[inner])
    x, v = _mx(X0), _mx(V0)
    t = np.tanh(X0)
    d2 = 2 * (1 - t**2) ** 2 - 4 * t**2 * (1 - t**2)  # (tanh²)''
    hv = mx.jvp(mx.grad(lambda x: mx.sum(b(x))), [x], [v])[1][0]
    _close(hv, d2 * V0, 1e-12)
    hv = mx.vjp(mx.grad(lambda x: mx.sum(b(x))), [x], [v])[1][0]
    _close(hv, d2 * V0, 1e-12)


def test_finite_differences_over_mlx_inside_an_outer_mlx_pass_is_an_error_not_a_zero():
    """torch, JAX and autograd show the outer pass beforehand (an error before running);
    MLX does not, so the results raise when the outer pass reaches them. Before, the
    outer derivative came out 0."""
    b = di.second_order(di.AutoFiniteDifferences(), di.AutoMLX())
    f, x, v = _poly(mx), _mx(X0), _mx(V0)
    _close(di.hvp(f, b, x, v), _poly_hess(X0) @ V0, 1e-6)  # no outer pass: fine
    match = r"hvp\(f, SecondOrder.*finite differences cannot run.*second_order\(AutoMLX"
    with pytest.raises(di.DiffifaceTypeError, match=match):
        mx.grad(lambda x: di.hvp(f, b, x, v).sum())(x)
    with pytest.raises(di.DiffifaceTypeError, match="finite differences cannot run"):
        mx.jvp(lambda x: di.hessian(f, b, x), [x], [v])
    p = {"w": _mx([2.0])}
    fixed = di.FixedParams(lambda t, p: p["w"][0] * mx.sum(t**3), p)
    with pytest.raises(di.DiffifaceTypeError, match="finite differences cannot run"):
        mx.grad(lambda p: di.hvp(di.FixedParams(fixed.f, p), b, x, v).sum())(p)
