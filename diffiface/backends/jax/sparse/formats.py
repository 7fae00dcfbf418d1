"""Sparse results as ``jax.experimental.sparse.BCOO``, and the index arrays of a
sparse plan as jax arrays."""

from __future__ import annotations

from typing import Any

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
        self.indices = jnp.asarray(np.stack([rows, indices], 1).astype(np.int32))
        self.info = {"shape": tuple(mn), "indices_sorted": True, "unique_indices": True}

    def __call__(self, data: Any) -> Any:
        # (the pytree constructor: BCOO(...) would convert and check both arrays again)
        return self.unflatten(self.info, (data, self.indices))


def index(idx: np.ndarray, like: Any) -> Any:
    return jnp.asarray(idx.astype(np.int32 if idx.size < 2**31 else np.int64))


def scatter(data: Any, flat: Any, total: int) -> Any:
    return jnp.zeros(total, data.dtype).at[flat].set(data)
