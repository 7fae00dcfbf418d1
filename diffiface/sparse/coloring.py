"""Graph colorings of sparse Jacobians and Hessians, and their exact decompression.

Columns of a Jacobian J that share no row (structurally orthogonal columns) can be
evaluated in one forward pass: with seeds S (``S[j, colors[j]] = 1``) the compressed
``B = J @ S`` holds every nonzero of J as a single product, and a gather of flat indices
into B returns J's CSR data. Rows work the same way in reverse mode (``B = S.T @ J``). A
symmetric H admits fewer colors: a star coloring lets every ``H[i, j]`` be read from
``B = H @ S`` at ``B[i, colors[j]]`` or, by symmetry, ``B[j, colors[i]]``.

After SparseMatrixColorings.jl and Gebremedhin, Manne & Pothen, "What color is your
Jacobian? Graph coloring for computing derivatives" (SIAM Review 47, 2005); the star
coloring is Algorithm 4.1 of Gebremedhin, Tarafdar, Manne & Pothen, "New acyclic and
star coloring algorithms with application to computing Hessians" (SIAM J. Sci. Comput.
29, 2007). NumPy and scipy only: the greedy loops run over vertices in Python, each step
on NumPy slices of CSR arrays.

A pattern is a ``scipy.sparse.csr_array`` of bools in canonical form (sorted indices, no
duplicates); :func:`as_pattern` makes one from any scipy.sparse matrix or a 2-D array.
"""

from __future__ import annotations

import heapq

import numpy as np
import scipy.sparse as sp

from diffiface._errors import DiffifaceTypeError, DiffifaceValueError
from diffiface.sparse.patterns import as_pattern

