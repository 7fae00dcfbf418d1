"""The vertex orders (SparseMatrixColorings.jl's and ColPack's), "best", the star
bicoloring and the acyclic coloring with substitution: each coloring's defining property
checked by brute force on the graph, each decompression against the dense matrix, the
orders' own definitions, known color counts (SparseMatrixColorings.jl's test/theory.jl),
and bidirectional AutoSparse Jacobians and substitution Hessians."""

from __future__ import annotations

import importlib.util
import itertools
import pathlib

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import HAVE
from helpers import native

import diffiface as di
from diffiface._errors import DiffifaceValueError
from diffiface.sparse.coloring import (
    BEST,
    ORDERS,
    Substitution,
    acyclic_coloring,
    as_pattern,
    bicolor_gather,
    bicoloring,
    check_coloring,
    coloring,
    column_coloring,
    column_gather,
    row_coloring,
    seeds,
    star_coloring,
    star_gather,
)
from diffiface.sparse.coloring._graphs import adjacency_graph
from diffiface.sparse.coloring.orders import vertex_order
from diffiface.sparse.plan import KEY

# test_coloring.py's patterns, loaded by path: "sparse" can also name benchmarks/sparse.py
_spec = importlib.util.spec_from_file_location(
    "_coloring_cases", pathlib.Path(__file__).with_name("test_coloring.py")
)
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
HESSIANS, JACOBIANS, _values, arrow, banded = (
    _cases.HESSIANS,
    _cases.JACOBIANS,
    _cases._values,
    _cases.arrow,
    _cases.banded,
)

NAMED = [*ORDERS, "best"]


def _k(c):
    return int(c.max()) + 1 if c.size else 0


def _adjacency(p):
    """The undirected graph of a square pattern as neighbor sets (no self-loops)."""
    q = as_pattern(p + p.T).tocoo()
    nb = [set() for _ in range(p.shape[0])]
    for i, j in zip(q.row.tolist(), q.col.tolist(), strict=True):
        if i != j:
            nb[i].add(j)
    return nb


def _is_star(p, c):
    """Brute force: a distance-1 coloring with no path on 4 vertices in 2 colors."""
    nb = _adjacency(p)
    for a in range(len(nb)):
        for b in nb[a]:
            if c[a] == c[b]:
                return False
            for x in nb[b] - {a}:
                for y in nb[x] - {a, b}:
                    if c[a] == c[x] and c[b] == c[y]:
                        return False
    return True


def _column_ok(p, c):
    """Brute force: no row holds two columns of one color."""
    d = p.toarray()
    return all(len(set(c[np.flatnonzero(r)].tolist())) == r.sum() for r in d)


@pytest.mark.parametrize("order", NAMED)
@pytest.mark.parametrize("name", list(JACOBIANS))
def test_column_row_orders_are_valid_and_exact(name, order):
    p = JACOBIANS[name]
    dense = _values(p, np.random.default_rng(2))
    c = column_coloring(p, order)
    assert _column_ok(p, c) and check_coloring(p, c, "column")
    assert np.array_equal((dense.toarray() @ seeds(c).T).ravel()[column_gather(p, c)], dense.data)
    r = row_coloring(p, order)
    assert _column_ok(p.T.tocsr(), r)


@pytest.mark.parametrize("order", NAMED)
@pytest.mark.parametrize("name", list(HESSIANS))
def test_star_orders_are_valid_and_exact(name, order):
    p = HESSIANS[name]
    n = p.shape[0]
    c = star_coloring(p, order)
    assert _is_star(p, c) and check_coloring(p, c, "star")
    h = _values(as_pattern(p + p.T + sp.eye_array(n, dtype=bool)), np.random.default_rng(3))
    h = (h + h.T).toarray()
    rows = np.repeat(np.arange(n), np.diff(p.indptr))
    got = (h @ seeds(c).T).ravel()[star_gather(p, c)]
    assert np.array_equal(got, h[rows, p.indices])


def _dynamic_ok(order, nb, v_order):
    """The order's definition, step by step: the vertex taken has the extreme dynamic
    degree among those left (smallest_last: least remaining degree, taken from the
    end; incidence_degree: most ordered neighbors; dynamic_largest_first: most
    unordered neighbors)."""
    n = len(nb)
    seq = v_order[::-1] if order == "smallest_last" else v_order
    done = set()
    for v in seq.tolist():
        left = [u for u in range(n) if u not in done]
        if order == "incidence_degree":
            score = {u: len(nb[u] & done) for u in left}
            ok = score[v] == max(score.values())
        else:
            score = {u: len(nb[u] - done) for u in left}
            best = min if order == "smallest_last" else max
            ok = score[v] == best(score.values())
        if not ok:
            return False
        done.add(v)
    return True


