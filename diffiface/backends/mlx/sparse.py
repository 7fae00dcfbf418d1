"""MLX's side of AutoSparse (imported on use; imports mlx): the global sparsity
detector, the index arrays of a sparse plan as MLX arrays, and its results.

MLX has no sparse array type, so a sparse Jacobian or Hessian of an MLX x comes as a
``scipy.sparse.csr_array`` (its values copied out of MLX's memory, as for a NumPy x);
``AutoSparse(AutoMLX(), dense=True)`` gives a dense ``mx.array``, differentiable by an
outer MLX pass.

MLX exposes no program that f traces to (no jaxpr, no FX graph): the global detector
runs f on NumPy's traced array (``diffiface.sparse.numpy_trace``), which an f written
with the Array API (``xp = array_namespace(x)``) takes as it takes an ``mx.array``.
An f that calls ``mx.*`` on x, or mixes x with an ``mx.array`` it closes over, gets
MLX's refusal of the traced array, turned into a clear error (never a pattern); MLX
contexts reach f as NumPy arrays of their values.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import scipy.sparse as sp

from ... import _checks, _tree
from ..._errors import DiffifaceTypeError, DiffifaceValueError
from ...sparse import numpy_trace
from .arrays import FRAMEWORK
from .runners import DTYPES

# the detector traces f on NumPy's traced array: sparse/detect.py calls f itself (not
# through the problem's MLX output checks) and gives it NumPy contexts (``as_contexts``)
TRACES_NUMPY = True
_USE = (
    "Write f with the Array API (xp = array_namespace(x), xp.sin(x); a constant as "
    "xp.asarray(c) or di.Constant(c)), or use AutoSparse(AutoMLX(), "
    "sparsity_detector='local') (the nonzeros at x and two nearby points) or pass the "
    "pattern itself"
)


def jacobian_pattern(fn, x: Any) -> sp.csr_array:
    """The global Jacobian pattern of ``fn``, an Array API function of an MLX x."""
    return numpy_trace.jacobian_pattern(_on_numpy(fn), _like(x))


def hessian_pattern(fn, x: Any) -> sp.csr_array:
    """The global Hessian pattern of a scalar ``fn``, an Array API function of an MLX x."""
    return numpy_trace.hessian_pattern(_on_numpy(fn), _like(x))


def as_contexts(ctx: tuple) -> tuple:
    """The contexts as f gets them while traced: each MLX array a NumPy array of its
    values (MLX's functions refuse the traced x, NumPy's take both)."""
    return tuple(_tree.tree_map(_numpy_leaf, c) for c in ctx)


def _numpy_leaf(leaf: Any) -> Any:
    if not isinstance(leaf, mx.array):
        return leaf
    values = FRAMEWORK.values(leaf)
    if values is None:
        raise DiffifaceValueError(
            "sparsity detection: a context is an mx.array traced by an outer MLX transform "
            "(mx.compile, mx.vmap), whose values the detector needs. Prepare outside the "
            "transform, or pass the pattern."
        )
    return values


def _like(x: Any) -> np.ndarray:
    """An array of x's shape and dtype (as NumPy names it), holding no memory."""
    dtype = next((k for k, v in DTYPES.items() if v == x.dtype), np.dtype(np.float32))
    return np.broadcast_to(np.zeros((), dtype), tuple(x.shape))


def _on_numpy(fn):
    """``fn`` on the traced array, MLX's refusal of it (an ``mx.*`` call on x, an
    ``mx.array`` combined with it) and an ``mx.array`` out clear errors."""

    def run(t: Any) -> Any:
        try:
            y = fn(t)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, DiffifaceTypeError | DiffifaceValueError) or not _says_mlx(exc):
                raise
            if _checks.foreign_framework(exc) not in (None, "mlx"):
                raise  # a JAX or torch f: the error that names its backend
            raise DiffifaceTypeError(
                "sparsity detection: f calls mlx.core functions on x or combines x with an "
                "mx.array, and the global detector traces f on NumPy's traced array "
                f"({str(exc).splitlines()[0]}). {_USE}."
            ) from exc
        if isinstance(y, mx.array):
            raise DiffifaceTypeError(
                "sparsity detection: f returned an mx.array made without x (f calls mlx.core "
                f"functions), and the global detector traces f on NumPy's traced array. {_USE}."
            )
        return y

    return run


def _says_mlx(exc: BaseException) -> bool:
    """MLX refused the traced array (its messages name mlx.core, its nanobind signatures
    MLX's streams), or NumPy found an mx.array (type ``array``) beside it."""
    msg = str(exc)
    return (
        "mlx" in msg
        or "tracer.Traced" in msg  # ("Invalid type ...Traced received in array initialization")
        or FRAMEWORK.says_foreign_arrays(msg)
        or "'array'" in msg
    )


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
