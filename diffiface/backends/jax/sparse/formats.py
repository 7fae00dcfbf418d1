"""Sparse results as ``jax.experimental.sparse.BCOO``, and the index arrays of a
sparse plan as jax arrays."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def as_input(x: Any) -> Any:
    """x as a jax array (a NumPy x: finite differences over JAX)."""
    return x if hasattr(x, "aval") else jnp.asarray(x)


class Format:
    """``result(data)``: a BCOO of the pattern (rows, columns in CSR order)."""

    def __init__(self, rows: np.ndarray, indices: np.ndarray, indptr: np.ndarray, mn, like):
        from jax.experimental import sparse as jsparse  # (imported by the first BCOO)

        self.unflatten = jsparse.BCOO.tree_unflatten
        self.indices = index(np.stack([rows, indices], 1).astype(np.int32), like)
        self.info = {"shape": tuple(mn), "indices_sorted": True, "unique_indices": True}

    def __call__(self, data: Any) -> Any:
        # (the pytree constructor: BCOO(...) would convert and check both arrays again)
        return self.unflatten(self.info, (data, self.indices))


def index(idx: np.ndarray, like: Any) -> Any:
    """``idx`` as a jax array on like's device (the default device for a tracer or a
    NumPy like, and for like spread over several devices)."""
    idx = idx.astype(np.int32 if idx.size < 2**31 else np.int64)
    devices = like.devices() if isinstance(like, jax.Array) and not _traced(like) else ()
    return jax.device_put(idx, next(iter(devices))) if len(devices) == 1 else jnp.asarray(idx)


def _traced(a: Any) -> bool:
    return isinstance(a, jax.core.Tracer)


def scatter(data: Any, flat: Any, total: int) -> Any:
    return jnp.zeros(total, data.dtype).at[flat].set(data)
