"""Bugs found in review, each pinned by a test."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import diffiface as di


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


def test_jax_batched_jacobian_does_not_keep_f_alive():
    jnp = pytest.importorskip("jax").numpy

    def f(x):
        return jnp.sin(x)

    ref = weakref.ref(f)
    di.batched_jacobian(f, di.AutoJax(), jnp.ones((2, 3)))
    del f
    gc.collect()
    assert ref() is None


def test_empty_inputs_and_outputs(backend):
    ns_ones = np.ones
    j = di.jacobian(lambda x: x[:0] * 2, backend, ns_ones(3))
    assert j.shape == (0, 3)
    j = di.jacobian(
        lambda x: (x * 2).sum() + x[:0].sum() * 0 + 0 * x[:1].sum(), backend, ns_ones(0)
    )
    assert j.shape == (0,)
    j = di.batched_jacobian(lambda x: x**2, backend, ns_ones((0, 3)))
    assert j.shape == (0, 3, 3)


def test_torch_empty_hessian_and_jacobian():
    torch = pytest.importorskip("torch")
    assert di.hessian(lambda x: (x**2).sum(), di.AutoTorch(), torch.ones(0)).shape == (0, 0)
    j = di.jacobian(lambda x: x.sum() * torch.ones(2), di.AutoTorch(), torch.ones(0))
    assert j.shape == (2, 0)


def test_negative_strides_into_torch():
    pytest.importorskip("torch")
    g = di.gradient(lambda x: (x**2).sum(), di.AutoTorch(), np.arange(3.0)[::-1])
    np.testing.assert_allclose(g, [4.0, 2.0, 0.0])


def test_autograd_grad_around_a_hessian():
    autograd = pytest.importorskip("autograd")
    anp = autograd.numpy
    outer = autograd.grad(
        lambda x: anp.sum(di.hessian(lambda x: (x**3).sum(), di.AutoAutograd(), x))
    )
    np.testing.assert_allclose(outer(np.array([1.0, 2.0])), [6.0, 6.0])


def test_prepared_with_tangents_called_with_one():
    jax = pytest.importorskip("jax")
    x = jax.numpy.ones(3)
    prep = di.prepare_jvp(jax.numpy.sin, di.AutoJax(), x, di.Tangents(x, x))
    with pytest.raises(di.MismatchError, match="tangent    MISMATCH"):
        di.jvp(jax.numpy.sin, di.AutoJax(), x, x, prep=prep)


def test_jax_float64_tangent_without_x64():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(False):
        x = jax.numpy.ones(2)
        with pytest.raises(ValueError, match="v is float64, but JAX has x64 disabled"):
            di.jvp(lambda x: x**2, di.AutoJax(), x, np.ones(2))


def test_finite_difference_hvp_of_a_scalar_is_an_array():
    hv = di.hvp(lambda x: x**3, di.AutoFiniteDifferences(), np.array(2.0), np.array(1.0))
    assert isinstance(hv, np.ndarray) and hv.shape == ()
    assert float(hv) == pytest.approx(12.0, rel=1e-5)


def test_prepared_torch_gradient_with_module_parameters_runs_f_once():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    calls = []

    def f(x):
        calls.append(1)
        return lin(x).sum()

    x = torch.randn(3)
    prep = di.prepare_gradient(f, di.AutoTorch(), x)
    calls.clear()
    g = di.gradient(f, di.AutoTorch(), x, prep=prep)
    assert len(calls) == 1
    torch.testing.assert_close(g, lin.weight.detach()[0])
    (gw,) = torch.autograd.grad(g.sum(), lin.weight)  # attached: d/dW sum(W) = 1
    torch.testing.assert_close(gw, torch.ones_like(gw))


def test_prep_accepts_bound_methods_and_odd_constants():
    jnp = pytest.importorskip("jax").numpy

    class M:
        def loss(self, x, c):
            return (x.astype(c) ** 2).sum()

    m, x = M(), jnp.ones(3)
    prep = di.prepare_gradient(m.loss, di.AutoJax(), x, di.Constant(jnp.float32))
    g = di.gradient(m.loss, di.AutoJax(), x, di.Constant(jnp.float32), prep=prep)
    np.testing.assert_allclose(g, 2 * np.ones(3))
    with pytest.raises(di.MismatchError, match="f          MISMATCH"):
        di.gradient(M().loss, di.AutoJax(), x, di.Constant(jnp.float32), prep=prep)


def test_mismatch_with_no_tangent_is_reported():
    f = lambda x: x * 2  # noqa: E731
    b, x = di.AutoFiniteDifferences(), np.ones(2)
    prep = di.prepare_jvp(f, b, x, di.Tangents(x, x))
    with pytest.raises(di.MismatchError, match="tangent    MISMATCH: got none"):
        di.jvp(lambda x: x * 3, b, x, None, prep=prep)


def test_torch_x_passed_again_as_a_constant_is_not_counted_twice():
    """An outer tensor used both as x and as a Constant: the inner gradient is with
    respect to x only (was d/dx sum(x * x**2) = 3x**2 instead of 2 c x)."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([4.0, -1.5], dtype=torch.float64, requires_grad=True)
    g = di.gradient(lambda y, c: (c * y**2).sum(), di.AutoTorch(), x, di.Constant(x))
    torch.testing.assert_close(g.detach(), 2 * x.detach() ** 2)
    (gx,) = torch.autograd.grad(g.sum(), x)  # d/dx sum(2 x x) = 4x
    torch.testing.assert_close(gx, 4 * x.detach())


