"""Several directions at once equal one direction at a time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, rounding, to_numpy, xp

import diffiface as di

RNG = np.random.default_rng(2)
X = np.array([0.4, -0.8, 1.3])
VS = [RNG.standard_normal(3) for _ in range(4)]
WS = [RNG.standard_normal(2) for _ in range(3)]


def field(ns):
    return lambda x: ns.sin(x[:2]) * x[1:] ** 2


def loss(ns):
    return lambda x: (ns.sin(x) * x[::1] ** 2).sum() + (x[:2] * x[1:]).sum() ** 2


def _close(a, b, backend=None):
    tol = 1e-12 if backend is None else rounding(backend, 1e-12)
    np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=tol, atol=tol)


def test_jvp_vjp_hvp_with_tangents(backend):
    ns = xp(backend)
    t = di.jvp(field(ns), backend, X, di.Tangents(*VS))
    assert isinstance(t, di.Tangents) and len(t) == len(VS)
    for got, v in zip(t, VS, strict=True):
        _close(got, di.jvp(field(ns), backend, X, v), backend)
    y, t = di.value_and_jvp(field(ns), backend, X, di.Tangents(*VS))
    _close(y, np.sin(X[:2]) * X[1:] ** 2, backend)
    g = di.vjp(field(ns), backend, X, di.Tangents(*WS))
    for got, w in zip(g, WS, strict=True):
        _close(got, di.vjp(field(ns), backend, X, w), backend)
    _, hv = di.gradient_and_hvp(loss(ns), backend, X, di.Tangents(*VS))
    for got, v in zip(hv, VS, strict=True):
        _close(got, di.hvp(loss(ns), backend, X, v), backend)


def test_tangents_on_native_pytrees(ad_backend):
    ns = xp(ad_backend)
    x = {"a": native(ad_backend, X), "b": native(ad_backend, np.array(0.7))}
    vs = [
        {"a": native(ad_backend, v), "b": native(ad_backend, np.array(float(i)))}
        for i, v in enumerate(VS[:3])
    ]

    def f(t):
        return (ns.sin(t["a"]) * t["b"]).sum()

    hv = di.hvp(f, ad_backend, x, di.Tangents(*vs))
    for got, v in zip(hv, vs, strict=True):
        want = di.hvp(f, ad_backend, x, v)
        _close(got["a"], want["a"])
        _close(got["b"], want["b"])
    t = di.jvp(lambda t: ns.sin(t["a"]) * t["b"], ad_backend, x, di.Tangents(*vs))
    for got, v in zip(t, vs, strict=True):
        _close(got, di.jvp(lambda t: ns.sin(t["a"]) * t["b"], ad_backend, x, v))


def test_jax_tangents_compile_once():
    jax = pytest.importorskip("jax")
    traces = []

    def f(x):
        traces.append(1)
        return jax.numpy.sin(x) * x

    for _ in range(5):
        di.jvp(f, di.AutoJax(), X, di.Tangents(*VS))
    assert len(traces) == 1  # one trace, vmapped over the 4 directions


def test_tangents_errors(backend):
    with pytest.raises(ValueError, match="at least one tangent"):
        di.Tangents()
    with pytest.raises(
        ValueError, match=r"v must have the shape of x: expected \(3,\), got \(2,\)"
    ):
        di.jvp(field(xp(backend)), backend, X, di.Tangents(VS[0], np.ones(2)))
    with pytest.raises(ValueError, match=r"w must have the shape of f\(x\)"):
        di.vjp(field(xp(backend)), backend, X, di.Tangents(WS[0], np.ones(3)))
