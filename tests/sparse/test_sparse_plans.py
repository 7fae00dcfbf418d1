"""AutoSparse without cliffs: plans kept for closures made anew (and sound when their
cells differ), finite-difference costs that follow the pattern, given Hessian
triangles, a strict check whose tolerance follows the backend, and a preparation's
pattern and colors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import HAVE
from helpers import native, to_numpy, xp

import diffiface as di
from diffiface.sparse import impl as sparse_impl
from diffiface.testing._scenario import dense as densify

GLOBAL = [b for b, m in ((di.AutoJax(), "jax"), (di.AutoTorch(), "torch")) if HAVE[m]]
DENSE = [*GLOBAL, *([di.AutoAutograd()] if HAVE["autograd"] else []), di.AutoFiniteDifferences()]
FD = di.AutoFiniteDifferences()


def _tri(n: int) -> np.ndarray:
    return np.abs(np.arange(n)[:, None] - np.arange(n)) <= 1


def _rosenbrock(ns):
    def f(x):
        return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    return f


def _rosenbrock_hessian(x: np.ndarray) -> np.ndarray:
    n = x.size
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i + 1, i + 1] += 200
        h[i, i + 1] = h[i + 1, i] = -400 * x[i]
    return h


def _banded(ns):
    def f(x):
        return x[1:-1] ** 2 - x[:-2] * ns.sin(x[2:])

    return f


def _banded_jacobian(x: np.ndarray) -> np.ndarray:
    n = x.size
    j = np.zeros((n - 2, n))
    for i in range(n - 2):
        j[i, i] = -np.sin(x[i + 2])
        j[i, i + 1] = 2 * x[i + 1]
        j[i, i + 2] = -x[i] * np.cos(x[i + 2])
    return j


@pytest.fixture
def plans_made(monkeypatch):
    """The number of sparse plans built (each detects and colors once)."""
    made = [0]
    real = sparse_impl.SparsePlan

    def counted(*args, **kwargs):
        made[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(sparse_impl, "SparsePlan", counted)
    return made


# ---- 1. no cliffs: an unprepared call keeps its plan, a closure made anew too ----------
@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_closure_made_anew_runs_its_codes_plan(backend, plans_made):
    ns, sparse = xp(backend), di.AutoSparse(backend)
    x0 = np.linspace(-1.0, 1.5, 12)
    x, scale = native(backend, x0), 3.0
    rosenbrock = _rosenbrock(ns)
    for _ in range(5):

        def f(x):
            return scale * rosenbrock(x)  # a flag and a plain function in its cells

        h = di.hessian(f, sparse, x)
        np.testing.assert_allclose(to_numpy(densify(h)), 3 * _rosenbrock_hessian(x0), rtol=1e-12)
    banded = _banded(ns)
    for _ in range(5):
        j = di.jacobian(lambda x: banded(x) * scale, sparse, x)
        np.testing.assert_allclose(to_numpy(densify(j)), 3 * _banded_jacobian(x0), rtol=1e-12)
    assert plans_made[0] == 2  # one per code, not one per object


def _squares(x):
    return x[1:] * x[:-1] + x[:-1] ** 2


@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_a_function_of_globals_made_anew_runs_its_codes_plan(backend, plans_made):
    """A lambda with no cells (it reads globals only), made anew on each call, and the
    kept plan holds none of them."""
    import gc
    import weakref

    sparse, x0 = di.AutoSparse(backend), np.linspace(0.5, 2.0, 6)
    x = native(backend, x0)
    want = np.zeros((5, 6))  # d(x[i+1] x[i] + x[i]^2) / dx
    want[np.arange(5), np.arange(5)] = x0[1:] + 2 * x0[:-1]
    want[np.arange(5), np.arange(1, 6)] = x0[:-1]
    refs = []
    for _ in range(4):
        f = lambda x: _squares(x)  # noqa: E731
        refs.append(weakref.ref(f))
        np.testing.assert_allclose(to_numpy(densify(di.jacobian(f, sparse, x))), want)
    assert plans_made[0] == 1
    del f
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_closures_whose_cells_differ_get_their_own_pattern(backend, plans_made):
    sparse, x0 = di.AutoSparse(backend), np.linspace(0.5, 2.0, 6)
    x = native(backend, x0)

    def squares_at(idx):
        return lambda x: x[idx] ** 2  # the pattern follows idx's values

    for values in ([0, 1, 2], [3, 4, 5], [5, 0, 5]):
        idx = native(backend, np.array(values))
        j = to_numpy(densify(di.jacobian(squares_at(idx), sparse, x)))
        want = np.zeros((3, 6))
        want[np.arange(3), values] = 2 * x0[values]
        np.testing.assert_array_equal(j, want)
    assert plans_made[0] == 3
    idx = native(backend, np.array([5, 0, 5]))  # equal values, another array: no detection
    j = di.jacobian(squares_at(idx), sparse, x)
    np.testing.assert_array_equal(to_numpy(densify(j)), want)
    assert plans_made[0] == 3

    def shifted(k):
        return lambda x: x[k:] * x[: x.shape[0] - k]

    for k in (1, 2, 1):  # a flag by value: k = 1 again finds its plan
        j = to_numpy(densify(di.jacobian(shifted(k), sparse, x)))
        want = np.zeros((6 - k, 6))
        want[np.arange(6 - k), np.arange(k, 6)] = x0[: 6 - k]
        want[np.arange(6 - k), np.arange(6 - k)] += x0[k:]
        np.testing.assert_allclose(j, want, rtol=1e-12)
    assert plans_made[0] == 5


# ---- 2. finite differences: evaluations follow the pattern -----------------------------
def _counting(f):
    calls = [0]

    def counted(x):
        calls[0] += 1
        return f(x)

    return counted, calls


@pytest.mark.parametrize("method", ["central", "forward", "backward"])
def test_finite_difference_evaluations_follow_the_pattern(method):
    n = 40
    x = np.linspace(-1.0, 1.5, n)
    fd = di.AutoFiniteDifferences(method=method)
    f, calls = _counting(_rosenbrock(np))
    sparse = di.AutoSparse(fd, sparsity_detector=_tri(n))
    prep = di.prepare_hessian(f, sparse, x)
    calls[0] = 0
    h = di.hessian(f, sparse, x, prep=prep)
    upper = n - 1  # nonzeros above the diagonal
    # (was 3 colors x 6n = 18n central, 9n + 9 one-sided)
    assert calls[0] == (1 + 2 * n + 2 * upper if method == "central" else 1 + 2 * n + upper)
    tol = 1e-6 if method == "central" else 1e-4
    want = _rosenbrock_hessian(x)
    np.testing.assert_allclose(h.toarray(), want, atol=tol * np.abs(want).max())
    calls[0] = 0
    _, g, h2 = di.value_gradient_and_hessian(f, sparse, x)
    np.testing.assert_allclose(g, di.gradient(_rosenbrock(np), fd, x))
    np.testing.assert_allclose(h2.toarray(), h.toarray())

    band, calls = _counting(_banded(np))
    sparse = di.AutoSparse(fd, sparsity_detector=_tri(n)[1:-1] | np.eye(n - 2, n, k=2, dtype=bool))
    prep = di.prepare_jacobian(band, sparse, x)
    calls[0] = 0
    j = di.jacobian(band, sparse, x, prep=prep)
    colors = prep.ncolors
    assert colors == 3
    assert calls[0] == (1 + 2 * colors if method == "central" else 1 + colors)  # (was 3c, 2c)
    tol = 1e-8 if method == "central" else 1e-6
    np.testing.assert_allclose(j.toarray(), _banded_jacobian(x), atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_finite_difference_hessian_as_accurate_as_the_dense_one(dtype):
    x = np.random.default_rng(0).standard_normal(30).astype(dtype)
    f = _rosenbrock(np)
    want = _rosenbrock_hessian(x.astype(np.float64))
    for method in ("central", "forward"):
        fd = di.AutoFiniteDifferences(method=method)
        got = di.hessian(f, di.AutoSparse(fd, sparsity_detector=_tri(30)), x)
        assert got.dtype == np.dtype(dtype)
        dense = di.hessian(f, fd, x)
        err, dense_err = (np.abs(h - want).max() for h in (got.toarray(), dense))
        assert err <= 2 * dense_err + 1e-12 * np.abs(want).max()


# ---- 3. given patterns: one triangle of a Hessian; strict's tolerance ------------------
@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_one_triangle_of_a_hessian_pattern_gives_the_whole_hessian(dense):
    n, x0 = 7, np.linspace(-1.0, 1.5, 7)
    f, x = _rosenbrock(xp(dense)), native(dense, x0)
    want = di.hessian(f, dense, x)
    tol = 1e-6 if dense.framework == "finite_differences" else 1e-12
    for triangle in (np.triu(_tri(n)), np.tril(_tri(n)), sp.csr_array(np.triu(_tri(n)))):
        sparse = di.AutoSparse(dense, sparsity_detector=triangle)
        got = to_numpy(densify(di.hessian(f, sparse, x)))
        scale = np.abs(_rosenbrock_hessian(x0)).max()
        np.testing.assert_allclose(got, to_numpy(want), rtol=tol, atol=tol * scale)
        np.testing.assert_allclose(got, _rosenbrock_hessian(x0), rtol=tol, atol=tol * scale)
        pattern = di.sparsity_pattern(f, sparse, x, hessian=True)
        assert (pattern.toarray() == _tri(n)).all()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_strict_never_fires_on_an_exact_pattern_and_fires_on_a_miss(dense, dtype):
    n, ns = 12, xp(dense)
    rosenbrock, banded = _rosenbrock(ns), _banded(ns)
    exact_j = _tri(n)[1:-1] | np.eye(n - 2, n, k=2, dtype=bool)
    rng = np.random.default_rng(0)
    for _ in range(5):  # (was: 4 of 5 points raised on finite differences)
        x0 = (3 * rng.standard_normal(n)).astype(dtype)
        x = native(dense, x0)
        strict = di.AutoSparse(dense, sparsity_detector=_tri(n), strict=True)
        h = to_numpy(densify(di.hessian(rosenbrock, strict, x)))
        want = _rosenbrock_hessian(x0.astype(np.float64))
        assert np.abs(h - want).max() <= 0.05 * np.abs(want).max()
        strict = di.AutoSparse(dense, sparsity_detector=exact_j, strict=True)
        di.jacobian(banded, strict, x)
    x = native(dense, np.linspace(0.5, 2.0, n).astype(dtype))  # (|f| ~ 1e3: float32 FD sees)
    missing = _tri(n) & ~(np.eye(n, k=1, dtype=bool) & (np.arange(n) == 4)[:, None])
    missing &= missing.T  # one off-diagonal pair left out
    with pytest.raises(di.DiffifaceValueError, match="outside the sparsity pattern"):
        di.hessian(rosenbrock, di.AutoSparse(dense, sparsity_detector=missing, strict=True), x)
    small = exact_j & ~np.eye(n - 2, n, k=2, dtype=bool)
    with pytest.raises(di.DiffifaceValueError, match="outside the sparsity pattern"):
        di.jacobian(banded, di.AutoSparse(dense, sparsity_detector=small, strict=True), x)


# ---- 4. a preparation's pattern and colors ---------------------------------------------
def test_a_sparse_preparation_exposes_its_pattern_and_colors():
    n, x = 9, np.linspace(0.5, 1.5, 9)
    exact_j = _tri(n)[1:-1] | np.eye(n - 2, n, k=2, dtype=bool)
    cases = [(di.AutoFiniteDifferences(), "column", np)]
    if HAVE["jax"]:  # (a reverse mode: rows)
        import jax.numpy as jnp

        cases.append((di.AutoJax(mode="reverse"), "row", jnp))
    for dense, kind, ns in cases:
        sparse, x = di.AutoSparse(dense, sparsity_detector=exact_j), native(dense, x)
        prep = di.prepare_jacobian(_banded(ns), sparse, x)
        p = prep.sparsity_pattern
        assert isinstance(p, sp.csr_array) and (p.toarray() == exact_j).all()
        colors = prep.column_colors if kind == "column" else prep.row_colors
        other = prep.row_colors if kind == "column" else prep.column_colors
        assert other is None and prep.ncolors == colors.max() + 1 == 3
        mat = exact_j if kind == "column" else exact_j.T
        for c in range(prep.ncolors):  # structurally orthogonal: no row meets a color twice
            assert (mat[:, colors == c].sum(axis=1) <= 1).all()
    x = np.linspace(0.5, 1.5, 9)
    hprep = di.prepare_hessian(_rosenbrock(np), di.AutoSparse(FD, sparsity_detector=_tri(n)), x)
    assert hprep.ncolors == 3 and hprep.row_colors is None
    assert len(hprep.column_colors) == n
    with pytest.raises(di.DiffifaceTypeError, match=r"only a preparation .* AutoSparse"):
        _ = di.prepare_jacobian(_banded(np), FD, x).ncolors


# ---- 5. reach: has_aux, chunk_size, pytree x -------------------------------------------
def _given_or_global(dense, pattern):
    """AutoSparse over ``dense``: global detection where it has it, else the pattern."""
    if dense in GLOBAL:
        return di.AutoSparse(dense)
    return di.AutoSparse(dense, sparsity_detector=pattern)


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_has_aux(dense):
    n, x0 = 8, np.linspace(-1.0, 1.5, 8)
    x, rosenbrock, banded = native(dense, x0), _rosenbrock(xp(dense)), _banded(xp(dense))

    def f(x):
        return rosenbrock(x), {"twice": 2 * x}

    def g(x):
        y = banded(x)
        return y, y.sum()

    sparse = _given_or_global(dense, _tri(n))
    tol = 1e-6 if dense.framework == "finite_differences" else 1e-12
    for _ in range(2):  # (the kept plan, then a warm call)
        h, aux = di.hessian(f, sparse, x, has_aux=True)
        np.testing.assert_allclose(
            to_numpy(densify(h)), to_numpy(densify(di.hessian(rosenbrock, sparse, x)))
        )
        np.testing.assert_allclose(to_numpy(aux["twice"]), 2 * x0)
        (y, grad, h), aux = di.value_gradient_and_hessian(f, sparse, x, has_aux=True)
        np.testing.assert_allclose(float(to_numpy(y)), float(to_numpy(rosenbrock(x))))
        np.testing.assert_allclose(
            to_numpy(grad), to_numpy(di.gradient(rosenbrock, dense, x)), rtol=tol
        )
    scale = np.abs(_rosenbrock_hessian(x0)).max()
    np.testing.assert_allclose(to_numpy(densify(h)), _rosenbrock_hessian(x0), atol=tol * scale)
    prep = di.prepare_hessian(f, sparse, x, has_aux=True)
    h, aux = di.hessian(f, sparse, x, prep=prep, has_aux=True)
    np.testing.assert_allclose(to_numpy(densify(h)), _rosenbrock_hessian(x0), atol=tol * scale)
    sparse = _given_or_global(dense, _tri(n)[1:-1] | np.eye(n - 2, n, k=2, dtype=bool))
    j, total = di.jacobian(g, sparse, x, has_aux=True)
    np.testing.assert_allclose(to_numpy(densify(j)), _banded_jacobian(x0), atol=tol)
    np.testing.assert_allclose(float(to_numpy(total)), float(to_numpy(banded(x)).sum()))


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_chunk_size_gives_the_same_matrix(dense):
    n, x0 = 10, np.linspace(-1.0, 1.5, 10)
    x, rosenbrock, banded = native(dense, x0), _rosenbrock(xp(dense)), _banded(xp(dense))
    hs = _given_or_global(dense, _tri(n))
    js = _given_or_global(dense, _tri(n)[1:-1] | np.eye(n - 2, n, k=2, dtype=bool))
    h, j = (
        to_numpy(densify(a)) for a in (di.hessian(rosenbrock, hs, x), di.jacobian(banded, js, x))
    )
    for k in (1, 2, 5):
        np.testing.assert_allclose(
            to_numpy(densify(di.hessian(rosenbrock, hs, x, chunk_size=k))), h
        )
        np.testing.assert_allclose(to_numpy(densify(di.jacobian(banded, js, x, chunk_size=k))), j)
    tol = 1e-6 if dense.framework == "finite_differences" else 1e-12
    np.testing.assert_allclose(j, _banded_jacobian(x0), atol=tol)
    with pytest.raises(di.DiffifaceValueError, match="chunk_size"):
        di.jacobian(banded, js, x, chunk_size=0)


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_pytree_x(dense):
    ns = xp(dense)
    a0, b0 = np.linspace(0.5, 1.5, 4), np.linspace(-1.0, 1.0, 3)
    x = {"a": native(dense, a0), "b": native(dense, b0)}
    v0 = np.concatenate([a0, b0])
    rosenbrock, banded = _rosenbrock(ns), _banded(ns)
    cat = (
        (lambda t: ns.cat([t["a"], t["b"]]))
        if dense.framework == "torch"
        else (lambda t: ns.concatenate([t["a"], t["b"]]))
    )

    def f(t):
        return rosenbrock(cat(t))

    def g(t):
        return banded(cat(t))

    tol = 1e-6 if dense.framework == "finite_differences" else 1e-12
    hs = _given_or_global(dense, _tri(7))
    want_h = _rosenbrock_hessian(v0)
    for _ in range(2):
        y, grad, h = di.value_gradient_and_hessian(f, hs, x)
        np.testing.assert_allclose(
            float(to_numpy(y)), float(to_numpy(rosenbrock(native(dense, v0))))
        )
        np.testing.assert_allclose(to_numpy(densify(h)), want_h, atol=tol * np.abs(want_h).max())
        want_g = to_numpy(di.gradient(rosenbrock, dense, native(dense, v0)))
        for key, part in (("a", slice(0, 4)), ("b", slice(4, 7))):
            np.testing.assert_allclose(to_numpy(grad[key]), want_g[part], rtol=tol, atol=tol)
    js = _given_or_global(dense, _tri(7)[1:-1] | np.eye(5, 7, k=2, dtype=bool))
    j = to_numpy(densify(di.jacobian(g, js, x)))
    dense_j = di.jacobian(g, dense, x)  # (columns: x's leaves end to end)
    np.testing.assert_allclose(j, np.hstack([to_numpy(dense_j["a"]), to_numpy(dense_j["b"])]))
    np.testing.assert_allclose(j, _banded_jacobian(v0), atol=tol)
    prep = di.prepare_jacobian(g, js, x)
    np.testing.assert_allclose(to_numpy(densify(di.jacobian(g, js, x, prep=prep))), j)
    assert prep.sparsity_pattern.shape == (5, 7) and prep.ncolors == 3


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
def test_finite_differences_over_an_ad_gradient_takes_hvps_per_color(monkeypatch):
    """second_order(AutoFiniteDifferences(), AutoJax()): the sparse Hessian differences
    the exact inner gradient along the colors (not f's values per nonzero), and strict's
    tolerance follows its one level of differences."""
    import jax.numpy as jnp

    from diffiface.operators import fd_over

    n, x = 12, np.linspace(-1.0, 1.5, 12)
    over = di.second_order(di.AutoFiniteDifferences(), di.AutoJax())
    rosenbrock, gradients = _rosenbrock(jnp), [0]
    real = fd_over.value_and_gradient

    def counted(*args, **kwargs):
        gradients[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(fd_over, "value_and_gradient", counted)
    want = _rosenbrock_hessian(x)
    for strict in (False, True):
        sparse = di.AutoSparse(over, sparsity_detector=_tri(n), strict=strict)
        gradients[0] = 0
        h = di.hessian(rosenbrock, sparse, x)
        np.testing.assert_allclose(h.toarray(), want, atol=1e-7 * np.abs(want).max())
        if not strict:  # the gradient at x, and two per color (central)
            assert gradients[0] == 1 + 2 * 3
    missing = _tri(n) & ~np.eye(n, k=1, dtype=bool) & ~np.eye(n, k=-1, dtype=bool)
    with pytest.raises(di.DiffifaceValueError, match="outside the sparsity pattern"):
        di.hessian(rosenbrock, di.AutoSparse(over, sparsity_detector=missing, strict=True), x)


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
def test_plans_at_many_sizes_warn_of_no_recompilation():
    """Each sparse plan compiles a stand-in of diffiface's own (``calls_current``, one
    per plan); after five sizes JAX's RecompileWarning blamed the user for it ("a lambda
    or def inside the loss"). Warnings are errors here; each Jacobian is checked."""
    import warnings

    from diffiface.testing._sparse import banded

    sparse = di.AutoSparse(di.AutoJax())
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for n in range(10, 17):
            x0 = np.linspace(0.5, 1.5, n)
            for _ in range(2):  # the second call takes the code's kept plan
                got = to_numpy(di.jacobian(banded, sparse, native(di.AutoJax(), x0)).todense())
            want = np.zeros((n - 2, n))
            i = np.arange(n - 2)
            want[i, i] = x0[1:-1] ** 2  # banded: x[1:-1]**2 * x[:-2] - sin(x[2:]) + 2 x[1:-1]
            want[i, i + 1] = 2 * x0[1:-1] * x0[:-2] + 2.0
            want[i, i + 2] = -np.cos(x0[2:])
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
