"""The plans of unprepared calls: an unprepared call is "prepare, then run", with the
plan kept weakly on ``f`` (as DifferentiationInterface.jl does).

After a plain call (or a ``prepare_*``), the backend's runner for that operator and
signature is kept under ``f`` and the operator's name. The next unprepared call
like it runs that runner, which a prepared call runs too: one native or NumPy array
(with one tangent like it, for the operators that take one) without contexts, or
native pytree leaves with Constant contexts of native leaves. Runners hold ``f``
only weakly, and the table is a ``FunctionCache``: an entry disappears with its
function. An entry also records what ``f`` read besides its arguments
(``_reads.fingerprint``): a runner compiled before a global or closure value was
rebound is not used after it.
"""

from __future__ import annotations

import functools
import weakref
from types import FunctionType
from typing import Any

from .._cache import FunctionCache
from .._contexts import Constant, FixedParams
from .._reads import snapshot, watch
from .._tangents import Tangents
from . import outputs, registry
from .backend import SLOW
from .plan import tree_runner
from .signature import ARRAY, LEAVES, Signature

TABLE = FunctionCache(per_function=16)


class Kept:
    """One kept plan: its backend, the form in which its runner takes calls, the
    signature of the calls it takes, what f read when it was built, and the backend's
    runner (None: the backend has none for calls like it, so none is built again).
    A plan of a code also keeps the objects it ran (``seen``, see ``run``)."""

    __slots__ = ("backend", "form", "reads", "run", "seen", "sig")

    def __init__(self, backend, form, sig, reads, run):
        self.backend, self.form, self.sig, self.reads, self.run = backend, form, sig, reads, run
        self.seen: dict = {}  # id(f) -> (weak reference to f, whether it went for its own)


def run(op: str, f: Any, backend: Any, x: Any, contexts: tuple, t: tuple) -> Any:
    """The result of the kept plan of ``f`` for ``op`` when this call matches it, else
    SLOW (``t``: ``(tangent,)`` for an operator that takes one, else ``()``).

    An f without a plan of its own runs the plan of its code (a closure made anew per
    call: its runner takes f, ``code_runner``), once per object: an object that comes
    again lives on, and the general path keeps a plan of its own for it (one try)."""
    kept = TABLE.peek(f, op)
    by_code = kept is None and type(f) is FunctionType
    if by_code:
        kept = TABLE.peek(f.__code__, op)
    if kept is None or kept.run is None:
        return SLOW
    if backend is not kept.backend and backend != kept.backend:
        return SLOW
    reads = kept.reads
    if reads is not None and snapshot(reads[0]) != reads[1]:
        return SLOW
    if not by_code:
        return kept.sig.run(kept.form, kept.run, x, contexts, t)
    seen, key = kept.seen, id(f)
    got = seen.get(key)
    if got is None or got[0]() is not f:  # (an id is reused once its object died)
        if len(seen) >= _SEEN:
            seen.clear()
        seen[key] = (weakref.ref(f), False)
    elif not got[1]:  # f again: its own plan, from the general path
        seen[key] = (got[0], True)
        return SLOW
    return kept.sig.run(kept.form, functools.partial(kept.run, f), x, contexts, t)


_SEEN = 8  # objects a plan of a code tells apart (a few long-lived ones in turn)


def remember(op: str, f, backend, impl, prob, combo, x, kinds, contexts, t) -> None:
    """Keep the runner of a plain call (or of a preparation) for the next call like it:
    one native or NumPy array or Python float without contexts, with a tangent (or
    ``Tangents``) of x's type (a pytree cotangent of native leaves for a pytree output);
    or native pytree leaves with Constant contexts of native leaves and a tangent of
    native leaves. Calls with aux, and with ``Tangents``, keep theirs under their own
    key."""
    many = isinstance(t, Tangents)
    if impl is not prob.impl or type(f) is FixedParams:
        return  # a nested-AD rule
    if contexts and any(type(c) is not Constant for c in contexts):
        return
    if prob.aux and (many or not impl.traits.runs_aux):
        return  # its runners do not hand f's aux to the sink
    one = prob.single and not contexts  # one array x: its runner takes the tangent as it came
    tree = outputs.returns_tree(prob.f)
    if tree and (not one or prob.aux or many):
        return  # a pytree output of pytree arguments, or with aux: the general path splits it
    if one and t is not None and not tree and any(type(v) is not type(x) for v in _each(t)):
        return  # a tangent to convert
    run = None
    if not one and t is not None:  # native leaves with a tangent: the backend's runner first
        run = impl.runner(prob, LEAVES, combo, weak=True)
        if run is None:
            return
    sig = Signature(impl, x, kinds, contexts, t, prob.single)
    form = sig.form()
    if form is None:
        return
    key = aux_key(op) if prob.aux else tangents_key(op) if many else op
    old = TABLE.peek(f, key)
    if old is not None and old.run is None and old.form == form and old.sig == sig:
        return  # the backend has no runner for calls like this one
    if tree and form != ARRAY:
        return  # NumPy arguments: the general path splits the output
    registry.KEEPS_PLANS.add(type(backend))  # a SecondOrder of a backend that keeps plans
    reads = _reads(f) if impl.traits.bakes_reads else None
    if run is None:
        run = impl.runner(prob, form, combo, weak=True)
    if tree:
        tree = outputs.signature((x,), (), False, impl.leaf_signature, op)
        run = tree_runner(impl, prob.f, op, tree, run, (x,) if t is None else (x, t))
    if run is not None or form != LEAVES:
        TABLE.put(f, key, Kept(backend, form, sig, reads, run))
    code_run = impl.code_runner(prob, form) if run and type(f) is FunctionType else None
    if code_run is not None:  # its code's plan, for the next new closure of that code
        code_run = tree_runner(impl, prob.f, op, tree, code_run, None) if tree else code_run
        code = Kept(backend, form, sig, None, code_run)
        old = TABLE.peek(f.__code__, key)
        if old is not None:
            code.seen = old.seen  # (the objects it ran)
        TABLE.put(f.__code__, key, code)


def _each(t: Any) -> tuple:
    """The tangents of a call: a Tangents' values, or the one tangent."""
    return t._values if type(t) is Tangents else (t,)


def aux_key(op: str) -> str:
    """The key of the kept plans of ``op`` for an f with aux (``has_aux=True``)."""
    return f"{op} has_aux"


def tangents_key(op: str) -> str:
    """The key of the kept plans of ``op`` for calls with ``Tangents`` (their runner is
    another compiled function)."""
    return f"{op} Tangents"


def entries(f: Any) -> int:
    """Number of operators entered for ``f`` (for tests)."""
    return TABLE.entries(f)


def _reads(f: Any) -> tuple | None:
    """(what f reads, their identities now), or None when f reads nothing to watch."""
    w = watch(f)
    return None if w is None else (w, snapshot(w))
