"""The direction diffiface picks must not change the answer: an f that supports one
direction only runs in that one on every operator (a clear error where the user fixed
the other), and an f whose second derivative torch cannot build is a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di

X = np.array([0.7, 1.3])


@pytest.fixture(autouse=True)
def _fresh_facts(monkeypatch):
    """Each test learns what f supports itself: the facts kept per code outlive
    clear_caches, so a neighbour would otherwise have learned them already."""
    from diffiface._cache import CodeFacts
    from diffiface.core import direction

    monkeypatch.setattr(direction, "_ONLY", CodeFacts())
    if HAVE["torch"]:
        from diffiface.backends.torch import graph

        monkeypatch.setattr(graph, "CHECKED", CodeFacts())
        monkeypatch.setattr(graph, "_TWICE", CodeFacts())


# ---- torch: no_grad inside f (reverse mode: a constant; forward mode ignores it) ----
def _blocked(block):
    """y = x**3 - sg(x**2) * x, sg by a grad-mode block inside f: J = diag(2 x**2), the
    Hessian of sum(y) diag(6 x), as JAX's stop_gradient gives."""
    import torch

    def y(x):
        if block == "no_grad":
            with torch.no_grad():
                c = x**2
        else:
            with torch.set_grad_enabled(False):
                c = x**2
        return x**3 - c * x

    return y


def _ops(torch):
    """op name -> (call on a fresh f, closed-form reference at X)."""
    x, ones = torch.tensor(X), torch.ones(2, dtype=torch.float64)
    b, j, h = di.AutoTorch(), np.diag(2 * X**2), np.diag(6 * X)
    summed = lambda y: lambda x: y(x).sum()  # noqa: E731
    wide = lambda y: lambda x: torch.cat([y(x), 2 * y(x)])  # noqa: E731  4 outputs: forward
    x0 = torch.tensor(0.7, dtype=torch.float64)

    def prepared_jvp(y):
        prep = di.prepare_jvp(y, b, x, ones)
        return [di.jvp(y, b, x, ones, prep=prep) for _ in range(2)][-1]

    return {
        "gradient": (lambda y: di.gradient(summed(y), b, x), 2 * X**2),
        "vjp": (lambda y: di.vjp(y, b, x, ones), 2 * X**2),
        "jvp": (lambda y: di.jvp(y, b, x, ones), 2 * X**2),
        "jvp_tangents": (lambda y: di.jvp(y, b, x, di.Tangents(ones, x))[1], 2 * X**3),
        "prepared_jvp": (prepared_jvp, 2 * X**2),
        "jacobian": (lambda y: di.jacobian(wide(y), b, x), np.vstack([j, 2 * j])),
        "jacobian_chunked": (
            lambda y: di.jacobian(wide(y), b, x, chunk_size=1),
            np.vstack([j, 2 * j]),
        ),
        "sparse_jacobian": (
            lambda y: di.jacobian(wide(y), di.AutoSparse(b), x).to_dense(),
            np.vstack([j, 2 * j]),
        ),
        "batched_jacobian": (
            lambda y: di.batched_jacobian(lambda x: torch.cat([y(x), 2 * y(x)], 1), b, x[:, None]),
            np.stack([[[2 * v**2], [4 * v**2]] for v in X]),
        ),
        "derivative": (lambda y: di.derivative(y, b, x0), 2 * 0.7**2),
        "second_derivative": (lambda y: di.second_derivative(y, b, x0), 6 * 0.7),
        "hessian": (lambda y: di.hessian(summed(y), b, x), h),
        "hvp": (lambda y: di.hvp(summed(y), b, x, ones), 6 * X),
        "hvp_second_order": (
            lambda y: di.hvp(summed(y), di.second_order(b, b), x, ones),  # forward over reverse
            6 * X,
        ),
    }


OPS = (  # (gradient, vjp, hessian and hvp run in reverse mode: right before too)
    "jvp",
    "jvp_tangents",
    "prepared_jvp",
    "jacobian",
    "jacobian_chunked",
    "sparse_jacobian",
    "batched_jacobian",
    "derivative",
    "second_derivative",
    "hvp_second_order",
)


