"""Finite-difference jvp: a runner at one float array, 2 evaluations of f for a plain
central jvp (f(x) is not needed), f's own copies of the moved points. Each result is
compared with the closed form J v at rtol 1e-8 (central differences, default step)."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di

X = np.array([0.3, -0.7, 1.1, 0.2, 0.9])
V = np.array([1.0, 0.5, -2.0, 0.25, -0.4])
B = di.AutoFiniteDifferences()
JV = (np.cos(X) * X + np.sin(X)) * V  # d/dx (sin(x) x) along V


def counted():
    calls, seen = [0], []

    def f(x):
        calls[0] += 1
        seen.append(x)
        out = np.sin(x) * x
        x[...] = 7.0  # f writes into its argument: never the caller's x
        return out

    return f, calls, seen


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize(("op", "runs"), [("jvp", 2), ("value_and_jvp", 3)])
def test_evaluations_of_f(monkeypatch, prepared, op, runs):
    """Before: 3 runs of f for a plain jvp (f(x) first, which it does not return)."""
    f, calls, _ = counted()
    x = X.copy()
    prep = di.prepare_jvp(f, B, x, V) if prepared else None
    getattr(di, op)(f, B, x, V, prep=prep)  # (an unprepared call keeps its plan)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))
    calls[0] = 0
    got = getattr(di, op)(f, B, x, V, prep=prep)
    assert calls[0] == runs
    np.testing.assert_array_equal(x, X)
    t = got[1] if op == "value_and_jvp" else got
    np.testing.assert_allclose(t, JV, rtol=1e-8)
    if op == "value_and_jvp":
        np.testing.assert_allclose(got[0], np.sin(X) * X, rtol=1e-15)


def test_a_zero_d_x_reaches_f_as_an_array():
    seen = []

    def f(x):
        seen.append(type(x))
        return np.sin(x) * x

    t = di.jvp(f, B, np.array(0.4), np.array(1.0))
    assert seen and all(k is np.ndarray for k in seen)
    np.testing.assert_allclose(t, np.cos(0.4) * 0.4 + np.sin(0.4), rtol=1e-8)


@pytest.mark.parametrize("method", ["forward", "backward"])
def test_one_sided_jvps_use_f_at_x(method):
    f, calls, _ = counted()
    calls[0] = 0
    t = di.jvp(f, di.AutoFiniteDifferences(method=method), X.copy(), V)
    assert calls[0] == 2  # f(x) and one moved point
    np.testing.assert_allclose(t, JV, rtol=1e-6)


def test_the_aux_is_f_at_x():
    def f(x):
        return np.sin(x) * x, np.sum(x)

    t, aux = di.jvp(f, B, X, V, has_aux=True)
    np.testing.assert_allclose(t, JV, rtol=1e-8)
    assert aux == np.sum(X)


def test_a_zero_tangent_gives_zeros_shaped_like_f():
    t = di.jvp(lambda x: np.stack([x, x**2]), B, X, np.zeros(5))
    np.testing.assert_array_equal(t, np.zeros((2, 5)))
