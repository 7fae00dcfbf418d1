"""Composition with the frameworks' own transforms: diffiface inside jax.jit/grad/vmap,
torch.func and autograd.grad, and an outer torch pass seeing through diffiface's results."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di

X = np.array([0.5, -1.0, 2.0])


# ---- JAX ---------------------------------------------------------------------


def test_jax_nested_in_native_transforms():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x):
        return (jnp.sin(x) * x).sum()

    def inner_grad_sum(x):
        return di.gradient(f, di.AutoJax(), x).sum()

    # d/dx sum(cos x * x + sin x) = -sin x * x + 2 cos x
    want = -np.sin(X) * X + 2 * np.cos(X)
    np.testing.assert_allclose(jax.grad(inner_grad_sum)(jnp.asarray(X)), want, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.grad(inner_grad_sum))(X), want, rtol=1e-12)
    batch = np.stack([X, 2 * X])
    got = jax.vmap(lambda x: di.gradient(f, di.AutoJax(), x))(batch)
    np.testing.assert_allclose(got, np.cos(batch) * batch + np.sin(batch), rtol=1e-12)


def test_jax_constant_non_array_leaves_are_static():
    jax = pytest.importorskip("jax")

    def f(x, c):
        scale, name = c
        assert name == "tag"
        return scale * (x**2).sum()

    g = di.gradient(f, di.AutoJax(), X, di.Constant((3.0, "tag")))
    np.testing.assert_allclose(g, 6 * X)
    assert isinstance(jax.numpy.asarray(g), jax.Array)


# ---- torch -------------------------------------------------------------------


def test_torch_results_are_plain_tensors():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, requires_grad=False)
    g = di.gradient(lambda x: (x**2).sum(), di.AutoTorch(), x)
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float64
    assert not g.requires_grad and g.grad_fn is None
    torch.testing.assert_close(g, 2 * x)


def test_torch_under_no_grad():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, requires_grad=True)
    with torch.no_grad():
        g = di.gradient(lambda x: (x**3).sum(), di.AutoTorch(), x)
        j = di.jacobian(lambda x: x**2, di.AutoTorch(mode="reverse"), x)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)
    torch.testing.assert_close(j, torch.diag(2 * x.detach()))
    assert not g.requires_grad and x.grad is None


def test_torch_outer_autograd_sees_through():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, requires_grad=True)
    c = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    g = di.gradient(lambda x, c: c * (torch.sin(x) * x).sum(), di.AutoTorch(), x, di.Constant(c))
    gx, gc_ = torch.autograd.grad(g.sum(), (x, c))
    xd = x.detach()
    torch.testing.assert_close(gx, 1.5 * (-torch.sin(xd) * xd + 2 * torch.cos(xd)))
    torch.testing.assert_close(gc_, (torch.cos(xd) * xd + torch.sin(xd)).sum())


def test_torch_inside_torch_func():
    torch = pytest.importorskip("torch")

    def f(x):
        return (torch.sin(x) * x).sum()

    x = torch.tensor(X)
    want = -torch.sin(x) * x + 2 * torch.cos(x)
    got = torch.func.grad(lambda x: di.gradient(f, di.AutoTorch(), x).sum())(x)
    torch.testing.assert_close(got, want)
    batch = torch.stack([x, 2 * x])
    got = torch.func.vmap(lambda x: di.gradient(f, di.AutoTorch(), x))(batch)
    torch.testing.assert_close(got, torch.cos(batch) * batch + torch.sin(batch))
    _, t = torch.func.jvp(
        lambda x: di.gradient(f, di.AutoTorch(), x), (x,), (torch.ones(3, dtype=x.dtype),)
    )
    torch.testing.assert_close(t, want)


def test_torch_jacobian_inside_torch_func():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X)
    for mode in (None, "forward", "reverse"):
        b = di.AutoTorch(mode=mode)
        h = torch.func.jacrev(lambda x, b=b: di.jacobian(lambda z: z**3, b, x))(x)
        want = torch.zeros(3, 3, 3, dtype=x.dtype)
        for i in range(3):
            want[i, i, i] = 6 * x[i]
        torch.testing.assert_close(h, want)


# ---- autograd ----------------------------------------------------------------


def test_autograd_nested_in_native_grad():
    autograd = pytest.importorskip("autograd")
    anp = autograd.numpy

    def f(x):
        return anp.sum(anp.sin(x) * x)

    got = autograd.grad(lambda x: anp.sum(di.gradient(f, di.AutoAutograd(), x)))(X)
    np.testing.assert_allclose(got, -np.sin(X) * X + 2 * np.cos(X), rtol=1e-12)


def test_autograd_float32_stays_float32():
    pytest.importorskip("autograd")
    x = X.astype(np.float32)
    c64 = np.float64(2.0)  # a float64 constant promotes inside f
    g = di.gradient(lambda x: (c64 * x**2).sum(), di.AutoAutograd(), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 4 * x, rtol=1e-6)
    t = di.jvp(lambda x: x**2, di.AutoAutograd(), x, np.ones(3, np.float32))
    assert t.dtype == np.float32


def test_torch_hvp_and_hessian_keep_closures_differentiable():
    torch = pytest.importorskip("torch")
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    x = torch.ones(2, dtype=torch.float64)
    f = lambda x: (w * x**3).sum()  # noqa: E731
    # H = diag(6 w x) -> H 1 = 6 w x = 6 w; d/dw sum(6 w) = 6, plus d/dw sum(w^2) = 2 w
    (di.hvp(f, di.AutoTorch(), x, torch.ones_like(x)).sum() + (w**2).sum()).backward()
    torch.testing.assert_close(w.grad, 6 + 2 * w.detach())
    w.grad = None
    di.hessian(f, di.AutoTorch(), x).sum().backward()
    torch.testing.assert_close(w.grad, torch.full((2,), 6.0, dtype=torch.float64))


def test_autograd_grad_around_a_hessian():
    autograd = pytest.importorskip("autograd")
    anp = autograd.numpy
    outer = autograd.grad(
        lambda x: anp.sum(di.hessian(lambda x: (x**3).sum(), di.AutoAutograd(), x))
    )
    np.testing.assert_allclose(outer(np.array([1.0, 2.0])), [6.0, 6.0])


def test_torch_x_passed_again_as_a_constant_is_not_counted_twice():
    """An outer tensor used both as x and as a Constant: the inner gradient is with
    respect to x only (was d/dx sum(x * x**2) = 3x**2 instead of 2 c x)."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([4.0, -1.5], dtype=torch.float64, requires_grad=True)
    g = di.gradient(lambda y, c: (c * y**2).sum(), di.AutoTorch(), x, di.Constant(x))
    torch.testing.assert_close(g.detach(), 2 * x.detach() ** 2)
    (gx,) = torch.autograd.grad(g.sum(), x)  # d/dx sum(2 x x) = 4x
    torch.testing.assert_close(gx, 4 * x.detach())


