"""AutoSparse without cliffs for every call form (issue 31): a pytree x (its leaves end to
end), a NumPy x and a closure made anew per call run the kept plan's runner, prepared
and unprepared, never detecting or coloring again; and a closed-over JAX or torch array
is compared on its device. Each test counts (plans built, entries to the general path,
traces of f, host reads), never times, and checks every result against the dense
backend's derivative."""

from __future__ import annotations

import warnings

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
OPS = ["jacobian", "value_and_jacobian", "hessian", "value_gradient_and_hessian"]
A0, B0 = np.linspace(0.5, 1.5, 4), np.linspace(-1.0, 1.0, 3)
V0 = np.concatenate([A0, B0])


@pytest.fixture
def counts(monkeypatch):
    """{"plans": sparse plans built (each detects and colors), "general": entries to the
    sparse operators' general path}, from a clean slate (a plan of the same code kept
    by an earlier test would be found)."""
    di.clear_caches()
    made = {"plans": 0, "general": 0}
    plan = sparse_impl.SparsePlan

    def counted_plan(*args, **kwargs):
        made["plans"] += 1
        return plan(*args, **kwargs)

    monkeypatch.setattr(sparse_impl, "SparsePlan", counted_plan)
    for name in ("sparse_jacobian", "sparse_hessian"):
        real = getattr(sparse_impl.SparseImpl, name)

        def entered(self, *args, real=real, **kwargs):
            made["general"] += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(sparse_impl.SparseImpl, name, entered)
    return made


def _functions(dense, scale=1.0):
    """(f of a dict {"a", "b"}, the same f of their concatenation): the Rosenbrock sum
    (a scalar, for Hessians) or a banded vector function (for Jacobians)."""
    ns = xp(dense)
    cat = ns.cat if dense.framework == "torch" else ns.concatenate

    def rosenbrock(v):
        return scale * (100 * (v[1:] - v[:-1] ** 2) ** 2 + (1 - v[:-1]) ** 2).sum()

    def banded(v):
        return scale * (v[1:-1] ** 2 - v[:-2] * ns.sin(v[2:]))

    return {
        "hessian": (lambda t: rosenbrock(cat([t["a"], t["b"]])), rosenbrock),
        "jacobian": (lambda t: banded(cat([t["a"], t["b"]])), banded),
    }


def _reference(dense, op, flat, v):
    """The dense backend's result of ``op`` at the concatenated x, as NumPy."""
    out = getattr(di, op)(flat, dense, v)
    return tuple(map(to_numpy, out)) if isinstance(out, tuple) else (to_numpy(out),)


def _check(dense, op, out, want, x_keys=None):
    """``out`` (a sparse result, with the value and gradient where op returns them)
    against the dense ``want``; a gradient in x's structure where ``x_keys``."""
    outs = out if isinstance(out, tuple) else (out,)
    tol = 1e-6 if dense.framework == "finite_differences" else 1e-12
    *rest, matrix = outs
    scale = np.abs(want[-1]).max()
    np.testing.assert_allclose(to_numpy(densify(matrix)), want[-1], atol=tol * scale)
    if rest:
        np.testing.assert_allclose(to_numpy(rest[0]), want[0], rtol=1e-12)
    if len(rest) == 2:
        g = rest[1]
        if x_keys is not None:
            assert set(g) == set(x_keys)
            g = np.concatenate([to_numpy(g[k]) for k in x_keys])
        np.testing.assert_allclose(to_numpy(g), want[1], atol=tol * scale)


def _family(op: str) -> str:
    return "hessian" if "hessian" in op else "jacobian"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_a_pytree_x_runs_its_kept_plan(dense, op, counts):
    """Unprepared: one plan and one general call, then the kept runner on x's leaves;
    prepared: the preparation's runner (a sibling operator learns it on its first
    call)."""
    sparse = di.AutoSparse(dense)
    f, flat = _functions(dense)[_family(op)]
    x = {"a": native(dense, A0), "b": native(dense, B0)}
    want = _reference(dense, op, flat, native(dense, V0))
    for _ in range(4):
        _check(dense, op, getattr(di, op)(f, sparse, x), want, ("a", "b"))
    assert counts == {"plans": 1, "general": 1}
    prep = getattr(di, f"prepare_{_family(op)}")(f, sparse, x)
    before = counts["general"]
    for _ in range(3):
        _check(dense, op, getattr(di, op)(f, sparse, x, prep=prep), want, ("a", "b"))
    assert counts["general"] - before == (0 if op == _family(op) else 1)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dense", GLOBAL, ids=repr)
