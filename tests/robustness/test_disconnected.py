"""f whose output does not depend on x (constant, or off the framework's graph):
zeros of the right shape and dtype with a DisconnectedWarning pointing at the
caller, or an error under strict, the same on every AD backend; f that depends
on x gives neither, and a partly unused x only zeros for the unused leaves."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import native, rounding, to_numpy, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])


def _dropping(backend):
    """f that leaves the framework's graph, per framework."""
    name = type(backend).__name__
    if name == "AutoJax":
        import jax

        return lambda x: jax.lax.stop_gradient(x).sum()
    if name == "AutoTorch":
        return lambda x: x.detach().sum()
    if name == "AutoMLX":
        import mlx.core as mx

        return lambda x: mx.stop_gradient(x).sum()
    return lambda x: np.sum(np.asarray(getattr(x, "_value", x)))  # autograd: unboxed by hand


def _constant(backend):
    ns = xp(backend)
    return lambda x: ns.sum(ns.ones(3)) * 2.0


@pytest.mark.parametrize("make", [_dropping, _constant], ids=["graph dropped", "constant"])
def test_zeros_and_a_warning(ad_backend, make):
    f, x = make(ad_backend), native(ad_backend, X)
    with pytest.warns(di.DisconnectedWarning, match="does not depend on x") as record:
        g = di.gradient(f, ad_backend, x)
    assert type(g) is type(x) and to_numpy(g).dtype == to_numpy(x).dtype
    np.testing.assert_array_equal(to_numpy(g), np.zeros(3))
    assert any(w.filename == __file__ for w in record)  # points at the caller
    with pytest.warns(di.DisconnectedWarning):
        ones = native(ad_backend, np.ones(2))
        di.vjp(lambda x: f(x) * ones, ad_backend, x, native(ad_backend, X[:2]))


@pytest.mark.parametrize("make", [_dropping, _constant], ids=["graph dropped", "constant"])
def test_strict_makes_it_an_error(ad_backend, make):
    f, x = make(ad_backend), native(ad_backend, X)
    with di.options(strict=True):
        with pytest.raises(ValueError, match=r"does not depend on x.*turn strict off") as err:
            di.gradient(f, ad_backend, x)
    assert repr(ad_backend) in str(err.value)


def test_connected_functions_do_not_warn(ad_backend):
    ns, x = xp(ad_backend), native(ad_backend, X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.DisconnectedWarning)
        g = di.gradient(lambda x: (x**2).sum(), ad_backend, x)
        np.testing.assert_allclose(to_numpy(g), 2 * X, rtol=1e-12)
        # a linear f: its Hessian is zero, and that is not a disconnection
        np.testing.assert_array_equal(
            to_numpy(di.hessian(lambda x: (2 * x).sum(), ad_backend, x)), np.zeros((3, 3))
        )
        d = {"used": x, "unused": native(ad_backend, X[:2])}
        g = di.gradient(lambda d: (d["used"] ** 2).sum(), ad_backend, d)
        np.testing.assert_array_equal(to_numpy(g["unused"]), np.zeros(2))
        g = di.gradient(lambda x, c: (ns.sin(x) * c).sum(), ad_backend, x, di.Constant(2.0))
        np.testing.assert_allclose(to_numpy(g), 2 * np.cos(X), rtol=rounding(ad_backend, 1e-12))


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
