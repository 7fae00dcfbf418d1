"""Colorings of sparse patterns: the defining property, exact decompression, known color
counts, agreement with asdex (SparseMatrixColorings.jl's algorithms) and argument errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from diffiface._errors import DiffifaceTypeError, DiffifaceValueError
from diffiface.sparse.coloring import (
    ORDERS,
    as_pattern,
    check_coloring,
    coloring,
    column_coloring,
    column_gather,
    row_coloring,
    row_gather,
    seeds,
    star_coloring,
    star_gather,
)


def _csr(dense) -> sp.csr_array:
    return sp.csr_array(np.asarray(dense, dtype=bool))


def banded(n, b, m=None):
    """|i - j| <= b."""
    i, j = np.ogrid[: (m or n), :n]
    return _csr(abs(i - j) <= b)


def arrow(n):
    a = np.eye(n, dtype=bool)
    a[0] = a[:, 0] = True
    return _csr(a)


def brusselator(big_n):
    """The Brusselator's Jacobian on an N x N periodic grid, x = (u, v): a 5-point stencil
    in each block, u and v coupled at each point."""
    n2 = big_n * big_n
    r, c = np.divmod(np.arange(n2), big_n)
    i = np.arange(n2)
    rows, cols = [i, n2 + i, i, n2 + i], [n2 + i, i, i, n2 + i]
    for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        k = ((r + dr) % big_n) * big_n + (c + dc) % big_n
        rows += [i, n2 + i]
        cols += [k, n2 + k]
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return as_pattern(sp.coo_array((np.ones(rows.size, bool), (rows, cols)), shape=(2 * n2,) * 2))


def _random(rng, shape, density):
    return as_pattern(sp.random_array(shape, density=density, rng=rng, format="csr") != 0)


def _symmetric(p):
    return as_pattern(p + p.T)


def jacobian_patterns():
    rng = np.random.default_rng(0)
    out = {
        f"random{shape}@{d}": _random(rng, shape, d)
        for shape, d in [((30, 20), 0.1), ((50, 80), 0.05), ((80, 50), 0.2), ((40, 40), 0.5)]
    }
    dense_row = np.eye(12, 15, dtype=bool)
    dense_row[4] = True
    blocks = sp.block_diag([np.ones((3, 2)), np.ones((1, 4)), np.ones((2, 2))], format="csr")
    empties = np.zeros((9, 7), dtype=bool)
    empties[[0, 3, 3, 8], [1, 1, 5, 5]] = True  # empty rows and columns
    out |= {
        "banded": banded(40, 3),
        "banded-rect": banded(60, 2, m=45),
        "arrow": arrow(10),
        "block-diagonal": as_pattern(blocks),
        "dense-row": _csr(dense_row),
        "dense": _csr(np.ones((6, 5))),
        "diagonal": _csr(np.eye(7)),
        "empty-rows-cols": _csr(empties),
        "all-zero": _csr(np.zeros((4, 3))),
        "0xn": _csr(np.zeros((0, 5))),
        "mx0": _csr(np.zeros((5, 0))),
        "0x0": _csr(np.zeros((0, 0))),
        "brusselator": brusselator(6),
    }
    return out


def hessian_patterns():
    rng = np.random.default_rng(1)
    out = {
        f"random{n}@{d}": _symmetric(_random(rng, (n, n), d))
        for n, d in [(20, 0.1), (60, 0.05), (40, 0.3), (100, 0.02)]
    }
    offdiag = _csr(np.eye(8, k=1) + np.eye(8, k=-1) + np.eye(8, k=3) + np.eye(8, k=-3))
    upper = _csr(np.triu(rng.random((25, 25)) < 0.2))  # only one triangle: symmetrized
    out |= {
        "tridiagonal": banded(20, 1),
        "banded": banded(50, 4),
        "arrow": arrow(12),
        "block-diagonal": as_pattern(sp.block_diag([np.ones((3, 3)), np.ones((4, 4))])),
        "dense": _csr(np.ones((6, 6))),
        "diagonal": _csr(np.eye(9)),
        "no-diagonal": offdiag,
        "upper-triangle": upper,
        "empty-rows-cols": _csr(np.diag([1, 0, 1, 0, 0, 1])),
        "all-zero": _csr(np.zeros((5, 5))),
        "0x0": _csr(np.zeros((0, 0))),
        "brusselator": _symmetric(brusselator(5)),
    }
    return out


JACOBIANS = jacobian_patterns()
HESSIANS = hessian_patterns()


def _values(p, rng):
    """A matrix with pattern p and nonzero random entries (data in p's CSR order)."""
    data = rng.uniform(1.0, 2.0, p.nnz) * rng.choice([-1.0, 1.0], p.nnz)
    return sp.csr_array((data, p.indices, p.indptr), shape=p.shape)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", list(JACOBIANS))
def test_column_and_row_decompression_is_exact(name, order):
    p = JACOBIANS[name]
    j = _values(p, np.random.default_rng(2))
    dense = j.toarray()

    c = column_coloring(p, order)
    assert c.shape == (p.shape[1],) and c.dtype == np.int64
    assert check_coloring(p, c, "column")
    if c.size:
        assert set(c.tolist()) == set(range(c.max() + 1))  # colors 0..k-1, all used
    b = dense @ seeds(c).T
    assert b.shape == (p.shape[0], c.max() + 1 if c.size else 0)
    assert np.array_equal(b.ravel()[column_gather(p, c)], j.data)

    r = row_coloring(p, order)
    assert r.shape == (p.shape[0],)
    assert check_coloring(p, r, "row")
    b = seeds(r) @ dense
    assert np.array_equal(b.ravel()[row_gather(p, r)], j.data)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", list(HESSIANS))
def test_star_decompression_is_exact(name, order):
    p = HESSIANS[name]
    n = p.shape[0]
    c = star_coloring(p, order)
    assert c.shape == (n,)
    assert check_coloring(p, c, "star")
    # H is symmetric, its pattern that of p, p.T and the diagonal (always read)
    h = _values(as_pattern(p + p.T + sp.eye_array(n, dtype=bool)), np.random.default_rng(3))
    h = (h + h.T).toarray()
    b = h @ seeds(c).T
    got = b.ravel()[star_gather(p, c)]
    rows = np.repeat(np.arange(n), np.diff(p.indptr))
    assert np.array_equal(got, h[rows, p.indices])


def test_many_small_random_patterns():
    """Small dense-ish random graphs hit every branch of the star coloring (hubs, two
    neighbors of one color) in every order."""
    rng = np.random.default_rng(6)
    for _ in range(150):
        m, n = rng.integers(1, 12, size=2)
        a = rng.random((m, n)) < rng.uniform(0.05, 0.6)
        order = ORDERS[rng.integers(len(ORDERS))]
        c = column_coloring(a, order)
        assert check_coloring(a, c, "column")
        h = a[:, :m] if n >= m else a[:n, :]
        s = star_coloring(h, order)
        assert check_coloring(h, s, "star")
        star_gather(h, s)  # every entry readable


def test_check_coloring_catches_violations():
    p = banded(6, 1)
    assert not check_coloring(p, np.zeros(6, int), "column")
    assert not check_coloring(p, np.zeros(6, int), "row")
    assert not check_coloring(p, np.array([0, 1, 0, 1, 0, 1]), "star")  # a 2-colored path
    assert check_coloring(p, np.array([0, 1, 2, 0, 1, 2]), "column")
    assert check_coloring(_csr(np.zeros((3, 3))), np.zeros(3, int), "star")
    # the diagonal counts as present for star: neighbors differ even without it
    assert not check_coloring(_csr(np.eye(2, k=1)), np.zeros(2, int), "star")
    with pytest.raises(DiffifaceValueError, match="not a star coloring"):
        star_gather(p, np.array([0, 1, 0, 1, 0, 1]))


def test_known_color_counts():
    def k(colors):
        return int(colors.max()) + 1

    assert k(star_coloring(banded(30, 1))) == 3  # tridiagonal Hessian
    assert k(star_coloring(banded(30, 1), "natural")) == 3
    assert k(star_coloring(arrow(40))) == 2
    assert k(column_coloring(arrow(40))) == 40
    for b in (1, 2, 5):
        assert k(column_coloring(banded(100, b))) == 2 * b + 1
        assert k(row_coloring(banded(100, b))) == 2 * b + 1
    assert k(column_coloring(_csr(np.eye(7)))) == 1
    assert k(star_coloring(_csr(np.eye(7)))) == 1
    assert k(column_coloring(_csr(np.ones((3, 4))))) == 4
    assert k(row_coloring(_csr(np.ones((3, 4))))) == 3
    # asdex reports 12 colors for the Brusselator (N = 32, 48)
    assert k(column_coloring(brusselator(32))) <= 12
    assert k(column_coloring(brusselator(48))) <= 12


def test_empty_shapes():
    for shape in [(0, 4), (4, 0), (0, 0)]:
        p = _csr(np.zeros(shape))
        assert column_coloring(p).shape == (shape[1],)
        assert row_coloring(p).shape == (shape[0],)
        assert column_gather(p, column_coloring(p)).shape == (0,)
    assert star_coloring(_csr(np.zeros((0, 0)))).shape == (0,)
    assert seeds(np.zeros(0, int)).shape == (0, 0)
    assert seeds([0, 2, 1], k=4).tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0]]


