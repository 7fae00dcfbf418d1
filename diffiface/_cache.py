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


class FunctionCache:
    def __init__(self, per_function: int = MAX_PER_FUNCTION, functions: int = MAX_FUNCTIONS):
        self._per_function = per_function
        self._functions = functions
        self._lock = threading.Lock()
        self._data: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._order: OrderedDict[int, weakref.ref] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, f: Callable, key: Hashable, build: Callable[[Callable], Any]) -> Any:
        """Return the entry for ``(f, key)``; ``build(fget)`` makes it once if missing."""
        if isinstance(f, types.MethodType):
            owner, key = f.__self__, (f.__func__, key)
        else:
            owner = f
        try:
            entries = self._data.get(owner)
        except TypeError:  # not weakly referenceable: never cached
            self.misses += 1
            return build(lambda: f)
        if entries is not None:
            value = entries.get(key)
            if value is not None:
                self.hits += 1
                return value
        value = build(_weak_getter(f))
        with self._lock:
            self.misses += 1
            entries = self._data.get(owner)
            if entries is None:
                entries = self._data[owner] = OrderedDict()
                self._track(owner)
            entries[key] = value
            if len(entries) > self._per_function:
                entries.popitem(last=False)
        return value

    def _track(self, f: Callable) -> None:
        self._order[id(f)] = weakref.ref(f)
        while len(self._order) > self._functions:
            _, ref = self._order.popitem(last=False)
            dead = ref()
            if dead is not None:
                self._data.pop(dead, None)

    def entries(self, f: Callable) -> int:
        """Number of cached entries for ``f`` (0 when none or not cacheable)."""
        owner = f.__self__ if isinstance(f, types.MethodType) else f
        try:
            return len(self._data.get(owner, ()))
        except TypeError:
            return 0

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data = weakref.WeakKeyDictionary()
            self._order.clear()


def _weak_getter(f: Callable) -> Callable[[], Callable]:
    if isinstance(f, types.MethodType):
        func, ref = f.__func__, weakref.ref(f.__self__)
        return lambda: types.MethodType(func, ref())
    ref = weakref.ref(f)
    return ref
