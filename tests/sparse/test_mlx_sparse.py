"""AutoSparse(AutoMLX()): sparse Jacobians and Hessians of MLX functions, from the
local detector or a given pattern (MLX exposes no program for the global one: a clear
error). MLX has no sparse type: the result is a scipy.sparse.csr_array, or with
dense=True an mx.array. Every result is checked against its closed form."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import diffiface as di

mx = pytest.importorskip("mlx.core")

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


def test_the_global_detector_is_a_clear_error():
    x = mx.array(X.astype(np.float32))
    backend = di.AutoSparse(di.AutoMLX())
    with pytest.raises(di.DiffifaceTypeError) as err:
        di.jacobian(_f, backend, x)
    msg = str(err.value)
    assert msg.startswith(f"jacobian(f, {backend!r}, x): sparsity detection")
    assert "sparsity_detector='local'" in msg


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