def test_orders():
    p = banded(20, 2)
    perm = np.random.default_rng(4).permutation(20)
    c = coloring(p, "column", perm)
    assert check_coloring(p, c, "column")
    # greedy in natural order on a band: the colors cycle
    assert coloring(p, order="natural").tolist() == [i % 5 for i in range(20)]
    assert check_coloring(p, coloring(p, "star", perm), "star")


def test_front_door_accepts_formats():
    a = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 1]])
    want = column_coloring(_csr(a))
    for p in [
        a,
        a.astype(bool),
        a.astype(np.float32),
        sp.coo_matrix(a),
        sp.csc_array(a),
        sp.lil_matrix(a),
        sp.dok_array(a),
        sp.dia_array(a),
        sp.bsr_array(a),
        [[1, 1, 0], [0, 1, 1], [0, 0, 1]],
    ]:
        assert np.array_equal(coloring(p), want), type(p)
    # duplicates and explicit zeros of a coo input
    q = sp.coo_array(([1, 1, 0, 1], ([0, 0, 1, 2], [1, 1, 0, 2])), shape=(3, 3))
    out = as_pattern(q)
    assert q.data.tolist() == [1, 1, 0, 1] and q.row.tolist() == [0, 0, 1, 2]  # untouched
    assert out.dtype == bool and out.has_canonical_format
    assert out.toarray().tolist() == [[False, True, False], [False] * 3, [False, False, True]]
    p = as_pattern(a)
    assert as_pattern(p) is p  # canonical already: no copy


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: coloring(np.ones((2, 2, 2))), DiffifaceValueError, "2-D"),
        (lambda: coloring(np.ones(3)), DiffifaceValueError, "2-D"),
        (lambda: coloring(np.array([[0.0, np.nan]])), DiffifaceValueError, "NaN"),
        (lambda: coloring(np.array([[0.0, 2.0]])), DiffifaceValueError, "M != 0"),
        (lambda: coloring(sp.csr_array(np.array([[0.5, 1.0]]))), DiffifaceValueError, "0/1"),
        (lambda: coloring(np.array([["a"]])), DiffifaceTypeError, "dtype"),
        (lambda: coloring(None), DiffifaceTypeError, "scipy.sparse"),
        (lambda: coloring([[1, 0], [1]]), DiffifaceTypeError, "2-D array"),
        (lambda: coloring(np.ones((2, 3)), "star"), DiffifaceValueError, "square"),
        (lambda: star_coloring(np.ones((2, 3))), DiffifaceValueError, "kind='column'"),
        (lambda: coloring(np.eye(2), order="biggest"), DiffifaceValueError, "largest_first"),
        (lambda: coloring(np.eye(2), order=[0, 0]), DiffifaceValueError, "permutation"),
        (lambda: coloring(np.eye(2), order=[0.0, 1.0]), DiffifaceTypeError, "permutation"),
        (lambda: coloring(np.eye(2), kind="columns"), DiffifaceValueError, "'column'"),
        (lambda: coloring(np.eye(2), kind=1), DiffifaceTypeError, "kind"),
        (lambda: column_gather(np.eye(2), [0, 0, 0]), DiffifaceValueError, "3 entries"),
        (lambda: column_gather(np.eye(2), [0, -1]), DiffifaceValueError, "nonnegative"),
        (lambda: seeds([0.5]), DiffifaceTypeError, "integer"),
        (lambda: seeds([0, 3], k=2), DiffifaceValueError, "too few"),
    ],
)
def test_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_large_pattern_within_the_greedy_bound():
    """n = 4608 (Brusselator): a valid column coloring with at most (the most columns a
    column shares a row with) + 1 colors, as any greedy coloring. (Its speed is measured
    in docs/sparse_results.md, never asserted: timings are noisy.)"""
    p = brusselator(48)
    c = column_coloring(p)
    assert check_coloring(p, c, "column")
    q = sp.csr_array(p, dtype=np.int64)
    degree = int(((q.T @ q) != 0).sum(axis=1).max()) - 1  # (less the column itself)
    assert int(c.max()) + 1 <= degree + 1


def test_same_colors_as_asdex():
    """asdex ports SparseMatrixColorings.jl: the same greedy algorithms and orders."""
    pytest.importorskip("asdex")
    from asdex._pattern import SparsityPattern
    from asdex.coloring import color_cols, color_rows, color_symmetric

    def ad(p):
        q = p.tocoo()
        return SparsityPattern.from_coo(q.row, q.col, p.shape)

    for name, p in JACOBIANS.items():
        if p.nnz:
            assert np.array_equal(column_coloring(p), color_cols(ad(p))[0]), name
            assert np.array_equal(row_coloring(p), color_rows(ad(p))[0]), name
    rng = np.random.default_rng(5)
    extra = [_symmetric(_random(rng, (n, n), d)) for n, d in [(15, 0.3), (30, 0.15), (200, 0.02)]]
    for p in [*HESSIANS.values(), *extra]:
        if p.nnz:
            p = as_pattern(p + sp.eye_array(p.shape[0], dtype=bool))  # asdex: as present
            want = color_symmetric(ad(p), postprocess=False)[0]
            assert np.array_equal(star_coloring(p), want)