def test_a_numpy_x_runs_its_kept_plan(dense, op, counts):
    """A NumPy x on JAX or torch: NumPy results (the matrix as ``scipy.sparse``) from the
    kept runner, as the general path gives them."""
    sparse = di.AutoSparse(dense)
    _, flat = _functions(dense)[_family(op)]
    want = _reference(dense, op, flat, native(dense, V0))
    outs = [getattr(di, op)(flat, sparse, V0.copy()) for _ in range(4)]
    assert counts == {"plans": 1, "general": 1}
    for out in outs:
        _check(dense, op, out, want)
        *rest, matrix = out if isinstance(out, tuple) else (out,)
        assert isinstance(matrix, sp.csr_array)
        assert all(type(a) is np.ndarray for a in rest)


@pytest.mark.parametrize("op", ["jacobian", "hessian"])
@pytest.mark.parametrize("dense", DENSE, ids=repr)
def test_a_closure_made_per_call_of_a_pytree_x_runs_its_codes_plan(dense, op, counts):
    sparse = di.AutoSparse(dense)
    x = {"a": native(dense, A0), "b": native(dense, B0)}
    _, flat = _functions(dense, 3.0)[op]
    want = _reference(dense, op, flat, native(dense, V0))
    for _ in range(5):
        f, _ = _functions(dense, 3.0)[op]  # a new closure of the same code and flag
        _check(dense, op, getattr(di, op)(f, sparse, x), want)
    assert counts == {"plans": 1, "general": 1}
    f, _ = _functions(dense, 2.0)[op]  # another flag: another plan
    _check(dense, op, getattr(di, op)(f, sparse, x), tuple(2 / 3 * w for w in want))
    assert counts == {"plans": 2, "general": 2}


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
@pytest.mark.parametrize("op", OPS)
def test_a_warm_jax_call_of_a_pytree_x_runs_no_f(op):
    """The kept runner is the compiled passes: f is not traced again."""
    import jax.numpy as jnp

    dense = di.AutoJax()
    f0, flat = _functions(dense)[_family(op)]
    runs = [0]

    def f(t):
        runs[0] += 1
        return f0(t)

    x = {"a": jnp.asarray(A0), "b": jnp.asarray(B0)}
    getattr(di, op)(f, di.AutoSparse(dense), x)
    getattr(di, op)(f, di.AutoSparse(dense), x)
    runs[0] = 0
    out = getattr(di, op)(f, di.AutoSparse(dense), x)
    assert runs[0] == (1 if op == "value_gradient_and_hessian" else 0)  # (its value: f once)
    _check(dense, op, out, _reference(dense, op, flat, jnp.asarray(V0)), ("a", "b"))


# ---- a closed-over array is compared where it lives ------------------------------------
def _host_reads(monkeypatch, like) -> list:
    """Counts the reads of ``like``'s framework's arrays to the host (``values``)."""
    from diffiface import _arrays

    fw, reads = _arrays.owner(like), []
    real = fw.values

    def values(leaf):
        reads.append(type(leaf).__name__)
        return real(leaf)

    monkeypatch.setattr(fw, "values", values)
    return reads


def _weighted(w):
    return lambda x: (w * x[1:] * x[:-1]).sum() + (x**3).sum()


def _weighted_hessian(w0, x0):
    h = np.diag(6 * x0)
    h[np.arange(5), np.arange(1, 6)] = h[np.arange(1, 6), np.arange(5)] = w0
    return h


