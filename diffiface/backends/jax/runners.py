"""The runners of JAX plans: the function the plan's warm-up compiled, called as is.

One array x (a JAX or a NumPy array) without contexts, with its tangent or a
``Tangents`` of k (one compiled call for all k); or native pytree leaves for the
gradient. A runner holds f only weakly (the compiled function comes from the
cache), so a preparation and an unprepared call of the same f use the same one.
Anything else (a tangent unlike x, another number of tangents, float64 NumPy with
x64 off) returns SLOW: the general path converts, or explains.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..._tangents import Tangents, of_stack
from ...core import outputs
from ...core.backend import SLOW
from ...core.operator import OPS, SHAPED_LIKE_F, names
from . import closures
from .running import TANGENTS, call, dense, ones_like, only_compiled

# operators whose compiled function returns the result as is
_AS_IS = frozenset(
    (
        "batched_jacobian",
        "value_and_batched_jacobian",
        "gradient",
        "value_and_gradient",
        "jacobian",
        "value_and_jacobian",
        "hessian",
        "value_gradient_and_hessian",
        "value_derivative_and_second_derivative",
    )
)

# operators taking a tangent, whose compiled function returns (first, result): do
# they return the first output (f(x), or the gradient) too (from the declarations)
_KEEPS = {
    op: len(OPS[op].returns) == 2
    for op in names()
    if OPS[op].tangent is not None and len(OPS[op].returns) <= 2
}
_LIKE_X = frozenset(("jvp", "jvps", "hvp", "hvps"))  # tags whose tangents are like x
_SEVERAL = frozenset(("jvps", "vjps", "hvps"))  # tags of a Tangents call
_TAGS = frozenset(("jvp", "vjp", "hvp")) | _SEVERAL


VALUED = "valued"  # a memo entry (operators/second_order): the problem of f(x) as aux
# an operator that returns the value first -> the one returning the rest (from the
# declarations): what the sub-problem of a VALUED problem computes
_UNVALUED = {
    op: rest
    for op, d in OPS.items()
    if d.returns[0] == "value"
    for rest, r in OPS.items()
    if r.returns == d.returns[1:]
}


def source(prob):
    """The problem whose compiled function runs ``prob``'s calls: prob itself, or the
    sub-problem that returns f(x) as aux (value_gradient_and_hvp)."""
    return prob.fns.get(VALUED) or prob


def single(prob, numpy: bool):
    """The runner for one array x without contexts (``numpy``: a NumPy x, results as
    NumPy), or None."""
    sub = prob.fns.get(VALUED)
    if sub is not None:
        if prob.aux or not prob.single:
            return None
        run = _single(sub, _UNVALUED[prob.op], numpy)
        return None if run is None else _with_value(run, numpy)
    return _single(prob, prob.op, numpy) if prob.single else None


def _with_value(run, numpy: bool):
    """``run`` of a sub-problem whose f puts f(x) as aux (see ``source``): f(x) taken from
    the sink before its results, as the general path takes it."""

    def valued(x, *t):
        with outputs.Sink() as sink:
            out = run(x, *t)
        if out is SLOW:
            return SLOW
        y = sink.aux
        return (_back(y) if numpy else y, *out)

    return valued


def _single(prob, op: str, numpy: bool):
    """``single`` for ``prob`` computing ``op``."""
    found = only_compiled(prob)
    if found is None:
        return None
    tag, run = found
    if op in _AS_IS:
        return _numpy_in_out(run, op.startswith("value")) if numpy else run
    name = tag[0]
    if op in _KEEPS and name in _TAGS and tag[1:] != (True,):  # (not a Python float's vjp)
        k = prob.fns.get(TANGENTS) if name in _SEVERAL else None
        return _tangents(op, prob.named(), name, run, numpy, k)
    if numpy:
        return None
    who = prob.named()
    if op in ("derivative", "value_and_derivative"):
        i = slice(None) if op == "value_and_derivative" else 1
        ones: dict = {}  # the tangent 1, made once per aval and device (no dispatch per call)

        def derivative(x):
            if isinstance(x, jax.core.Tracer):  # (traced into a caller's compiled call)
                return call(who, run, x, jnp.ones_like(x))[i]
            key = (x.dtype, getattr(x, "weak_type", False), getattr(x, "sharding", None))
            one = ones.get(key)
            if one is None:
                one = ones[key] = ones_like(x)
            return call(who, run, x, one)[i]

        return derivative
    if op == "second_derivative":
        return lambda x: call(who, run, x)[2]
    return None


def python_float(prob):
    """The runner for a Python float x (and tangents): each passed to the compiled
    function as the scalar the general path makes of it (the default float dtype, not
    weakly typed: no other compilation), each result back as the general path gives it
    (a float for a 0-d result); SLOW once the default float dtype changed (x64)."""
    run = single(prob, False)
    if run is None:
        return None
    scalar = np.dtype(jnp.result_type(float)).type  # (np.float64 with x64, else float32)
    x64 = jax.config.jax_enable_x64

    def from_float(x, *t):
        if jax.config.jax_enable_x64 != x64 or (t and type(t[0]) is not float):
            return SLOW
        out = run(scalar(x), *(scalar(a) for a in t))
        if type(out) is tuple:
            return tuple(_python(a) for a in out)
        return out if out is SLOW else _python(out)

    return from_float


def _python(a):
    """A result for a Python float x: a float where it is 0-d, else NumPy (as
    ``convert.back``); None stays None."""
    if a is None or isinstance(a, jax.core.Tracer):
        return a
    a = np.asarray(a)
    return a.item() if a.ndim == 0 else a


def per_code(prob, key: tuple, numpy: bool):
    """For a closure made anew per call whose compiled function is its code's (see
    ``closures``): ``runner(f, x, *t)`` for any object of that code, on its own cell
    arrays (SLOW for an object of other cells); one JAX or NumPy (``numpy``) array x,
    one tangent or none. It holds neither f nor the problem; None for other calls."""
    sub, op = source(prob), prob.op
    if sub is not prob:
        if prob.aux:
            return None
        op = _UNVALUED[op]
    found = only_compiled(sub)
    if found is None or not (op in _AS_IS or op in _KEEPS):
        return None
    tag, who, value = found[0], sub.named(), op.startswith("value")
    if op in _KEEPS and (tag[0] not in ("jvp", "vjp", "hvp") or tag[1:] == (True,)):
        return None

    def code_run(f, x, *t):
        run = closures.bound(f, key)
        if run is None:
            return SLOW
        if t:
            return _tangents(op, who, tag[0], run, numpy)(x, *t)
        return _numpy_in_out(run, value)(x) if numpy else run(x)

    return code_run if sub is prob else _with_value(code_run, numpy)


def _tangents(op: str, who, name: str, run, numpy: bool, k: int | None = None):
    """``runner(x, t)`` for a tangent (or, with ``k``, a Tangents of k): each like x
    for jvp and hvp; a cotangent of x's type for vjp, which the compiled function
    checks against f(x) (a cotangent of another shape traces anew: ``call`` explains
    errors and bounds the shapes). ``who``: the problem's ``named()``."""
    keep, like_x = _KEEPS[op], name in _LIKE_X
    if like_x:
        go = run  # compiled for exactly these arguments: nothing left to catch
    else:

        def go(x, t):
            return call(who, run, x, t)

    if k is None:

        def one(x, t):
            if type(t) is not type(x) or (like_x and (t.shape != x.shape or t.dtype != x.dtype)):
                return SLOW
            if numpy:
                x, t = _numpy_arg(x), _numpy_arg(t)
                if x is None or t is None:
                    return SLOW
                first, out = go(x, t)
                return (_back(first), _back(out)) if keep else _back(out)
            out = go(x, t)
            return out if keep else out[1]

        return one

    def several(x, ts):
        if type(ts) is not Tangents:
            return SLOW
        if ts._stack is not None:
            return stacked(x, ts._stack)
        if len(vs := ts._values) != k:  # (diffiface's own)
            return SLOW
        for t in vs:
            if type(t) is not type(x) or (like_x and (t.shape != x.shape or t.dtype != x.dtype)):
                return SLOW
        if numpy:
            x, vs = _numpy_arg(x), tuple(_numpy_arg(t) for t in vs)
            if x is None or any(t is None for t in vs):
                return SLOW
            first, outs = go(x, vs)
            first, outs = _back(first), [_back(a) for a in outs]
        else:
            first, outs = go(x, vs)
        return (first, Tangents(*outs)) if keep else Tangents(*outs)

    def stacked(x, v):  # the k tangents on v's leading axis, the results on theirs
        if type(v) is not type(x) or v.shape[0] != k:
            return SLOW
        if like_x and (v.shape[1:] != x.shape or v.dtype != x.dtype):
            return SLOW
        if numpy:
            x, v = _numpy_arg(x), _numpy_arg(v)
            if x is None or v is None:
                return SLOW
            first, out = go(x, v)
            first, out = _back(first), _back(out)
        else:
            first, out = go(x, v)
        return (first, of_stack(out)) if keep else of_stack(out)

    return several


