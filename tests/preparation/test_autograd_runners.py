"""The runners of autograd plans for jvp and vjp: a prepared or kept call at one float
array runs one make_jvp / make_vjp of f, without the general path. Every derivative
is compared with autograd's own transforms in float64; each test proves the runner
answered (the general path made to fail)."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di

pytest.importorskip("autograd")
import autograd
import autograd.numpy as anp

X = np.array([0.3, -0.7, 1.1, 0.2, 0.9, -1.3])
V = np.array([1.0, 0.5, -2.0, 0.25, -0.4, 0.8])
B = di.AutoAutograd()


def field(x):
    return anp.sin(x) * x[0] + x**2


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


def _autograd_own(op, x, t):
    jac = autograd.jacobian(field)(x)
    d = jac @ t if "jvp" in op else t @ jac
    return (field(x), d) if op.startswith("value") else (d,)


@pytest.mark.parametrize("op", ["jvp", "value_and_jvp", "vjp", "value_and_vjp"])
@pytest.mark.parametrize("prepared", [True, False])
def test_jvp_and_vjp_by_the_runner(monkeypatch, op, prepared):
    family = op.removeprefix("value_and_")
    prep = getattr(di, f"prepare_{family}")(field, B, X, V) if prepared else None
    fn = getattr(di, op)
    fn(field, B, X, V, prep=prep)  # (an unprepared call keeps its plan)
    _general_path_fails(monkeypatch)
    for _ in range(2):
        got = fn(field, B, X, V, prep=prep)
        got = got if isinstance(got, tuple) else (got,)
        for a, b in zip(got, _autograd_own(op, X, V), strict=True):
            assert type(a) is np.ndarray and a.dtype == np.float64
            np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("op", ["jvp", "vjp"])
def test_an_outer_autograd_pass_sees_through_the_plan(op):
    """f closing over a box of an outer autograd pass: the runner hands the call to the
    general path, whose result autograd differentiates."""
    fn = getattr(di, op)
    prep = getattr(di, f"prepare_{op}")(field, B, X, V)
    np.testing.assert_allclose(fn(field, B, X, V, prep=prep), _autograd_own(op, X, V)[0])

    def outer(c):  # d/dc of <jvp or vjp of c * field, V>, by autograd around diffiface
        g = lambda x: c * field(x)  # noqa: E731
        fn(g, B, X, V)  # (the first call keeps g's plan: the second runs it)
        return anp.sum(fn(g, B, X, V) * V)

    want = np.sum(_autograd_own(op, X, V)[0] * V)
    np.testing.assert_allclose(autograd.grad(outer)(2.0), want, rtol=1e-12)


def constant(x):
    return np.ones(3)


def test_an_f_that_ignores_x_still_warns():
    """f off x's trace: the runner hands the call to the general path, which warns."""
    with pytest.warns(di.DisconnectedWarning):
        prep = di.prepare_jvp(constant, B, X, V)
    with pytest.warns(di.DisconnectedWarning):
        got = di.jvp(constant, B, X, V, prep=prep)
    np.testing.assert_array_equal(got, np.zeros(3))


@pytest.mark.parametrize("op", ["jvp", "value_and_jvp", "vjp", "value_and_vjp"])
def test_tangents_by_the_runner(monkeypatch, op):
    """A prepared call with a Tangents of k runs the runner once per tangent."""
    ts = [V, V[::-1].copy(), np.cos(V)]
    family = op.removeprefix("value_and_")
    prep = getattr(di, f"prepare_{family}")(field, B, X, di.Tangents(*ts))
    _general_path_fails(monkeypatch)
    got = getattr(di, op)(field, B, X, di.Tangents(*ts), prep=prep)
    if op.startswith("value"):
        np.testing.assert_allclose(got[0], field(X), rtol=1e-12)
        got = got[1]
    assert type(got) is di.Tangents and len(got) == 3
    for a, t in zip(got, ts, strict=True):
        np.testing.assert_allclose(a, _autograd_own(family, X, t)[0], rtol=1e-12)
