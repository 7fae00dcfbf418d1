"""Graph colorings of sparse Jacobians and Hessians, and their exact decompression.

``coloring(pattern, kind, order)`` is the front door; :mod:`.greedy` holds the column,
row and star colorings, :mod:`.bicoloring` the bidirectional one, :mod:`.orders` the
vertex orders and :mod:`.decompress` the gathers that read each nonzero from the
compressed products. After SparseMatrixColorings.jl (Dalle & Montoison, 2025) and
ColPack (Gebremedhin, Nguyen, Patwary & Pothen, 2013).

A pattern is a ``scipy.sparse.csr_array`` of bools in canonical form (sorted indices, no
duplicates); :func:`as_pattern` makes one from any scipy.sparse matrix or a 2-D array.
"""

from __future__ import annotations

import numpy as np

from diffiface.sparse.patterns import as_pattern

from .acyclic import Substitution, acyclic_coloring
from .bicoloring import bicolor_gather, bicoloring
from .decompress import (
    KINDS,
    check_coloring,
    check_kind,
    column_gather,
    row_gather,
    seeds,
    star_gather,
)
from .greedy import column_coloring, row_coloring, star_coloring
from .orders import BEST, ORDERS

__all__ = [
    "BEST",
    "KINDS",
    "Substitution",
    "acyclic_coloring",
    "ORDERS",
    "as_pattern",
    "bicolor_gather",
    "bicoloring",
    "check_coloring",
    "coloring",
    "column_coloring",
    "column_gather",
    "row_coloring",
    "row_gather",
    "seeds",
    "star_coloring",
    "star_gather",
]


def coloring(
    pattern, kind="column", order="largest_first"
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """A greedy coloring of a sparsity pattern, for compressed derivative passes.

    Args:
        pattern: a scipy.sparse matrix (any format) or a 2-D bool or 0/1 array.
        kind: ``"column"`` (Jacobian, ``B = J @ S``: one forward pass per color),
            ``"row"`` (Jacobian, ``B = S.T @ J``: one reverse pass per color),
            ``"star"`` (symmetric Hessian, ``B = H @ S``), ``"acyclic"`` (symmetric
            Hessian, fewer colors: see :class:`Substitution`) or ``"bidirectional"``
            (Jacobian, forward and reverse passes together: see :func:`bicoloring`).
        order: the greedy vertex order: ``"largest_first"`` (descending degree),
            ``"natural"``, ``"random"``, ``"smallest_last"``, ``"incidence_degree"``,
            ``"dynamic_largest_first"`` (see :mod:`.orders`), or a permutation of the
            vertices; or several, each tried and the fewest colors kept: a tuple of
            them, or ``"best"`` (all of them).

    Returns:
        int64 colors 0..k-1, one per column (column, star, acyclic) or row (row); for
        bidirectional the pair ``(column_colors, row_colors)``, -1 in no seed.

    Raises:
        DiffifaceTypeError: a pattern or argument of the wrong type.
        DiffifaceValueError: a pattern that is not 2-D or not 0/1, an unknown kind or order,
            a non-square pattern for ``"star"``.

    Examples:
        >>> import numpy as np
        >>> from diffiface.sparse.coloring import coloring, column_gather, seeds
        >>> J = np.array([[1.0, 2, 0, 0], [0, 3, 4, 0], [0, 0, 5, 6], [0, 0, 0, 7]])
        >>> colors = coloring(J != 0)  # columns sharing no row may share a color
        >>> colors
        array([1, 0, 1, 0])
        >>> B = J @ seeds(colors).T  # 2 forward passes instead of 4
        >>> B.ravel()[column_gather(J != 0, colors)]  # J's nonzeros, in CSR order
        array([1., 2., 3., 4., 5., 6., 7.])

        A Hessian with a dense first row and column and a diagonal (an arrow) takes
        2 colors by symmetry, where its columns would take 5:

        >>> H = np.eye(5, dtype=bool)
        >>> H[0] = H[:, 0] = True
        >>> coloring(H, "star"), coloring(H, "column")
        (array([0, 1, 1, 1, 1]), array([0, 1, 2, 3, 4]))
    """
    kind = check_kind(kind)
    p = as_pattern(pattern)
    if kind == "column":
        return column_coloring(p, order)
    if kind == "row":
        return row_coloring(p, order)
    if kind == "bidirectional":
        return bicoloring(p, order)
    if kind == "acyclic":
        return acyclic_coloring(p, order)
    return star_coloring(p, order)
