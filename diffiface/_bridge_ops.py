"""Operators on another framework's arrays: the whole call crosses a bridge.

``di.gradient(f, di.AutoJax(), x)`` with torch tensors (in ``x``, a tangent, a
``Constant`` or the ``FixedParams`` parameters) runs as one bridged operation:
the arrays cross to JAX, the operator runs there (jit-compiled, with the
FixedParams rules), and the results come back as tensors. torch's
differentiation sees one operation whose derivatives JAX computes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import _checks
from ._bridge import Bridged, framework_of
from ._cache import FunctionCache
from ._contexts import Constant, FixedParams
from ._tangents import Tangents

_CACHE = FunctionCache()


class Foreign(Exception):
    """Raised by the argument conversions on an array of another framework."""


def foreign(impl: Any, leaf: Any) -> bool:
    """``leaf`` is an array of a framework other than ``impl``'s."""
    fw = framework_of(leaf)
    return fw not in (None, "numpy", impl.framework)


def bridgeable(op: Callable) -> Callable:
    """The operator, or on another framework's arrays, the operator run across a bridge."""

    @functools.wraps(op)
    def run(f, backend, *args, **kwargs):
        try:
            return op(f, backend, *args, **kwargs)
        except Foreign:
            return call(op, f, backend, args, kwargs)

    return run


def call(op: Callable, f: Callable, backend: Any, args: tuple, kwargs: dict) -> Any:
    name = op.__name__
    if kwargs.get("prep") is not None:
        raise _checks.DiffifaceValueError(
            f"{name}(f, {backend!r}, ...) got arrays of another framework and a prep. A "
            "preparation holds one framework's arrays: call without prep=, or convert the arrays."
        )
    kwargs = {k: v for k, v in kwargs.items() if k != "prep"}
    fixed = f if isinstance(f, FixedParams) else None
    g = fixed.f if fixed is not None else f
    shape, values = [], []
    for a in args:
        if isinstance(a, Constant):
            shape.append("C")
            values.append(a.value)
        elif isinstance(a, Tangents):
            raise _checks.DiffifaceValueError(
                f"{name}(f, {backend!r}, ...): di.Tangents cannot cross between frameworks yet; "
                "pass one tangent per call."
            )
        else:
            shape.append("A")
            values.append(a)
    strategy = fixed.strategy if fixed is not None else None
    key = (name, backend, tuple(shape), strategy, tuple(sorted(kwargs.items())))

    def build(fget):
        def inner(params, values):
            h = fget() if fixed is None else FixedParams(fget(), params, strategy=strategy)
            rebuilt = [Constant(v) if s == "C" else v for s, v in zip(shape, values, strict=True)]
            return op(h, backend, *rebuilt, **kwargs)

        return Bridged(inner, backend, name=f"{name} of {getattr(g, '__name__', 'f')}")

    bridged = _CACHE.get(g, key, build)
    return bridged(fixed.params if fixed is not None else None, tuple(values))