@pytest.mark.parametrize("dense", GLOBAL, ids=repr)
def test_closed_over_arrays_are_compared_on_their_device(dense, counts, monkeypatch):
    """A closure made per call over an array of equal values (another object each time)
    runs its code's plan without reading the array to the host; other values still
    get a plan of their own."""
    sparse, x0, w0 = di.AutoSparse(dense), np.linspace(0.5, 1.5, 6), np.arange(1.0, 6.0)
    x = native(dense, x0)
    ws = [native(dense, w0) for _ in range(4)]
    reads = _host_reads(monkeypatch, ws[0])
    for w in ws:
        h = di.hessian(_weighted(w), sparse, x)
        np.testing.assert_allclose(to_numpy(densify(h)), _weighted_hessian(w0, x0), rtol=1e-12)
    assert counts["plans"] == 1 and reads == []
    other = native(dense, w0[::-1].copy())
    h = di.hessian(_weighted(other), sparse, x)
    np.testing.assert_allclose(to_numpy(densify(h)), _weighted_hessian(w0[::-1], x0), rtol=1e-12)
    assert counts["plans"] == 2


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
def test_a_warm_closure_over_a_jax_array_transfers_nothing():
    """Under ``jax.transfer_guard("disallow")`` (on a GPU it sees device-to-host reads
    too: the comparison's one bool is an explicit read)."""
    import jax
    import jax.numpy as jnp

    sparse, x0, w0 = di.AutoSparse(di.AutoJax()), np.linspace(0.5, 1.5, 6), np.arange(1.0, 6.0)
    x = jnp.asarray(x0)
    fs = [_weighted(jnp.asarray(w0)) for _ in range(4)]  # (made before the guard)
    for f in fs[:3]:
        di.hessian(f, sparse, x)
    with jax.transfer_guard("disallow"):
        h = di.hessian(fs[3], sparse, x)
    np.testing.assert_allclose(densify(h), _weighted_hessian(w0, x0), rtol=1e-12)


@pytest.mark.parametrize("dense", GLOBAL, ids=repr)
def test_one_f_called_with_native_and_numpy_x_in_turn(dense, counts):
    """Each signature keeps its plan; the code's runner is built once per plan, not on
    every call that replaces the other signature's entry (JAX warned of recompiling
    diffiface's own stand-in after five)."""
    sparse = di.AutoSparse(dense)

    def f(v):  # (a code of its own: other tests' objects of _functions' code count too)
        return (100 * (v[1:] - v[:-1] ** 2) ** 2 + (1 - v[:-1]) ** 2).sum()

    want = _reference(dense, "hessian", f, native(dense, V0))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", di.RecompileWarning)
        for _ in range(8):
            for x in (native(dense, V0), V0.copy()):
                _check(dense, "hessian", di.hessian(f, sparse, x), want)
    assert counts["plans"] == 2
    assert [str(w.message) for w in seen if w.category is di.RecompileWarning] == []


@pytest.mark.skipif(not HAVE["torch"], reason="needs torch")
@pytest.mark.parametrize("pytree", [False, True])
def test_a_warm_unprepared_torch_call_watches_f_no_more(pytree, monkeypatch):
    """torch watches f's first call (``graph.Watch``); the kept runner holds f weakly
    and keeps that fact (a weak proxy could not be keyed: every call was watched, unless
    a dense call of f's code came first). The reference comes last for that reason."""
    from diffiface.backends.torch import graph

    dense = di.AutoTorch()
    f, flat = _functions(dense)["hessian"]
    x = {"a": native(dense, A0), "b": native(dense, B0)} if pytree else native(dense, V0)
    g = f if pytree else flat
    watched, real = [0], graph.Watch.__init__

    def counted(self, *args, **kwargs):
        watched[0] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(graph.Watch, "__init__", counted)
    for _ in range(3):
        di.hessian(g, di.AutoSparse(dense), x)
    watched[0] = 0  # (f's first call, and the kept runner's)
    outs = [di.hessian(g, di.AutoSparse(dense), x) for _ in range(3)]
    assert watched[0] == 0
    want = _reference(dense, "hessian", flat, native(dense, V0))
    for out in outs:
        _check(dense, "hessian", out, want)
