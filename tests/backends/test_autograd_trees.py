"""autograd runners for f returning a pytree (a dict, nested containers) at one array x.

Each test proves the runner answered (the general path made to fail), compares with
autograd's own make_jvp / make_vjp of f's leaves joined in one autograd tuple, and counts
f's runs (once per call, as autograd itself runs it). Outputs the runner does not take
(a Python number, an integer or complex leaf, no leaf on x's trace, a cotangent unlike
the output) give the general path's result or error on every call."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import counted

import diffiface as di
from diffiface._tree import flatten, tree_map, unflatten
from diffiface.core.operator import OPS

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")

B = di.AutoAutograd()
X = np.array([0.3, -0.7, 1.1, 0.2, 0.9, -1.3])
V = np.array([1.0, 0.5, -2.0, 0.25, -0.4, 0.8])


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


# f's outputs the runner takes: nested containers with None, 0-d leaves (NumPy floats),
# a float32 leaf beside float64 ones, a leaf that does not depend on x
def _nested(x):
    return {"y": anp.sin(x) * x, "z": [anp.cos(x[:2]) ** 2, None, (anp.sum(x**3),)]}


def _mixed(x):
    return {"f32": np.ones(3, np.float32), "f64": anp.exp(x[1:3]), "s": anp.sum(x) * 1.0}


def _off_x(x):
    return {"y": anp.tanh(x), "c": np.ones((2, 2)), "s": np.float64(4.0)}


TAKEN = {"nested": _nested, "mixed": _mixed, "off_x": _off_x}


def _w(f):
    """A cotangent like f(X), each leaf an array of its output leaf's dtype."""
    return tree_map(
        lambda a: (
            np.cos(np.arange(np.size(a)) + 0.5).reshape(np.shape(a)).astype(np.result_type(a))
        ),
        f(X),
    )


def _own(f, op, w=None):
    """autograd's own transform of f's leaves joined as one autograd tuple, in f's
    structure (independent of diffiface's runners and general path)."""
    from autograd.builtins import tuple as ag_tuple
    from autograd.differential_operators import make_jvp, make_vjp

    treedef = flatten(f(X))[1]
    g = lambda x: ag_tuple(flatten(f(x))[0])  # noqa: E731
    if OPS[op].family == "jvp":
        ys, ts = make_jvp(g)(X)(V)
        ts = [
            np.asarray(t, dtype=np.result_type(y)).reshape(np.shape(y))
            for y, t in zip(ys, ts, strict=True)
        ]
        parts = (unflatten(treedef, list(ys)), unflatten(treedef, ts))
    else:
        pb, ys = make_vjp(g)(X)
        parts = (unflatten(treedef, list(ys)), pb(tuple(flatten(w)[0])))
    return parts if op.startswith("value_and") else parts[1]


def _same(got, want):
    """Two pytrees of arrays: the same structure, dtypes and values (float rounding)."""
    leaves, tree = flatten(got)
    ref, ref_tree = flatten(want)
    assert tree == ref_tree, (tree, ref_tree)
    for a, b in zip(leaves, ref, strict=True):
        assert type(a) is np.ndarray, type(a)
        assert a.dtype == np.result_type(b) and a.shape == np.shape(b), (a, b)
        np.testing.assert_allclose(a, b, rtol=1e-6 if a.dtype == np.float32 else 1e-13)


OPS_TREE = ("jvp", "value_and_jvp", "vjp", "value_and_vjp")


@pytest.mark.parametrize("op", OPS_TREE)
@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("case", sorted(TAKEN))
def test_a_pytree_output_runs_the_runner(monkeypatch, case, op, prepared):
    """The runner answers with autograd's own result in f's structure and dtypes, f run
    once per call; the general path's first answer is the same."""
    f, runs = counted(TAKEN[case])
    arg = V if OPS[op].family == "jvp" else _w(TAKEN[case])
    fn = getattr(di, op)
    prep = getattr(di, f"prepare_{OPS[op].family}")(f, B, X, arg) if prepared else None
    first = fn(f, B, X, arg, prep=prep)  # the general path (an unprepared call keeps its plan)
    fn(f, B, X, arg, prep=prep)  # (an f after another object of its code: its second call)
    _general_path_fails(monkeypatch)
    runs[0] = 0
    out = [fn(f, B, X, arg, prep=prep) for _ in range(3)]
    assert runs[0] == 3
    want = _own(TAKEN[case], op, arg)
    for got in (first, *out):
        _same(got, want)


