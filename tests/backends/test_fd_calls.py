"""The finite-difference jvp runner at one float array: few Python calls inside diffiface
per warm call (counted, not timed), and the same checks as the general path (f's output
on every evaluation, nested levels, errors that name the call). Results are compared
with the closed form J v of sin(x) x at rtol 1e-8 (central differences, default step)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls as calls_inside

import diffiface as di

X = np.linspace(-1.0, 1.2, 7)
V = np.linspace(0.5, -1.5, 7)
B = di.AutoFiniteDifferences()
JV = (np.cos(X) * X + np.sin(X)) * V


def f(x):
    return np.sin(x) * x


@pytest.mark.parametrize("op", ["jvp", "value_and_jvp"])
@pytest.mark.parametrize("prepared", [True, False])
def test_python_calls_per_warm_jvp(op, prepared):
    """Before (b100143): 33 prepared, 35 unprepared (jvp); 45 and 47 (value_and_jvp).
    After: 11 and 13 (jvp); 12 and 14 (value_and_jvp) in a fresh process; up to 4 more
    once other tests have set process-wide state (a pytree output seen anywhere adds
    the output-layout check's calls), so the bound leaves that room and still fails
    on the old runner."""
    prep = di.prepare_jvp(f, B, X, V) if prepared else None
    got = getattr(di, op)(f, B, X, V, prep=prep)
    np.testing.assert_allclose(got[1] if op == "value_and_jvp" else got, JV, rtol=1e-8)
    n = calls_inside(lambda: getattr(di, op)(f, B, X, V, prep=prep))
    assert n <= (15 if prepared else 17) + (op == "value_and_jvp"), n


@pytest.mark.parametrize("method", ["central", "forward", "backward"])
def test_each_method_matches_the_closed_form(method):
    b = di.AutoFiniteDifferences(method=method)
    prep = di.prepare_jvp(f, b, X, V)
    for _ in range(2):  # the second call takes the plan's runner
        y, t = di.value_and_jvp(f, b, X, V, prep=prep)
        np.testing.assert_allclose(y, f(X), rtol=1e-15)
        np.testing.assert_allclose(t, JV, rtol=1e-8 if method == "central" else 1e-6)


@pytest.mark.parametrize("method", ["central", "forward", "backward"])
@pytest.mark.parametrize("op", ["jvp", "value_and_jvp"])
def test_an_output_that_changes_kind_between_evaluations_is_checked(monkeypatch, method, op):
    """Every evaluation's output is checked by the plan's runner: integers at the second
    point are refused."""
    b, runs, bad = di.AutoFiniteDifferences(method=method), [0], [False]

    def g(x):
        runs[0] += 1
        if bad[0] and runs[0] % 2 == 0:
            return np.ones(x.shape, dtype=np.int64)
        return np.sin(x) * x

    prep = di.prepare_jvp(g, b, X, V)
    getattr(di, op)(g, b, X, V, prep=prep)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))
    runs[0], bad[0] = 0, True
    with pytest.raises(di.DiffifaceTypeError, match="f returns int64"):
        getattr(di, op)(g, b, X, V, prep=prep)


def test_nested_levels_count_through_the_runner():
    """jvp of jvp of jvp by finite differences: three levels of default steps are
    refused, from the runner as from the general path; two levels give f'' v v."""

    def inner(x):
        return di.jvp(f, B, x, V)

    def two(x):
        return di.jvp(inner, B, x, V)

    want = (2 * np.cos(X) - X * np.sin(X)) * V * V
    np.testing.assert_allclose(two(X), want, rtol=1e-3)
    with pytest.raises(di.DiffifaceValueError, match="3 levels"):
        di.jvp(two, B, X, V)


# ------------------------------------------------------------------ the gradient runner

G = np.cos(X) * X + np.sin(X)  # the gradient of s(x) = sum(sin(x) x)


def s(x):
    return np.sum(np.sin(x) * x)


@pytest.mark.parametrize("op", ["gradient", "value_and_gradient"])
@pytest.mark.parametrize("prepared", [True, False])
def test_python_calls_per_warm_gradient(op, prepared):
    """Before (ad5f1e2), n = 7: 102 prepared, 104 unprepared (gradient; 111 and 113
    value_and_gradient): about 6 calls per evaluation through the general path's
    checked ``flat()``. After: one per evaluation (2n = 14) plus the call's own: 24 and
    26 (25 and 27) in a fresh process; the bound leaves the room process-wide state
    takes (see above) and fails on the old runner."""
    prep = di.prepare_gradient(s, B, X) if prepared else None
    got = getattr(di, op)(s, B, X, prep=prep)
    np.testing.assert_allclose(got[1] if op == "value_and_gradient" else got, G, rtol=1e-8)
    n = calls_inside(lambda: getattr(di, op)(s, B, X, prep=prep))
    assert n <= 2 * X.size + 16, n


@pytest.mark.parametrize("method", ["central", "forward", "backward"])
@pytest.mark.parametrize("op", ["gradient", "value_and_gradient"])
@pytest.mark.parametrize("prepared", [True, False])
def test_gradient_evaluations_are_exact(method, op, prepared):
    """A warm call evaluates f 2n times (central gradient), 2n + 1 (central
    value_and_gradient: f(x) too), n + 1 (one-sided: f(x) is one side), and matches the
    closed form; f always gets a copy (it writes into it here), x is unchanged."""
    b, runs, x = di.AutoFiniteDifferences(method=method), [0], X.copy()

    def g(x):
        runs[0] += 1
        out = np.sum(np.sin(x) * x)
        x[:] = np.nan  # (f's own array: x stays as it was)
        return out

    prep = di.prepare_gradient(g, b, x) if prepared else None
    getattr(di, op)(g, b, x, prep=prep)
    runs[0] = 0
    got = getattr(di, op)(g, b, x, prep=prep)
    central = method == "central"
    assert runs[0] == (2 * X.size + (op != "gradient") if central else X.size + 1)
    np.testing.assert_array_equal(x, X)
    if op == "value_and_gradient":
        np.testing.assert_allclose(got[0], s(X), rtol=1e-15)
        got = got[1]
    np.testing.assert_allclose(got, G, rtol=1e-8 if central else 1e-6)


def test_gradient_of_a_matrix_x_and_float32():
    """x of two dimensions (the flat index of each coordinate, C order, whatever x's
    memory order) and float32 (its dtype kept): the closed form 2 x."""

    def q(x):
        return np.sum(x**2) + x[0, 0] * x[1, 2]

    for x in (np.arange(6.0).reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(2, 3))):
        want = 2 * x
        want[0, 0] += x[1, 2]
        want[1, 2] += x[0, 0]
        prep = di.prepare_gradient(q, B, x)
        for p in (prep, None, prep):
            np.testing.assert_allclose(di.gradient(q, B, x, prep=p), want, rtol=1e-8)
    x32 = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
    got = di.gradient(s, B, x32)
    assert got.dtype == np.float32
    want = np.cos(x32.astype(np.float64)) * x32 + np.sin(x32.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-3)


@pytest.mark.parametrize("op", ["gradient", "value_and_gradient"])
def test_an_output_that_changes_kind_is_checked_by_the_gradient_runner(monkeypatch, op):
    """Every evaluation's output is checked by the plan's runner: an integer, or an
    array of another shape, at a later point is refused as the general path refuses it."""
    runs, bad = [0], [None]

    def g(x):
        runs[0] += 1
        if bad[0] is not None and runs[0] == 4:
            return bad[0]
        return np.sum(np.sin(x) * x)

    prep = di.prepare_gradient(g, B, X)
    getattr(di, op)(g, B, X, prep=prep)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))
    for out, match in ((np.int64(3), "f returns int64"), (np.ones(2), "scalar")):
        runs[0], bad[0] = 0, out
        with pytest.raises((di.DiffifaceTypeError, di.DiffifaceValueError), match=match):
            getattr(di, op)(g, B, X, prep=prep)


def test_nested_levels_count_through_the_gradient_runner():
    """A gradient inside a jvp: two levels of default steps give the closed form; a
    gradient inside a jvp inside a jvp (three levels) is refused from the runner."""

    def inner(x):
        return di.gradient(s, B, x)

    want = (2 * np.cos(X) - X * np.sin(X)) * V  # (H v of s: H is diagonal)
    np.testing.assert_allclose(di.jvp(inner, B, X, V), want, rtol=1e-3)
    with pytest.raises(di.DiffifaceValueError, match="3 levels"):
        di.jvp(lambda x: di.jvp(inner, B, x, V), B, X, V)