__all__ = [
    "KINDS",
    "ORDERS",
    "as_pattern",
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

ORDERS = ("largest_first", "natural", "smallest_last")
KINDS = ("column", "row", "star")


# Arguments


def _check_colors(colors, n: int | None = None) -> np.ndarray:
    """``colors`` as an int64 vector of nonnegative colors (of length ``n`` if given)."""
    c = np.asarray(colors)
    if c.ndim != 1 or (c.size and c.dtype.kind not in "iu"):
        raise DiffifaceTypeError(
            f"colors is a 1-D integer array (one color per vertex), got dtype {c.dtype} and "
            f"shape {c.shape}."
        )
    if n is not None and c.shape[0] != n:
        raise DiffifaceValueError(
            f"colors has {c.shape[0]} entries but the pattern has {n} vertices of this kind; "
            "color the same pattern with the same kind."
        )
    if c.size and c.min() < 0:
        raise DiffifaceValueError("colors are nonnegative integers (0, 1, ..., k - 1).")
    return c.astype(np.int64, copy=False)


def _ncolors(colors: np.ndarray) -> int:
    return int(colors.max()) + 1 if colors.size else 0


def _square(p: sp.csr_array) -> None:
    if p.shape[0] != p.shape[1]:
        raise DiffifaceValueError(
            f"star coloring is for a square symmetric (Hessian) pattern, got shape {p.shape}; "
            "color a Jacobian with kind='column' or kind='row'."
        )


# Graphs: (indptr, indices) of an undirected graph, sorted neighbors, no self-loops


def _without_diagonal(g: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    g = sp.csr_array(g)
    g.sum_duplicates()
    n = g.shape[0]
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    keep = g.indices != rows
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=indptr[1:])
    return indptr, g.indices[keep].astype(np.int64)


def _column_graph(p: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """The column intersection graph: columns j, j' adjacent iff they share a row."""
    return _without_diagonal(p.T.tocsr() @ p)


def _adjacency_graph(p: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """The graph of the symmetric pattern ``p | p.T`` (the diagonal dropped)."""
    return _without_diagonal(p + p.T.tocsr())


def _closed(p: sp.csr_array) -> sp.csr_array:
    """``p | p.T | I``: the symmetric pattern with its diagonal (for H = H.T)."""
    q = sp.csr_array(p + p.T.tocsr() + sp.eye_array(p.shape[0], dtype=bool, format="csr"))
    q.sum_duplicates()
    return q


def _rows(p: sp.csr_array) -> np.ndarray:
    """The row index of each stored entry, in CSR order."""
    return np.repeat(np.arange(p.shape[0], dtype=np.int64), np.diff(p.indptr))


def _ranges(indptr: np.ndarray, verts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the neighbors of ``verts`` in ``indices``, and which vertex each is of."""
    start = indptr[verts]
    lens = indptr[verts + 1] - start
    seg = np.repeat(np.arange(len(verts)), lens)
    pos = np.arange(len(seg)) + np.repeat(start - (np.cumsum(lens) - lens), lens)
    return pos, seg


# Orders


def _order(order, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The vertex order: a name from ORDERS or an explicit permutation."""
    n = len(indptr) - 1
    if isinstance(order, str):
        if order == "natural":
            return np.arange(n)
        if order == "largest_first":  # descending degree, ties by index
            return np.argsort(-np.diff(indptr), kind="stable")
        if order == "smallest_last":
            return _smallest_last(indptr, indices)
        raise DiffifaceValueError(
            f"unknown order {order!r}: use one of {ORDERS} or a permutation of the vertices."
        )
    perm = np.asarray(order)
    if perm.ndim != 1 or (perm.size and perm.dtype.kind not in "iu"):
        raise DiffifaceTypeError(
            f"order is one of {ORDERS} or a 1-D integer permutation of the vertices, got "
            f"{type(order).__name__}."
        )
    if perm.shape[0] != n or not np.array_equal(np.sort(perm), np.arange(n)):
        raise DiffifaceValueError(
            f"an explicit order is a permutation of the {n} vertices (each of 0..{n - 1} once)."
        )
    return perm.astype(np.int64)


def _smallest_last(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Matula & Beck: remove a vertex of least remaining degree, repeatedly; color in reverse."""
    n = len(indptr) - 1
    deg = np.diff(indptr)
    heap = list(zip(deg.tolist(), range(n), strict=True))
    heapq.heapify(heap)
    gone = np.zeros(n, dtype=bool)
    out = np.empty(n, dtype=np.int64)
    ip = indptr.tolist()
    i = n
    while heap:
        d, v = heapq.heappop(heap)
        if gone[v] or d != deg[v]:  # a stale entry
            continue
        gone[v] = True
        i -= 1
        out[i] = v
        nb = indices[ip[v] : ip[v + 1]]
        nb = nb[~gone[nb]]
        deg[nb] -= 1
        for item in zip(deg[nb].tolist(), nb.tolist(), strict=True):
            heapq.heappush(heap, item)
    return out


# Greedy colorings


def _greedy(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Distance-1 greedy coloring: each vertex takes the smallest color of no neighbor."""
    n = len(indptr) - 1
    colors = np.full(n, -1, dtype=np.int64)
    # mark[c] == v: color c is taken around v. Uncolored neighbors (-1) hit mark[n],
    # never read: at most n - 1 colors exist while a vertex is still uncolored.
    mark = np.full(n + 1, -1, dtype=np.int64)
    ip = indptr.tolist()
    k = 0
    for v in order.tolist():
        mark[colors[indices[ip[v] : ip[v + 1]]]] = v
        c = int((mark[: k + 1] != v).argmax())
        colors[v] = c
        if c == k:
            k += 1
    return colors


def _later(cw: np.ndarray, rep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Among the entries ``rep`` (their colors ``cw`` repeated): those after the first of
    their color, and the first one of each."""
    idx = np.flatnonzero(rep)
    o = idx[np.argsort(cw[idx], kind="stable")]
    s = cw[o]
    new = np.append(True, s[1:] != s[:-1])
    first = o[np.maximum.accumulate(np.where(new, np.arange(len(o)), 0))]
    return o[~new], first[~new]


def _two_hop(indptr, indices, eid, verts):
    """The neighbors x of the neighbors w of each of ``verts``, grouped by vertex: x, the
    edge id of w-x, the index of w in N(v), and the offsets of each vertex's group."""
    p1, s1 = _ranges(indptr, verts)
    via = p1 - indptr[verts][s1]
    p2, s2 = _ranges(indptr, indices[p1])
    cum = np.zeros(len(p1) + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr)[indices[p1]], out=cum[1:])
    first = np.zeros(len(verts) + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr)[verts], out=first[1:])
    return indices[p2], eid[p2], via[s2], cum[first].tolist()


def _star(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Greedy star coloring, Algorithm 4.1 of Gebremedhin, Tarafdar, Manne & Pothen (2007).

    The 2-colored stars (subgraphs on two colors) are kept as ``star[edge]`` (a star's id is
    the id of its first edge) and ``hub[star]`` (-1 while a star is one edge). Coloring v
    must avoid the colors of its colored neighbors w and any 2-colored path on 4 vertices:
    v-w-x-y (x the hub of the star of edge w-x: forbid color(x)) and w-v-w' (two neighbors
    of one color: forbid the colors of all their neighbors). Then each edge v-w joins a
    star: that of w-x if x has v's color (w becomes its hub), that of v-w' if w' is an
    earlier neighbor of w's color (v becomes its hub), or a new one. The loop over v's
    neighbors is vectorized (two hops at a time, precomputed for chunks of the order); the
    result is that of the sequential algorithm (and of SparseMatrixColorings.jl).
    """
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    # Edge ids: an undirected edge has one id, found from both of its CSR positions.
    mirror = np.searchsorted(rows * n + indices, indices * n + rows)
    upper = rows < indices
    rank = np.cumsum(upper) - 1
    eid = np.where(upper, rank, rank[mirror])
    nedges = len(indices) // 2

    colors = np.full(n, -1, dtype=np.int64)
    mark = np.full(n + 1, -1, dtype=np.int64)  # as in _greedy
    star = np.full(nedges, -1, dtype=np.int64)
    hub = np.full(nedges + 1, -1, dtype=np.int64)  # hub[-1]: the star of no edge
    ip = indptr.tolist()
    k = 0
    # Chunks of the order whose two-hop neighborhoods hold about 2**20 entries in all.
    hops = np.bincount(rows, weights=np.diff(indptr)[indices], minlength=n)
    cum = np.zeros(n + 1)
    np.cumsum(hops[order] + 1, out=cum[1:])
    start = 0
    while start < n:
        stop = max(start + 1, int(np.searchsorted(cum, cum[start] + 2**20, "right")) - 1)
        chunk = order[start:stop]
        x2, e2, via2, off = _two_hop(indptr, indices, eid, chunk)
        for t, v in enumerate(chunk.tolist()):
            a, b, o, z = ip[v], ip[v + 1], off[t], off[t + 1]
            w, x = indices[a:b], x2[o:z]
            cw = colors[w]  # -1: uncolored
            cx = colors[x]  # v among them, uncolored
            sx = star[e2[o:z]]  # -1 unless w and x are both colored
            mark[cw] = v
            mark[cx[hub[sx] == x]] = v
            count = np.bincount(cw + 1, minlength=1)
            count[0] = 0
            rep = None
            if count[count.argmax()] > 1:  # two neighbors of one color
                rep = count[cw + 1] > 1
                mark[cx[rep[via2[o:z]]]] = v
            c = int((mark[: k + 1] != v).argmax())
            colors[v] = c
            if c == k:
                k += 1

            ew = eid[a:b]
            new = ew[cw >= 0]
            star[new] = new
            # All x around a colored w of color c share one star (hub w): any will do.
            hit = ((cx == c) & (sx >= 0)).nonzero()[0]
            if hit.size:
                s = sx[hit]
                wi = via2[o:z][hit]
                hub[s] = w[wi]
                star[ew[wi]] = s
            if rep is not None:
                later, first = _later(cw, rep)
                s = star[ew[first]]
                hub[s] = v
                star[ew[later]] = s
        start = stop
    return colors


def column_coloring(pattern, order="largest_first") -> np.ndarray:
    """Partial distance-2 coloring of the columns: two columns sharing a row differ.

    Args:
        pattern: the (m, n) Jacobian pattern (see :func:`as_pattern`).
        order: the greedy vertex order, one of ``ORDERS`` or a permutation of the columns;
            ``largest_first`` is by descending degree in the column intersection graph.

    Returns:
        (n,) int64 colors 0..k-1; ``B = J @ seeds(colors).T`` is (m, k).

    The graph ``P.T @ P`` is built whole: a pattern with a dense row of n entries makes
    it n x n dense (and takes n colors anyway).
    """
    return _distance2(as_pattern(pattern), order)


def row_coloring(pattern, order="largest_first") -> np.ndarray:
    """Partial distance-2 coloring of the rows: two rows sharing a column differ.

    Args:
        pattern: the (m, n) Jacobian pattern (see :func:`as_pattern`).
        order: the greedy vertex order (see :func:`column_coloring`), over the rows.

    Returns:
        (m,) int64 colors 0..k-1; ``B = seeds(colors) @ J`` is (k, n).
    """
    return _distance2(as_pattern(pattern).T.tocsr(), order)


def _distance2(p: sp.csr_array, order) -> np.ndarray:
    indptr, indices = _column_graph(p)
    return _greedy(indptr, indices, _order(order, indptr, indices))


def star_coloring(pattern, order="largest_first") -> np.ndarray:
    """Star coloring of a symmetric (Hessian) pattern.

    A distance-1 coloring in which every path on 4 vertices takes at least 3 colors: then
    each ``H[i, j]`` is ``B[i, colors[j]]`` or ``B[j, colors[i]]`` of ``B = H @ S``
    (direct decompression, see :func:`star_gather`). The pattern is symmetrized
    (``p | p.T``) and its diagonal counts as present.

    Args:
        pattern: the (n, n) pattern (see :func:`as_pattern`).
        order: the greedy vertex order (see :func:`column_coloring`), by degree in the
            adjacency graph.

    Returns:
        (n,) int64 colors 0..k-1; ``B = H @ seeds(colors).T`` is (n, k).
    """
    p = as_pattern(pattern)
    _square(p)
    indptr, indices = _adjacency_graph(p)
    return _star(indptr, indices, _order(order, indptr, indices))


# Decompression


def column_gather(pattern, colors) -> np.ndarray:
    """Flat indices into ``B.ravel()`` (``B = J @ S``, (m, k)) of J's nonzeros in CSR order.

    Args:
        pattern: the (m, n) pattern.
        colors: a column coloring of it.

    Returns:
        (nnz,) int64 ``idx``: ``B.ravel()[idx]`` is J's data in the pattern's CSR order.
    """
    p = as_pattern(pattern)
    c = _check_colors(colors, p.shape[1])
    return _rows(p) * _ncolors(c) + c[p.indices]


def row_gather(pattern, colors) -> np.ndarray:
    """Flat indices into ``B.ravel()`` (``B = S.T @ J``, (k, n)) of J's nonzeros in CSR order.

    Args:
        pattern: the (m, n) pattern.
        colors: a row coloring of it.

    Returns:
        (nnz,) int64 ``idx``: ``B.ravel()[idx]`` is J's data in the pattern's CSR order.
    """
    p = as_pattern(pattern)
    c = _check_colors(colors, p.shape[0])
    return c[_rows(p)] * p.shape[1] + p.indices


def _star_readable(p: sp.csr_array, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each stored (i, j) of ``p``: whether ``B[i, c[j]]``, and whether ``B[j, c[i]]``,
    of ``B = H @ S`` is ``H[i, j]`` alone, i.e. whether ``c[j]`` is unique among the colors
    of row i of ``p | p.T | I`` (and ``c[i]`` in row j)."""
    k = _ncolors(c)
    q = _closed(p)
    keys, counts = np.unique(_rows(q) * k + c[q.indices], return_counts=True)
    i, j = _rows(p), p.indices.astype(np.int64)
    at_i = counts[np.searchsorted(keys, i * k + c[j])] == 1
    at_j = counts[np.searchsorted(keys, j * k + c[i])] == 1
    return at_i, at_j


def star_gather(pattern, colors) -> np.ndarray:
    """Flat indices into ``B.ravel()`` (``B = H @ S``, (n, k)) of H's nonzeros in CSR order.

    ``H[i, j]`` is read at ``B[i, colors[j]]`` when no other ``j'`` of row i (diagonal
    included) has color ``colors[j]``, else at ``B[j, colors[i]]`` (H is symmetric).

    Args:
        pattern: the (n, n) pattern.
        colors: a star coloring of it.

    Returns:
        (nnz,) int64 ``idx``: ``B.ravel()[idx]`` is H's data in the pattern's CSR order.

    Raises:
        DiffifaceValueError: some ``H[i, j]`` can be read at neither place: ``colors`` is
            not a star coloring of the pattern.
    """
    p = as_pattern(pattern)
    _square(p)
    c = _check_colors(colors, p.shape[0])
    at_i, at_j = _star_readable(p, c)
    i, j = _rows(p), p.indices.astype(np.int64)
    bad = np.flatnonzero(~(at_i | at_j))
    if bad.size:
        r, s = int(i[bad[0]]), int(j[bad[0]])
        raise DiffifaceValueError(
            f"colors is not a star coloring of this pattern: H[{r}, {s}] is alone in neither "
            f"B[{r}, {c[s]}] nor B[{s}, {c[r]}]; color it with star_coloring (colors from "
            "star_coloring never do this: that would be a diffiface bug, please report it)."
        )
    k = _ncolors(c)
    return np.where(at_i, i * k + c[j], j * k + c[i])


def seeds(colors, k=None) -> np.ndarray:
    """The (k, len(colors)) 0/1 float64 matrix whose row c indicates the vertices of color c.

    Args:
        colors: a coloring.
        k: the number of rows (at least ``max(colors) + 1``, the default).

    Returns:
        The tangents (or cotangents) of the compressed passes, one per row: ``S.T``.
    """
    c = _check_colors(colors)
    need = _ncolors(c)
    k = need if k is None else int(k)
    if k < need:
        raise DiffifaceValueError(f"k={k} is too few rows for colors up to {need - 1}.")
    s = np.zeros((k, c.size))
    s[c, np.arange(c.size)] = 1.0
    return s


def check_coloring(pattern, colors, kind="column") -> bool:
    """Whether ``colors`` has the defining property of a ``kind`` coloring of ``pattern``.

    Column: no two columns of a row share a color. Row: no two rows of a column do.
    Star: every ``H[i, j]`` of the symmetrized pattern (diagonal included) can be read
    alone from ``B = H @ S`` (equivalent to a star coloring). Vectorized, O(nnz log nnz).

    Args:
        pattern: the pattern.
        colors: the colors of its columns (column, star) or rows (row).
        kind: ``"column"``, ``"row"`` or ``"star"``.

    Returns:
        True when the property holds.
    """
    p = as_pattern(pattern)
    kind = _check_kind(kind)
    if kind == "star":
        _square(p)
        c = _check_colors(colors, p.shape[0])
        at_i, at_j = _star_readable(_closed(p), c)  # the diagonal too: distance-1
        return bool((at_i | at_j).all())
    if kind == "row":
        p = p.T.tocsr()
    c = _check_colors(colors, p.shape[1])
    keys = _rows(p) * _ncolors(c) + c[p.indices]
    return bool(np.unique(keys).size == keys.size)


def _check_kind(kind) -> str:
    if not isinstance(kind, str):
        raise DiffifaceTypeError(f"kind is one of {KINDS}, got {type(kind).__name__}.")
    if kind not in KINDS:
        raise DiffifaceValueError(
            f"unknown kind {kind!r}: use 'column' (B = J @ S, forward passes), 'row' "
            "(B = S.T @ J, reverse passes) or 'star' (symmetric H, B = H @ S)."
        )
    return kind


def coloring(pattern, kind="column", order="largest_first") -> np.ndarray:
    """A greedy coloring of a sparsity pattern, for compressed derivative passes.

    Args:
        pattern: a scipy.sparse matrix (any format) or a 2-D bool or 0/1 array.
        kind: ``"column"`` (Jacobian, ``B = J @ S``: one forward pass per color),
            ``"row"`` (Jacobian, ``B = S.T @ J``: one reverse pass per color) or
            ``"star"`` (symmetric Hessian, ``B = H @ S``).
        order: the greedy vertex order: ``"largest_first"`` (descending degree),
            ``"natural"``, ``"smallest_last"``, or a permutation of the vertices.

    Returns:
        int64 colors 0..k-1, one per column (column, star) or row (row).

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
    kind = _check_kind(kind)
    p = as_pattern(pattern)
    if kind == "column":
        return column_coloring(p, order)
    if kind == "row":
        return row_coloring(p, order)
    return star_coloring(p, order)