def test_a_pytree_output_is_taken_per_call(monkeypatch):
    """autograd traces f anew on every call: an output whose structure changes between
    calls (a key more) is split as that call gives it."""
    extra = [False]

    def f(x):
        out = {"y": anp.sin(x)}
        if extra[0]:
            out["w"] = x * 2.0
        return out

    prep = di.prepare_jvp(f, B, X, V)
    _general_path_fails(monkeypatch)
    extra[0] = True
    _same(di.jvp(f, B, X, V, prep=prep), {"y": np.cos(X) * V, "w": 2.0 * V})
    extra[0] = False
    _same(di.jvp(f, B, X, V, prep=prep), {"y": np.cos(X) * V})


@pytest.mark.parametrize("tree", [True, False])
def test_a_jvp_autograd_does_not_define_is_the_general_paths(monkeypatch, tree):
    """``astype`` has no JVP in autograd: the general path answers every call (by reverse
    mode), with the runner's first try only once."""

    def g(x):
        y = (x * 2.5).astype(np.float32)
        return {"y": y, "z": anp.sin(x)} if tree else y

    f, runs = counted(g)
    first = di.jvp(f, B, X, V)  # the general path
    want = {"y": 2.5 * V, "z": np.cos(X) * V}
    for got, ref in zip(flatten(first)[0], flatten(want if tree else want["y"])[0], strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-13)
    _same(di.jvp(f, B, X, V), first)  # (the runner gives up)
    runs[0] = 0
    _same(di.jvp(f, B, X, V), first)
    alone = runs[0]  # the general path's runs of f, from now on
    for _ in range(2):
        _same(di.jvp(f, B, X, V), first)
    assert runs[0] == 3 * alone


# outputs the runner hands to the general path: its result or error on every call
HANDED = {
    "python float": lambda x: {"a": x * 2.0, "b": 1.0},
    "integer leaf": lambda x: {"a": x * 2.0, "b": np.arange(2)},
    "complex leaf": lambda x: {"a": x * 2.0, "b": x * 1j},
    "constant": lambda x: {"a": np.ones(2)},
    "empty": lambda x: {},
}


def _outcome(call):
    """(result, or the error's type and message; the warnings' types and messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = call()
        except Exception as exc:  # (the outcome compared)
            got = (type(exc), str(exc))
    return got, [(w.category, str(w.message)) for w in caught]


def _equal(a, b):
    if type(a) is tuple and a and type(a[0]) is type:
        assert a == b
    else:
        _same(a, b)


@pytest.mark.parametrize("op", OPS_TREE)
@pytest.mark.parametrize("case", sorted(HANDED))
def test_an_output_the_runner_does_not_take_is_the_general_paths(case, op):
    """The same outcome (result or error, and warnings) on the first call (the general
    path) and on the next ones (the runner hands over)."""
    f = HANDED[case]
    arg = V if OPS[op].family == "jvp" else tree_map(np.ones_like, f(X))
    fn = getattr(di, op)
    first, warned = _outcome(lambda: fn(f, B, X, arg))
    for _ in range(2):
        got, again = _outcome(lambda: fn(f, B, X, arg))
        _equal(got, first)
        assert set(again) == set(warned)  # (the first call of a constant f warns twice)


COTANGENTS = {
    "a key missing": lambda w: {"y": w["y"]},
    "a leaf of another shape": lambda w: {**w, "y": w["y"][:3]},
    "a leaf of another dtype": lambda w: {**w, "y": w["y"].astype(np.float32)},
    "a Python float leaf": lambda w: {**w, "s": 1.0},
    "an integer leaf": lambda w: {**w, "y": np.ones(6, dtype=np.int64)},
    "a list for a dict": lambda w: [w["y"], w["s"]],
}


@pytest.mark.parametrize("case", sorted(COTANGENTS))
def test_a_cotangent_unlike_the_output_is_the_general_paths(case):
    """A cotangent the runner does not take: the general path's outcome on every call,
    after the runner answered a cotangent like the output."""

    def f(x):
        return {"y": anp.sin(x), "s": anp.sum(x**2)}

    good = {"y": V, "s": np.array(0.5)}
    want = {"y": np.cos(X) * V}["y"] + 2 * X * 0.5
    _same(di.vjp(f, B, X, good), want)  # (the plan is kept)
    w = COTANGENTS[case](good)
    first, warned = _outcome(lambda: di.vjp(f, B, X, w))
    _same(di.vjp(f, B, X, good), want)
    got, again = _outcome(lambda: di.vjp(f, B, X, w))
    _equal(got, first)
    assert set(again) == set(warned)
