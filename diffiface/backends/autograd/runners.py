"""The runners of autograd plans for gradient, jvp, vjp and hvp at one float array: one
make_vjp or make_jvp of f itself, as autograd's users write it. Anything unusual (a box
from an outer pass, complex or integer arrays, a tangent unlike x or a cotangent unlike
f(x), an error, f off the trace, an output that is no float array) returns SLOW for the
general path, which runs f again and explains.

Each runner takes f first, ``run(f, x[, t])``: autograd traces f anew on every call, so
one runner serves every function object of f's code (a closure made per call); a plan of
one f holds ``functools.partial(run, f)``."""

from __future__ import annotations

from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd.tracer import Box, getval

from ..._tangents import Tangents, one_by_one
from ..._tree import unflatten
from ...core.backend import OUT_SIZE, SLOW
from ...core.operator import OPS, SHAPED_LIKE_F
from . import trees
from .rows import jacobian_rows
from .traces import make_jvp, make_vjp

# a jvp's cost in pullbacks: a jacobian runs in reverse up to this many outputs per input
# (see AutogradImpl.prefers_reverse)
FORWARD_COST = 3

# the operators run here (declared in core.operator): gradient, jvp, vjp and hvp, alone
# or with one part before (f's value; the gradient for hvp)
TAKES = frozenset(
    n
    for n, d in OPS.items()
    if d.family in ("gradient", "jvp", "vjp", "hvp") and len(d.returns) <= 2
)


def runner(op: str):
    """``run(f, x[, t])``, the runner of ``op`` (one of ``TAKES``) for any f."""
    value = len(OPS[op].returns) == 2
    family = OPS[op].family
    if family == "gradient":
        return _grad(value)
    if family == "hvp":
        return _hvp(value)
    return _jvps(value) if family == "jvp" else _vjp(value)


def leaves(op: str, treedef, single: bool):
    """``run(f, xs, context leaves, context values[, tangent leaves])`` (see
    ``Signature.run``) for native leaves: the runner of ``op`` on x's leaves (a tuple,
    which autograd traces as one), f called with x's structure and the Constants' values;
    results like x come back in x's structure. None for an hvp of several leaves."""
    if not single and OPS[op].family == "hvp":
        return None
    run = runner(op)
    like_x = [part not in SHAPED_LIKE_F for part in OPS[op].returns]
    one = single or OPS[op].tangent == "w"  # a tangent of one array (a cotangent: f's)

    def back(out):
        out = out if len(like_x) > 1 else (out,)
        return tuple(_unflat(treedef, o) if x else o for o, x in zip(out, like_x, strict=True))

    def leaves_run(f, xs, _, values, *ts):
        def fx(xb):
            x = xb if single else unflatten(treedef, [xb[i] for i in range(len(xs))])
            return f(x, *values)

        t = tuple(_tangent(t, one) for t in ts)
        if not xs or any(a is None for a in t):  # (an empty x: the general path's)
            return SLOW
        out = run(fx, xs[0] if single else xs, *t)
        if out is SLOW or single or not any(like_x):
            return out
        out = back(out)
        return out if len(like_x) > 1 else out[0]

    return leaves_run


def _tangent(ts: tuple, one: bool):
    """A tangent from its leaves: the array (``one``) or the tuple of leaves; a tuple of
    k such tuples (a Tangents of k) as a ``Tangents``; None for no one array."""
    if ts and type(ts[0]) is tuple:
        got = tuple(_tangent(t, one) for t in ts)
        return None if any(a is None for a in got) else Tangents(*got)
    if not one:
        return ts
    return ts[0] if len(ts) == 1 else None


def _unflat(treedef, out):
    """Results like x (a tuple of leaves, or a Tangents of them) in x's structure."""
    if type(out) is Tangents:
        return Tangents(*(unflatten(treedef, list(o)) for o in out._values))
    return unflatten(treedef, list(out))


def _plain(a) -> bool:
    """A float NumPy array, or a tuple of them (x's leaves)."""
    if type(a) is tuple:
        return all(type(b) is np.ndarray and b.dtype.kind == "f" for b in a)
    return type(a) is np.ndarray and a.dtype.kind == "f"


def _like(v, x) -> bool:
    """v is a float array of x's shape and dtype (of each leaf of a tuple x)."""
    if type(x) is tuple:
        return type(v) is tuple and len(v) == len(x) and all(map(_like, v, x))
    return type(v) is np.ndarray and v.shape == x.shape and v.dtype == x.dtype


def _as_x(g, x):
    """autograd's result like x (promoted, or a scalar) in x's dtype and shape."""
    if type(x) is tuple:
        return tuple(_as_x(a, b) for a, b in zip(g, x, strict=True))
    return np.asarray(g, dtype=x.dtype).reshape(x.shape)


class _Lost(Exception):
    """f's output is not on x's trace: the general path runs f again and warns."""


