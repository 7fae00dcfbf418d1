"""batched_jacobian against the per-sample loop and a closed form, its cost, its dense
limit and chunk_size."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_BACKENDS
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


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_batched_jacobian_over_the_dense_limit_is_refused_before_any_work(backend):
    calls = []

    def f(x):
        calls.append(1)
        return x * 2.0

    with pytest.raises(di.DiffifaceValueError, match=r"batched Jacobian.*chunk_size"):
        di.batched_jacobian(f, backend, native(backend, np.ones((4, 12000))))
    assert len(calls) <= 1  # at most the output-size evaluation


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("k", [1, 2, 5])
def test_batched_jacobian_in_chunks_equals_the_closed_form(backend, k):
    rng = np.random.default_rng(3)
    xv = rng.normal(size=(3, 4))
    f = lambda x: x[:, :3] * x[:, 1:]  # noqa: E731
    want = np.zeros((3, 3, 4))
    for i in range(3):
        want[i, np.arange(3), np.arange(3)] = xv[i, 1:]
        want[i, np.arange(3), np.arange(1, 4)] += xv[i, :3]
    tol = 1e-5 if backend.framework == "finite_differences" else 1e-12
    got = di.batched_jacobian(f, backend, native(backend, xv), chunk_size=k)
    np.testing.assert_allclose(to_numpy(got), want, atol=tol)
    y, got = di.value_and_batched_jacobian(f, backend, native(backend, xv), chunk_size=k)
    np.testing.assert_allclose(to_numpy(y), xv[:, :3] * xv[:, 1:], atol=tol)
    np.testing.assert_allclose(to_numpy(got), want, atol=tol)
