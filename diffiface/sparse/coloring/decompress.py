"""Decompression: where each nonzero sits in the compressed products (a gather of flat
indices), the seeds, and the defining property of each coloring, checked.

Columns of a Jacobian J that share no row (structurally orthogonal columns) can be
evaluated in one forward pass: with seeds S (``S[j, colors[j]] = 1``) the compressed
``B = J @ S`` holds every nonzero of J as a single product, and a gather of flat indices
into B returns J's CSR data. Rows work the same way in reverse mode (``B = S.T @ J``). A
symmetric H admits fewer colors: a star coloring lets every ``H[i, j]`` be read from
``B = H @ S`` at ``B[i, colors[j]]`` or, by symmetry, ``B[j, colors[i]]``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from diffiface._errors import DiffifaceTypeError, DiffifaceValueError
from diffiface.sparse.patterns import as_pattern

from ._graphs import check_colors, closed, ncolors, rows_of, square
from .acyclic import Substitution
from .bicoloring import check_bicoloring

KINDS = ("column", "row", "star", "acyclic", "bidirectional")


def column_gather(pattern, colors) -> np.ndarray:
    """Flat indices into ``B.ravel()`` (``B = J @ S``, (m, k)) of J's nonzeros in CSR order.

    Args:
        pattern: the (m, n) pattern.
        colors: a column coloring of it.

    Returns:
        (nnz,) int64 ``idx``: ``B.ravel()[idx]`` is J's data in the pattern's CSR order.
    """
    p = as_pattern(pattern)
    c = check_colors(colors, p.shape[1])
    return rows_of(p) * ncolors(c) + c[p.indices]


def row_gather(pattern, colors) -> np.ndarray:
    """Flat indices into ``B.ravel()`` (``B = S.T @ J``, (k, n)) of J's nonzeros in CSR order.

    Args:
        pattern: the (m, n) pattern.
        colors: a row coloring of it.

    Returns:
        (nnz,) int64 ``idx``: ``B.ravel()[idx]`` is J's data in the pattern's CSR order.
    """
    p = as_pattern(pattern)
    c = check_colors(colors, p.shape[0])
    return c[rows_of(p)] * p.shape[1] + p.indices


def _star_readable(p: sp.csr_array, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each stored (i, j) of ``p``: whether ``B[i, c[j]]``, and whether ``B[j, c[i]]``,
    of ``B = H @ S`` is ``H[i, j]`` alone, i.e. whether ``c[j]`` is unique among the colors
    of row i of ``p | p.T | I`` (and ``c[i]`` in row j)."""
    k = ncolors(c)
    q = closed(p)
    keys, counts = np.unique(rows_of(q) * k + c[q.indices], return_counts=True)
    i, j = rows_of(p), p.indices.astype(np.int64)
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
    square(p)
    c = check_colors(colors, p.shape[0])
    at_i, at_j = _star_readable(p, c)
    i, j = rows_of(p), p.indices.astype(np.int64)
    bad = np.flatnonzero(~(at_i | at_j))
    if bad.size:
        r, s = int(i[bad[0]]), int(j[bad[0]])
        raise DiffifaceValueError(
            f"colors is not a star coloring of this pattern: H[{r}, {s}] is alone in neither "
            f"B[{r}, {c[s]}] nor B[{s}, {c[r]}]; color it with star_coloring (colors from "
            "star_coloring never do this: that would be a diffiface bug, please report it)."
        )
    k = ncolors(c)
    return np.where(at_i, i * k + c[j], j * k + c[i])


def seeds(colors, k=None) -> np.ndarray:
    """The (k, len(colors)) 0/1 float64 matrix whose row c indicates the vertices of color c.

    Args:
        colors: a coloring; -1 (a bicoloring's vertex in no seed) sets no entry.
        k: the number of rows (at least ``max(colors) + 1``, the default).

    Returns:
        The tangents (or cotangents) of the compressed passes, one per row: ``S.T``.
    """
    c = check_colors(colors, neutral=True)
    need = ncolors(c)
    k = need if k is None else int(k)
    if k < need:
        raise DiffifaceValueError(f"k={k} is too few rows for colors up to {need - 1}.")
    s = np.zeros((k, c.size))
    on = np.flatnonzero(c >= 0)
    s[c[on], on] = 1.0
    return s


def check_coloring(pattern, colors, kind="column") -> bool:
    """Whether ``colors`` has the defining property of a ``kind`` coloring of ``pattern``.

    Column: no two columns of a row share a color. Row: no two rows of a column do.
    Star: every ``H[i, j]`` of the symmetrized pattern (diagonal included) can be read
    alone from ``B = H @ S`` (equivalent to a star coloring). Acyclic: a distance-1
    coloring whose two-colored subgraphs are forests. Bidirectional: every
    ``J[i, j]`` is alone of its color in its forward or its reverse product.
    Vectorized, O(nnz log nnz).

    Args:
        pattern: the pattern.
        colors: the colors of its columns (column, star, acyclic) or rows (row), or the pair
            ``(column_colors, row_colors)`` (bidirectional).
        kind: one of ``KINDS``.

    Returns:
        True when the property holds.
    """
    p = as_pattern(pattern)
    kind = check_kind(kind)
    if kind == "bidirectional":
        return check_bicoloring(p, colors)
    if kind == "acyclic":
        square(p, "acyclic")
        try:
            Substitution(p, colors)  # builds the two-colored forests, or raises
        except DiffifaceValueError:
            return False
        return True
    if kind == "star":
        square(p)
        c = check_colors(colors, p.shape[0])
        at_i, at_j = _star_readable(closed(p), c)  # the diagonal too: distance-1
        return bool((at_i | at_j).all())
    if kind == "row":
        p = p.T.tocsr()
    c = check_colors(colors, p.shape[1])
    keys = rows_of(p) * ncolors(c) + c[p.indices]
    return bool(np.unique(keys).size == keys.size)


def check_kind(kind) -> str:
    if not isinstance(kind, str):
        raise DiffifaceTypeError(f"kind is one of {KINDS}, got {type(kind).__name__}.")
    if kind not in KINDS:
        raise DiffifaceValueError(
            f"unknown kind {kind!r}: use 'column' (B = J @ S, forward passes), 'row' "
            "(B = S.T @ J, reverse passes), 'star' (symmetric H, B = H @ S), 'acyclic' "
            "(symmetric H, fewer colors, decompression by substitution) or "
            "'bidirectional' (forward and reverse passes together)."
        )
    return kind
