"""batched_jacobian against the per-sample loop; within_gradient under every transform."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, to_numpy, tolerance, xp

import diffiface as di

RNG = np.random.default_rng(1)
W1 = RNG.standard_normal((3, 6))
W2 = RNG.standard_normal((6, 2))


def mlp(ns):
    def f(x, w):
        a, b = w
        return ns.tanh(x @ a) @ b

    return f


def _per_sample_jacobians(x):
    out = []
    for xi in x:
        hidden = np.tanh(xi @ W1)
        out.append(((1 - hidden**2)[:, None] * W2).T @ W1.T)  # (2, 3)
    return np.stack(out)


@pytest.mark.parametrize("mode", [None, "forward", "reverse"])
def test_batched_jacobian_equals_the_per_sample_loop(backend, mode):
    if mode is not None:
        if backend.framework == "finite_differences":
            pytest.skip("no mode")
        backend = type(backend)(mode=mode)
    x = RNG.standard_normal((5, 3))
    want = _per_sample_jacobians(x)
    ctx = di.Constant((W1, W2))
    y, J = di.value_and_batched_jacobian(mlp(xp(backend)), backend, x, ctx)
    rtol, atol = tolerance(backend, np.float64)
    assert J.shape == (5, 2, 3) and isinstance(J, np.ndarray)
    np.testing.assert_allclose(J, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(y, np.tanh(x @ W1) @ W2, rtol=1e-12)


def test_batched_jacobian_native_and_matrix_samples(ad_backend):
    x = RNG.standard_normal((4, 2, 2))
    f = lambda x: x * x[:, :1, :1]  # noqa: E731 - (B, 2, 2) -> (B, 2, 2)
    J = di.batched_jacobian(f, ad_backend, native(ad_backend, x))
    assert tuple(J.shape) == (4, 2, 2, 2, 2)
    for b in range(4):
        want = di.jacobian(lambda s: s * s[:1, :1], di.AutoFiniteDifferences(), x[b])
        np.testing.assert_allclose(to_numpy(J[b]), want, rtol=1e-6, atol=1e-8)


def test_finite_difference_batched_jacobian_cost():
    calls = []

    def f(x):
        calls.append(1)
        return x**2

    di.batched_jacobian(f, di.AutoFiniteDifferences(), np.ones((100, 3)))
    # the output size (the dense-size check), f(x) and 2 per input of one sample, not 2*100*3
    assert len(calls) == 2 + 2 * 3


def test_batched_jacobian_errors(backend):
    with pytest.raises(ValueError, match="x must have a batch axis first"):
        di.batched_jacobian(lambda x: x * 2, backend, np.array(1.0))
    with pytest.raises(ValueError, match="f must keep the batch axis first"):
        di.batched_jacobian(lambda x: x.sum(axis=0), backend, np.ones((4, 3)))


# ---- within_gradient -----------------------------------------------------------------


def _probe(seen):
    def f(x):
        seen.append(di.within_gradient(x))
        return (x**2).sum()

    return f


def test_within_gradient_plain_arrays():
    assert di.within_gradient(np.ones(2)) is False
    assert di.within_gradient(1.0) is False


def test_within_gradient_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, xb = jnp.ones(3), jnp.ones((2, 3))
    cases = {
        "grad": (lambda f: jax.grad(f)(x), True),
        "jit(grad)": (lambda f: jax.jit(jax.grad(f))(x), True),
        "vmap(grad)": (lambda f: jax.vmap(jax.grad(f))(xb), True),
        "grad(vmap)": (lambda f: jax.grad(lambda x: jax.vmap(f)(x).sum())(xb), True),
        "jvp": (lambda f: jax.jvp(f, (x,), (x,)), True),
        "vjp": (lambda f: jax.vjp(f, x), True),
        "linearize": (lambda f: jax.linearize(f, x), True),
        "hessian": (lambda f: jax.hessian(f)(x), True),
        "jit": (lambda f: jax.jit(f)(x), False),
        "vmap": (lambda f: jax.vmap(f)(xb), False),
        "grad(jit) (documented limit)": (lambda f: jax.grad(jax.jit(f))(x), False),
    }
    for name, (run, want) in cases.items():
        seen = []
        run(_probe(seen))
        assert seen and all(s is want for s in seen), name
    assert di.within_gradient(x) is False


def test_within_gradient_torch():
    torch = pytest.importorskip("torch")
    import torch.autograd.forward_ad as fwAD

    t, tb = torch.ones(3), torch.ones(2, 3)

    def dual(f):
        with fwAD.dual_level():
            f(fwAD.make_dual(t, t))

    def no_grad(f):
        with torch.no_grad():
            f(t.clone().requires_grad_())

    cases = {
        "requires_grad": (lambda f: f(t.clone().requires_grad_()), True),
        "func.grad": (lambda f: torch.func.grad(f)(t), True),
        "func.jvp": (lambda f: torch.func.jvp(f, (t,), (t,)), True),
        "func.vjp": (lambda f: torch.func.vjp(f, t), True),
        "vmap(grad)": (lambda f: torch.func.vmap(torch.func.grad(f))(tb), True),
        "forward_ad dual": (dual, True),
        "plain": (lambda f: f(t), False),
        "no_grad": (no_grad, False),
        "vmap": (lambda f: torch.func.vmap(f)(tb), False),
    }
    for name, (run, want) in cases.items():
        seen = []
        run(_probe(seen))
        assert seen and all(s is want for s in seen), name


def test_within_gradient_autograd():
    autograd = pytest.importorskip("autograd")
    seen = []
    autograd.grad(_probe(seen))(np.ones(3))
    assert seen == [True]
    seen.clear()
    _probe(seen)(np.ones(3))
    assert seen == [False]


def test_within_gradient_through_diffiface(backend):
    seen = []
    di.gradient(_probe(seen), backend, np.ones(3))
    assert seen and all(s is (backend.framework != "finite_differences") for s in seen)
