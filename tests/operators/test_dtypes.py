"""Dtypes and array kinds: float32 in, float32 out on every operator; mixed dtypes keep
their own; Python floats in, Python floats out; NumPy views (negative strides) into torch."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, to_numpy, tolerance, xp

import diffiface as di


def test_python_float_in_python_float_out(backend):
    f = xp(backend).sin
    d = di.derivative(f, backend, 0.5)
    assert isinstance(d, float)
    rtol, atol = tolerance(backend, np.float32)
    assert d == pytest.approx(np.cos(0.5), rel=rtol, abs=atol)
    y, g = di.value_and_gradient(f, backend, 0.5)
    assert isinstance(y, float) and isinstance(g, float)
    assert g == pytest.approx(np.cos(0.5), rel=rtol, abs=atol)


X = np.array([0.3, -0.7, 1.1])


def _leaves(out):
    if isinstance(out, tuple | list):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


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


def test_negative_strides_into_torch():
    pytest.importorskip("torch")
    g = di.gradient(lambda x: (x**2).sum(), di.AutoTorch(), np.arange(3.0)[::-1])
    np.testing.assert_allclose(g, [4.0, 2.0, 0.0])
