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

from typing import Any

from .._cache import FunctionCache
from .._contexts import Constant, FixedParams
from .._reads import snapshot, watch
from .._tangents import Tangents
from . import convert, outputs, registry
from .backend import SLOW
from .plan import ARRAY, LEAVES, fast_sig, native_sig, run_form, tree_runner

TABLE = FunctionCache(per_function=16)


class Kept:
    """One kept plan: its backend, form ("array", "numpy" or "leaves"), signature, what
    f read when it was built, and the backend's runner (None: the backend has none for
    calls like it, so none is built again)."""

    __slots__ = ("backend", "c_sig", "form", "reads", "run", "x_sig")

    def __init__(self, backend, form, x_sig, c_sig, reads, run):
        self.backend, self.form, self.x_sig, self.c_sig = backend, form, x_sig, c_sig
        self.reads, self.run = reads, run


def run(op: str, f: Any, backend: Any, x: Any, contexts: tuple, t: tuple) -> Any:
    """The result of the kept plan of ``f`` for ``op`` when this call matches it, else
    SLOW (``t``: ``(tangent,)`` for an operator that takes one, else ``()``)."""
    kept = TABLE.peek(f, op)
    if kept is None or kept.run is None:
        return SLOW
    if backend is not kept.backend and backend != kept.backend:
        return SLOW
    reads = kept.reads
    if reads is not None and snapshot(reads[0]) != reads[1]:
        return SLOW
    return run_form(kept.form, kept.run, kept.x_sig, kept.c_sig, x, contexts, t)


def remember(op: str, f, backend, impl, prob, combo, x, kinds, contexts, t) -> None:
    """Keep the runner of a plain call (or of a preparation) for the next call like it:
    one native or NumPy array without contexts, with a tangent that is one array of
    x's type; or native pytree leaves with Constant contexts of native leaves."""
    if t is not None and (isinstance(t, Tangents) or type(t) is not type(x)):
        return  # several tangents: another compiled function; a tangent to convert
    one = prob.single and not contexts and kinds[0] in (convert.NATIVE, convert.NUMPY)
    if one:
        form, sig = "numpy" if kinds[0] == convert.NUMPY else ARRAY, fast_sig(x)
        old = TABLE.peek(f, op)
        if old is not None and old.run is None and old.form == form and old.x_sig == sig:
            return  # the backend has no runner for calls like this one
    if impl is not prob.impl or type(f) is FixedParams:
        return  # a nested-AD rule
    tree = outputs.returns_tree(prob.f)
    if tree and not (one and form == ARRAY):
        return  # a pytree output of pytree or NumPy arguments: the general path splits it
    registry.KEEPS_PLANS.add(type(backend))  # a SecondOrder of a backend that keeps plans
    reads = _reads(f) if impl.traits.bakes_reads else None
    if one:
        run = impl.runner(prob, form, combo, weak=True)
        if tree:
            run = tree_runner(impl, prob.f, op, x, run)
        TABLE.put(f, op, Kept(backend, form, sig, None, reads, run))
        return
    if t is not None or not all(k == convert.NATIVE for k in kinds):
        return
    if any(type(a) is not Constant for a in contexts):
        return
    x_sig = native_sig(impl, x)
    c_sig = native_sig(impl, tuple(a.value for a in contexts)) if contexts else None
    if x_sig is None or (contexts and c_sig is None):
        return
    run = impl.runner(prob, LEAVES, combo, weak=True)
    if run is not None:
        TABLE.put(f, op, Kept(backend, LEAVES, x_sig, c_sig, reads, run))


def entries(f: Any) -> int:
    """Number of operators entered for ``f`` (for tests)."""
    return TABLE.entries(f)


def _reads(f: Any) -> tuple | None:
    """(what f reads, their identities now), or None when f reads nothing to watch."""
    w = watch(f)
    return None if w is None else (w, snapshot(w))
