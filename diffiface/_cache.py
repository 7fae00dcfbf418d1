"""A bounded, thread-safe cache of built functions, keyed weakly on ``f``.

Entries of a function disappear when the function dies: a builder gets a
getter for ``f`` (not ``f`` itself) so that what it builds holds ``f`` only
weakly. A bound method is keyed on its instance, so ``model.loss`` hits the
cache although each attribute access makes a new method object. Callables
that cannot be weakly referenced are not cached.
"""

from __future__ import annotations

import functools
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

MAX_PER_FUNCTION = 64
MAX_FUNCTIONS = 1024
_ALL: weakref.WeakSet = weakref.WeakSet()  # every FunctionCache, for clear_caches


def clear_caches() -> None:
    """Drop every function diffiface has compiled, prepared implicitly or bridged (each
    also goes when its ``f`` dies). Prepared ``Prep`` objects are unaffected.

    Examples:
        >>> import diffiface as di
        >>> di.clear_caches()
    """
    for cache in list(_ALL):
        cache.clear()


class FunctionCache:
    def __init__(
        self, per_function: int = MAX_PER_FUNCTION, functions: int = MAX_FUNCTIONS, clear=True
    ):
        self._per_function = per_function
        self._functions = functions
        self._lock = threading.RLock()  # a weakref callback may run inside
        # id(owner) -> (weakref to owner, {key: value}); insertion order = age
        self._data: OrderedDict[int, tuple[weakref.ref, dict]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        if clear:  # (a cache of facts about f that outlive compiled functions: clear=False)
            _ALL.add(self)

    def get(self, f: Callable, key: Hashable, build: Callable[[Callable], Any]) -> Any:
        """Return the entry for ``(f, key)``; ``build(fget)`` makes it once if missing."""
        value = self.peek(f, key)
        if value is not None:
            self.hits += 1
            return value
        try:
            fget = _weak_getter(f)
        except TypeError:  # not weakly referenceable: never cached
            self.misses += 1
            return build(lambda: f)
        value = build(fget)
        self.misses += 1
        self.put(f, key, value)
        return value

    def peek(self, f: Callable, key: Hashable) -> Any:
        """The entry for ``(f, key)``, or None (nothing is built or counted)."""
        if type(f) is types.MethodType:  # (as _owner_key: inline, it runs per call)
            owner, key = f.__self__, (f.__func__, key)
        else:
            owner = f
        item = self._data.get(id(owner))
        if item is not None and item[0]() is owner:
            return item[1].get(key)
        return None

    def put(self, f: Callable, key: Hashable, value: Any) -> None:
        """Set the entry for ``(f, key)`` (``value`` must hold ``f`` only weakly); a
        callable that cannot be weakly referenced is not entered."""
        owner, key = _owner_key(f, key)
        with self._lock:
            item = self._data.get(id(owner))
            if item is None or item[0]() is not owner:
                try:
                    ref = weakref.ref(owner, self._forget(id(owner)))
                except TypeError:
                    return
                item = self._data[id(owner)] = (ref, {})
                while len(self._data) > self._functions:
                    self._data.popitem(last=False)
            entries = item[1]
            entries[key] = value
            if len(entries) > self._per_function:
                del entries[next(iter(entries))]

    def _forget(self, ident: int) -> Callable:
        data, lock = self._data, self._lock

        def callback(ref: weakref.ref) -> None:
            with lock:
                item = data.get(ident)
                if item is not None and item[0] is ref:
                    del data[ident]

        return callback

    def entries(self, f: Callable) -> int:
        """Number of cached entries for ``f`` (0 when none or not cacheable)."""
        owner = f.__self__ if isinstance(f, types.MethodType) else f
        item = self._data.get(id(owner))
        return len(item[1]) if item is not None and item[0]() is owner else 0

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def _owner_key(f: Callable, key: Hashable) -> tuple:
    """A bound method is entered under its instance (each access makes a new method)."""
    if type(f) is types.MethodType:
        return f.__self__, (f.__func__, key)
    return f, key


def weak_callable(f: Callable, weak: bool = True) -> Callable | None:
    """A callable that calls ``f`` and holds it only weakly (for a runner kept in a
    FunctionCache under ``f``): a proxy of a function or a callable object, the function
    of a bound method with its instance looked up per call; None when ``f`` cannot be
    weakly referenced. ``weak=False``: ``f`` itself (a prepared runner holds it)."""
    if not weak:
        return f
    if isinstance(f, types.MethodType):
        func, ref = f.__func__, weakref.ref(f.__self__)
        return lambda *args: func(ref(), *args)
    try:
        return weakref.proxy(f)
    except TypeError:
        return None


def _weak_getter(f: Callable) -> Callable[[], Callable]:
    if isinstance(f, types.MethodType):
        func, ref = f.__func__, weakref.ref(f.__self__)
        return lambda: types.MethodType(func, ref())
    return weakref.ref(f)


class CodeFacts:
    """Facts about f that hold for every function object of its code (``code_of``): a
    check made on f's first call, the one direction f supports. Kept per code (bounded,
    so a closure made per call pays the first-call work once), or weakly per object
    where f has no code of its own or the table is full. Not cleared by ``clear_caches``."""

    def __init__(self, codes: int = 4096, strict: bool = True):
        self._codes, self._strict = codes, strict
        self._by_code: dict = {}
        self._by_object = FunctionCache(per_function=4, clear=False)

    def get(self, f: Callable, key: Hashable = True) -> Any:
        code = code_of(f, strict=self._strict)
        got = None if code is None else self._by_code.get((code, key))
        if got is None and (code is None or len(self._by_code) >= self._codes):
            return self._by_object.peek(f, key)  # (kept per object: see put)
        return got

    def put(self, f: Callable, value: Any, key: Hashable = True) -> None:
        code = code_of(f, strict=self._strict)
        if code is not None and len(self._by_code) < self._codes:
            self._by_code[code, key] = value
        else:  # no code, or the table is full: this object keeps it
            self._by_object.put(f, key, value)


def code_of(f, depth: int = 2, strict: bool = False):
    """What ``f`` is one of, for facts about f that hold for every function object of
    the same code: its code and the kinds of what it closes over or binds (for an
    array: type, shape and dtype; for a function: its own code_of). A closure made anew
    on every call has the same one each time. None where ``f`` has no Python code of its
    own nor a class that gives it one (a callable of C type): keep such facts per object.

    ``strict``: for checks whose miss would drop a derivative silently (torch's
    first-call watch, ``@once_differentiable``, the one direction f supports): flags
    (bool, str, None, int) count by value, and a callable object (an ``nn.Module``,
    whose layers differ by instance) anywhere in f makes it None. Without it (the
    nested strategy, a speed choice) a callable object counts by its class."""
    if depth < 0:
        return None
    kind = type(f)
    if kind is types.BuiltinFunctionType:  # a builtin (torch.dot) lives as long as its module
        bound = f.__self__  # a method of an array (a.sum): by type, not keeping a alive
        if bound is None or isinstance(bound, types.ModuleType):
            return f
        return ("builtin", type(bound), f.__name__)
    if kind is types.FunctionType:
        cells = f.__closure__
        if not cells:
            return f.__code__
        return _known((f.__code__, *[_kind(c, depth, strict) for c in cells]))
    if kind is types.MethodType:
        inner = code_of(f.__func__, depth, strict)
        bound = _value_kind(f.__self__, depth, strict)
        return None if inner is None else _known(("method", inner, bound))
    if kind is functools.partial:
        inner = code_of(f.func, depth, strict)
        if inner is None:
            return None
        args = tuple(_value_kind(a, depth, strict) for a in f.args)
        kw = [x for k, v in sorted(f.keywords.items()) for x in (k, _value_kind(v, depth, strict))]
        return _known(("partial", inner, *args, *kw))
    wrapped = getattr(f, "__wrapped__", None)  # jax.jit, functools.wraps
    if wrapped is not None and wrapped is not f:
        inner = code_of(wrapped, depth - 1, strict)
        return None if inner is None else (kind, inner)
    if not strict and isinstance(getattr(kind, "__call__", None), types.FunctionType):  # noqa: B004
        return kind  # a callable object (an nn.Module): its class
    return None


_UNKNOWN = object()  # (strict) a value whose behaviour its kind does not tell
_FLAGS = (bool, str, int, type(None))


def _known(key: tuple):
    return None if any(part is _UNKNOWN for part in key) else key


def _kind(cell, depth: int, strict: bool):
    try:
        value = cell.cell_contents
    except ValueError:  # an empty cell
        return None
    return _value_kind(value, depth, strict)


def _value_kind(value, depth: int, strict: bool = False):
    """An array: its type, shape and dtype; a function: its code; a class or a module:
    itself (``Cube.apply`` is bound to the class: its behaviour is the class's); else
    the type (``strict``: a flag by value, a callable object unknown)."""
    if isinstance(value, types.ModuleType | type):
        return value
    if strict and type(value) in _FLAGS:
        return (type(value), value)
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and hasattr(value, "dtype"):
        return (type(value), shape, value.dtype)
    if depth > 0 and callable(value):
        inner = code_of(value, depth - 1, strict)
        if inner is not None:
            return inner
        if strict:
            return _UNKNOWN
    return type(value)
