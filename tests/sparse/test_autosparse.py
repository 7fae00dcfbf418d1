"""AutoSparse end to end: every backend and detector against the closed-form sparse
scenarios (values, exact zeros, result types), preparation, strict mode and errors."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import HAVE
from helpers import native, xp

import diffiface as di
from diffiface import testing
from diffiface.sparse import detect
from diffiface.sparse.plan import KEY
from diffiface.testing._check import short_name
from diffiface.testing._scenario import dense as densify
from diffiface.testing._scenario import flat_result
from diffiface.testing._sparse import (
    _banded_jac,
    _brusselator_jac,
    _rosenbrock_grad_hess,
    banded,
    brusselator,
    rosenbrock,
)

SCENARIOS = testing.sparse_scenarios(("float64", "float32"))
GLOBAL = [b for b, m in ((di.AutoJax(), "jax"), (di.AutoTorch(), "torch")) if HAVE[m]]
DENSE = [*GLOBAL, *([di.AutoAutograd()] if HAVE["autograd"] else []), di.AutoFiniteDifferences()]
MLX = [di.AutoMLX()] if HAVE["mlx"] else []  # (global: the NumPy tracer, Array API f)


def _np(a):
    return np.asarray(a.detach() if hasattr(a, "detach") else a)


def _pattern_of(s):
    ref = s.hess if s.hess is not None else s.jac
    return sp.csr_array(np.asarray(ref) != 0)


def _backends():
    """Each AutoSparse variant once, and both dtypes for the default one (compiling is
    most of the time here)."""
    out = []
    for b in GLOBAL + MLX:
        out += [di.AutoSparse(b), di.AutoSparse(type(b)(mode="reverse"))]
        out += [di.AutoSparse(type(b)(mode="forward"), dense=True)]
    for b in DENSE + MLX:
        out.append(di.AutoSparse(b, sparsity_detector="local"))
    return out


def _main(backend):
    """The default variant: global detection, mode None, sparse results."""
    det = backend.sparsity_detector
    return isinstance(det, str) and det == "global" and backend.mode is None and not backend.dense


def _cases():
    """Every variant prepared; unprepared too, except the JAX variants besides the main
    one (compiling dominates there, and the unprepared path is the same)."""
    out = []
    for b in _backends():
        for prepared in (False, True):
            if prepared or _main(b) or b.framework != "jax":
                tag = "prepared" if prepared else "unprepared"
                out.append(pytest.param(b, prepared, id=f"{short_name(b)}-{tag}"))
    return out


@pytest.mark.parametrize(("backend", "prepared"), _cases())
def test_matches_closed_forms(backend, prepared):
    both = _main(backend) and prepared  # float32 too
    scenarios = SCENARIOS if both else [s for s in SCENARIOS if s.dtype == np.float64]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", di.SparsityWarning)
        report = testing.check([backend], scenarios, prepared=prepared)
    ran = [r for r in report.results if r.status != "skip"]
    assert ran, report.results
    bad = [f"{r.scenario} {r.operator}: {r.status} {r.reason}" for r in ran if r.status != "pass"]
    assert not bad, bad


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_given_pattern_on_every_backend(dense):
    for s in testing.sparse_scenarios():
        backend = di.AutoSparse(dense, sparsity_detector=_pattern_of(s))
        report = testing.check([backend], [s], prepared=True)
        bad = [r.reason for r in report.results if r.status not in ("pass", "skip")]
        assert not bad, (s.name, bad)


def test_result_types():
    x = np.linspace(0.5, 1.5, 8)
    if HAVE["jax"]:
        import jax.numpy as jnp
        from jax.experimental import sparse as jsparse

        j = di.jacobian(banded, di.AutoSparse(di.AutoJax()), jnp.asarray(x))
        assert isinstance(j, jsparse.BCOO) and j.shape == (6, 8) and j.nse == 18
        # NumPy in, SciPy out (the kind of x decides, as for dense results)
        assert isinstance(di.jacobian(banded, di.AutoSparse(di.AutoJax()), x), sp.csr_array)
    if HAVE["torch"]:
        import torch

        j = di.jacobian(banded, di.AutoSparse(di.AutoTorch()), torch.tensor(x))
        assert j.layout == torch.sparse_csr and j.dtype == torch.float64
        h = di.hessian(rosenbrock, di.AutoSparse(di.AutoTorch()), torch.tensor(x))
        assert h.layout == torch.sparse_csr and h._nnz() == 8 + 2 * 7
    with pytest.warns(di.SparsityWarning):
        j = di.jacobian(
            banded, di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector="local"), x
        )
    assert isinstance(j, sp.csr_array) and j.nnz == 18


@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_dense_equals_the_dense_backend(backend):
    x = native(backend, np.random.default_rng(0).uniform(0.5, 1.5, 2 * 4 * 4))
    want = di.jacobian(brusselator, backend, x)
    got = di.jacobian(brusselator, di.AutoSparse(backend, dense=True), x)
    assert type(got) is type(want) and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(flat_result(got), flat_result(want), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_prepared_call_detects_and_colors_once(backend, monkeypatch):
    calls = []
    real = detect.pattern
    monkeypatch.setattr(detect, "pattern", lambda *a, **k: calls.append(1) or real(*a, **k))
    sparse = di.AutoSparse(backend)
    x = native(backend, np.random.default_rng(1).uniform(0.5, 1.5, 2 * 6 * 6))
    prep = di.prepare_jacobian(brusselator, sparse, x)
    for _ in range(3):
        j = di.jacobian(brusselator, sparse, x, prep=prep)
    assert len(calls) == 1
    plan = prep._probs["jacobian"].fns[KEY]
    assert plan.colors <= 12  # the 5-point stencil and the u-v coupling (asdex: 12)
    want = _brusselator_jac(np.asarray(x, dtype=np.float64))
    np.testing.assert_allclose(_np(densify(j)), want, atol=1e-12)


@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_second_order_combinations(backend):
    cls = type(backend)
    x = native(backend, np.random.default_rng(2).uniform(-1, 1.5, 9))
    want = _rosenbrock_grad_hess(np.asarray(x, dtype=np.float64))[1]
    for outer, inner in (("forward", "reverse"), ("reverse", "reverse"), ("forward", "forward")):
        b = di.second_order(di.AutoSparse(cls(mode=outer)), cls(mode=inner))
        assert isinstance(b, di.AutoSparse) and isinstance(b.backend, di.SecondOrder)
        h = di.hessian(rosenbrock, b, x)
        np.testing.assert_allclose(_np(densify(h)), want, rtol=1e-10)
    over = di.AutoSparse(di.second_order(di.AutoFiniteDifferences(), cls()))
    with pytest.raises(di.DiffifaceTypeError, match="does not cross frameworks"):
        di.hessian(rosenbrock, over, x)  # finite differences run on NumPy arrays
    h = di.hessian(rosenbrock, over, _np(x))
    np.testing.assert_allclose(_np(densify(h)), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_strict_catches_a_pattern_too_small(dense):
    x = native(dense, np.linspace(0.5, 1.5, 8))
    small = sp.csr_array(np.eye(6, 8, k=1, dtype=bool))  # misses two of the three bands
    with pytest.raises(di.DiffifaceValueError, match="outside the sparsity pattern"):
        di.jacobian(banded, di.AutoSparse(dense, sparsity_detector=small, strict=True), x)
    full = sp.csr_array(sum(np.eye(6, 8, k=k, dtype=bool) for k in range(3)))
    strict = di.AutoSparse(dense, sparsity_detector=full, strict=True)
    j = di.jacobian(banded, strict, x)
    want = _banded_jac(np.linspace(0.5, 1.5, 8))
    tol = 1e-5 if dense.framework == "finite_differences" else 1e-12
    np.testing.assert_allclose(_np(densify(j)), want, atol=tol)


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_strict_hessian(dense):
    x = native(dense, np.linspace(-1, 1.5, 8))
    diag = sp.csr_array(np.eye(8, dtype=bool))
    with pytest.raises(di.DiffifaceValueError, match="outside the sparsity pattern"):
        di.hessian(rosenbrock, di.AutoSparse(dense, sparsity_detector=diag, strict=True), x)


def test_local_detection_warns():
    x = np.linspace(0.5, 1.5, 8)
    with pytest.warns(di.SparsityWarning, match="local"):
        di.jacobian(banded, di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector="local"), x)


def test_errors_name_the_fix():
    x = np.linspace(0.5, 1.5, 8)
    fd = di.AutoFiniteDifferences()
    with pytest.raises(di.DiffifaceValueError, match=r"shape \(3, 3\).*\(6, 8\)"):
        di.jacobian(banded, di.AutoSparse(fd, sparsity_detector=np.eye(3, dtype=bool)), x)
    with pytest.raises(di.DiffifaceTypeError, match="Did you mean AutoSparse"):
        di.AutoSparse(di.AutoJax)
    with pytest.raises(di.DiffifaceTypeError, match="dense backend"):
        di.AutoSparse(di.AutoSparse(di.AutoJax()))
    with pytest.raises(di.DiffifaceValueError, match="sparsity_detector"):
        di.AutoSparse(di.AutoJax(), sparsity_detector="magic")
    with pytest.raises(di.DiffifaceValueError, match="coloring"):
        di.AutoSparse(di.AutoJax(), coloring="biggest_first")
    second = di.AutoSparse(di.second_order(di.AutoFiniteDifferences(), di.AutoFiniteDifferences()))
    with pytest.raises(di.DiffifaceTypeError, match="hessian and hvp"):
        di.jacobian(banded, second, x)


@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_other_operators_run_on_the_dense_backend(dense):
    x = native(dense, np.linspace(0.5, 1.5, 6))
    sparse = di.AutoSparse(dense, sparsity_detector="local")
    got = di.gradient(rosenbrock, sparse, x)
    want = di.gradient(rosenbrock, dense, x)
    np.testing.assert_allclose(np.asarray(flat_result(got)), flat_result(want))
    v = native(dense, np.ones(6))
    got = di.hvp(rosenbrock, sparse, x, v)
    want = di.hvp(rosenbrock, dense, x, v)
    np.testing.assert_allclose(flat_result(got), flat_result(want))


@pytest.mark.parametrize("backend", GLOBAL, ids=repr)
def test_contexts_and_empty(backend):
    ns = xp(backend)
    x = native(backend, np.linspace(0.5, 1.5, 6))
    c = native(backend, np.arange(6.0))

    def f(x, c):
        return x * c + ns.sin(x)

    j = di.jacobian(f, di.AutoSparse(backend), x, di.Constant(c))
    want = np.diag(np.arange(6.0) + np.cos(np.linspace(0.5, 1.5, 6)))
    np.testing.assert_allclose(_np(densify(j)), want, rtol=1e-12)
    # a Jacobian with no nonzero: no pass at all, and an empty sparse matrix
    j = di.jacobian(lambda x: x * 0.0 + 1.0, di.AutoSparse(backend), x)
    assert _np(densify(j)).shape == (6, 6)
    assert not _np(densify(j)).any()


def test_sparsity_pattern_and_coloring_are_public():
    p = np.eye(5, dtype=bool) | np.eye(5, k=1, dtype=bool) | np.eye(5, k=-1, dtype=bool)
    assert di.coloring(p).max() + 1 == 3
    if HAVE["jax"]:
        import jax.numpy as jnp

        got = di.sparsity_pattern(banded, di.AutoJax(), jnp.ones(8))
        assert (got.toarray() == (_banded_jac(np.ones(8)) != 0)).all()
        got = di.sparsity_pattern(rosenbrock, di.AutoJax(), jnp.ones(8), hessian=True)
        assert (got.toarray() == (np.abs(np.arange(8)[:, None] - np.arange(8)) <= 1)).all()


def test_first_use_in_a_fresh_process():
    """The first AutoSparse call of a process builds its dense backend inside the
    registry's lock (it deadlocked when the lock was not reentrant)."""
    code = (
        "import numpy as np, diffiface as di\n"
        "b = di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector=np.eye(3, dtype=bool))\n"
        "print(round(di.jacobian(lambda x: 2 * x, b, np.ones(3)).toarray().sum(), 6))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6.0"


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
def test_no_forward_mode_takes_rows():
    """A custom_vjp has no forward mode: the column plan turns to rows by itself (a
    forward mode the user fixed is a clear error), prepared or not."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def cube(x):
        return x**3

    cube.defvjp(lambda x: (x**3, x), lambda x, g: (3 * x**2 * g,))

    def f(x):
        return cube(x[1:]) - x[:-1]

    x = jnp.linspace(0.5, 1.5, 7)
    want = np.asarray(jax.jacrev(f)(x))
    # a custom_vjp hides its pattern's rows from the forward pass: give the pattern
    pattern = sp.csr_array(want != 0)
    backend = di.AutoSparse(di.AutoJax(mode=None), sparsity_detector=pattern)
    prep = di.prepare_jacobian(f, backend, x)
    for _ in range(2):
        np.testing.assert_allclose(_np(densify(di.jacobian(f, backend, x, prep=prep))), want)
        np.testing.assert_allclose(_np(densify(di.jacobian(f, backend, x))), want)
    forward = di.AutoSparse(di.AutoJax(mode="forward"), sparsity_detector=pattern)
    with pytest.raises(di.DiffifaceTypeError, match="mode='reverse'"):
        di.jacobian(f, forward, x)


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
def test_unprepared_calls_compile_no_plan_of_their_own():
    """An unprepared call plans anew (detection, coloring) but compiles nothing per plan:
    its products go through the backend's cached batched jvps."""
    import jax.numpy as jnp

    from diffiface.backends.jax.impl import CACHE

    x = jnp.linspace(0.5, 1.5, 10)
    backend = di.AutoSparse(di.AutoJax())
    di.jacobian(banded, backend, x)
    before = CACHE.entries(banded)
    for _ in range(3):
        j = di.jacobian(banded, backend, x)
    assert CACHE.entries(banded) == before
    np.testing.assert_allclose(_np(densify(j)), _banded_jac(np.linspace(0.5, 1.5, 10)))


def test_equal_given_patterns_make_equal_backends():
    """A given pattern is compared by its nonzeros, not by the object: a backend rebuilt
    with an equal pattern (any format) matches a preparation made with the first."""
    x = np.linspace(0.5, 1.5, 8)
    band = sum(np.eye(6, 8, k=k, dtype=bool) for k in range(3))
    a = di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector=band)
    b = di.AutoSparse(
        di.AutoFiniteDifferences(), sparsity_detector=sp.coo_array(band.astype(float))
    )
    assert a == b and hash(a) == hash(b)
    other = di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector=np.eye(6, 8, dtype=bool))
    assert a != other
    prep = di.prepare_jacobian(banded, a, x)
    got = di.jacobian(banded, b, x, prep=prep)
    np.testing.assert_allclose(got.toarray(), _banded_jac(x), atol=1e-5)


