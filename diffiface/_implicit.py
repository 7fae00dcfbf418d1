"""The implicit preparation of unprepared calls: per function and operator, the last
plain call's signature and its compiled runner.

An unprepared call of one native float array without contexts that matches the
last such call of the same ``f``, operator and backend goes straight to the
runner the general path built, the way a prepared call does. Runners hold ``f``
only weakly (they come from the backend's weak cache), and an entry disappears
with its function, so the table keeps nothing alive. Bound methods are not
entered (each attribute access makes a new method object).
"""

from __future__ import annotations

import threading
import types
import weakref
from collections import OrderedDict
from typing import Any

from ._contexts import Constant as _Constant

MAX_FUNCTIONS = 1024

_lock = threading.RLock()  # a weakref callback may run inside
# id(f) -> (weakref to f, {op: (backend, type(x), shape, dtype, run)}); oldest first
_data: OrderedDict[int, tuple[weakref.ref, dict]] = OrderedDict()


def lookup(op: str, f: Any, backend: Any, x: Any):
    """The runner of the last plain call like this one, or None."""
    item = _data.get(id(f))
    if item is None or item[0]() is not f:
        return None
    entry = item[1].get(op)
    if entry is None:
        return None
    b, xtype, shape, dtype, run = entry
    if (
        type(x) is not xtype
        or (backend is not b and backend != b)
        or x.shape != shape
        or x.dtype != dtype
    ):
        return None
    return run


def run_leaves(op: str, f: Any, backend: Any, x: Any, contexts: tuple, matches) -> Any:
    """The result of the last plain pytree call like this one (native leaves of x and of
    Constant contexts, see ``store_leaves``), or None when there is none."""
    item = _data.get(id(f))
    if item is None or item[0]() is not f:
        return None
    entry = item[1].get((op, "leaves"))
    if entry is None:
        return None
    b, x_sig, c_sig, n, run = entry
    if (backend is not b and backend != b) or len(contexts) != n:
        return None
    xs = matches(x, x_sig)
    if xs is None:
        return None
    if n:
        if any(type(c) is not _Constant for c in contexts):
            return None
        cs = matches(tuple(c.value for c in contexts), c_sig)
        if cs is None:
            return None
        return run(xs, cs, ())
    return run(xs, (), ())


def store_leaves(op, f, backend, x_sig, c_sig, n: int, run) -> None:
    """Remember a leaves runner (holding ``f`` weakly) for pytree calls like this one."""
    store((op, "leaves"), f, backend, None, run, (backend, x_sig, c_sig, n, run))


def store(op, f: Any, backend: Any, x: Any, run: Any, entry: tuple | None = None) -> None:
    """Remember ``run`` for calls like this one (``run`` must hold ``f`` only weakly)."""
    if run is None or type(f) is types.MethodType:
        return
    try:
        ref = weakref.ref(f, _forget(id(f)))
    except TypeError:  # not weakly referenceable: never entered
        return
    if entry is None:
        entry = (backend, type(x), x.shape, x.dtype, run)
    with _lock:
        item = _data.get(id(f))
        if item is None or item[0]() is not f:
            item = _data[id(f)] = (ref, {})
            while len(_data) > MAX_FUNCTIONS:
                _data.popitem(last=False)
        item[1][op] = entry


def _forget(ident: int):
    def callback(ref: weakref.ref) -> None:
        with _lock:
            item = _data.get(ident)
            if item is not None and item[0] is ref:
                del _data[ident]

    return callback


def entries(f: Any) -> int:
    """Number of operators entered for ``f`` (for tests)."""
    item = _data.get(id(f))
    return len(item[1]) if item is not None and item[0]() is f else 0


def clear() -> None:
    with _lock:
        _data.clear()
