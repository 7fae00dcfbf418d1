"""Index sets, one per array element, stored as one CSR-like pair of arrays.

``Rows(indptr, idx)``: row k (element k, C order) holds the sorted, distinct integers
``idx[indptr[k]:indptr[k + 1]]``: the inputs element k may depend on, or, for the
second-order sets, the pairs (i, j), i <= j, it may have a nonzero second derivative
in, each as the key ``i * n + j``. Every operation is vectorised over all rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class Rows:
    """One set of integers per element."""

    __slots__ = ("idx", "indptr")

    def __init__(self, indptr: np.ndarray, idx: np.ndarray):
        self.indptr, self.idx = indptr, idx

    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def row_ids(self) -> np.ndarray:
        """The row of each stored integer."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)


def distinct(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (a sort: ``np.unique`` hashes, slower here)."""
    a = np.sort(a, kind="stable")  # (a merge of the sorted runs it usually holds)
    keep = np.ones(len(a), bool)
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def empty(rows: int) -> Rows:
    return Rows(np.zeros(rows + 1, np.int64), np.zeros(0, np.int64))


def identity(n: int) -> Rows:
    return Rows(np.arange(n + 1, dtype=np.int64), np.arange(n, dtype=np.int64))


def take(r: Rows, m) -> Rows:
    """The rows ``r[m]`` (``m`` flat, repeats allowed); a row index -1 gives an empty
    row."""
    m = np.asarray(m, dtype=np.int64).ravel()
    if len(m) and m[0] >= 0 and m[-1] - m[0] == len(m) - 1:
        if np.array_equal(m, np.arange(m[0], m[-1] + 1)):  # a slice: no gather
            a, b = r.indptr[m[0]], r.indptr[m[-1] + 1]
            return r if len(m) == len(r) else Rows(r.indptr[m[0] : m[-1] + 2] - a, r.idx[a:b])
    valid = m >= 0
    safe = np.where(valid, m, 0)
    start = r.indptr[safe]
    length = np.where(valid, r.indptr[safe + 1] - start, 0)
    indptr = np.zeros(len(m) + 1, np.int64)
    np.cumsum(length, out=indptr[1:])
    pos = np.arange(indptr[-1], dtype=np.int64) - np.repeat(indptr[:-1] - start, length)
    return Rows(indptr, r.idx[pos])


def from_pairs(rows: np.ndarray, keys: np.ndarray, count: int) -> Rows:
    """Row k holds the distinct ``keys`` whose ``rows`` entry is k."""
    if not len(keys):
        return empty(count)
    top = int(keys.max()) + 1
    if count * top < 2**62:  # one sort of row * top + key; the rows' bounds by bisection
        both = distinct(rows * top + keys)
        indptr = np.searchsorted(both, np.arange(count + 1, dtype=np.int64) * top)
        keys = both - np.repeat(np.arange(count, dtype=np.int64) * top, np.diff(indptr))
        return Rows(indptr.astype(np.int64), keys)
    order = np.lexsort((keys, rows))
    rows, keys = rows[order], keys[order]
    keep = np.ones(len(keys), bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (keys[1:] != keys[:-1])
    indptr = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=count), out=indptr[1:])
    return Rows(indptr, keys[keep].astype(np.int64, copy=False))


def union(*parts: Rows) -> Rows:
    """Row-wise union of same-length row sets (None entries skipped): scipy's sparse
    sum, a merge of sorted rows in C++."""
    parts = [p for p in parts if p is not None and len(p.idx)]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    shape = (len(parts[0]), max(int(p.idx.max()) for p in parts) + 1)
    total = _csr(parts[0], shape)
    for p in parts[1:]:
        total = total + _csr(p, shape)
    return Rows(
        total.indptr.astype(np.int64, copy=False), total.indices.astype(np.int64, copy=False)
    )


def _csr(r: Rows, shape) -> sp.csr_array:
    out = sp.csr_array((np.ones(len(r.idx), bool), r.idx, r.indptr), shape=shape, copy=False)
    out.has_canonical_format = True  # (sorted, distinct: every Rows is)
    return out


_MATMUL_WIDTH = 2**24  # scipy's sparse product keeps a work array this wide


def gather_union(r: Rows, out_rows: np.ndarray, in_rows: np.ndarray, count: int) -> Rows:
    """Row k of the result: the union of ``r[i]`` over the pairs (k, i) given as
    ``out_rows``, ``in_rows``."""
    if r is None or not len(r.idx):
        return None
    width = int(r.idx.max()) + 1
    if width <= _MATMUL_WIDTH:  # (first-order sets: the selection times the sets)
        pick = sp.csr_array(
            (np.ones(len(out_rows), bool), (out_rows, in_rows)), shape=(count, len(r))
        )
        got = pick @ _csr(r, (len(r), width))
        got.sort_indices()
        return Rows(
            got.indptr.astype(np.int64, copy=False), got.indices.astype(np.int64, copy=False)
        )
    got = take(r, in_rows)
    return from_pairs(np.repeat(out_rows.astype(np.int64), got.lengths), got.idx, count)


def all_union(r: Rows, count: int) -> Rows:
    """``count`` copies of the union of every row."""
    if r is None:
        return None
    keys = distinct(r.idx)
    return take(Rows(np.array([0, len(keys)], np.int64), keys), np.zeros(count, np.int64))


def self_pairs(g: Rows, n: int) -> Rows:
    """Per row, every pair (i, j), i <= j, of its first-order set, as ``i * n + j``."""
    if g is None:
        return None
    lengths = g.lengths
    local = np.arange(len(g.idx), dtype=np.int64) - np.repeat(g.indptr[:-1], lengths)
    after = np.repeat(lengths, lengths) - local  # pairs each entry starts: itself and later
    first = np.repeat(np.arange(len(g.idx), dtype=np.int64), after)
    starts = np.cumsum(after) - after
    second = first + np.arange(len(first), dtype=np.int64) - np.repeat(starts, after)
    keys = g.idx[first] * n + g.idx[second]
    indptr = np.zeros(len(g) + 1, np.int64)
    np.cumsum(lengths * (lengths + 1) // 2, out=indptr[1:])
    return Rows(indptr, keys)  # sorted and distinct: g's rows are


def cross_pairs(a: Rows, b: Rows, n: int) -> Rows:
    """Per row, every pair of one integer of ``a``'s row and one of ``b``'s, ordered
    (min, max), as ``min * n + max``."""
    if a is None or b is None:
        return None
    la, lb = a.lengths, b.lengths
    per_entry = np.repeat(lb, la)  # each entry of a pairs with its row's entries of b
    first = np.repeat(np.arange(len(a.idx), dtype=np.int64), per_entry)
    starts = np.cumsum(per_entry) - per_entry
    offset = np.arange(len(first), dtype=np.int64) - np.repeat(starts, per_entry)
    second = np.repeat(np.repeat(b.indptr[:-1], la), per_entry) + offset
    i, j = a.idx[first], b.idx[second]
    rows = np.repeat(a.row_ids, per_entry)
    return from_pairs(rows, np.minimum(i, j) * n + np.maximum(i, j), len(a))


def replace(r: Rows, positions: np.ndarray, new: Rows) -> Rows:
    """``r`` with rows ``positions`` replaced by ``new``'s rows."""
    m = np.arange(len(r), dtype=np.int64)
    m[positions] = len(r) + np.arange(len(positions), dtype=np.int64)
    return take(stack([r, new]), m)


def stack(parts: list) -> Rows:
    """The rows of each part, one part after the other."""
    offsets = np.cumsum([0] + [len(p.idx) for p in parts])
    indptr = np.concatenate(
        [p.indptr[:-1] + o for p, o in zip(parts, offsets, strict=False)] + [offsets[-1:]]
    )
    return Rows(indptr.astype(np.int64), np.concatenate([p.idx for p in parts]))
