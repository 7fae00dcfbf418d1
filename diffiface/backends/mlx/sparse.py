"""MLX's side of AutoSparse (imported on use; imports mlx): the index arrays of a sparse
plan as MLX arrays, and its results.

MLX has no sparse array type, so a sparse Jacobian or Hessian of an MLX x comes as a
``scipy.sparse.csr_array`` (its values copied out of MLX's memory, as for a NumPy x);
``AutoSparse(AutoMLX(), dense=True)`` gives a dense ``mx.array``, differentiable by an
outer MLX pass. MLX exposes no program that f traces to (no jaxpr, no FX graph), so
this module has no detector, and ``sparsity_detector="global"`` is a clear error
(sparse/detect.py): ``sparsity_detector="local"`` or a given pattern serve MLX.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import scipy.sparse as sp

from .runners import DTYPES


def as_input(x: Any) -> Any:
    """x as an MLX array (a NumPy x: finite differences over MLX)."""
    return x if isinstance(x, mx.array) else mx.array(x, dtype=DTYPES.get(np.asarray(x).dtype))


class Format:
    """``result(data)``: a ``scipy.sparse.csr_array`` of the pattern (MLX has no sparse
    type)."""

    def __init__(self, rows: np.ndarray, indices: np.ndarray, indptr: np.ndarray, mn, like):
        self.indices, self.indptr, self.mn = indices, indptr, tuple(mn)

    def __call__(self, data: Any) -> Any:
        return sp.csr_array((np.asarray(data), self.indices, self.indptr), shape=self.mn)


def index(idx: np.ndarray, like: Any) -> Any:
    return mx.array(idx.astype(np.int32 if idx.size < 2**31 else np.int64))


def scatter(data: Any, flat: Any, total: int) -> Any:
    """Zeros with ``data`` at the (distinct) ``flat`` indices, differentiably."""
    return mx.zeros((total,), dtype=data.dtype).at[flat].add(data)
