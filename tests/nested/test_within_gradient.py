"""within_gradient: whether a call runs under a differentiation, under every transform."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di


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


def test_within_gradient_mlx():
    """A known gap (diffiface/_gaps.py): MLX shows no tracer, so within_gradient cannot
    see mx.grad; outside it, False is right."""
    mx = pytest.importorskip("mlx.core")
    seen = []
    _probe(seen)(mx.ones(3))
    assert seen == [False]
    mx.grad(_probe(seen))(mx.ones(3))
    assert seen == [False, True]


def test_mlx_output_that_does_not_depend_on_x_warns():
    """A known gap (diffiface/_gaps.py): MLX shows no graph, so a disconnected output
    gives zeros (right) without the DisconnectedWarning the other AD backends give."""
    mx = pytest.importorskip("mlx.core")
    with pytest.warns(di.DisconnectedWarning):
        g = di.gradient(lambda x: mx.array(2.0), di.AutoMLX(), mx.ones(3))
    np.testing.assert_array_equal(np.asarray(g), 0.0)