def _gave_up(exc: NotImplementedError, unsupported: list):
    """SLOW for an operation whose derivative autograd does not define in the runner's
    mode ("JVP of astype ... not defined"): the general path runs the call (in the other
    mode, or explains), and every later one (``unsupported``). Another
    NotImplementedError (f's own) is the general path's to raise."""
    if str(exc).startswith(("JVP of ", "VJP of ")):
        unsupported.append(True)
    return SLOW


def _on_trace(f, tree: list):
    """f, stopping a call whose output is not on x's trace; a pytree output comes out as
    one autograd tuple of its leaves, its treedef put in ``tree`` (``trees.joined``)."""

    def traced(xb):
        y = f(xb)
        if isinstance(y, Box) and y._trace == xb._trace:
            return y
        got = trees.joined(y, xb._trace)
        if got is None:
            raise _Lost
        tree.append(got[1])
        return got[0]

    return traced


def link_out(y: Any, x: Any) -> Any:
    """y, tied to x by ``+ 0 * sum(x)`` when f's output does not depend on x
    (diffiface has warned): autograd then gives the zeros without a second warning.
    (``anp.array(..., dtype=)`` keeps y's dtype in both modes: ``astype`` has no JVP.)"""
    if not isinstance(x, Box) or (isinstance(y, Box) and y._trace == x._trace):
        return y
    return y + anp.array(0 * anp.sum(x), dtype=np.result_type(y))


def _jvps(value: bool):
    """One tangent, or a ``Tangents`` of k: one make_jvp each (autograd's native loop)."""
    one = _jvp(value)

    def run(f, x, t):
        if type(t) is not Tangents:
            return one(f, x, t)
        return one_by_one(lambda x, v: one(f, x, v), value, SLOW)(x, t)

    return run


def _jvp(value: bool):
    unsupported: list = []  # (see _gave_up)

    def run(f, x, v):
        if unsupported or not (_plain(x) and _like(v, x)):
            return SLOW
        tree: list = []
        try:
            y, t = make_jvp(_on_trace(f, tree), x)(v)
        except (_Lost, TypeError, AttributeError):  # (TypeError: e.g. a boxed container)
            return SLOW
        except NotImplementedError as exc:
            return _gave_up(exc, unsupported)
        if tree:  # a pytree output
            t = trees.tangents(y, t, tree[0])
            return (trees.values(y, tree[0]), t) if value else t
        if not _plain(y):
            return SLOW
        t = np.asarray(t, dtype=y.dtype).reshape(y.shape)
        return (y, t) if value else t

    return run


def _vjp(value: bool):
    """One trace of f, then one pullback per cotangent (a ``Tangents`` of k: k)."""
    unsupported: list = []  # (see _gave_up)

    def run(f, x, w):
        ws = w._values if type(w) is Tangents else (w,)
        if unsupported or not _plain(x):
            return SLOW
        for one in ws:  # (a pytree w is checked against f's output, see _tree_vjp)
            if type(one) is np.ndarray and one.dtype.kind != "f":
                return SLOW
        tree: list = []
        try:
            pb, y = make_vjp(_on_trace(f, tree), x)
        except (_Lost, TypeError, AttributeError):
            return SLOW
        except NotImplementedError as exc:
            return _gave_up(exc, unsupported)
        if tree:  # a pytree output: w like it
            return _tree_vjp(pb, x, y, tree[0], w, ws, value, unsupported)
        for one in ws:
            if not _plain(one):
                return SLOW
        if not _plain(y):
            return SLOW
        gs = []
        for one in ws:
            if one.shape != y.shape or one.dtype != y.dtype:
                return SLOW
            try:
                gs.append(_as_x(pb(one), x))
            except NotImplementedError as exc:
                return _gave_up(exc, unsupported)
        g = Tangents(*gs) if type(w) is Tangents else gs[0]
        return (y, g) if value else g

    return run


def _tree_vjp(pb, x, ys: tuple, treedef, w, ws: tuple, value: bool, unsupported: list):
    """The pullback of f's pytree output leaves ``ys`` along each cotangent of ``ws``
    (SLOW where one is unlike the output: see ``trees.cotangents``)."""
    gs = []
    for one in ws:
        got = trees.cotangents(ys, treedef, one)
        if got is None:
            return SLOW
        try:
            gs.append(_as_x(pb(got), x))
        except NotImplementedError as exc:
            return _gave_up(exc, unsupported)
    g = Tangents(*gs) if type(w) is Tangents else gs[0]
    return (trees.values(ys, treedef), g) if value else g


def hvp_outer(k: int) -> str:
    """The outer mode of a plain backend's hvp of k directions (inner: reverse): forward
    for one (one trace), reverse for several (one trace of the gradient, a pullback
    each, H being symmetric, instead of a trace each): the faster, measured."""
    return "forward" if k == 1 else "reverse"


