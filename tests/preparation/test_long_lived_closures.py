"""A closure made once and called many times (a factory that makes f once per model)
runs a plan of its own, also after another closure of the same code left the plan of
that code (which serves closures made anew per call, and takes f per call): from its
second call on, the general path keeps its own plan, and then it runs as the first
closure of its code does. Closures made anew per call keep the plan of their code.
Results against closed forms; Python calls inside diffiface (``python_calls``) and
f's runs counted."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di
from diffiface.core import shell
from diffiface.core import unprepared as kept

X = np.array([0.3, -0.7, 1.1, 0.2])
V = np.array([1.0, -0.5, 0.25, 2.0])
A = (np.array([1.0, 2.0, -1.0, 0.5]), np.array([-2.0, 0.5, 3.0, 1.5]))
_RUNS = [0]  # f's runs (JAX: its traces), read as a global: no cell of its own


def _kit(name):
    """(backend, asarray, total) of a backend."""
    if name == "torch":
        torch = pytest.importorskip("torch")
        return di.AutoTorch(), torch.tensor, torch.sum
    if name == "jax":
        jnp = pytest.importorskip("jax").numpy
        return di.AutoJax(), jnp.asarray, jnp.sum
    anp = pytest.importorskip("autograd.numpy")
    if name == "autograd":
        return di.AutoAutograd(), np.array, anp.sum
    return di.AutoFiniteDifferences(), np.array, anp.sum


def _make(a, total):
    def f(x):  # sum(a x^3): gradient 3 a x^2, hvp 6 a x v, jvp sum(3 a x^2 v)
        _RUNS[0] += 1
        return total(a * x**3)

    return f


def _want(op: str, a) -> np.ndarray:
    return {
        "gradient": 3 * a * X**2,
        "hvp": 6 * a * X * V,
        "jvp": np.sum(3 * a * X**2 * V),
    }[op]


def _caller(op: str, b, asarray):
    x, v = asarray(X), asarray(V)
    if op == "gradient":
        return lambda f: di.gradient(f, b, x)
    return lambda f: getattr(di, op)(f, b, x, v)


def _np(a):
    return np.asarray(a.detach() if hasattr(a, "detach") else a)


def _tol(name: str) -> dict:
    return {"rtol": 1e-6, "atol": 1e-6} if name == "fd" else {"rtol": 1e-12}


BACKENDS = ["torch", "jax", "autograd", "fd"]


@pytest.mark.parametrize("op", ["gradient", "hvp", "jvp"])
@pytest.mark.parametrize("name", BACKENDS)
def test_a_long_lived_closure_after_its_code_plan_runs_its_own_plan(name, op):
    b, asarray, total = _kit(name)
    call = _caller(op, b, asarray)
    tol = _tol(name)
    first = _make(asarray(A[0]), total)  # the first object of the code: its own plan
    np.testing.assert_allclose(_np(call(first)), _want(op, A[0]), **tol)
    second = _make(asarray(A[1]), total)  # (JAX compiles the code's function for it)
    np.testing.assert_allclose(_np(call(second)), _want(op, A[1]), **tol)
    code_plan = kept.TABLE.peek(first.__code__, op)
    if name != "fd":  # (finite differences keep no plan per code)
        assert code_plan is not None and code_plan.backend == b
    own_calls = python_calls(lambda: call(first))
    before = _RUNS[0]
    call(first)
    own_runs = _RUNS[0] - before
    a = 0.5 * A[0] - A[1]
    f = _make(asarray(a), total)  # made once, called many times
    runs = []
    for _ in range(5):
        before = _RUNS[0]
        np.testing.assert_allclose(_np(call(f)), _want(op, a), **tol)
        runs.append(_RUNS[0] - before)
    assert python_calls(lambda: call(f)) == own_calls  # warm: the first object's plan
    if name == "jax":
        assert runs == [0] * 5  # no trace: the code's compiled function serves f's own plan
    else:  # f runs as often per call as in the first object's plan, the first calls too
        assert runs == [own_runs] * 5


@pytest.mark.parametrize("name", ["torch", "jax", "autograd"])
def test_long_lived_closures_called_in_turn_each_get_their_own_plan(name):
    """Three models' losses of one factory, called in turn (an ensemble's step)."""
    b, asarray, total = _kit(name)
    call = _caller("gradient", b, asarray)
    first = _make(asarray(A[0]), total)
    call(first)
    scales = (1.0, -2.0, 0.5)
    fs = [_make(asarray(k * A[1]), total) for k in scales]
    for _ in range(3):
        for f, k in zip(fs, scales, strict=True):
            np.testing.assert_allclose(_np(call(f)), _want("gradient", k * A[1]), rtol=1e-12)
    own = python_calls(lambda: call(first))
    assert [python_calls(lambda f=f: call(f)) for f in fs] == [own] * 3


@pytest.mark.parametrize("op", ["gradient", "hvp"])
@pytest.mark.parametrize("name", ["torch", "jax", "autograd"])
def test_closures_made_anew_per_call_keep_the_plan_of_their_code(monkeypatch, name, op):
    b, asarray, total = _kit(name)
    call = _caller(op, b, asarray)
    for a in A:
        call(_make(asarray(a), total))

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)
    for k in range(6):  # a new object each call: the code's plan, never the general path
        a = (k + 1) * A[1]
        np.testing.assert_allclose(_np(call(_make(asarray(a), total))), _want(op, a), rtol=1e-12)


def test_jax_long_lived_closures_of_one_code_compile_once_and_never_warn():
    """Six models' losses of one factory: the code compiles for its first object and
    once for the rest; none is counted as a closure made anew per call (no
    RecompileWarning: pytest turns warnings into errors)."""
    b, asarray, total = _kit("jax")
    call = _caller("gradient", b, asarray)
    _RUNS[0] = 0
    fs = [_make(asarray((k + 1) * A[0]), total) for k in range(6)]
    for _ in range(3):
        for k, f in enumerate(fs):
            np.testing.assert_allclose(call(f), _want("gradient", (k + 1) * A[0]), rtol=1e-12)
    assert _RUNS[0] <= 2


@pytest.mark.parametrize("op", ["gradient", "vjp", "hvp", "jvp"])
def test_a_closure_of_the_same_code_with_other_cells_is_watched(op):
    """torch: closures made anew per call share their code's plan, but one whose cells
    differ (here: ``.item()`` instead of ``.detach().item()``) is watched on its own
    first call, so a derivative it drops is the usual clear error, never a silently
    wrong result (the code's plan skipped the watch)."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    t = (x,) if op in ("vjp", "hvp", "jvp") else ()
    scalar = op in ("gradient", "hvp")

    def make(conv):
        if scalar:
            return lambda x: conv(x.sum()) * x.sum()
        return lambda x: conv(x.sum()) * x

    call = getattr(di, op)
    for _ in range(3):  # the code's plan, made from closures that detach on purpose
        got = call(make(lambda s: s.detach().item()), di.AutoTorch(), x, *t)
    s = float(x.sum())
    want = {"gradient": np.full(3, s), "vjp": s * x.numpy(), "jvp": s * x.numpy()}
    if op != "hvp":
        np.testing.assert_allclose(got.numpy(), want[op], rtol=1e-12)
    with pytest.raises(TypeError, match="converted a tensor that carries the derivative"):
        call(make(lambda s: s.item()), di.AutoTorch(), x, *t)