def _framework_patterns(band):
    """The banded pattern as the sparse and dense arrays of each framework present."""
    out = {}
    if HAVE["torch"]:
        import torch

        t = torch.tensor(band.astype(np.float64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch: CSR support is beta
            out["torch sparse_coo"] = t.to_sparse()
            out["torch sparse_csr"] = t.to_sparse_csr()
            out["torch sparse_bsr"] = t.to_sparse_bsr((2, 2))
        out["torch dense, requires_grad"] = t.clone().requires_grad_()
    if HAVE["jax"]:
        import jax.numpy as jnp
        from jax.experimental import sparse as jsparse

        out["jax BCOO"] = jsparse.BCOO.fromdense(jnp.asarray(band), nse=40)  # padded
        out["jax BCSR"] = jsparse.BCSR.fromdense(jnp.asarray(band))
    return out


def test_framework_sparse_arrays_are_given_patterns():
    """A torch sparse tensor raised torch's "can't convert Sparse layout tensor to
    numpy", a JAX BCOO JAX's NotImplementedError: each is now the pattern it holds
    (equal to the NumPy one), and the Jacobian matches the closed form."""
    x = np.linspace(0.5, 1.5, 8)
    band = sum(np.eye(6, 8, k=k, dtype=bool) for k in range(3))
    want = di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector=band)
    patterns = _framework_patterns(band)
    assert patterns
    for name, p in patterns.items():
        b = di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector=p)
        assert b == want, name
        np.testing.assert_allclose(
            di.jacobian(banded, b, x).toarray(), _banded_jac(x), atol=1e-5, err_msg=name
        )
        colors = di.coloring(p)
        assert len(set(colors.tolist())) == 3, name
