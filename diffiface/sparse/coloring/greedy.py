"""Greedy colorings: partial distance-2 (columns or rows of a Jacobian) and star (a
symmetric Hessian), after SparseMatrixColorings.jl and Gebremedhin, Manne & Pothen, "What
color is your Jacobian? Graph coloring for computing derivatives" (SIAM Review 47, 2005);
the star coloring is Algorithm 4.1 of Gebremedhin, Tarafdar, Manne & Pothen, "New acyclic
and star coloring algorithms with application to computing Hessians" (SIAM J. Sci.
Comput. 29, 2007). NumPy and scipy only: the greedy loops run over vertices in Python,
each step on NumPy slices of CSR arrays.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from diffiface.sparse.patterns import as_pattern

from ._graphs import adjacency_graph, column_graph, square
from .orders import orders_of, vertex_order


def _greedy(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Distance-1 greedy coloring: each vertex takes the smallest color of no neighbor.

    ``mark[c] == v``: color c is taken around v. Uncolored neighbors (-1) hit mark[n],
    never read: at most n - 1 colors exist while a vertex is still uncolored. Plain
    Python lists for a sparse graph; NumPy slices per vertex where vertices have many
    neighbors (about 16 on average: measured, the break-even)."""
    n = len(indptr) - 1
    if indices.size > 16 * n:
        return _greedy_numpy(indptr, indices, order)
    ip, nb = indptr.tolist(), indices.tolist()
    colors, mark = [-1] * n, [-1] * (n + 1)
    for v in order.tolist():
        for u in nb[ip[v] : ip[v + 1]]:
            mark[colors[u]] = v
        c = 0
        while mark[c] == v:
            c += 1
        colors[v] = c
    return np.asarray(colors, dtype=np.int64)


def _greedy_numpy(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """:func:`_greedy` with a NumPy slice per vertex."""
    n = len(indptr) - 1
    colors = np.full(n, -1, dtype=np.int64)
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


def star(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Greedy star coloring, Algorithm 4.1 of Gebremedhin, Tarafdar, Manne & Pothen (2007),
    as SparseMatrixColorings.jl's ``star_coloring`` (the same colors).

    The 2-colored stars (subgraphs on two colors) are kept as ``star_of[edge]`` (an index
    into ``hub``; -1 there while a star is one edge). Coloring v must avoid the colors of
    its colored neighbors w and any 2-colored path on 4 vertices: w-v-w' (two neighbors
    of one color: forbid the colors of all their neighbors) and v-w-x-y (x the hub of
    the star of edge w-x: forbid color(x)). Then each edge v-w joins a star: that of
    w-x if x has v's color (w becomes its hub), that of v-q if q is the first neighbor
    of w's color (v becomes its hub), or a new one. Plain Python over lists: a vertex
    costs a few list operations per two-hop neighbor.
    """
    n = len(indptr) - 1
    ip, nb, ed = indptr.tolist(), indices.tolist(), edge_ids(indptr, indices).tolist()
    color, forbidden, treated = [-1] * n, [-1] * (n + 1), [-1] * n
    first = [(-1, -1, -1)] * (n + 1)  # per color: (v, its first neighbor w of it, edge)
    star_of, hub = [0] * (len(nb) // 2), []
    for v in order.tolist():
        a, b = ip[v], ip[v + 1]
        for t in range(a, b):
            w = nb[t]
            cw = color[w]
            if cw < 0:
                continue
            forbidden[cw] = v
            p, q, _ = first[cw]
            if p == v:  # two neighbors of one color: forbid their neighbors' colors
                for u in (q, w) if treated[q] != v else (w,):
                    for x in nb[ip[u] : ip[u + 1]]:
                        if color[x] >= 0:
                            forbidden[color[x]] = v
                    treated[u] = v
            else:
                first[cw] = (v, w, ed[t])
                for s in range(ip[w], ip[w + 1]):
                    x = nb[s]
                    if x != v and color[x] >= 0 and hub[star_of[ed[s]]] == x:
                        forbidden[color[x]] = v
        c = 0
        while forbidden[c] == v:
            c += 1
        color[v] = c
        _update_stars(v, c, a, b, ip, nb, ed, color, first, star_of, hub)
    return np.asarray(color, dtype=np.int64)


def _update_stars(v, c, a, b, ip, nb, ed, color, first, star_of, hub) -> None:
    """Each edge v-w (w colored) joins its star (see :func:`star`)."""
    for t in range(a, b):
        w = nb[t]
        cw = color[w]
        if cw < 0:
            continue
        for s in range(ip[w], ip[w + 1]):
            x = nb[s]
            if x != v and color[x] == c:  # v-w-x: w the hub
                joined = star_of[ed[s]]
                hub[joined] = w
                star_of[ed[t]] = joined
                break
        else:
            p, q, e = first[cw]
            if p == v and q != w:  # q-v-w: v the hub
                joined = star_of[e]
                hub[joined] = v
                star_of[ed[t]] = joined
            else:  # a new star of one edge
                hub.append(-1)
                star_of[ed[t]] = len(hub) - 1


def edge_ids(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """An id per undirected edge (0..E-1), at both of its CSR positions."""
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    mirror = np.searchsorted(rows * n + indices, indices * n + rows)
    upper = rows < indices
    rank = np.cumsum(upper) - 1
    return np.where(upper, rank, rank[mirror])


def fewest(color, indptr: np.ndarray, indices: np.ndarray, order) -> np.ndarray:
    """``color(indptr, indices, vertex order)`` for each order of ``order`` (one, a tuple,
    or "best"): the colors of the fewest, the first on a tie."""
    best = None
    for o in orders_of(order):
        c = color(indptr, indices, vertex_order(o, indptr, indices))
        if best is None or (c.size and c.max() < best.max()):
            best = c
    return best


def column_coloring(pattern, order="largest_first") -> np.ndarray:
    """Partial distance-2 coloring of the columns: two columns sharing a row differ.

    Args:
        pattern: the (m, n) Jacobian pattern (see :func:`as_pattern`).
        order: the greedy vertex order, one of ``ORDERS`` or a permutation of the columns
            (degrees in the column intersection graph), or several (``"best"`` or a tuple
            of them): each tried, the fewest colors kept.

    Returns:
        (n,) int64 colors 0..k-1; ``B = J @ seeds(colors).T`` is (m, k).

    The graph ``P.T @ P`` is built whole: a pattern with a dense row of n entries makes
    it n x n dense (and takes n colors anyway; see :func:`bicoloring`).
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
    indptr, indices = column_graph(p)
    return fewest(_greedy, indptr, indices, order)


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
    square(p)
    indptr, indices = adjacency_graph(p)
    return fewest(star, indptr, indices, order)