# ---- MLX ---------------------------------------------------------------------


def test_mlx_nested_in_native_transforms():
    """diffiface inside mx.grad, mx.value_and_grad, mx.jvp and mx.vmap (also third order),
    against closed forms of f = Σx⁴ + (Σx²)² (polynomials: exact in MLX's float64)."""
    mx = pytest.importorskip("mlx.core")

    def f(x):
        return (x**4).sum() + (x**2).sum() ** 2

    def grad(x):  # 4x³ + 4 Σx² x
        return 4 * x**3 + 4 * (x**2).sum() * x

    def hess(x):  # diag(12x²) + 4 Σx² I + 8 x xᵀ
        return np.diag(12 * x**2) + 4 * (x**2).sum() * np.eye(x.size) + 8 * np.outer(x, x)

    x, V = mx.array(X, dtype=mx.float64), np.array([1.0, -2.0, 0.5])
    v = mx.array(V, dtype=mx.float64)
    got = mx.grad(lambda x: di.gradient(f, di.AutoMLX(), x).sum())(x)
    np.testing.assert_allclose(np.asarray(got), hess(X).sum(0), rtol=1e-12)
    val, _ = mx.value_and_grad(lambda x: di.gradient(f, di.AutoMLX(), x).sum())(x)
    assert float(val) == pytest.approx(grad(X).sum(), rel=1e-12)
    t = mx.jvp(lambda x: di.gradient(f, di.AutoMLX(), x), [x], [v])[1][0]
    np.testing.assert_allclose(np.asarray(t), hess(X) @ V, rtol=1e-12)
    got = mx.vmap(lambda x: di.gradient(f, di.AutoMLX(), x))(mx.stack([x, 2 * x]))
    np.testing.assert_allclose(np.asarray(got), [grad(X), grad(2 * X)], rtol=1e-12)
    third = mx.grad(lambda x: di.hvp(f, di.AutoMLX(), x, v).sum())(x)  # d/dx Σ (H v)
    want = 24 * X * V + 8 * X * V.sum() + 8 * (X @ V) + 8 * X.sum() * V
    np.testing.assert_allclose(np.asarray(third), want, rtol=1e-12)
