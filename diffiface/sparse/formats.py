"""The result of a sparse operator in the array kind of x: built from the nonzeros in the
pattern's CSR order, with every index array made once per plan."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp


class Format:
    """Makes ``result(data)`` for one pattern, framework and output kind.

    ``kind``: "jax", "torch" (the framework's sparse type), "numpy" (``scipy.sparse``),
    or "dense" (a dense array of the dense backend, shaped ``shape``)."""

    def __init__(self, kind: str, pattern: sp.csr_array, like: Any, shape: tuple, impl: Any):
        self.kind, self.shape, self.impl = kind, shape, impl
        m, n = pattern.shape
        self.mn = (m, n)
        indptr, indices = pattern.indptr.astype(np.int64), pattern.indices.astype(np.int64)
        self.np_indptr, self.np_indices = indptr, indices
        rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
        if kind == "jax":
            import jax.numpy as jnp

            self.indices = jnp.asarray(np.stack([rows, indices], 1).astype(np.int32))
            self.info = {"shape": (m, n), "indices_sorted": True, "unique_indices": True}
        elif kind == "torch":
            import torch

            dev = like.device
            self.crow = torch.as_tensor(indptr, device=dev)
            self.col = torch.as_tensor(indices, device=dev)
            with warnings.catch_warnings():  # torch's once-per-process "beta" notice: here
                warnings.simplefilter("ignore", UserWarning)
                self(torch.zeros(len(indices), dtype=like.dtype, device=dev))
        elif kind == "dense":
            self.flat = native_index(impl, rows * n + indices, like)

    def __call__(self, data: Any) -> Any:
        kind = self.kind
        if kind == "jax":
            from jax.experimental import sparse as jsparse

            # (the pytree constructor: BCOO(...) would convert and check both arrays again)
            return jsparse.BCOO.tree_unflatten(self.info, (data, self.indices))
        if kind == "torch":
            import torch

            return torch.sparse_csr_tensor(
                self.crow, self.col, data, size=self.mn, check_invariants=False
            )
        if kind == "numpy":
            data = np.asarray(data)
            return sp.csr_array((data, self.np_indices, self.np_indptr), shape=self.mn)
        return self.impl.reshape(
            scatter(self.impl, data, self.flat, self.mn[0] * self.mn[1]), self.shape
        )


def native_index(impl: Any, idx: np.ndarray, like: Any) -> Any:
    """An int64 index array of the dense backend's framework (on like's device)."""
    fw = impl.framework
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.asarray(idx.astype(np.int32 if idx.size < 2**31 else np.int64))
    if fw == "torch":
        import torch

        return torch.as_tensor(idx, device=like.device)
    return idx


def take(impl: Any, a: Any, idx: Any) -> Any:
    """``a.ravel()[idx]`` in a's framework (differentiable where the framework is)."""
    return impl.reshape(a, (-1,))[idx]


def scatter(impl: Any, data: Any, flat: Any, total: int) -> Any:
    """A 1-d array of ``total`` zeros with ``data`` at ``flat``."""
    fw = impl.framework
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.zeros(total, data.dtype).at[flat].set(data)
    if fw == "torch":
        import torch

        out = torch.zeros(total, dtype=data.dtype, device=data.device)
        return out.index_put((flat,), data)
    out = np.zeros(total, dtype=np.asarray(data).dtype)
    out[flat] = data
    return out
