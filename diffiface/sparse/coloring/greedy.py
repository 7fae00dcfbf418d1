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

from ._graphs import adjacency_graph, column_graph, ranges, square
from .orders import orders_of, vertex_order


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
    p1, s1 = ranges(indptr, verts)
    via = p1 - indptr[verts][s1]
    p2, s2 = ranges(indptr, indices[p1])
    cum = np.zeros(len(p1) + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr)[indices[p1]], out=cum[1:])
    first = np.zeros(len(verts) + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr)[verts], out=first[1:])
    return indices[p2], eid[p2], via[s2], cum[first].tolist()


def star(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
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
    eid = edge_ids(indptr, indices)
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
