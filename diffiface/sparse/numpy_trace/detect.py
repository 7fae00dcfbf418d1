"""Global Jacobian and Hessian patterns of functions on NumPy arrays, by tracing them
with index sets instead of values."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..._errors import DiffifaceTypeError, DiffifaceValueError
from . import functions as functions  # (registers NumPy's functions)
from . import sets as S
from . import ufuncs as ufuncs  # (registers the ufuncs)
from .tracer import Trace, Traced

__all__ = ["as_input", "hessian_pattern", "jacobian_pattern"]


def as_input(x):
    """x as the detector reads it: its shape and dtype only (an autograd box, a NumPy
    array or a number)."""
    return x


def jacobian_pattern(fn, x) -> sp.csr_array:
    """Global sparsity pattern of the Jacobian of ``fn``, a function on NumPy arrays.

    ``fn`` runs once on a traced array: each element carries the set of inputs it may
    depend on, through NumPy's ufuncs and functions (``__array_ufunc__``,
    ``__array_function__``), ``autograd.numpy`` and the ``array_api_compat.numpy``
    namespace. No value of x is computed.

    Args:
        fn: a function of one array, returning one array (or a number).
        x: the input; only its shape and dtype matter.

    Returns:
        A canonical bool ``csr_array`` of shape (y.size, x.size), rows the flattened
        outputs and columns the flattened inputs (C order): (i, j) is True when output
        i may depend on input j for some x.

    Raises:
        DiffifaceValueError: ``fn`` needs x's values (``if x[0] > 0``, ``float(x)``,
            ``np.asarray(x)``); the message names the fix.

    Warns:
        SparsityWarning: for a function the detector has no rule for, whose outputs are
            taken to depend on all of its inputs.

    Examples:
        >>> import numpy as np
        >>> p = jacobian_pattern(lambda x: x[1:] * np.sin(x[:-1]), np.zeros(4))
        >>> p.toarray().astype(int)
        array([[1, 1, 0, 0],
               [0, 1, 1, 0],
               [0, 0, 1, 1]])
    """
    y, n = _run(fn, x, second=False)
    g = y.g
    return _csr(g.indptr, g.idx, (len(g), n))


def hessian_pattern(fn, x) -> sp.csr_array:
    """Global sparsity pattern of the Hessian of a scalar ``fn`` on NumPy arrays.

    Each element also carries the pairs of inputs it may have a nonzero second
    derivative in, each operation classified as SparseConnectivityTracer.jl does:
    linear or not in each argument, with a zero cross derivative or not.

    Args:
        fn: a scalar function of one array.
        x: the input; only its shape and dtype matter.

    Returns:
        A canonical, symmetric bool ``csr_array`` of shape (x.size, x.size).

    Examples:
        >>> import numpy as np
        >>> p = hessian_pattern(lambda x: np.sum(x[1:] * x[:-1]) + x[0] ** 3, np.zeros(3))
        >>> p.toarray().astype(int)
        array([[1, 1, 0],
               [1, 0, 1],
               [0, 1, 0]])
    """
    y, n = _run(fn, x, second=True)
    if y.size != 1:
        raise DiffifaceTypeError(
            f"sparsity detection: a Hessian pattern is of a scalar f, and f returned shape "
            f"{y.shape}. Reduce it (np.sum), or ask for the Jacobian pattern."
        )
    keys = y.h.idx
    i, j = keys // n, keys % n
    rows, cols = np.concatenate([i, j]), np.concatenate([j, i])
    p = S.from_pairs(rows, cols, n)
    return _csr(p.indptr, p.idx, (n, n))


def _run(fn, x, second: bool) -> tuple:
    shape, dtype = tuple(np.shape(x)), np.result_type(getattr(x, "dtype", np.float64))
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.dtype(np.float64)
    n = math.prod(shape)
    trace = Trace(n, second)
    xt = Traced(trace, shape, dtype, S.identity(n), S.empty(n) if second else None)
    try:
        y = fn(xt)
    except (TypeError, ValueError) as exc:  # NumPy's own error over the detector's
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, DiffifaceValueError) and not isinstance(exc, DiffifaceValueError):
            raise cause from None
        raise
    if not isinstance(y, Traced):  # a constant (or a number): it depends on nothing
        y = Traced(trace, np.shape(y), np.float64)
    return y, n


def _csr(indptr, idx, shape) -> sp.csr_array:
    small = max(len(idx), *shape) < 2**31
    itype = np.int32 if small else np.int64
    return sp.csr_array(
        (np.ones(len(idx), bool), idx.astype(itype), indptr.astype(itype)), shape=shape
    )
