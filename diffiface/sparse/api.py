"""The public sparse functions: ``sparsity_pattern`` and ``coloring`` (each imports
scipy and the detectors on first use, so ``import diffiface`` stays light)."""

from __future__ import annotations

from typing import Any

from .. import _checks
from .._backend_types import AutoSparse, SecondOrder
from .._errors import DiffifaceTypeError


def sparsity_pattern(f, backend: Any, x: Any, *contexts: Any, hessian: bool = False):
    """The sparsity pattern of f's Jacobian (or, with ``hessian=True``, of a scalar f's
    Hessian) at x, as a boolean ``scipy.sparse.csr_array``.

    Rows are f(x)'s elements and columns x's, both flattened in C order. ``backend``
    is a dense backend (global detection) or an :class:`AutoSparse` (its
    ``sparsity_detector``).

    Args:
        f: function ``f(x, *contexts)``.
        backend: a dense backend (global detection: ``AutoJax()``, ``AutoTorch()``,
            ``AutoAutograd()``, ``AutoFiniteDifferences()``, ``AutoMLX()``) or
            ``AutoSparse(...)``.
        x: one array.
        *contexts: ``di.Constant(c)`` arguments.
        hessian: the pattern of the Hessian of a scalar f.

    Examples:
        >>> import jax.numpy as jnp
        >>> import diffiface as di
        >>> p = di.sparsity_pattern(lambda x: x[1:] * x[:-1], di.AutoJax(), jnp.ones(4))
        >>> p.toarray().astype(int)
        array([[1, 1, 0, 0],
               [0, 1, 1, 0],
               [0, 0, 1, 1]])
    """
    from ..core import crossing, registry, shell
    from .detect import pattern

    sparse = backend if isinstance(backend, AutoSparse) else AutoSparse(backend)
    op = "hessian" if hessian else "jacobian"
    dense = sparse.backend
    impl = registry.implementation(dense.inner if isinstance(dense, SecondOrder) else dense)
    called = f"sparsity_pattern(f, {backend!r}, x)"
    if crossing.holds_other(f, impl.traits.arrays, x, None, contexts):
        raise DiffifaceTypeError(
            f"{called}: x and the contexts hold arrays of another framework, and a sparsity "
            "pattern does not cross frameworks: pass the backend's arrays or NumPy arrays "
            "(NumPy for finite differences)."
        )
    try:
        c = shell.enter_impl(op, f, sparse, impl, x, contexts, hessian)
        if not c.prob.single:
            raise DiffifaceTypeError(
                f"{called}: x must be one array, got a tree of {len(c.xs)} leaves. Flatten it "
                "into one array."
            )
        (xv,) = c.xs
        return pattern(sparse, impl, c.prob, xv, c.ctx)  # (f traced, not run, for its size)
    except _checks.ERRORS as exc:  # the checks name the operator the pattern is for
        _checks.restate(exc, called, _checks.call_form(op, sparse), _checks.call_form(op, dense))
        raise


def coloring(pattern: Any, kind: str = "column", order: str = "largest_first"):
    """The colors of a sparsity pattern's greedy coloring, one per compressed pass.

    Args:
        pattern: a ``scipy.sparse`` matrix or a 2-D boolean array.
        kind: "column" (structurally orthogonal columns share a color: J times the
            seeds), "row" (rows: the seeds times J), "star" (a symmetric Hessian: every
            nonzero read directly from H times the seeds), "acyclic" (a symmetric
            Hessian, fewer colors, read by substitution) or "bidirectional" (rows and
            columns together: forward and reverse passes).
        order: "largest_first", "natural", "random", "smallest_last",
            "incidence_degree", "dynamic_largest_first", a permutation of the
            vertices, or several ("best", or a tuple of them): the fewest colors kept.

    Returns:
        An int array of colors 0..k-1, one per column (row for "row"); for
        "bidirectional" the pair (column colors, row colors), -1 in no pass.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> tridiagonal = np.eye(5, dtype=bool) | np.eye(5, k=1, dtype=bool) | np.eye(5, k=-1, dtype=bool)
        >>> int(di.coloring(tridiagonal).max()) + 1, int(di.coloring(tridiagonal, "star").max()) + 1
        (3, 3)
    """  # noqa: E501
    from . import coloring as col

    return col.coloring(pattern, kind, order)
