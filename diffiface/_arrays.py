"""The one place that tells which framework an array belongs to.

Only frameworks already imported are asked: nothing here imports one.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def framework_of(leaf: Any) -> str | None:
    """ "jax", "torch", "autograd" (a box), "numpy" or None for a leaf that is no array
    (a dtype, a device or a module is no array)."""
    if isinstance(leaf, np.ndarray | np.generic):
        return "numpy"
    mod = type(leaf).__module__.partition(".")[0]
    if mod == "torch":
        return "torch" if isinstance(leaf, sys.modules["torch"].Tensor) else None
    if mod in ("jax", "jaxlib"):
        jax = sys.modules["jax"]
        return "jax" if isinstance(leaf, jax.Array | jax.core.Tracer) else None
    if mod == "autograd":
        return "autograd" if isinstance(leaf, sys.modules["autograd.tracer"].Box) else None
    return None


def foreign(framework: str, leaf: Any) -> bool:
    """``leaf`` is an array of a framework other than ``framework`` (NumPy is no one's)."""
    return framework_of(leaf) not in (None, "numpy", framework)


def is_jax_tracer(a: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(a, jax.core.Tracer)
