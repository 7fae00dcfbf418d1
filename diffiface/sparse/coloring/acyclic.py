"""Acyclic coloring of a symmetric (Hessian) pattern and its decompression by substitution.

An acyclic coloring is a distance-1 coloring in which every cycle takes at least 3 colors:
the subgraph of any two colors is a forest. It needs fewer colors than a star coloring (a
band with rho off-diagonal bands: rho // 2 + 1 against rho + 1), but an entry of
``B = H @ S`` may sum several nonzeros, so H is recovered by substitution along each
two-colored tree, leaves first. The greedy coloring is Algorithm 3.1 of Gebremedhin,
Tarafdar, Manne & Pothen (SIAM J. Sci. Comput. 29, 2007), as in SparseMatrixColorings.jl's
``acyclic_coloring`` (two-colored trees kept as disjoint sets of edges). It loops over
each vertex's two-hop neighborhood in Python: several times slower than the star coloring.

The substitution is vectorized: on a tree rooted anywhere, the edge from v to its parent
u holds ``H[v, u] = B[v, color(u)] - sum of its children's edges``, i.e. the alternating
sum of ``b(w) = B[w, color(parent(w))]`` over v's subtree. In a depth-first order each
subtree is a contiguous range, so one prefix sum gives every edge (:class:`Substitution`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from diffiface._errors import DiffifaceValueError
from diffiface.sparse.patterns import as_pattern

from ._graphs import adjacency_graph, check_colors, ncolors, rows_of, square
from .greedy import edge_ids, fewest


def acyclic(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Greedy acyclic coloring in ``order`` (SparseMatrixColorings.jl's algorithm)."""
    n = len(indptr) - 1
    ne = len(indices) // 2
    ip, nb, ed = indptr.tolist(), indices.tolist(), edge_ids(indptr, indices).tolist()
    color, forbidden = [-1] * n, [-1] * (n + 1)
    first_neighbor = [(-1, -1, -1)] * (n + 1)  # per color: (v, w, edge v-w)
    first_visit = [(-1, -1)] * ne  # per tree root: (v, w)
    parent = list(range(ne))  # the two-colored trees: disjoint sets of edges

    def find(e):
        while parent[e] != e:
            parent[e] = parent[parent[e]]
            e = parent[e]
        return e

    for v in order.tolist():
        a, b = ip[v], ip[v + 1]
        for w in nb[a:b]:
            if color[w] >= 0:
                forbidden[color[w]] = v
        for w in nb[a:b]:  # a tree reached through two neighbors would close a cycle
            if color[w] < 0:
                continue
            for t in range(ip[w], ip[w + 1]):
                cx = color[nb[t]]
                if cx >= 0 and forbidden[cx] != v:
                    r = find(ed[t])
                    p, q = first_visit[r]
                    if p != v:
                        first_visit[r] = (v, w)
                    elif q != w:
                        forbidden[cx] = v
        c = 0
        while forbidden[c] == v:
            c += 1
        color[v] = c
        for t in range(a, b):  # grow the two-colored stars around v
            cw = color[nb[t]]
            if cw >= 0:
                p, _, e = first_neighbor[cw]
                if p != v:
                    first_neighbor[cw] = (v, nb[t], ed[t])
                else:
                    parent[find(ed[t])] = find(e)
        for t in range(a, b):  # join the trees v now links
            w = nb[t]
            if color[w] < 0:
                continue
            for s in range(ip[w], ip[w + 1]):
                x = nb[s]
                if x != v and color[x] == c:
                    r1, r2 = find(ed[t]), find(ed[s])
                    if r1 != r2:
                        parent[r1] = r2
    return np.asarray(color, dtype=np.int64)


def acyclic_coloring(pattern, order="largest_first") -> np.ndarray:
    """Acyclic coloring of a symmetric (Hessian) pattern.

    Args:
        pattern: the (n, n) pattern (see :func:`as_pattern`); symmetrized, its diagonal
            counted as present.
        order: the greedy vertex order (see :func:`column_coloring`).

    Returns:
        (n,) int64 colors 0..k-1; ``B = H @ seeds(colors).T`` is (n, k), and
        ``Substitution(pattern, colors)`` recovers H from it.

    Examples:
        >>> import numpy as np
        >>> from diffiface.sparse.coloring import acyclic_coloring, star_coloring
        >>> band = np.abs(np.subtract.outer(np.arange(50), np.arange(50))) <= 2
        >>> int(acyclic_coloring(band).max()) + 1, int(star_coloring(band).max()) + 1
        (3, 5)
    """
    p = as_pattern(pattern)
    square(p, "acyclic")
    indptr, indices = adjacency_graph(p)
    return fewest(acyclic, indptr, indices, order)