@pytest.mark.skipif(not HAVE["torch"], reason="needs torch")
@pytest.mark.parametrize("block", ["no_grad", "set_grad_enabled"])
@pytest.mark.parametrize("op", OPS)
def test_torch_grad_mode_block_same_answer_on_every_operator(op, block):
    import torch

    run, want = _ops(torch)[op]
    got = run(_blocked(block))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not HAVE["torch"], reason="needs torch")
@pytest.mark.parametrize("op", ["jvp", "derivative", "jacobian"])
def test_torch_grad_mode_block_in_a_closure_made_per_call(op):
    """The first call of f's code is watched; later closures of the same code (not
    watched again) still run in reverse mode."""
    import torch

    run, want = _ops(torch)[op]
    for k in (1.0, 2.0, 3.0):
        y = _blocked("no_grad")
        got = run(lambda x, k=k: y(x) * k)  # noqa: B023
        np.testing.assert_allclose(np.asarray(got), k * np.asarray(want), rtol=1e-12)


@pytest.mark.skipif(not HAVE["torch"], reason="needs torch")
@pytest.mark.parametrize("first", [None, "gradient"])
def test_torch_no_grad_with_forward_fixed_is_a_clear_error(first):
    import torch

    x, y = torch.tensor(X), _blocked("no_grad")
    if first == "gradient":  # learned in reverse mode first, then asked in forward mode
        di.gradient(lambda x: y(x).sum(), di.AutoTorch(), x)
    forward = di.AutoTorch(mode="forward")
    with pytest.raises(
        di.DiffifaceTypeError,
        match=r"jacobian\(f, AutoTorch\(mode='forward'\), x\): f cannot run in forward .*no_grad",
    ):
        di.jacobian(y, forward, x)
    with pytest.raises(di.DiffifaceTypeError, match=r"forward mode .*no_grad"):
        di.hvp(lambda x: y(x).sum(), di.second_order(forward, di.AutoTorch()), x, x)
    # .detach() is dropped by both modes alike: forward mode stays in use
    detached = lambda x: x**3 - x.detach() ** 2 * x  # noqa: E731
    np.testing.assert_allclose(di.jacobian(detached, forward, x).numpy(), np.diag(2 * X**2))


# ---- torch: an autograd.Function whose backward is @once_differentiable ----
def _cube():
    import torch
    from torch.autograd.function import once_differentiable

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2

    return Cube


@pytest.mark.skipif(not HAVE["torch"], reason="needs torch")
def test_torch_once_differentiable_second_derivatives_are_a_clear_error():
    import torch

    cube, b, x = _cube(), di.AutoTorch(), torch.tensor(X)
    f = lambda x: (cube.apply(x) + x**2).sum()  # noqa: E731  part of H would be lost
    np.testing.assert_allclose(di.gradient(f, b, x).numpy(), 3 * X**2 + 2 * X, rtol=1e-12)
    match = r"autograd.Function Cube, which is marked @once_differentiable.*AutoFiniteDifferences"
    for call in (
        lambda: di.hessian(f, b, x),
        lambda: di.hvp(f, b, x, x),
        lambda: di.hvp(f, b, x, di.Tangents(x, x)),
        lambda: di.value_gradient_and_hessian(f, b, x),
        lambda: di.second_derivative(cube.apply, b, torch.tensor(0.7, dtype=torch.float64)),
    ):
        with pytest.raises(di.DiffifaceTypeError, match=match):
            call()
    w = torch.tensor(X, requires_grad=True)  # a gradient penalty over FixedParams
    g = lambda w: di.gradient(di.FixedParams(lambda x, w: cube.apply(x * w).sum(), w), b, x)  # noqa: E731
    with pytest.raises(di.DiffifaceTypeError, match=match):
        torch.autograd.grad((g(w) ** 2).sum(), w)
    fd = di.second_order(di.AutoFiniteDifferences(), b)  # the fix the message names
    np.testing.assert_allclose(di.hessian(f, fd, x).numpy(), np.diag(6 * X + 2), rtol=1e-5)