@pytest.mark.parametrize("order", ["smallest_last", "incidence_degree", "dynamic_largest_first"])
def test_dynamic_orders_follow_their_definition(order):
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 25))
        p = _csr_sym(rng.random((n, n)) < rng.uniform(0.05, 0.5))
        indptr, indices = adjacency_graph(p)
        v = vertex_order(order, indptr, indices)
        assert sorted(v.tolist()) == list(range(n))
        assert _dynamic_ok(order, _adjacency(p), v)


def _csr_sym(a):
    return as_pattern(sp.csr_array(a) + sp.csr_array(a).T)


def test_best_takes_the_fewest():
    rng = np.random.default_rng(8)
    for _ in range(20):
        a = rng.random((30, 30)) < 0.15
        counts = [_k(column_coloring(a, o)) for o in BEST]
        assert _k(column_coloring(a, "best")) == min(counts)
        counts = [_k(star_coloring(a, o)) for o in BEST]
        assert _k(star_coloring(a, "best")) == min(counts)
        pair = ("natural", "smallest_last")
        assert _k(coloring(a, "column", pair)) == min(_k(column_coloring(a, o)) for o in pair)


def banded_matrix(n, rho):
    """SparseMatrixColorings.jl's test/theory.jl: rho off-diagonal bands."""
    return banded(n, rho // 2)


@pytest.mark.parametrize("order", ["largest_first", "natural", "best"])
def test_known_counts_banded(order):
    """Star coloring of a symmetric band with rho off-diagonal bands: 2 * (rho // 2) + 1
    colors (test/theory.jl, after Gebremedhin, Tarafdar, Manne & Pothen 2007); columns of
    a band of half-width b: 2b + 1 (a clique of that size: no fewer)."""
    for rho in (10, 20):
        assert _k(star_coloring(banded_matrix(2000, rho), order)) == rho + 1
    for b in (1, 3):
        assert _k(column_coloring(banded(500, b), order)) == 2 * b + 1


def test_bicoloring_arrow_and_decompression():
    rng = np.random.default_rng(9)
    for n in (6, 50, 300):
        p = arrow(n)
        cc, rc = bicoloring(p, "best")
        assert _k(cc) + _k(rc) <= 4  # a column or a row coloring: n
        assert check_coloring(p, (cc, rc), "bidirectional")
        _check_bidirectional(p, cc, rc, rng)


def _check_bidirectional(p, cc, rc, rng):
    j = _values(p, rng)
    d = j.toarray()
    fwd = (d @ seeds(cc).T).T  # (kc, m)
    rev = seeds(rc) @ d  # (kr, n)
    flat = np.concatenate([fwd.ravel(), rev.ravel()])
    assert np.array_equal(flat[bicolor_gather(p, cc, rc)], j.data)


@pytest.mark.parametrize("order", NAMED)
@pytest.mark.parametrize("name", list(JACOBIANS))
def test_bicoloring_valid_and_exact(name, order):
    p = JACOBIANS[name]
    cc, rc = coloring(p, "bidirectional", order)
    assert cc.shape == (p.shape[1],) and rc.shape == (p.shape[0],)
    assert check_coloring(p, (cc, rc), "bidirectional")
    _check_bidirectional(p, cc, rc, np.random.default_rng(10))
    # brute force: each entry alone of its color in its row (forward) or column (reverse)
    d = p.toarray()
    for i, jj in zip(*np.nonzero(d), strict=True):
        fwd = cc[jj] >= 0 and (cc[np.flatnonzero(d[i])] == cc[jj]).sum() == 1
        rev = rc[i] >= 0 and (rc[np.flatnonzero(d[:, jj])] == rc[i]).sum() == 1
        assert fwd or rev


@pytest.mark.parametrize("order", NAMED)
@pytest.mark.parametrize("name", list(JACOBIANS))
def test_bicoloring_takes_no_more_products_than_columns_or_rows(name, order):
    """A column (row) coloring alone is a bicoloring with no row (column) in a seed, so a
    bicoloring never takes more products than the better of the two (random patterns:
    the star bicoloring alone took 9 where 8 columns did)."""
    p = JACOBIANS[name]
    cc, rc = bicoloring(p, order)
    one_side = min(_k(column_coloring(p, order)), _k(row_coloring(p, order)))
    assert _k(cc) + _k(rc) <= one_side
    assert check_coloring(p, (cc, rc), "bidirectional")


def test_bicoloring_violations_caught():
    p = arrow(5)
    none = -np.ones(5, dtype=np.int64)
    assert not check_coloring(p, (none, none), "bidirectional")
    assert not check_coloring(p, (np.zeros(5, int), none), "bidirectional")
    assert check_coloring(p, (np.arange(5), none), "bidirectional")
    with pytest.raises(DiffifaceValueError, match="not a bicoloring"):
        bicolor_gather(p, none, none)
    for a, b in itertools.product(range(3), repeat=2):  # tiny exhaustive: the brute force
        cc = np.array([a, b, 0, 1, 2]) % 3
        ok = check_coloring(p, (cc, none), "bidirectional")
        assert ok == _column_ok(p, cc)


def _arrow_f(x):
    return x * x[0] + x[0] ** 3 + x.sum() * 0.5


def _arrow_jac(x):
    n = x.size
    j = np.diag(np.full(n, x[0]))
    j[:, 0] += x + 3 * x[0] ** 2
    j[0, 0] = 2 * x[0] + 3 * x[0] ** 2
    return j + 0.5


DENSE = [
    *([di.AutoJax()] if HAVE["jax"] else []),
    *([di.AutoTorch()] if HAVE["torch"] else []),
    *([di.AutoAutograd()] if HAVE["autograd"] else []),
    di.AutoFiniteDifferences(),
]
REVERSE = DENSE[:-1]  # backends with reverse products, which a bicoloring runs


@pytest.mark.parametrize("dense", REVERSE, ids=repr)
def test_autosparse_bidirectional_jacobian(dense):
    """An arrow Jacobian (dense row and column): a few forward and reverse products
    together, where columns or rows alone take n."""
    n = 40
    pattern = arrow(n)  # x * x[0] + sum: every output reads x[0], output 0 all of x
    pattern = as_pattern(pattern + sp.csr_array(np.ones((n, n), bool)))
    x0 = np.linspace(0.5, 1.5, n)

    def f(x):
        return x * x[0] + x[0] ** 3

    p = arrow(n)
    sparse = di.AutoSparse(dense, sparsity_detector=p, bidirectional=True, coloring="best")
    x = native(dense, x0)
    prep = di.prepare_jacobian(f, sparse, x)
    got = di.jacobian(f, sparse, x, prep=prep)
    want = np.diag(np.full(n, x0[0]))
    want[:, 0] += x0 + 3 * x0[0] ** 2
    want[0, 0] = 2 * x0[0] + 3 * x0[0] ** 2
    tol = 1e-6 if dense.framework == "finite_differences" else 1e-12
    got = got.toarray() if hasattr(got, "toarray") else _dense(got)
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    plan = prep._probs["jacobian"].fns[KEY]
    assert plan.kind == "bidirectional" and plan.colors <= 4
    got = di.jacobian(f, sparse, x)  # unprepared: the same
    got = got.toarray() if hasattr(got, "toarray") else _dense(got)
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("dense", REVERSE, ids=repr)
def test_autosparse_bidirectional_with_one_side_runs_f_once(dense):
    """A bicoloring that is a column coloring alone (a bidiagonal Jacobian): jvps only,
    f run as often as by the column-colored call, the Jacobian exact."""
    n, runs = 30, [0]
    x0 = np.linspace(0.5, 1.5, n)

    def f(x):
        runs[0] += 1
        return x[1:] * x[:-1]

    want = np.zeros((n - 1, n))
    want[np.arange(n - 1), np.arange(n - 1)] = x0[1:]
    want[np.arange(n - 1), np.arange(1, n)] = x0[:-1]
    counts = []
    for bidirectional in (False, True):
        sparse = di.AutoSparse(dense, bidirectional=bidirectional)
        x = native(dense, x0)
        prep = di.prepare_jacobian(f, sparse, x)
        runs[0] = 0
        got = _dense(di.jacobian(f, sparse, x, prep=prep))
        counts.append(runs[0])
        np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-12)
        plan = prep._probs["jacobian"].fns[KEY]
        assert plan.colors == 2
    if dense.framework != "jax":  # JAX runs f's Python when it traces, not per call
        assert counts[1] == counts[0]


