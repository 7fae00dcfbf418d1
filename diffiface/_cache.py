"""A bounded, thread-safe cache of built functions, keyed weakly on ``f``.

Entries of a function disappear when the function dies: a builder gets a
getter for ``f`` (not ``f`` itself) so that what it builds holds ``f`` only
weakly. A bound method is keyed on its instance, so ``model.loss`` hits the
cache although each attribute access makes a new method object. Callables
that cannot be weakly referenced are not cached.
"""

from __future__ import annotations

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
        owner, key = _owner_key(f, key)
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
