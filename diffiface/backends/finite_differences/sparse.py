"""A sparse Hessian from values of f: one or two evaluations per nonzero, not per color.

A scalar f gives one number per evaluation, and its Hessian has a number per nonzero
of one triangle: no scheme on f's values alone needs fewer evaluations than that, and
compressed Hessian-vector products (one per color) each cost two gradients, that is
4n evaluations. Here, with steps ``h_i`` per coordinate (exact in x's dtype):

- central: ``H_ii = (f(x + h_i e_i) - 2 f(x) + f(x - h_i e_i)) / h_i^2`` and, for each
  nonzero i < j, ``H_ij = (f(x + d) + f(x - d) - f(x + h_i e_i) - f(x - h_i e_i)
  - f(x + h_j e_j) - f(x - h_j e_j) + 2 f(x)) / (2 h_i h_j)`` with ``d = h_i e_i + h_j
  e_j``: errors O(h^2) (fourth derivatives) and O(eps |f| / h^2) (rounding), balanced
  by h = eps^(1/4); 1 + 2n + 2 (nonzeros above the diagonal) evaluations.
- one-sided (s = 1 forward, -1 backward): ``H_ii = (f(x + 2 s h_i e_i) - 2 f(x + s
  h_i e_i) + f(x)) / h_i^2``, ``H_ij = (f(x + s d) - f(x + s h_i e_i) - f(x + s h_j
  e_j) + f(x)) / (h_i h_j)``: error O(h), balanced by h = eps^(1/3); 1 + 2n + (nonzeros
  above the diagonal) evaluations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp


def relative_step(dtype: np.dtype, central: bool) -> float:
    """The default relative step of the scheme: eps^(1/4) central, eps^(1/3) one-sided."""
    eps = float(np.finfo(dtype).eps)
    return eps**0.25 if central else eps ** (1 / 3)


def hessian_nonzeros(
    evaluate: Callable, x: np.ndarray, pattern: sp.csr_array, rel: float, side: int
) -> np.ndarray:
    """H's entries at the pattern's nonzeros (CSR order), as float64.

    Args:
        evaluate: ``evaluate(point)`` is f at a new array shaped like x, as a float.
        x: the point.
        pattern: the Hessian's pattern (symmetric, n x n, canonical CSR).
        rel: the relative step; ``h_i = rel * max(1, |x_i|)`` rounded to x's dtype.
        side: 0 central, 1 forward, -1 backward.
    """
    flat = x.reshape(-1)
    wide = flat.astype(np.float64)
    h = ((flat + (rel * np.maximum(np.abs(wide), 1.0)).astype(x.dtype)) - flat).astype(np.float64)
    coo = pattern.tocoo()
    upper = coo.row <= coo.col
    rows, cols = coo.row[upper], coo.col[upper]
    used = np.unique(np.concatenate([rows, cols]))  # the coordinates any nonzero involves

    def at(moves: list) -> float:
        point = flat.copy()
        for i, step in moves:
            point[i] += step
        return float(evaluate(point.reshape(x.shape)))

    f0 = at([])
    near, far = np.zeros(flat.size), np.zeros(flat.size)  # f at x + s h_i e_i, and beyond
    for i in used.tolist():
        if side:  # x + s h_i e_i and x + 2 s h_i e_i
            near[i], far[i] = at([(i, side * h[i])]), at([(i, 2 * side * h[i])])
        else:  # x + h_i e_i and x - h_i e_i
            near[i], far[i] = at([(i, h[i])]), at([(i, -h[i])])
    values = np.empty(rows.size)
    for k, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
        if i == j and side:
            values[k] = (far[i] - 2 * near[i] + f0) / h[i] ** 2
        elif i == j:
            values[k] = (near[i] - 2 * f0 + far[i]) / h[i] ** 2
        elif side:
            both = at([(i, side * h[i]), (j, side * h[j])])
            values[k] = (both - near[i] - near[j] + f0) / (h[i] * h[j])
        else:
            plus, minus = at([(i, h[i]), (j, h[j])]), at([(i, -h[i]), (j, -h[j])])
            rest = near[i] + far[i] + near[j] + far[j]
            values[k] = (plus + minus - rest + 2 * f0) / (2 * h[i] * h[j])
    upper_matrix = sp.csr_array((values, (rows, cols)), shape=pattern.shape)
    full = upper_matrix + sp.triu(upper_matrix, k=1, format="csr").T
    return _on(full, pattern)


def _on(matrix: sp.csr_array, pattern: sp.csr_array) -> np.ndarray:
    """The entries of ``matrix`` at the pattern's nonzeros, in the pattern's CSR order."""
    coo = pattern.tocoo()
    return np.asarray(matrix[coo.row, coo.col]).reshape(-1)
