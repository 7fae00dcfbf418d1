"""Star bicoloring: rows and columns of a Jacobian colored together, for forward and
reverse products at once (SparseMatrixColorings.jl's ``partition=:bidirectional`` with
direct decompression, ``StarBicoloring``; DifferentiationInterface.jl's ``MixedMode``).

A star coloring of the bipartite graph ``[[0, J.T], [J, 0]]`` (columns, then rows) reads
every ``J[i, j]`` either from the forward product of column color ``c_j`` (``B_f = J @
S_c``, at ``B_f[i, c_j]``) or from the reverse product of row color ``r_i`` (``B_r =
S_r.T @ J``, at ``B_r[r_i, j]``): a matrix with a few dense rows and dense columns (an
arrow) takes a few of each, where a column or row coloring takes n. Then only the colors
that some entry is read from are kept (a greedy cover); the others become -1, a vertex in
no seed. After Coleman & Verma, "The efficient computation of sparse Jacobian matrices
using automatic differentiation" (SIAM J. Sci. Comput. 19, 1998) and Gebremedhin, Manne &
Pothen (2005), Section 7.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from diffiface._errors import DiffifaceValueError
from diffiface.sparse.patterns import as_pattern

from ._graphs import check_colors, ncolors, rows_of
from .greedy import column_coloring, row_coloring, star_coloring
from .orders import orders_of


def _bipartite(p: sp.csr_array) -> sp.csr_array:
    """``[[0, p.T], [p, 0]]``: vertices 0..n-1 the columns, n..n+m-1 the rows."""
    m, n = p.shape
    return sp.csr_array(sp.block_array([[None, p.T], [p, None]], format="csr"), shape=(n + m,) * 2)


def _readable(p: sp.csr_array, cc: np.ndarray, rc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each stored (i, j): whether ``J[i, j]`` is alone of its column's color in row i
    (read forward), and alone of its row's color in column j (read in reverse). A color
    of -1 reads nothing."""
    i, j = rows_of(p), p.indices.astype(np.int64)
    out = []
    for a, b, c in ((i, j, cc), (j, i, rc)):  # (where it sums, what it sums, whose color)
        k = ncolors(c) + 1
        keys = a * k + c[b] + 1
        u, counts = np.unique(keys, return_counts=True)
        out.append((counts[np.searchsorted(u, keys)] == 1) & (c[b] >= 0))
    return out[0], out[1]


