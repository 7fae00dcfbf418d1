"""A closed-over array's values, kept and compared on its own device (``sparse.kept``):
a closure made anew per call finds its code's plan with one bool read back, never a
copy of the array to the host."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def kept_copy(a: Any) -> Any:
    """A copy of a's values where a lives (its sharding kept), or None for a tracer (no
    values yet)."""
    return None if isinstance(a, jax.core.Tracer) else jnp.array(a, copy=True)


def same_values(a: Any, kept: Any) -> bool:
    """``a`` holds the values of ``kept`` (a ``kept_copy``), compared where both live:
    False for a tracer, another shape, dtype or placement."""
    if isinstance(a, jax.core.Tracer) or a.shape != kept.shape or a.dtype != kept.dtype:
        return False
    if a.sharding != kept.sharding:
        return False
    return bool(jax.device_get(_equal(a, kept)))  # (explicit: one bool, as the guard allows)


@jax.jit
def _equal(a: Any, b: Any) -> Any:
    return jnp.array_equal(a, b)
