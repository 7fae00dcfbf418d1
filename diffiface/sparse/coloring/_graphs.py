"""Arguments and graphs shared by the colorings: colors checked, and the undirected graphs
``(indptr, indices)`` (sorted neighbors, no self-loops) of a pattern's columns or of a
symmetric pattern."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from diffiface._errors import DiffifaceTypeError, DiffifaceValueError


def check_colors(colors, n: int | None = None, neutral: bool = False) -> np.ndarray:
    """``colors`` as an int64 vector of colors (of length ``n`` if given); ``neutral``
    allows -1, a vertex in no seed (bicoloring)."""
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
    if c.size and c.min() < (-1 if neutral else 0):
        raise DiffifaceValueError(
            "colors are nonnegative integers (0, 1, ..., k - 1)"
            + (", or -1 for a vertex in no seed." if neutral else ".")
        )
    return c.astype(np.int64, copy=False)


def ncolors(colors: np.ndarray) -> int:
    return int(colors.max()) + 1 if colors.size else 0


def square(p: sp.csr_array, kind: str = "star") -> None:
    if p.shape[0] != p.shape[1]:
        raise DiffifaceValueError(
            f"{kind} coloring is for a square symmetric (Hessian) pattern, got shape "
            f"{p.shape}; color a Jacobian with kind='column', 'row' or 'bicolor'."
        )


def without_diagonal(g: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    g = sp.csr_array(g)
    g.sum_duplicates()
    n = g.shape[0]
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    keep = g.indices != rows
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=indptr[1:])
    return indptr, g.indices[keep].astype(np.int64)


def column_graph(p: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """The column intersection graph: columns j, j' adjacent iff they share a row."""
    return without_diagonal(p.T.tocsr() @ p)


def adjacency_graph(p: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """The graph of the symmetric pattern ``p | p.T`` (the diagonal dropped)."""
    return without_diagonal(p + p.T.tocsr())


def closed(p: sp.csr_array) -> sp.csr_array:
    """``p | p.T | I``: the symmetric pattern with its diagonal (for H = H.T)."""
    q = sp.csr_array(p + p.T.tocsr() + sp.eye_array(p.shape[0], dtype=bool, format="csr"))
    q.sum_duplicates()
    return q


def rows_of(p: sp.csr_array) -> np.ndarray:
    """The row index of each stored entry, in CSR order."""
    return np.repeat(np.arange(p.shape[0], dtype=np.int64), np.diff(p.indptr))


def ranges(indptr: np.ndarray, verts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the neighbors of ``verts`` in ``indices``, and which vertex each is of."""
    start = indptr[verts]
    lens = indptr[verts + 1] - start
    seg = np.repeat(np.arange(len(verts)), lens)
    pos = np.arange(len(seg)) + np.repeat(start - (np.cumsum(lens) - lens), lens)
    return pos, seg
