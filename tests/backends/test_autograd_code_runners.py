"""autograd's runners take f per call: one runner serves every closure of f's code (a
closure made anew per call), and a pytree x (or one array with Constant contexts) has a
leaves runner. Both run f once per trace, without the general path; each result equals
autograd's own transform (make_jvp, make_vjp, grad) of the same f at rtol 1e-12, or the
closed form for the closures."""

from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.differential_operators import make_jvp, make_vjp

import diffiface as di
from diffiface.backends.autograd import runners
from diffiface.core import shell
from diffiface.core.operator import OPS, pick
from diffiface.testing._calls import parts, tangent_args

B = di.AutoAutograd()
X = np.array([0.3, -0.7, 1.1, 0.2, 0.9])
V = np.array([1.0, 0.5, -2.0, 0.25, -0.4])
W = np.array([0.2, -1.0, 0.7, 1.5, -0.3])
D1 = X * np.cos(X) + np.sin(X)  # d/dx sin(x) x
D2 = 2 * np.cos(X) - X * np.sin(X)  # d2/dx2 sin(x) x
RUN = sorted(runners.TAKES)  # the operators with a runner (declared families)


def _no_general_path(monkeypatch):
    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))


def make_scalar(c, calls):
    def f(x):
        calls[0] += 1
        return c * anp.sum(anp.sin(x) * x)

    return f


def make_vector(c, calls):
    def f(x):
        calls[0] += 1
        return c * (anp.sin(x) * x)

    return f


def _closed_form(op, c):
    if OPS[op].scalar:
        return pick(op, parts(c * np.sum(np.sin(X) * X), c * D1, np.diag(c * D2), v=V))
    return pick(op, parts(c * np.sin(X) * X, np.diag(c * D1), v=V, w=W))


def _close(got, ref, rtol):
    pairs = zip(got, ref, strict=True) if isinstance(ref, tuple) else [(got, ref)]
    for g, r in pairs:
        np.testing.assert_allclose(g, r, rtol=rtol)


@pytest.mark.parametrize("op", RUN)
def test_a_closure_made_per_call_runs_its_codes_runner(monkeypatch, op):
    """Each new closure runs the runner kept under its code, with its own captured c.
    Before: the general path ran for every new closure."""
    calls = [0]
    make = make_scalar if OPS[op].scalar else make_vector
    args = tangent_args(op, V, W)
    call = getattr(di, op)
    call(make(1.0, calls), B, X, *args)  # the first closure of the code keeps its plan
    _no_general_path(monkeypatch)
    for c in (2.0, -3.0):
        calls[0] = 0
        got = call(make(c, calls), B, X, *args)
        assert calls[0] == 1
        _close(got, _closed_form(op, c), 1e-12)


def tree_scalar(calls):
    def f(x, *c):
        calls[0] += 1
        k = c[0] if c else 1.0
        return k * anp.sum(anp.sin(x["a"]) * x["b"]) + anp.sum(x["a"] ** 2)

    return f


def tree_vector(calls):
    def f(x, *c):
        calls[0] += 1
        k = c[0] if c else 1.0
        return k * anp.sin(x["a"]) * x["b"]

    return f


XT = {"a": X, "b": X[::-1].copy()}
VT = {"a": V, "b": W}
LEAVES = [op for op in RUN if OPS[op].family != "hvp"]  # (an hvp of several leaves: none)


def _reference(op, f, x, t, c):
    g = lambda x: f(x, *c)  # noqa: E731
    family = OPS[op].family
    if family == "gradient":
        p = {"value": g(x), "gradient": autograd.grad(g)(x)}
    elif family == "jvp":
        p = dict(zip(("value", "jvp"), make_jvp(g)(x)(t), strict=True))
    else:
        pb, y = make_vjp(g)(x)
        p = {"value": y, "vjp": pb(t)}
    return pick(op, p)


def _close_tree(got, ref):
    if isinstance(ref, tuple):
        for g, r in zip(got, ref, strict=True):
            _close_tree(g, r)
    elif isinstance(ref, dict):
        assert set(got) == set(ref)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-12)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-12)


@pytest.mark.parametrize("constant", [False, True], ids=["x only", "Constant"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("op", LEAVES)
def test_a_pytree_x_runs_the_leaves_runner(monkeypatch, op, prepared, constant):
    """A dict x (and a Constant context): one trace of f, no general path.
    Before: the general path ran on every call."""
    calls = [0]
    f = (tree_scalar if OPS[op].scalar else tree_vector)(calls)
    c = (2.5,) if constant else ()
    ctx = tuple(di.Constant(np.asarray(k)) for k in c)
    t = tangent_args(op, VT, W)
    call = getattr(di, op)
    prep = getattr(di, "prepare_" + OPS[op].family)(f, B, XT, *t, *ctx) if prepared else None
    call(f, B, XT, *t, *ctx, prep=prep)  # (an unprepared call keeps its plan)
    _no_general_path(monkeypatch)
    calls[0] = 0
    got = call(f, B, XT, *t, *ctx, prep=prep)
    assert calls[0] == 1
    ref = _reference(op, f, XT, t[0] if t else None, c)
    _close_tree(got, ref)


@pytest.mark.parametrize("op", ["jvp", "value_and_vjp"])
def test_tangents_of_a_pytree_x(monkeypatch, op):
    """A Tangents of 2: f traced once per tangent (jvp) or once (vjp's pullbacks)."""
    calls = [0]
    f = tree_vector(calls)
    jvp = op == "jvp"
    ts = di.Tangents(VT, {"a": W, "b": V}) if jvp else di.Tangents(W, 2 * W)
    call = getattr(di, op)
    call(f, B, XT, ts)
    _no_general_path(monkeypatch)
    calls[0] = 0
    got = call(f, B, XT, ts)
    assert calls[0] == (2 if jvp else 1)
    outs = got if jvp else got[1]
    for out, t in zip(outs, ts, strict=True):
        _close_tree(out, _reference(op.removeprefix("value_and_"), f, XT, t, ()))


def test_a_tangent_unlike_the_plan_gets_the_general_paths_error():
    """A float32 tangent leaf: the runner hands over, and the general path refuses it
    as it refuses it on a first call."""
    calls = [0]
    f = tree_vector(calls)
    di.jvp(f, B, XT, VT)
    t32 = {"a": V.astype(np.float32), "b": W}
    with pytest.raises(di.DiffifaceValueError, match="v must have the dtype of x"):
        di.jvp(f, B, XT, t32)
