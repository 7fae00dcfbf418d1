"""Vertex orders for the greedy colorings, as in SparseMatrixColorings.jl (``order.jl``)
and ColPack (Gebremedhin, Nguyen, Patwary & Pothen, ACM TOMS 40, 2013, Section 5).

Static: ``natural``, ``random`` (seeded, reproducible), ``largest_first`` (descending
degree, ties by index). Dynamic, with degree buckets updated as vertices are ordered:
``smallest_last`` (Matula & Beck: remove a vertex of least remaining degree, color in
reverse), ``incidence_degree`` (next: most already-ordered neighbors) and
``dynamic_largest_first`` (next: most not-yet-ordered neighbors). The degrees are those of
the graph being colored: the column intersection graph for a column coloring (the
distance-2 degree of the bipartite graph), the adjacency graph for a star coloring.
"""

from __future__ import annotations

import numpy as np

from diffiface._backend_types import COLORING_ORDERS
from diffiface._errors import DiffifaceTypeError, DiffifaceValueError

ORDERS = COLORING_ORDERS
# "best": all of these tried, the fewest colors kept (the first on a tie)
BEST = (
    "largest_first",
    "smallest_last",
    "incidence_degree",
    "dynamic_largest_first",
    "natural",
    "random",
)


def orders_of(order) -> tuple:
    """The orders to try: one, or several (``"best"`` or a tuple of them)."""
    if isinstance(order, str) and order == "best":
        return BEST
    if isinstance(order, tuple):
        if not order:
            raise DiffifaceValueError("a tuple of orders holds at least one order.")
        return order
    return (order,)


def vertex_order(order, indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The vertex order: a name from ORDERS or an explicit permutation."""
    n = len(indptr) - 1
    if isinstance(order, str):
        if order == "natural":
            return np.arange(n)
        if order == "random":
            return np.random.default_rng(0).permutation(n)
        if order == "largest_first":  # descending degree, ties by index
            return np.argsort(-np.diff(indptr), kind="stable")
        if order in _DYNAMIC:
            return _dynamic(indptr, indices, *_DYNAMIC[order])
        raise DiffifaceValueError(
            f"unknown order {order!r}: use one of {ORDERS}, 'best', a tuple of them, or a "
            "permutation of the vertices."
        )
    perm = np.asarray(order)
    if perm.ndim != 1 or (perm.size and perm.dtype.kind not in "iu"):
        raise DiffifaceTypeError(
            f"order is one of {ORDERS}, 'best', or a 1-D integer permutation of the "
            f"vertices, got {type(order).__name__}."
        )
    if perm.shape[0] != n or not np.array_equal(np.sort(perm), np.arange(n)):
        raise DiffifaceValueError(
            f"an explicit order is a permutation of the {n} vertices (each of 0..{n - 1} once)."
        )
    return perm.astype(np.int64)


# (degree counted, direction): SparseMatrixColorings.jl's DynamicDegreeBasedOrder
_DYNAMIC = {
    "smallest_last": ("back", "high2low"),
    "incidence_degree": ("back", "low2high"),
    "dynamic_largest_first": ("forward", "low2high"),
}


class _Buckets:
    """Vertices bucketed by degree in one array (bucket d holds ``store[low[d]:high[d]+1]``),
    as SparseMatrixColorings.jl's ``DegreeBucketsSMC``: a vertex moves one bucket up or
    down in O(1)."""

    def __init__(self, degrees: np.ndarray, dmax: int):
        count = np.bincount(degrees, minlength=dmax + 1)
        high = np.cumsum(count) - 1
        low = high - count + 1
        # each bucket in ascending vertex order
        self.store = np.argsort(degrees, kind="stable").tolist()
        self.pos = np.empty(len(degrees), dtype=np.int64)
        self.pos[self.store] = np.arange(len(degrees))
        self.pos = self.pos.tolist()
        self.low, self.high = low.tolist(), high.tolist()
        self.deg = degrees.tolist()

    def pop(self, degrees) -> tuple[int, int]:
        """The last vertex of the first nonempty bucket among ``degrees``."""
        low, high = self.low, self.high
        d = next(d for d in degrees if high[d] >= low[d])
        u = self.store[high[d]]
        high[d] -= 1
        self.deg[u] = -1  # ordered
        return u, d

    def up(self, v: int, d: int) -> None:
        """v from bucket d to the start of bucket d + 1."""
        store, pos, high, low = self.store, self.pos, self.high, self.low
        w = store[high[d]]
        store[pos[v]] = w
        pos[w] = pos[v]
        high[d] -= 1
        low[d + 1] -= 1
        store[low[d + 1]] = v
        pos[v] = low[d + 1]
        self.deg[v] = d + 1

    def down(self, v: int, d: int) -> None:
        """v from bucket d to the end of bucket d - 1."""
        store, pos, high, low = self.store, self.pos, self.high, self.low
        w = store[low[d]]
        store[pos[v]] = w
        pos[w] = pos[v]
        low[d] += 1
        high[d - 1] += 1
        store[high[d - 1]] = v
        pos[v] = high[d - 1]
        self.deg[v] = d - 1


def _dynamic(indptr: np.ndarray, indices: np.ndarray, degtype: str, direction: str) -> np.ndarray:
    """SparseMatrixColorings.jl's ``vertices(g, DynamicDegreeBasedOrder)``: pick the vertex
    of highest (low2high) or lowest (high2low) dynamic degree, update its neighbors'."""
    n = len(indptr) - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    deg = np.diff(indptr)
    dmax = int(deg.max())
    rising = (degtype == "back") == (direction == "low2high")
    b = _Buckets(np.zeros(n, dtype=np.int64) if rising else deg, dmax)
    move = b.up if rising else b.down
    out = [0] * n
    slots = range(n) if direction == "low2high" else range(n - 1, -1, -1)
    search = range(dmax, -1, -1) if direction == "low2high" else range(dmax + 1)
    ip, nb, bdeg = indptr.tolist(), indices.tolist(), b.deg
    for i in slots:
        u, du = b.pop(search)
        out[i] = u
        for v in nb[ip[u] : ip[u + 1]]:
            dv = bdeg[v]
            if dv != -1:
                move(v, dv)
        if direction == "low2high":
            search = range(min(du + 1, dmax), -1, -1)
        else:
            search = range(max(du - 1, 0), dmax + 1)
    return np.asarray(out, dtype=np.int64)
