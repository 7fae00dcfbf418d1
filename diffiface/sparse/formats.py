"""The result of a sparse operator in the array kind of x: built from the nonzeros in the
pattern's CSR order, with every index array made once per plan. A framework's own sparse
type comes from its sparsity module (``Framework.sparse``)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._arrays import named


def framework_module(framework: str) -> Any:
    """The framework's sparsity module (its global detector and sparse format), imported
    now; None where it has none."""
    fw = named(framework)
    return None if fw is None or fw.sparse is None else importlib.import_module(fw.sparse)


class Format:
    """Makes ``result(data)`` for one pattern, framework and output kind.

    ``kind``: "native" (the framework's sparse type), "numpy" (``scipy.sparse``), or
    "dense" (a dense array of the dense backend, shaped ``shape``)."""

    def __init__(self, kind: str, pattern: sp.csr_array, like: Any, shape: tuple, impl: Any):
        self.kind, self.shape, self.impl = kind, shape, impl
        m, n = pattern.shape
        self.mn = (m, n)
        indptr, indices = pattern.indptr.astype(np.int64), pattern.indices.astype(np.int64)
        self.np_indptr, self.np_indices = indptr, indices
        rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
        if kind == "native":
            native = framework_module(impl.traits.arrays)
            self.native = native.Format(rows, indices, indptr, (m, n), like)
        elif kind == "dense":
            self.flat = native_index(impl, rows * n + indices, like)

    def __call__(self, data: Any) -> Any:
        kind = self.kind
        if kind == "native":
            return self.native(data)
        if kind == "numpy":
            data = np.asarray(data)
            return sp.csr_array((data, self.np_indices, self.np_indptr), shape=self.mn)
        return self.impl.reshape(
            scatter(self.impl, data, self.flat, self.mn[0] * self.mn[1]), self.shape
        )


def native_index(impl: Any, idx: np.ndarray, like: Any) -> Any:
    """An int64 index array of the dense backend's framework (on like's device)."""
    module = framework_module(impl.traits.arrays)
    return idx if module is None else module.index(idx, like)


def take(impl: Any, a: Any, idx: Any) -> Any:
    """``a.ravel()[idx]`` in a's framework (differentiable where the framework is)."""
    return impl.reshape(a, (-1,))[idx]


def scatter(impl: Any, data: Any, flat: Any, total: int) -> Any:
    """A 1-d array of ``total`` zeros with ``data`` at ``flat``."""
    module = framework_module(impl.traits.arrays)
    if module is not None:
        return module.scatter(data, flat, total)
    out = np.zeros(total, dtype=np.asarray(data).dtype)
    out[flat] = data
    return out