def _dense(a):
    if hasattr(a, "todense"):
        a = a.todense()
    if hasattr(a, "to_dense"):
        a = a.to_dense()
    return np.asarray(a.detach() if hasattr(a, "detach") else a)


def test_autosparse_arguments():
    with pytest.raises(DiffifaceValueError, match="mode=None"):
        di.AutoSparse(di.AutoAutograd(mode="forward"), bidirectional=True)
    with pytest.raises(di.DiffifaceTypeError, match="True or False"):
        di.AutoSparse(di.AutoFiniteDifferences(), bidirectional=1)
    with pytest.raises(DiffifaceValueError, match="no reverse products"):
        di.AutoSparse(di.AutoFiniteDifferences(), bidirectional=True)
    a, b = di.AutoSparse(di.AutoAutograd()), di.AutoSparse(di.AutoAutograd(), bidirectional=True)
    assert a != b and "bidirectional=True" in repr(b) and "bidirectional" not in repr(a)
    for order in NAMED:
        assert di.AutoSparse(di.AutoAutograd(), coloring=order).coloring == order
    with pytest.raises(DiffifaceValueError, match="decompression"):
        di.AutoSparse(di.AutoAutograd(), decompression="solve")
    c = di.AutoSparse(di.AutoAutograd(), decompression="substitution")
    assert c != a and "decompression='substitution'" in repr(c)
    from diffiface._backend_types import _ORDERS

    assert _ORDERS == (*ORDERS, "best")  # one list of names, kept in two modules