def _scalar_on_trace(f):
    """f, stopping a call whose output is not a float scalar on x's trace."""

    def traced(xb):
        y = f(xb)
        if not (isinstance(y, Box) and y._trace == xb._trace):
            raise _Lost
        value = getval(y)
        if np.ndim(value) or np.result_type(value).kind != "f":
            raise _Lost  # the general path explains
        return y

    return traced


def _gradient(f):
    """x -> the gradient of the scalar f, tied to x by ``+ 0 x`` where it does not
    depend on x (a linear f: autograd would warn, and the next derivative is 0)."""

    def grad(xb):
        pb, y = make_vjp(_scalar_on_trace(f), xb)
        g = pb(np.ones((), dtype=np.result_type(y)))
        return g if isinstance(g, Box) and g._trace == xb._trace else g + 0 * xb

    return grad


def jacobian(fns: dict, mode: str | None, value: bool):
    """``run(f, x)``: autograd's own Jacobian, one make_vjp of f and a pullback per
    output element, once an earlier call has sized f(x) (``fns``: its problem's memo)
    and reverse is the direction (``mode``: the backend's); SLOW otherwise (forward
    columns trace f once each: the general path's)."""
    unsupported: list = []  # (see _gave_up)

    def run(f, x):
        m = fns.get(OUT_SIZE)
        if unsupported or m is None or not _plain(x) or not x.size:
            return SLOW
        if mode == "forward" or (mode is None and m > FORWARD_COST * x.size):
            return SLOW
        try:
            y, got = jacobian_rows(_array_on_trace(f), x)
        except (_Lost, TypeError, AttributeError):
            return SLOW
        except NotImplementedError as exc:
            return _gave_up(exc, unsupported)
        if isinstance(y, Box) or any(isinstance(g, Box) for g in got):
            return SLOW  # (f closes over an outer pass's boxes: the general path's)
        y = np.asarray(y)
        jac = np.stack([_as_x(g, x) for g in got]) if got else np.zeros((0, *x.shape), x.dtype)
        jac = jac.reshape((*y.shape, *x.shape))
        return (y, jac) if value else jac

    return run


def _array_on_trace(f):
    """f, stopping a call whose output is not a float array on x's trace."""

    def traced(xb):
        y = f(xb)
        if not (isinstance(y, Box) and y._trace == xb._trace):
            raise _Lost
        if np.result_type(getval(y)).kind != "f":
            raise _Lost  # the general path explains
        return y

    return traced


def _grad(value: bool):
    """One make_vjp of f; a non-scalar output, or one off x's trace (the general path
    warns), returns SLOW."""

    unsupported: list = []  # (see _gave_up)

    def run(f, x):
        if unsupported or not _plain(x):
            return SLOW
        try:
            pb, y = make_vjp(_scalar_on_trace(f), x)
            if type(y) is not np.ndarray and not isinstance(y, np.floating):
                return SLOW
            g = _as_x(pb(np.ones((), dtype=y.dtype)), x)
        except (_Lost, TypeError, AttributeError):
            return SLOW
        except NotImplementedError as exc:
            return _gave_up(exc, unsupported)
        return (np.asarray(y), g) if value else g

    return run


def _hvp(value: bool):
    """H v of each direction (a ``Tangents`` of k: k), the gradient given with
    ``value`` (gradient_and_hvp); the outer mode is ``hvp_outer(k)``, reverse from the
    first f without forward mode on (what the general path learns, ``core.direction``)."""
    reverse_only: list = []
    unsupported: list = []  # (see _gave_up)

    def run(f, x, v):
        vs = v._values if type(v) is Tangents else (v,)
        if unsupported or not _plain(x):
            return SLOW
        for one in vs:
            if not _plain(one) or one.shape != x.shape or one.dtype != x.dtype:
                return SLOW
        try:
            g, hvs = _hvps(_gradient(f), x, vs, reverse_only)
        except (_Lost, TypeError, AttributeError):
            return SLOW
        except NotImplementedError as exc:
            return _gave_up(exc, unsupported)
        if not all(_plain(h) or isinstance(h, np.floating) for h in (g, *hvs)):
            return SLOW  # (boxes of an outer pass)
        hvs = [np.asarray(h, dtype=x.dtype).reshape(x.shape) for h in hvs]
        hv = Tangents(*hvs) if type(v) is Tangents else hvs[0]
        return (np.asarray(g, dtype=x.dtype).reshape(x.shape), hv) if value else hv

    return run


def _hvps(grad, x, vs: tuple, reverse_only: list) -> tuple:
    """(g, [H v for v in vs]) from ``grad`` (x -> g)."""
    if not reverse_only and hvp_outer(len(vs)) == "forward":
        try:
            g, hv = make_jvp(grad, x)(vs[0])
            return g, [hv]
        except NotImplementedError as exc:
            if not str(exc).startswith("JVP of "):
                raise
            reverse_only.append(True)
    pb, g = make_vjp(grad, x)
    return g, [pb(one) for one in vs]