class Substitution:
    """How to read a symmetric H from ``B = H @ S`` of an acyclic coloring, as index arrays.

    ``B`` comes flat and seed-major: ``bflat[c * n + i] = B[i, c]``. Then, with ``P`` the
    exclusive prefix sum of ``sign * bflat[take]`` (the trees' vertices in depth-first
    order): ``E = edge_sign * (P[end] - P[start])`` are the off-diagonal entries, one per
    edge, and ``concat(E, bflat[diagonal])[assemble]`` is H's data in the pattern's CSR
    order. :meth:`__call__` does it in NumPy; the sparse plan does the same in the
    framework's arrays.

    Raises:
        DiffifaceValueError: two colors hold a cycle: ``colors`` is not an acyclic
            coloring of the pattern.
    """

    def __init__(self, pattern, colors):
        p = as_pattern(pattern)
        square(p, "acyclic")
        n = p.shape[0]
        c = check_colors(colors, n)
        k = ncolors(c)
        q = sp.csr_array(sp.triu(p + p.T.tocsr(), k=1))
        q.sort_indices()
        i, j = rows_of(q), q.indices.astype(np.int64)  # each edge once, i < j, sorted
        if (c[i] == c[j]).any():
            raise _not_acyclic()
        pair = np.minimum(c[i], c[j]) * k + np.maximum(c[i], c[j])
        # a copy of each vertex per pair of colors: the two-colored forests, disjoint
        key = np.concatenate([i * k * k + pair, j * k * k + pair])
        node = np.unique(key, return_inverse=True)[1].astype(np.int64)
        ne = i.size
        copies = int(node.max()) + 1 if ne else 0
        tree = _tree(node[:ne], node[ne:], copies)
        vert = np.zeros(copies, dtype=np.int64)
        vert[node] = np.concatenate([i, j])
        self._fill(tree, vert, c, n, node[:ne], node[ne:], ne)
        self.diagonal = c * n + np.arange(n)
        self.assemble = _assemble(p, i, j, ne)

    def _fill(self, tree, vert, c, n, a, b, ne) -> None:
        order, pred, depth = tree
        copies = vert.size
        pos = np.empty(copies + 1, dtype=np.int64)
        pos[order] = np.arange(copies + 1)
        real = order[1:]  # order[0]: the root joined to every tree
        up = pred[real]
        has = up != copies  # a tree's own root has no edge to its parent
        sign = np.where(depth[real] % 2 == 0, 1.0, -1.0)
        self.take = np.where(has, c[vert[np.minimum(up, copies - 1)]] * n + vert[real], 0)
        self.sign = np.where(has, sign, 0.0)
        child = np.where(pred[a] == b, a, b)  # the edge's lower end
        if ne and not (pred[child] == np.where(child == a, b, a)).all():
            raise _not_acyclic()
        self.start = pos[child] - 1
        self.end = _subtree_end(depth[order[1:]], self.start)
        self.edge_sign = np.where(depth[child] % 2 == 0, 1.0, -1.0)

    def __call__(self, bflat: np.ndarray) -> np.ndarray:
        """H's data in the pattern's CSR order from the flat, seed-major B."""
        s = self.sign * bflat[self.take]
        prefix = np.concatenate([[0.0], np.cumsum(s)])
        e = self.edge_sign * (prefix[self.end] - prefix[self.start])
        return np.concatenate([e, bflat[self.diagonal]])[self.assemble]


def _not_acyclic() -> DiffifaceValueError:
    return DiffifaceValueError(
        "colors is not an acyclic coloring of this pattern: two colors hold a cycle (or "
        "two neighbors share a color); color it with acyclic_coloring (colors from "
        "acyclic_coloring never do this: that would be a diffiface bug, please report it)."
    )


def _tree(a: np.ndarray, b: np.ndarray, copies: int) -> tuple:
    """A depth-first order of the forest with edges a-b, under an extra root (``copies``)
    joined to one vertex of each tree: (order, predecessors, depths)."""
    ncomp, label = csgraph.connected_components(
        sp.coo_array((np.ones(a.size), (a, b)), shape=(copies, copies)), directed=False
    )
    if a.size != copies - ncomp:  # a forest: edges = vertices - trees
        raise _not_acyclic()
    roots = np.unique(label, return_index=True)[1]
    r = np.concatenate([a, roots])
    s = np.concatenate([b, np.full(roots.size, copies)])
    g = sp.csr_array((np.ones(r.size), (r, s)), shape=(copies + 1, copies + 1))
    order, pred = csgraph.depth_first_order(g, copies, directed=False)
    depth = csgraph.shortest_path(g, unweighted=True, directed=False, indices=copies)
    return order, pred, depth.astype(np.int64)


def _subtree_end(depth: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each position ``start``: one past the last position of its subtree, the first
    later position no deeper than it (binary lifting over a table of range minima)."""
    size = depth.size
    levels, table, step = [], depth, 1
    while step <= size:
        levels.append(table)
        table = np.minimum(table, np.concatenate([table[step:], np.full(step, -1)]))
        step *= 2
    q, d = start + 1, depth[start]
    for lv in range(len(levels) - 1, -1, -1):
        w = 1 << lv
        ok = q + w <= size
        skip = ok & (levels[lv][np.minimum(q, size - 1)] > d)
        q = np.where(skip, q + w, q)
    return q


def _assemble(p: sp.csr_array, i: np.ndarray, j: np.ndarray, ne: int) -> np.ndarray:
    """For each stored (r, s) of p: its edge's index, or ``ne + r`` on the diagonal."""
    r, s = rows_of(p), p.indices.astype(np.int64)
    n = p.shape[0]
    keys = i * n + j  # sorted
    lo, hi = np.minimum(r, s), np.maximum(r, s)
    at = np.searchsorted(keys, lo * n + hi)
    return np.where(r == s, ne + r, np.minimum(at, max(ne - 1, 0)))