# ---- an f without reverse mode: the automatic direction falls back to forward ----
def _while_loop():
    import jax
    import jax.numpy as jnp

    def f(x):  # the trip count depends on x: no reverse mode
        def body(c):
            return c[0] * 1.1 + jnp.sin(x[1]), c[1] + 1.0

        return jnp.reshape(
            jax.lax.while_loop(lambda c: c[1] < x[0] * 10, body, (x[0], 0.0))[0], (1,)
        )

    return f


JAX_OPS = (
    "jacobian",
    "value_and_jacobian",
    "jacobian_chunked",
    "sparse_jacobian",
    "batched_jacobian",
    "gradient",
    "vjp",
    "hessian",
)


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
@pytest.mark.parametrize("op", JAX_OPS)
def test_jax_while_loop_falls_back_to_forward(op):
    import jax
    import jax.numpy as jnp

    f, b = _while_loop(), di.AutoJax()
    x = jnp.array([0.35, 0.2], dtype=jnp.float32)
    want_j = np.asarray(jax.jacfwd(f)(x))
    scalar = lambda x: f(x)[0]  # noqa: E731
    got, want = {
        "jacobian": lambda: (di.jacobian(f, b, x), want_j),
        "value_and_jacobian": lambda: (di.value_and_jacobian(f, b, x)[1], want_j),
        "jacobian_chunked": lambda: (di.jacobian(f, b, x, chunk_size=1), want_j),
        "sparse_jacobian": lambda: (di.jacobian(f, di.AutoSparse(b), x).todense(), want_j),
        "batched_jacobian": lambda: (
            di.batched_jacobian(lambda xs: jax.vmap(f)(xs)[:, 0], b, jnp.stack([x, x])),
            np.stack([want_j[0], want_j[0]]),
        ),
        "gradient": lambda: (di.gradient(scalar, b, x), want_j[0]),
        "vjp": lambda: (di.vjp(f, b, x, jnp.ones(1, dtype=x.dtype)), want_j[0]),
        "hessian": lambda: (di.hessian(scalar, b, x), jax.jacfwd(jax.jacfwd(scalar))(x)),
    }[op]()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
def test_jax_while_loop_with_reverse_fixed_is_a_clear_error():
    import jax.numpy as jnp

    x = jnp.array([0.35, 0.2], dtype=jnp.float32)
    with pytest.raises(di.DiffifaceTypeError, match=r"cannot run in reverse mode.*mode='forward'"):
        di.jacobian(_while_loop(), di.AutoJax(mode="reverse"), x)


@pytest.mark.skipif(not HAVE["torch"], reason="needs torch")
@pytest.mark.parametrize("op", ["jacobian", "gradient", "vjp"])
def test_torch_function_without_backward_falls_back_to_forward(op):
    import torch

    class Sin(torch.autograd.Function):  # forward mode only
        @staticmethod
        def forward(x):
            return torch.sin(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return torch.cos(x) * t

    b, x = di.AutoTorch(), torch.tensor(X)
    f = lambda x: Sin.apply(x).sum(0, keepdim=True)  # noqa: E731
    got = {
        "jacobian": lambda: di.jacobian(f, b, x)[0],
        "gradient": lambda: di.gradient(lambda x: f(x)[0], b, x),
        "vjp": lambda: di.vjp(f, b, x, torch.ones(1, dtype=torch.float64)),
    }[op]()
    np.testing.assert_allclose(got.numpy(), np.cos(X), rtol=1e-12)


@pytest.mark.skipif(not HAVE["autograd"], reason="needs autograd")
@pytest.mark.parametrize("op", ["jacobian", "gradient"])
def test_autograd_primitive_without_vjp_falls_back_to_forward(op):
    import autograd.numpy as anp
    from autograd.extend import defjvp, primitive

    @primitive
    def sin(x):
        return anp.sin(x)

    defjvp(sin, lambda g, ans, x: anp.cos(x) * g)
    b = di.AutoAutograd()
    if op == "jacobian":
        got = di.jacobian(lambda x: sin(x).sum(keepdims=True), b, X)[0]
    else:
        got = di.gradient(lambda x: sin(x).sum(), b, X)
    np.testing.assert_allclose(got, np.cos(X), rtol=1e-12)
