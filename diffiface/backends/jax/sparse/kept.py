"""A closed-over array's values, kept and compared on its own device (``sparse.kept``):
a closure made anew per call finds its code's plan with one bool read back, never a
copy of the array to the host. The same-point preparations' keep and compare."""

from __future__ import annotations

from typing import Any

import jax

from .. import same_point


def kept_copy(a: Any) -> Any:
    """a itself (JAX arrays are immutable), or None for a tracer (no values yet)."""
    return None if isinstance(a, jax.core.Tracer) else same_point.keep(a)


def same_values(a: Any, kept: Any) -> bool:
    """``a`` holds the values of ``kept`` (a ``kept_copy``), compared where both live:
    False for a tracer, another shape, dtype or placement."""
    return a.dtype == kept.dtype and same_point.same(kept, a)