def _is_acyclic(p, c):
    """Brute force: a distance-1 coloring whose two-colored subgraphs hold no cycle."""
    nb = _adjacency(p)
    edges = [(a, b) for a in range(len(nb)) for b in nb[a] if a < b]
    if any(c[a] == c[b] for a, b in edges):
        return False
    for pair in {frozenset((int(c[a]), int(c[b]))) for a, b in edges}:
        root = {}

        def find(v, root=root):
            while root.setdefault(v, v) != v:
                v = root[v]
            return v

        for a, b in edges:
            if {int(c[a]), int(c[b])} == pair:
                ra, rb = find(a), find(b)
                if ra == rb:
                    return False
                root[ra] = rb
    return True


def _hessian_values(p, seed):
    n = p.shape[0]
    h = _values(as_pattern(p + p.T + sp.eye_array(n, dtype=bool)), np.random.default_rng(seed))
    return (h + h.T).toarray()


@pytest.mark.parametrize("order", NAMED)
@pytest.mark.parametrize("name", list(HESSIANS))
def test_acyclic_orders_valid_and_substitution_exact(name, order):
    p = HESSIANS[name]
    n = p.shape[0]
    c = acyclic_coloring(p, order)
    assert c.shape == (n,) and _is_acyclic(p, c) and check_coloring(p, c, "acyclic")
    assert np.array_equal(coloring(p, "acyclic", order), c)
    h = _hessian_values(p, 4)
    b = h @ seeds(c).T  # (n, k)
    got = Substitution(p, c)(b.T.ravel())
    rows = np.repeat(np.arange(n), np.diff(p.indptr))
    np.testing.assert_allclose(got, h[rows, p.indices], rtol=1e-12, atol=1e-12)


def test_acyclic_random_patterns_and_violations():
    rng = np.random.default_rng(11)
    for _ in range(100):
        n = int(rng.integers(1, 14))
        p = _csr_sym(rng.random((n, n)) < rng.uniform(0.05, 0.7))
        order = NAMED[int(rng.integers(len(NAMED)))]
        c = acyclic_coloring(p, order)
        assert _is_acyclic(p, c)
        h = _hessian_values(p, 5)
        got = Substitution(p, c)((h @ seeds(c).T).T.ravel())
        rows = np.repeat(np.arange(n), np.diff(p.indptr))
        np.testing.assert_allclose(got, h[rows, p.indices], rtol=1e-10, atol=1e-10)
    cycle = _csr_sym(np.eye(4, k=1, dtype=bool) | np.eye(4, k=-3, dtype=bool))
    with pytest.raises(DiffifaceValueError, match="not an acyclic coloring"):
        Substitution(cycle, np.array([0, 1, 0, 1]))  # a 2-colored 4-cycle
    assert not check_coloring(cycle, np.array([0, 1, 0, 1]), "acyclic")
    assert check_coloring(cycle, np.array([0, 1, 0, 2]), "acyclic")
    with pytest.raises(DiffifaceValueError, match="not an acyclic coloring"):
        Substitution(cycle, np.array([0, 0, 1, 2]))  # neighbors of one color
    assert _k(acyclic_coloring(cycle)) == 3


