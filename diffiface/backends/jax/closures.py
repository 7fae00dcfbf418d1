"""A closure made anew on every call, compiled once per code.

``di.gradient(lambda p: loss(p, batch), AutoJax(), params)`` inside a training
loop makes a new function object per step: keyed on the object, every step
traced and compiled f again (60-130 ms a call at n = 1e3). Its code is the same
each step and only what its cells hold differs, so diffiface compiles the code
once, with the cells' arrays as arguments of the compiled function (closure
conversion, as ``jax.closure_convert`` does for traced values): later objects
of the code run that compilation. Flags in cells (bool, int, float, str, None)
count by value, classes, modules and plain module-level functions by identity,
and what f reads from globals by identity: any of them changed compiles anew.
A cell holding anything else (a dict, a closure, an object) keeps the per-object
path. Used for every operator without aux; a pytree output's Layout is kept with
the compilation of its code and recorded for each object that runs it.
"""

from __future__ import annotations

import functools
import threading
import types
import weakref
from collections import OrderedDict
from typing import Any

import jax
import numpy as np

from ..._reads import snapshot, watch
from ...core import outputs
from .aux import WithAux

_ARRAY = object()  # a cell part passed as an argument
_FLAGS = (bool, int, float, str, type(None))
_SEEN: OrderedDict = OrderedDict()  # code -> True once an object of it compiled
_LIFTED: OrderedDict = OrderedDict()  # key -> its _Entry (jitted on (cell arrays, *args))
MAX = 256
_LOCK = threading.Lock()


def lift(f: Any) -> tuple | None:
    """``(key, arrays)`` of a plain closure whose cells hold arrays and flags, else None:
    ``key`` names its code and everything the compilation bakes in."""
    if type(f) is not types.FunctionType or not f.__closure__ or f.__kwdefaults__:
        return None
    parts, arrays = [], []
    for cell in f.__closure__:
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            return None
        if isinstance(v, np.ndarray) or (
            isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)
        ):
            parts.append((_ARRAY, None))  # (its shape and dtype: jit keys its own cache on them)
            arrays.append(v)
        elif type(v) in _FLAGS:
            parts.append((type(v), v))
        elif isinstance(v, types.ModuleType | type) or (
            type(v) in (types.FunctionType, types.BuiltinFunctionType)
            and not getattr(v, "__closure__", None)
        ):
            parts.append((None, v))
        else:
            return None
    defaults = f.__defaults__
    try:
        hash(defaults)
    except TypeError:
        return None
    w = watch(f)
    reads = () if w is None else snapshot((w[0], ()))
    return (f.__code__, tuple(parts), defaults, reads), arrays


class _Entry:
    """One compilation of a code: the jitted function, and the Layouts its traces
    recorded for a pytree output (kept per code: later objects of the code never run
    f, so each gets them recorded as its own)."""

    __slots__ = ("jitted", "layouts")

    def __init__(self) -> None:
        self.jitted, self.layouts = None, {}


_NOW = threading.local()  # .f: a weak reference to the object whose lifted call runs
KEY = "lifted"  # a memo entry of a problem whose compiled function is its code's: the key


def compiled(prob: Any, key: tuple, make_run, on_compile) -> Any:
    """The compiled function of f's code for ``key`` (``prob.key(...)`` of the call),
    called with this object's cell arrays; None for the first object of its code (the
    usual path compiles it) or an f that cannot be lifted. ``on_compile(f)`` counts a
    compilation (a flag that changes per call still compiles per value)."""
    f, wrap = own(prob.f)
    got = lift(f)
    if got is None:
        return None
    (code, parts, defaults, reads), arrays = got
    with _LOCK:
        if code not in _SEEN:
            _SEEN[code] = True
            while len(_SEEN) > MAX:
                _SEEN.popitem(last=False)
            return None
        full = (code, parts, defaults, reads, key)
        entry = _LIFTED.get(full)
        new = entry is None
        if new:
            entry = _LIFTED[full] = _Entry()
            lifted = _lifted(f, parts, make_run, entry, wrap)
            entry.jitted = WithAux(lifted) if prob.aux else jax.jit(lifted)
            while len(_LIFTED) > MAX:
                _LIFTED.popitem(last=False)
    if new:
        on_compile(prob.f)
    run = functools.partial(entry.jitted, tuple(arrays))
    if prob.op not in outputs.TREE_OPS:
        return run
    f = prob.f
    for sig, layout in entry.layouts.items():
        outputs.record(f, sig, layout)
    ref = weakref.ref(f)

    def run_tree(*args):  # a trace (a shape not met yet) records its Layout for f too
        _NOW.f = ref
        try:
            return run(*args)
        finally:
            _NOW.f = None

    return run_tree


def own(f: Any) -> tuple:
    """(the user's function, a rebuild around another function of its code or None): f
    itself, or for a ``ValueAsAux`` (the value carried as aux: value_gradient_and_hvp)
    the user's f it runs, which is what is lifted."""
    if type(f) is outputs.ValueAsAux and not f.aux:
        user, backend, op = f.fget(), f.backend, f.op
        return user, lambda fn: outputs.ValueAsAux(lambda: fn, False, backend, op)
    return f, None


def bound(f: Any, key: tuple) -> Any:
    """The compiled function of f's code for ``key`` on f's cell arrays, or None (f is
    not lifted so: cells of other kinds, shapes or flags, a rebound read, not compiled)."""
    got = lift(f)
    if got is None:
        return None
    (code, parts, defaults, reads), arrays = got
    entry = _LIFTED.get((code, parts, defaults, reads, key))
    return None if entry is None else functools.partial(entry.jitted, tuple(arrays))


def _lifted(f: Any, parts: tuple, make_run, entry: _Entry, wrap=None):
    """``g(cell_arrays, *args)``: f's code rebuilt on the traced cells (and ``wrap``ped,
    see ``own``), then run as the operator's compiled function would (``make_run(fget)``:
    that function for f). A pytree output's Layout goes to the entry and to the object
    being called."""
    code, env, name, defaults = f.__code__, f.__globals__, f.__name__, f.__defaults__

    def g(cell_arrays, *args):
        values = iter(cell_arrays)
        cells = tuple(types.CellType(next(values) if kind is _ARRAY else v) for kind, v in parts)
        fn = types.FunctionType(code, env, name, defaults, cells)
        run = wrap(fn) if wrap is not None else fn
        out = make_run(lambda: run)(*args)
        found = outputs.layouts(fn)
        if found:
            entry.layouts = {**entry.layouts, **found}  # (a new dict: readers iterate it)
            ref = getattr(_NOW, "f", None)
            now = None if ref is None else ref()
            for sig, layout in found.items() if now is not None else ():
                outputs.record(now, sig, layout)
        return out

    return g


def clear() -> None:
    with _LOCK:
        _SEEN.clear()
        _LIFTED.clear()
