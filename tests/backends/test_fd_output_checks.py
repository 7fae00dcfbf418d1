"""Finite differences check f's output once per kind (type, dtype, shape), not once per
evaluation: a gradient of n coordinates evaluates f 2n + 1 times (central) and checks
the first output only, unless a later one is of another kind, which is checked (and
refused) as the first is. The evaluations keep their count, x is never written, and
each result equals the closed form at rtol 1e-7 (central) / 1e-5 (one-sided)."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di
from diffiface.core import problem

X = np.array([0.3, -0.7, 1.1, 0.2])
N = X.size
GRAD = X * np.cos(X) + np.sin(X)  # d/dx sum(sin(x) x)
B = di.AutoFiniteDifferences()


def scalar_f():
    calls = [0]

    def f(x):
        calls[0] += 1
        out = np.sum(np.sin(x) * x)
        x[...] = 7.0  # f writes into its argument: never the caller's x, nor a later point
        return out

    return f, calls


def vector_f():
    calls = [0]

    def f(x):
        calls[0] += 1
        out = np.sin(x) * x
        x[...] = 7.0
        return out

    return f, calls


def count_checks(monkeypatch) -> list:
    """Counts the full output checks (``problem._discrete`` runs once in each)."""
    seen = [0]
    real = problem._discrete

    def counted(y):
        seen[0] += 1
        return real(y)

    monkeypatch.setattr(problem, "_discrete", counted)
    return seen


# (operator, f's kind, its arguments after x, its reference, whether central differences
# evaluate f(x) (a plain gradient does not), the runs of f before the differences (the
# jacobian first measures f(x)'s size, with a check of its own))
CASES = [
    ("gradient", scalar_f, (), GRAD, False, 0),
    ("value_and_gradient", scalar_f, (), (np.sum(np.sin(X) * X), GRAD), True, 0),
    ("jacobian", vector_f, (), np.diag(GRAD), True, 1),
    ("vjp", vector_f, (np.arange(1.0, N + 1),), np.arange(1.0, N + 1) * GRAD, True, 0),
]


@pytest.mark.parametrize(("method", "rtol"), [("central", 1e-7), ("forward", 1e-5)])
@pytest.mark.parametrize(
    ("op", "make", "args", "ref", "fx", "before"), CASES, ids=[c[0] for c in CASES]
)
def test_one_check_per_call(monkeypatch, op, make, args, ref, fx, before, method, rtol):
    """Before: one full check per evaluation (2n + 1 central, n + 1 forward), and a
    plain central gradient evaluated f(x) too."""
    f, calls = make()
    b = di.AutoFiniteDifferences(method=method)
    x = X.copy()
    checks = count_checks(monkeypatch)
    got = getattr(di, op)(f, b, x, *args)
    central = method == "central"
    assert calls[0] == before + (2 * N if central else N) + (fx or not central)
    assert checks[0] == before + 1
    np.testing.assert_array_equal(x, X)
    for g, r in zip(
        got if isinstance(ref, tuple) else (got,),
        ref if isinstance(ref, tuple) else (ref,),
        strict=True,
    ):
        np.testing.assert_allclose(g, r, rtol=rtol)


def test_a_prepared_jvp_checks_its_plans_kind_once(monkeypatch):
    """A prepared jvp's runner keeps its check: later calls of the same kind check none.
    Before: one check per evaluation, 2 per call."""
    f, calls = vector_f()
    v = np.array([1.0, -0.5, 2.0, 0.25])
    prep = di.prepare_jvp(f, B, X, v)
    di.jvp(f, B, X, v, prep=prep)
    checks = count_checks(monkeypatch)
    calls[0] = 0
    got = di.jvp(f, B, X, v, prep=prep)
    assert (calls[0], checks[0]) == (2, 0)
    np.testing.assert_allclose(got, GRAD * v, rtol=1e-8)


def _switching(other):
    """A scalar f at X whose output at every moved point is ``other``."""

    def f(x):
        return np.sum(np.sin(x) * x) if np.array_equal(x, X) else other

    return f


@pytest.mark.parametrize(
    ("other", "error", "says"),
    [
        (np.array([1, 2]), di.DiffifaceTypeError, "f returns int64"),
        (
            np.array([1.0, 2.0]),
            di.DiffifaceValueError,
            "f must return a scalar (shape ()), got shape (2,)",
        ),
        ([1.0], di.DiffifaceTypeError, "list"),
    ],
    ids=["integers", "not a scalar", "a list"],
)
def test_a_later_output_of_another_kind_is_refused(other, error, says):
    """Guards what held before: an evaluation whose output is of another kind than the
    first's is checked, with the first's errors."""
    with pytest.raises(error, match=None) as info:
        di.gradient(_switching(other), B, X.copy())
    assert says in str(info.value)
    assert str(info.value).startswith("gradient(f, AutoFiniteDifferences(")


def test_the_first_output_is_refused_before_any_difference():
    """Guards what held before: an integer output is refused at f's first run."""
    calls = [0]

    def f(x):
        calls[0] += 1
        return np.array(3)

    with pytest.raises(di.DiffifaceTypeError, match="f returns int64"):
        di.gradient(f, B, X.copy())
    assert calls[0] == 1


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("op", ["gradient", "value_and_gradient"])
def test_a_gradients_plan_runs_without_the_general_path(monkeypatch, op, prepared):
    """A gradient at one float array keeps a runner, and its check (once per plan): a
    later call of the same kind runs f 2n times (value_and_gradient: 2n + 1) and checks
    none of them. Before: the general path ran on every call, with 2n + 1 checked runs."""
    f, calls = scalar_f()
    prep = di.prepare_gradient(f, B, X) if prepared else None
    for _ in range(2):  # an unprepared call keeps its plan; its runner's first call checks
        getattr(di, op)(f, B, X.copy(), prep=prep)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))
    checks = count_checks(monkeypatch)
    calls[0] = 0
    x = X.copy()
    got = getattr(di, op)(f, B, x, prep=prep)
    value = op == "value_and_gradient"
    assert (calls[0], checks[0]) == (2 * N + value, 0)
    np.testing.assert_array_equal(x, X)
    g = got[1] if value else got
    np.testing.assert_allclose(g, GRAD, rtol=1e-7)
    if value:
        np.testing.assert_allclose(got[0], np.sum(np.sin(X) * X), rtol=1e-15)
