"""Sparsity patterns: the canonical boolean CSR form every sparse function takes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._arrays import registered
from .._errors import DiffifaceTypeError, DiffifaceValueError


def as_pattern(p) -> sp.csr_array:
    """The canonical boolean CSR pattern of ``p``.

    Args:
        p: a scipy.sparse matrix or array of any format, a torch sparse tensor (any
            layout), a ``jax.experimental.sparse`` array (BCOO, BCSR), or a 2-D array
            (NumPy, torch, JAX, or anything ``np.asarray`` takes) of bools or of 0/1
            numbers. Stored zeros are not part of the pattern.

    Returns:
        A ``scipy.sparse.csr_array`` of bools, sorted indices, no duplicates, no zeros.

    Raises:
        DiffifaceValueError: ``p`` is not 2-D or holds values other than 0/1 (NaN included).
        DiffifaceTypeError: ``p`` is not an array, or its dtype is not bool/int/float.
    """
    p = _as_scipy_or_numpy(p)
    if sp.issparse(p):
        if p.ndim != 2:
            raise DiffifaceValueError(
                f"a sparsity pattern is 2-D (outputs x inputs), got a {p.ndim}-D sparse array; "
                "reshape it to (f.size, x.size)."
            )
        if isinstance(p, sp.csr_array) and p.dtype == bool and p.has_canonical_format:
            if p.data.all():
                return p
        a = p.tocoo()  # duplicates kept: each stored value is checked
        data = _pattern_values(a.data, "sparse matrix")
        out = sp.coo_array((data, (a.row, a.col)), shape=a.shape).tocsr()  # True + True: True
        out.eliminate_zeros()
        out.sum_duplicates()
        return out
    if p is None or isinstance(p, (str, bytes, dict, set)):
        raise DiffifaceTypeError(
            f"a sparsity pattern is a scipy.sparse matrix or a 2-D bool array, got "
            f"{type(p).__name__}."
        )
    try:
        a = np.asarray(p)
    except (TypeError, ValueError) as e:  # a ragged list, say
        raise DiffifaceTypeError(f"a sparsity pattern is a 2-D array; np.asarray: {e}") from e
    if a.ndim != 2:
        raise DiffifaceValueError(
            f"a sparsity pattern is 2-D (outputs x inputs), got shape {a.shape}; reshape "
            "it to (f.size, x.size)."
        )
    return sp.csr_array(_pattern_values(a, "array"))


def given_pattern(p) -> sp.csr_array:
    """``as_pattern(p)`` for ``AutoSparse(backend, sparsity_detector=p)``: its errors
    name that call."""
    try:
        return as_pattern(p)
    except (DiffifaceTypeError, DiffifaceValueError) as exc:
        raise type(exc)(f"AutoSparse(backend, sparsity_detector=p): {exc}") from None


def symmetric(p: sp.csr_array) -> sp.csr_array:
    """A Hessian's pattern ``p`` with each nonzero's mirror: ``p | p.T``. A Hessian is
    symmetric, so a pattern that holds one side of a pair (one triangle, as IPOPT-style
    code stores it) means both; ``p`` itself where it is symmetric already."""
    mirror = p.T.tocsr()
    if (p != mirror).nnz == 0:
        return p
    out = (p + mirror).tocsr()  # (bools: True + True is True)
    out.sort_indices()
    return out


def _as_scipy_or_numpy(p):
    """A framework's array (sparse, or on a device) as a scipy.sparse COO array or a
    NumPy array, as its backend package reads it; anything else as it is."""
    for framework in registered():
        got = framework.as_pattern_input(p)
        if got is not None:
            return got
    return p


def _pattern_values(a: np.ndarray, what: str) -> np.ndarray:
    """``a != 0`` after checking that ``a`` holds bools or 0/1 numbers."""
    if a.dtype == bool:
        return a.copy()
    if a.dtype.kind not in "iuf":
        raise DiffifaceTypeError(
            f"a sparsity pattern holds bools or 0/1 numbers, got a {what} of dtype "
            f"{a.dtype}; pass `(M != 0)` for the pattern of a numeric matrix M."
        )
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise DiffifaceValueError(
            "a sparsity pattern can't hold NaN; pass `(M != 0)` (NaN counts as nonzero) "
            "for the pattern of a matrix M."
        )
    if not ((a == 0) | (a == 1)).all():
        raise DiffifaceValueError(
            f"a sparsity pattern holds bools or 0/1 numbers, this {what} holds other values; "
            "pass `(M != 0)` for the pattern of a numeric matrix M."
        )
    return a != 0
