"""The implicit preparation of unprepared calls: per function and operator, the last
plain call's signature and its compiled runner.

An unprepared call that matches the last plain call of the same ``f``, operator
and backend goes straight to the runner the general path built, the way a
prepared call does: one native or NumPy array without contexts, or native
pytree leaves with Constant contexts of native leaves. Runners hold ``f`` only
weakly (they come from the backend's weak cache), and the table is a
``FunctionCache``: an entry disappears with its function. An entry also records
what ``f`` read besides its arguments (``_reads.fingerprint``): a runner compiled
before a global or closure value was rebound is not used after it.
"""

from __future__ import annotations

from typing import Any

from .._cache import FunctionCache
from .._reads import snapshot, watch
from .plan import leaves_of

TABLE = FunctionCache(per_function=16)


def lookup(op: str, f: Any, backend: Any, x: Any):
    """The runner of the last plain single-array call like this one, or None."""
    entry = TABLE.peek(f, op)
    if entry is None:
        return None
    b, xtype, shape, dtype, reads, run = entry
    if (
        type(x) is not xtype
        or (backend is not b and backend != b)
        or x.shape != shape
        or x.dtype != dtype
        or (reads is not None and snapshot(reads[0]) != reads[1])
    ):
        return None
    return run


def store(op: str, f: Any, backend: Any, x: Any, run: Any, watch: bool) -> None:
    """Remember ``run`` (holding ``f`` weakly) for single-array calls like this one;
    ``watch``: the runner keeps what f read when it was compiled (checked per call)."""
    if run is not None:
        reads = _reads(f) if watch else None
        TABLE.put(f, op, (backend, type(x), x.shape, x.dtype, reads, run))


def run_leaves(op: str, f: Any, backend: Any, x: Any, contexts: tuple) -> Any:
    """The result of the last plain pytree call like this one, or None."""
    entry = TABLE.peek(f, (op, "leaves"))
    if entry is None:
        return None
    b, x_sig, c_sig, reads, run = entry
    if (backend is not b and backend != b) or (
        reads is not None and snapshot(reads[0]) != reads[1]
    ):
        return None
    got = leaves_of(x, contexts, x_sig, c_sig)
    return None if got is None else run(*got)


def store_leaves(op: str, f: Any, backend: Any, x_sig, c_sig, run, watch: bool) -> None:
    """Remember a leaves runner (holding ``f`` weakly) for pytree calls like this one."""
    if run is not None:
        reads = _reads(f) if watch else None
        TABLE.put(f, (op, "leaves"), (backend, x_sig, c_sig, reads, run))


def entries(f: Any) -> int:
    """Number of operators entered for ``f`` (for tests)."""
    return TABLE.entries(f)


def _reads(f: Any) -> tuple | None:
    """(what f reads, their identities now), or None when f reads nothing to watch."""
    w = watch(f)
    return None if w is None else (w, snapshot(w))