def leaves(prob):
    """For a call of native leaves (x and Constant contexts, and a tangent's leaves):
    the compiled function on the leaves, its results like x put back in the structure
    of x."""
    found, treedef = only_compiled(prob), prob.treedef
    if found is None:
        return None
    if prob.op in _KEEPS:
        return _leaf_tangents(prob, *found)
    if prob.op not in ("gradient", "value_and_gradient"):
        return None
    run = found[1]
    if prob.single:
        return lambda xs, cs, _: run(xs[0], *cs)
    if prob.op == "gradient":
        back = treedef.unflatten  # (optree's, in C: no frame)
        return lambda xs, cs, _: back(run(xs, *cs))

    def value_and_gradient(xs, cs, _):
        y, g = run(xs, *cs)
        return y, treedef.unflatten(g)

    return value_and_gradient


def _leaf_tangents(prob, tag: tuple, run):
    """``runner(xs, context leaves, context values, tangent leaves)`` (see
    ``Signature.run``): the leaves match the plan's, so they pass the general path's
    checks (and the compiled function's trace: it runs as is); a tangent like x goes in
    as x does, a cotangent as its one array. Results
    like x come back in x's structure; a Tangents' as k of them."""
    name, op, single, treedef = tag[0], prob.op, prob.single, prob.treedef
    if name not in _TAGS or tag[1:] == (True,):  # (a Python float's vjp)
        return None
    like_x, several, keep = name in _LIKE_X, name in _SEVERAL, _KEEPS[op]
    first_x, out_x = (
        OPS[op].returns[0] not in SHAPED_LIKE_F,
        OPS[op].returns[-1] not in SHAPED_LIKE_F,
    )
    back = (lambda a: a) if single else treedef.unflatten  # (optree's: no frame)
    if like_x:
        arg = (lambda ts: ts[0]) if single else (lambda ts: ts)
    else:
        arg = lambda ts: ts[0] if len(ts) == 1 else None  # noqa: E731 (a pytree of f(x))

    def one(xs, cs, _, ts):
        w = arg(ts)
        if w is None:
            return SLOW
        first, out = run(xs[0] if single else xs, w, *cs)
        out = back(out) if out_x else out
        if not keep:
            return out
        return (back(first) if first_x else first), out

    def many(xs, cs, _, tss):
        ws = tuple(arg(ts) for ts in tss)
        if any(w is None for w in ws):
            return SLOW
        first, outs = run(xs[0] if single else xs, ws, *cs)
        outs = Tangents(*(back(o) for o in outs) if out_x else outs)
        if not keep:
            return outs
        return (back(first) if first_x else first), outs

    return many if several else one


def _numpy_in_out(run, value: bool):
    """``run`` for a NumPy x: jit takes it as is (no separate conversion), the results
    come back as NumPy (``value``: a tuple of them)."""

    def from_numpy(x):
        x = _numpy_arg(x)
        if x is None:
            return SLOW
        out = run(x)
        return tuple(_back(a) for a in out) if value else _back(out)

    return from_numpy


def _numpy_arg(a: np.ndarray) -> np.ndarray | None:
    """``a`` as jit takes it fast (see ``running.dense``), or None where jit would
    truncate it: float64 and complex128 need x64, checked per call (it is global
    state); without it the general path explains."""
    size = a.dtype.itemsize  # float64 (8, "f") or complex128 (16)
    if (size == 16 or (size == 8 and a.dtype.kind == "f")) and not jax.config.jax_enable_x64:
        return None
    return a if a.flags.forc else dense(a)


def _back(a):
    """A result as NumPy; one an outer trace sees (f closes over it) stays a tracer."""
    return a if a is None or isinstance(a, jax.core.Tracer) else np.asarray(a)