@pytest.mark.parametrize("op", ["hvp", "hessian", "second_derivative"])
def test_autograd_second_order_of_a_linear_function_is_zero_without_a_warning(op):
    """autograd warned "Output seems independent of input" (an error under pytest) when
    it differentiated a gradient that is constant: found by the fuzz test."""
    pytest.importorskip("autograd")
    b = di.AutoAutograd()
    if op == "second_derivative":
        out = di.second_derivative(lambda x: 3.0 * x, b, np.asarray(0.5))
        np.testing.assert_array_equal(out, 0.0)
        return
    x = np.array([1.0, 2.0])
    f = lambda x: (x * np.array([3.0, -1.0])).sum()  # noqa: E731
    out = di.hvp(f, b, x, x) if op == "hvp" else di.hessian(f, b, x)
    np.testing.assert_array_equal(out, np.zeros_like(out))


def test_review_of_the_fast_paths():
    """Found in review: a chunked call must not leave a runner for plain calls; strict
    must hold for an f JAX compiled before; an outer non-leaf x must not be changed."""
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    jnp = jax.numpy
    x = jnp.asarray([0.3, -0.7, 1.1])

    def f(x):
        return jnp.sin(x) * x.sum()

    want = np.diag(np.cos(x) * float(x.sum())) + np.sin(np.asarray(x))[:, None]
    np.testing.assert_allclose(di.jacobian(f, di.AutoJax(), x, chunk_size=2), want, rtol=1e-12)
    np.testing.assert_allclose(di.jacobian(f, di.AutoJax(), x), want, rtol=1e-12)
    np.testing.assert_allclose(di.jacobian(f, di.AutoJax(), x), want, rtol=1e-12)

    def const(x):
        return jnp.asarray(2.0) * 1.0

    with pytest.warns(di.DisconnectedWarning):
        di.gradient(const, di.AutoJax(), x)
    with di.options(strict=True), pytest.raises(ValueError, match="does not depend on x"):
        di.gradient(const, di.AutoJax(), x)

    p = torch.ones(3, dtype=torch.float64, requires_grad=True)
    xt = p * 2  # a non-leaf an outer pass differentiates
    g = di.gradient(lambda v: v.mul_(2).sum(), di.AutoTorch(), xt)  # f gets a copy
    np.testing.assert_array_equal(g.detach().numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(xt.detach().numpy(), [2.0, 2.0, 2.0])
