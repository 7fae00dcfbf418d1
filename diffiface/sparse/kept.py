"""What a sparse plan kept for an f's code depends on: a closure made anew on each call
finds the plan of an earlier object of its code when its cells hold the same things.

A global pattern may depend on any value f reads besides x: a closed-over index array
(``x[idx]``), a flag, a function it calls. So a plan is shared between two objects of
one code only when every cell holds an equal flag (bool, int, float, complex, str,
bytes, None, by value), the same module, class, plain module-level function or NumPy
function (``np.sin``, ``np.concatenate``), an array of the same type, shape and dtype
with the same values (the same object, or equal values, compared where the array
lives: a JAX or torch array on its device, one bool read back), or a closure whose
cells pass the same test (3 levels down); and what the code reads from globals is the
same objects. A cell holding anything else (a dict, a list, an object whose contents f
may read) keeps the per-object path: detection and coloring anew.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

import numpy as np

from .. import _arrays
from .._reads import watch
from .formats import framework_module

_FLAGS = (bool, int, float, complex, str, bytes, type(None))
# functions kept by identity: plain ones, and NumPy's (its ufuncs and array functions)
_PLAIN = (types.FunctionType, types.BuiltinFunctionType, np.ufunc, type(np.concatenate))
_DEPTH = 3  # closures in cells, levels down


class Cells:
    """A closure's cells as a plan of its code keys them: ``key`` (hashable: the code,
    the flags by value, modules, classes and plain functions by identity, the arrays'
    types, shapes and dtypes, and the identities f reads from globals) and ``arrays``
    (the arrays themselves, compared by value)."""

    __slots__ = ("arrays", "key")

    def __init__(self, key: tuple, arrays: list) -> None:
        self.key, self.arrays = key, arrays

    def record(self) -> tuple | None:
        """The arrays as a kept plan holds them: (weak reference or None, a copy of the
        values, the framework's sparsity module that keeps and compares them on the
        array's device, or None for a copy on the host) each; None where a value is
        unknown (traced)."""
        out = []
        for a in self.arrays:
            side = _on_device(a)
            copy = _host_copy(a) if side is None else side.kept_copy(a)
            if copy is None:
                return None
            try:
                ref = weakref.ref(a)
            except TypeError:
                ref = None
            out.append((ref, copy, side))
        return tuple(out)

    def same_arrays(self, record: tuple) -> bool:
        """Its arrays are the recorded ones: the same objects, or equal values (compared
        where the array lives: a JAX or torch array on its device, one bool back)."""
        for a, (ref, copy, side) in zip(self.arrays, record, strict=True):
            if ref is not None and ref() is a:
                continue
            if side is not None:
                if not side.same_values(a, copy):
                    return False
                continue
            now = _arrays.values(a)
            if now is None or now.dtype != copy.dtype or not np.array_equal(now, copy):
                return False
        return True


def _on_device(a: Any) -> Any:
    """The sparsity module of a's framework where it keeps values on the array's device
    (``kept_copy``, ``same_values``: JAX, torch), else None (NumPy, and frameworks
    whose arrays are compared on the host)."""
    if isinstance(a, np.ndarray):
        return None
    fw = _arrays.owner(a)
    module = None if fw is None else framework_module(fw.name)
    return module if hasattr(module, "kept_copy") else None


def _host_copy(a: Any) -> np.ndarray | None:
    values = _arrays.values(a)
    return None if values is None else np.array(values, copy=True)


def cells(f: Any) -> Cells | None:
    """The cells of a plain function ``f`` (a closure, or one that reads only globals)
    whose code's plan it may share, else None."""
    if type(f) is not types.FunctionType:
        return None
    arrays: list = []
    parts = _parts(f, arrays, _DEPTH)
    if parts is None:
        return None
    return Cells((f.__code__, parts, _reads(f, parts)), arrays)


def _parts(f: types.FunctionType, arrays: list, depth: int) -> tuple | None:
    """The key of f's cells and defaults (its arrays appended to ``arrays``): a closure
    in a cell by its code and its own cells, ``depth`` levels down; None for a cell
    of another kind."""
    defaults = f.__defaults__
    if f.__kwdefaults__:
        return None
    try:
        hash(defaults)
    except TypeError:
        return None
    parts = []
    for cell in f.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            return None
        if type(v) in _FLAGS:
            parts.append((type(v), v))
        elif isinstance(v, np.ndarray) or _arrays.owner(v) is not None:
            parts.append((type(v), tuple(v.shape), str(v.dtype)))
            arrays.append(v)
        elif isinstance(v, types.ModuleType | type) or (
            type(v) in _PLAIN and not getattr(v, "__closure__", None)
        ):
            parts.append((None, v))
        elif type(v) is types.FunctionType and depth:  # a closure: its code, its cells
            inner = _parts(v, arrays, depth - 1)
            if inner is None:
                return None
            parts.append((v.__code__, inner))
        else:
            return None
    return tuple(parts), defaults


_PAIRS: dict = {}  # (code, cell parts) -> the (globals dict, name) pairs its objects read
_MAX = 256
_MISSING = object()


def _reads(f: types.FunctionType, parts: tuple) -> tuple:
    """The identities of the values f reads from globals (through the functions it
    reaches too: ``_reads.watch``), found once per code and cells' kinds."""
    key = (f.__code__, parts)
    pairs = _PAIRS.get(key)
    if pairs is None:
        w = watch(f)
        pairs = () if w is None else tuple(w[0])
        if len(_PAIRS) >= _MAX:
            _PAIRS.clear()
        _PAIRS[key] = pairs
    return tuple([id(d.get(n, _MISSING)) for d, n in pairs]) if pairs else ()