@pytest.mark.parametrize("order", ["largest_first", "natural"])
def test_known_counts_banded_acyclic(order):
    """test/theory.jl: acyclic coloring of rho off-diagonal bands takes rho // 2 + 1."""
    for rho in (10, 20):
        assert _k(acyclic_coloring(banded_matrix(2000, rho), order)) == rho // 2 + 1


def _banded_f(x):
    return (x**4).sum() + (x[1:] * x[:-1] ** 2).sum() + (x[2:] * x[:-2]).sum()


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_autosparse_substitution_hessian(dense):
    """Acyclic coloring and substitution: 3 Hessian-vector products where the star
    coloring takes 5 (half-width 2), the same Hessian as the dense backend's."""
    x0 = np.linspace(0.5, 1.5, 30)
    x = native(dense, x0)
    det = "global" if dense.framework in ("jax", "torch") else banded(30, 2)
    sparse = di.AutoSparse(dense, sparsity_detector=det, decompression="substitution")
    prep = di.prepare_hessian(_banded_f, sparse, x)
    got = _dense(di.hessian(_banded_f, sparse, x, prep=prep))
    want = _dense(di.hessian(_banded_f, dense, x))
    tol = 1e-5 if dense.framework == "finite_differences" else 1e-12
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
    plan = prep._probs["hessian"].fns[KEY]
    assert plan.kind == "acyclic" and plan.colors == 3
    star = di.AutoSparse(dense, sparsity_detector=det)
    prep = di.prepare_hessian(_banded_f, star, x)
    assert prep._probs["hessian"].fns[KEY].colors == 5


def test_substitution_traces_under_jit():
    jax = pytest.importorskip("jax")
    x = jax.numpy.linspace(0.5, 1.5, 20)
    sparse = di.AutoSparse(di.AutoJax(), decompression="substitution")
    prep = di.prepare_hessian(_banded_f, sparse, x)
    eager = di.hessian(_banded_f, sparse, x, prep=prep).todense()
    jitted = jax.jit(lambda t: di.hessian(_banded_f, sparse, t, prep=prep).todense())(x)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-6)
    want = jax.hessian(_banded_f)(x)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(want), rtol=1e-5, atol=1e-5)


FIG_41 = """110000 111011 011100 001101 010010 010101"""  # "What color...", Figure 4.1
FIG_61 = """1100001000 1110100000 0111010000 0011000001 0100110100
0010110010 1000001100 0000101110 0000010111 0001000011"""  # Figure 6.1


def _figure(rows):
    return as_pattern(np.array([[ch == "1" for ch in r] for r in rows.split()]))


def test_reference_examples():
    """SparseMatrixColorings.jl's src/examples.jl (Gebremedhin, Manne & Pothen 2005):
    Figure 4.1 with the paper's star coloring (3 colors), Figure 6.1 with its acyclic
    coloring (3 colors, not a star coloring). diffiface's colorings use no more."""
    star41 = np.array([1, 2, 1, 3, 1, 1]) - 1
    acyclic61 = np.array([1, 2, 1, 2, 1, 3, 2, 3, 2, 3]) - 1
    p41, p61 = _figure(FIG_41), _figure(FIG_61)
    assert check_coloring(p41, star41, "star") and _is_star(p41, star41)
    assert check_coloring(p61, acyclic61, "acyclic") and _is_acyclic(p61, acyclic61)
    assert not check_coloring(p61, acyclic61, "star")
    h = _hessian_values(p61, 12)
    got = Substitution(p61, acyclic61)((h @ seeds(acyclic61).T).T.ravel())
    rows = np.repeat(np.arange(10), np.diff(p61.indptr))
    np.testing.assert_allclose(got, h[rows, p61.indices], rtol=1e-12)
    assert _k(star_coloring(p41, "best")) <= 3
    assert _k(acyclic_coloring(p61, "best")) <= 3
