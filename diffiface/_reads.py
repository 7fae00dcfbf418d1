"""What a function reads besides its arguments, as a fingerprint of identities.

A compiled function bakes in the values ``f`` reads from globals, closure
cells and ``self`` attributes (``jax.jit`` semantics). An unprepared call must
not answer with stale values, so the caches of unprepared calls are keyed on
:func:`fingerprint`: rebinding such a name (``scale = 5.0``) compiles anew.
Changes made in place (an element of a NumPy array, a dict entry) keep the
identity and are not seen: pass such values as ``di.Constant``.
"""

from __future__ import annotations

import functools
import types
import weakref
from typing import Any

_DEPTH = 3  # helper functions followed from f, through globals and closures
_MISSING = object()
_WATCH: dict = {}  # id(f) -> (weakref to f, (globals, name) pairs, closure cells)


def fingerprint(f: Any) -> tuple:
    """The identities of the values ``f`` reads from globals, closure cells and its
    instance (a bound method or a callable object)."""
    w = watch(f)
    return () if w is None else snapshot(w)


def watch(f: Any) -> tuple | None:
    """What ``f`` reads: (globals dict or instance dict, name) pairs and closure cells;
    None when nothing (the check is then free). A ``functools.partial``'s own
    arguments cannot be rebound: only its function's reads count."""
    if isinstance(f, functools.partial):
        return watch(f.func)
    if type(f) is types.MethodType:
        obj, func = f.__self__, f.__func__
    elif type(f) is types.FunctionType:
        obj, func = None, f
    else:
        obj, func = f, type(f).__call__ if callable(f) else None
    if type(func) is not types.FunctionType:
        return None
    entry = _WATCH.get(id(func))
    if entry is None or entry[0]() is not func:
        entry = _enter(func)
    _, pairs, cells = entry
    attrs = getattr(obj, "__dict__", None) if obj is not None else None
    if attrs:
        pairs = [(attrs, n) for n in _names(func.__code__) if n in attrs] + pairs
    return (pairs, cells) if pairs or cells else None


def snapshot(w: tuple) -> tuple:
    """The identities of the values ``w`` (from :func:`watch`) points at, now."""
    pairs, cells = w
    ids = []
    for d, n in pairs:  # (a loop, not a comprehension: one frame less per unprepared call)
        ids.append(id(d.get(n, _MISSING)))
    for c in cells:
        try:
            ids.append(id(c.cell_contents))
        except ValueError:  # an empty cell
            ids.append(0)
    return tuple(ids)


def _enter(f: types.FunctionType) -> tuple:
    """The watch list of ``f``, entered under ``id(f)`` until ``f`` dies."""
    key = id(f)

    def forget(ref: weakref.ref) -> None:
        if _WATCH.get(key, (None,))[0] is ref:
            del _WATCH[key]

    entry = _WATCH[key] = (weakref.ref(f, forget), *_watch(f, _DEPTH, set()))
    return entry


def _watch(f: types.FunctionType, depth: int, seen: set) -> tuple[list, list]:
    """(globals dict, name) pairs and closure cells that ``f`` (and the plain functions
    it reaches through them, ``depth`` levels down) reads; modules are not watched."""
    pairs: list = []
    cells: list = []
    if id(f) in seen:
        return pairs, cells
    seen.add(id(f))
    g = f.__globals__
    for name in _names(f.__code__):
        value = g.get(name, _MISSING)
        if value is _MISSING or isinstance(value, types.ModuleType):
            continue
        pairs.append((g, name))
        if depth and type(value) is types.FunctionType:
            more = _watch(value, depth - 1, seen)
            pairs += more[0]
            cells += more[1]
    for cell in f.__closure__ or ():
        cells.append(cell)
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if depth and type(value) is types.FunctionType:
            more = _watch(value, depth - 1, seen)
            pairs += more[0]
            cells += more[1]
    return pairs, cells


@functools.lru_cache(maxsize=1024)
def _names(code: types.CodeType) -> tuple:
    """The global and attribute names of ``code`` and of the code nested in it."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names(const)
    return tuple(dict.fromkeys(names))