def _cover(p: sp.csr_array, cc: np.ndarray, rc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the fewest colors (greedily) that every entry can still be read from."""
    fwd, rev = _readable(p, cc, rc)
    i, j = rows_of(p), p.indices.astype(np.int64)
    k = max(ncolors(cc), ncolors(rc))
    keep_c, keep_r = np.zeros(k, bool), np.zeros(k, bool)
    keep_c[cc[j[fwd & ~rev]]] = True  # entries with one way only
    keep_r[rc[i[rev & ~fwd]]] = True
    while True:
        left = ~((fwd & keep_c[cc[j]]) | (rev & keep_r[rc[i]]))
        if not left.any():
            break
        by_c = np.bincount(cc[j[left & fwd]], minlength=k)
        by_r = np.bincount(rc[i[left & rev]], minlength=k)
        if by_c.max() >= by_r.max():
            keep_c[by_c.argmax()] = True
        else:
            keep_r[by_r.argmax()] = True
    return _renumber(cc, keep_c), _renumber(rc, keep_r)


def _renumber(c: np.ndarray, keep: np.ndarray) -> np.ndarray:
    new = np.cumsum(keep) - 1
    return np.where(keep[c], new[c], -1) if c.size else c


def bicoloring(pattern, order="largest_first") -> tuple[np.ndarray, np.ndarray]:
    """Colors of the columns and of the rows of a Jacobian pattern, together.

    Args:
        pattern: the (m, n) Jacobian pattern (see :func:`as_pattern`).
        order: the greedy vertex order of the star coloring of the bipartite graph (see
            :func:`column_coloring`), over columns then rows.

    Returns:
        ``(column_colors, row_colors)``: (n,) and (m,) int64, each 0..k-1 or -1 (in no
        seed). ``max(column_colors) + 1`` forward and ``max(row_colors) + 1`` reverse
        products read every nonzero (see :func:`bicolor_gather`).

    Examples:
        >>> import numpy as np
        >>> from diffiface.sparse.coloring import bicoloring, check_coloring
        >>> arrow = np.eye(6, dtype=bool)
        >>> arrow[0] = arrow[:, 0] = True  # a dense row and a dense column
        >>> columns, rows = bicoloring(arrow, "best")
        >>> int(columns.max()) + 1, int(rows.max()) + 1  # products: not 6 of either kind
        (2, 2)
        >>> check_coloring(arrow, (columns, rows), "bidirectional")
        True
    """
    p = as_pattern(pattern)
    n = p.shape[1]
    graph, best = _bipartite(p), None
    for o in orders_of(order):  # the fewest products after the cover
        colors = star_coloring(graph, o)
        cc, rc = _cover(p, colors[:n], colors[n:])
        if best is None or ncolors(cc) + ncolors(rc) < sum(map(ncolors, best)):
            best = cc, rc
    names = all(isinstance(o, str) for o in orders_of(order))  # not a permutation
    return _one_side(p, best, order) if names else best


def _one_side(p: sp.csr_array, best: tuple, order) -> tuple[np.ndarray, np.ndarray]:
    """``best``, or a column (row) coloring alone where it takes fewer products: either
    is a bicoloring too (no row, or no column, in a seed). One is tried only where it
    can win: it takes at least the most nonzeros of a row (a column), and a dense row
    would make its graph n x n."""
    m, n = p.shape
    total = sum(map(ncolors, best))
    if p.nnz and np.diff(p.indptr).max() < total:
        cc = column_coloring(p, order)
        if ncolors(cc) < total:
            best, total = (cc, np.full(m, -1, dtype=np.int64)), ncolors(cc)
    if p.nnz and np.bincount(p.indices, minlength=n).max() < total:
        rc = row_coloring(p, order)
        if ncolors(rc) < total:
            best = np.full(n, -1, dtype=np.int64), rc
    return best


def bicolor_gather(pattern, column_colors, row_colors) -> np.ndarray:
    """Flat indices into ``concat(B_f.ravel(), B_r.ravel())`` of J's nonzeros in CSR order,
    where ``B_f = (J @ seeds(column_colors).T).T`` is (kc, m) (one forward product per
    row) and ``B_r = seeds(row_colors) @ J`` is (kr, n).

    Raises:
        DiffifaceValueError: some ``J[i, j]`` can be read from neither product: the
            colors are not a bicoloring of the pattern.
    """
    p = as_pattern(pattern)
    m, n = p.shape
    cc = check_colors(column_colors, n, neutral=True)
    rc = check_colors(row_colors, m, neutral=True)
    fwd, rev = _readable(p, cc, rc)
    i, j = rows_of(p), p.indices.astype(np.int64)
    bad = np.flatnonzero(~(fwd | rev))
    if bad.size:
        r, s = int(i[bad[0]]), int(j[bad[0]])
        raise DiffifaceValueError(
            f"the colors are not a bicoloring of this pattern: J[{r}, {s}] is alone in "
            "neither its forward nor its reverse product; color it with bicoloring."
        )
    return np.where(fwd, cc[j] * m + i, ncolors(cc) * m + rc[i] * n + j)


def check_bicoloring(p: sp.csr_array, colors) -> bool:
    """Whether ``(column_colors, row_colors)`` reads every nonzero of ``p``."""
    cc, rc = colors
    m, n = p.shape
    fwd, rev = _readable(p, check_colors(cc, n, True), check_colors(rc, m, True))
    return bool((fwd | rev).all())
