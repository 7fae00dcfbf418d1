"""One plan per call: an unprepared call of every operator (those that take a tangent
too) runs the plan the last call like it kept, the runner a prepared call runs; a
preparation's plan serves unprepared calls; AutoSparse keeps the plan of unprepared
calls. Each test proves the path (the general path made to fail, or a count) and
checks results against closed forms."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import diffiface as di
from diffiface.core import shell
from diffiface.core import unprepared as kept_plans

X = np.array([0.3, -0.7, 1.1, 0.2])
V = np.array([1.0, 0.5, -2.0, 0.25])


def _framework(name):
    """(backend, asarray, sin, total) of a framework."""
    if name == "jax":
        jax = pytest.importorskip("jax")
        jax.config.update("jax_enable_x64", True)
        jnp = jax.numpy
        return di.AutoJax(), jnp.asarray, jnp.sin, jnp.sum
    torch = pytest.importorskip("torch")
    return di.AutoTorch(), torch.tensor, torch.sin, torch.sum


def _np(a):
    return np.asarray(a.detach() if hasattr(a, "detach") else a)


class _GeneralPath:
    """Counts the calls that took the general path (shell.enter)."""

    def __init__(self, monkeypatch):
        self.count, enter = 0, shell.enter

        def counted(*args, **kwargs):
            self.count += 1
            return enter(*args, **kwargs)

        monkeypatch.setattr(shell, "enter", counted)


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_unprepared_tangent_operators_run_the_kept_plan(monkeypatch, name):
    b, asarray, sin, total = _framework(name)
    x, v = asarray(X), asarray(V)
    f = lambda x: total(sin(x) * x)  # noqa: E731
    g = lambda x: sin(x) * x[0]  # noqa: E731
    grad = np.cos(X) * X + np.sin(X)
    hess_v = (2 * np.cos(X) - X * np.sin(X)) * V
    J = np.diag(np.cos(X) * X[0])
    J[:, 0] += np.sin(X)
    cases = [
        (lambda: di.jvp(g, b, x, v), J @ V),
        (lambda: di.value_and_jvp(g, b, x, v)[1], J @ V),
        (lambda: di.vjp(g, b, x, v), V @ J),
        (lambda: di.hvp(f, b, x, v), hess_v),
        (lambda: di.gradient_and_hvp(f, b, x, v)[1], hess_v),
        (lambda: di.gradient_and_hvp(f, b, x, v)[0], grad),
    ]
    for run, _ in cases:  # the first call of each: general path, plan kept
        run()
    general = _GeneralPath(monkeypatch)
    for _ in range(2):
        for run, want in cases:
            np.testing.assert_allclose(_np(run()), want, rtol=1e-12)
    assert general.count == 0
    assert kept_plans.entries(f) == 2 and kept_plans.entries(g) == 3


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_several_tangents_never_take_one_tangents_plan(name):
    """A Tangents call compiles another function (all tangents in one pass): it keeps no
    plan, and calls of one tangent before and after it keep their own results."""
    b, asarray, sin, _total = _framework(name)
    x, v = asarray(X), asarray(V)
    g = lambda x: sin(x) * x[0]  # noqa: E731
    J = np.diag(np.cos(X) * X[0])
    J[:, 0] += np.sin(X)
    for _ in range(2):
        np.testing.assert_allclose(_np(di.jvp(g, b, x, v)), J @ V, rtol=1e-12)
        ts = di.jvp(g, b, x, di.Tangents(v, 2 * v))
        np.testing.assert_allclose(_np(ts[0]), J @ V, rtol=1e-12)
        np.testing.assert_allclose(_np(ts[1]), 2 * J @ V, rtol=1e-12)
    # a tangent of another shape: the general path explains
    with pytest.raises(di.DiffifaceValueError, match="must have the shape of x"):
        di.jvp(g, b, x, asarray(V[:2]))


def test_prepare_then_unprepared_compiles_nothing_more():
    """After prepare_*, unprepared calls on the same f and signature run the
    preparation's compiled function (JAX compiles once in all)."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    from diffiface.backends.jax.impl import CACHE

    traces = []

    def f(x):
        traces.append(1)
        return jnp.sum(jnp.sin(x) ** 2)

    x, v, b = jnp.asarray(X), jnp.asarray(V), di.AutoJax()
    prep = di.prepare_gradient(f, b, x)
    n, misses = len(traces), CACHE.misses
    want = 2 * np.sin(X) * np.cos(X)
    for g in (di.gradient(f, b, x, prep=prep), di.gradient(f, b, x), di.gradient(f, b, x)):
        np.testing.assert_allclose(g, want, rtol=1e-12)
    assert len(traces) == n and CACHE.misses == misses
    prep = di.prepare_hvp(f, b, x, v)
    n = len(traces)
    hv = 2 * np.cos(2 * X) * V
    np.testing.assert_allclose(di.hvp(f, b, x, v), hv, rtol=1e-12)
    np.testing.assert_allclose(di.hvp(f, b, x, v, prep=prep), hv, rtol=1e-12)
    assert len(traces) == n


def test_prepared_plan_kept_for_unprepared_calls_is_never_stale():
    """The preparation's compiled function baked in what f read; after a rebinding,
    unprepared calls compile anew (the prepared one keeps its own, as documented)."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    box = {"scale": 2.0}

    def make():
        scale = box["scale"]
        return lambda x: scale * jnp.sum(x**2)

    f = make()
    x = jnp.asarray(X)
    di.prepare_gradient(f, di.AutoJax(), x)
    np.testing.assert_allclose(di.gradient(f, di.AutoJax(), x), 4 * X, rtol=1e-12)

    global _SCALE
    _SCALE = 3.0

    def h(x):
        return _SCALE * jnp.sum(x**2)

    di.prepare_gradient(h, di.AutoJax(), x)
    np.testing.assert_allclose(di.gradient(h, di.AutoJax(), x), 6 * X, rtol=1e-12)
    _SCALE = 5.0
    np.testing.assert_allclose(di.gradient(h, di.AutoJax(), x), 10 * X, rtol=1e-12)


_SCALE = 1.0


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_kept_tangent_plans_hold_f_weakly(name):
    b, asarray, sin, total = _framework(name)

    def f(x):
        return total(sin(x))

    x, v = asarray(X), asarray(V)
    for _ in range(2):
        di.hvp(f, b, x, v)
        di.jvp(f, b, x, v)
        di.vjp(f, b, x, asarray(np.array(1.0)))
    assert kept_plans.entries(f) >= 2
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None


# ------------------------------------------------------------------ AutoSparse
def _sparse(name):
    b, asarray, _sin, total = _framework(name)
    if name == "jax":
        cat = pytest.importorskip("jax").numpy.concatenate
    else:
        cat = pytest.importorskip("torch").cat
    return di.AutoSparse(b), asarray, cat, total


def _chain(cat):
    return lambda x: cat([x[1:] * x[:-1], x[:1] ** 2])


def _chain_jacobian(x):
    n = x.size
    J = np.zeros((n, n))
    for i in range(n - 1):
        J[i, i + 1], J[i, i] = x[i], x[i + 1]
    J[n - 1, 0] = 2 * x[0]
    return J


def _dense(a):
    a = a.todense() if hasattr(a, "todense") else a
    a = a.to_dense() if hasattr(a, "to_dense") else a
    return _np(a)


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_unprepared_sparse_calls_detect_and_color_once(monkeypatch, name):
    from diffiface.sparse import detect

    b, asarray, cat, total = _sparse(name)
    found, pattern = [], detect.pattern

    def counted(*args, **kwargs):
        found.append(1)
        return pattern(*args, **kwargs)

    monkeypatch.setattr(detect, "pattern", counted)
    f = _chain(cat)
    h = lambda x: total(x[1:] ** 2 * x[:-1])  # noqa: E731
    for k in range(3):
        xk = X * (k + 1)
        J = di.jacobian(f, b, asarray(xk))
        np.testing.assert_allclose(_dense(J), _chain_jacobian(xk), rtol=1e-12)
        H = _dense(di.hessian(h, b, asarray(xk)))
        want = np.zeros((4, 4))
        for i in range(3):
            want[i + 1, i + 1] += 2 * xk[i]
            want[i + 1, i] += 2 * xk[i + 1]
            want[i, i + 1] += 2 * xk[i + 1]
        np.testing.assert_allclose(H, want, rtol=1e-12)
    assert len(found) == 2  # one Jacobian pattern, one Hessian pattern
    di.jacobian(f, b, asarray(np.ones(6)))  # another shape: another plan
    assert len(found) == 3


def test_unprepared_sparse_plan_follows_contexts_and_reads(monkeypatch):
    """A global pattern may depend on a context's values (f reads them as constants) and
    on what f reads: another context object, or a rebound global, detects anew."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from diffiface.sparse import detect

    found, pattern = [], detect.pattern

    def counted(*args, **kwargs):
        found.append(1)
        return pattern(*args, **kwargs)

    monkeypatch.setattr(detect, "pattern", counted)
    b, x = di.AutoSparse(di.AutoJax()), jnp.asarray(X)

    def f(x, w):
        return x * w

    w1, w2 = jnp.asarray(V), jnp.asarray(2 * V)
    for w, scale in ((w1, 1), (w1, 1), (w2, 2), (w2, 2)):
        J = _dense(di.jacobian(f, b, x, di.Constant(w)))
        np.testing.assert_allclose(J, np.diag(scale * V), rtol=1e-12)
    assert len(found) == 2


def test_local_sparse_detection_stays_per_call():
    """A local pattern holds near x only: unprepared calls detect at their own x (and
    warn each time), never reuse another point's pattern."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    b = di.AutoSparse(di.AutoJax(), sparsity_detector="local")
    f = lambda x: jnp.where(x > 0, x**2, 0.0)  # noqa: E731
    with pytest.warns(di.SparsityWarning):
        di.prepare_jacobian(f, b, jnp.asarray(X))  # (its plan serves prep= only)
    for x in (X, -X, X):
        with pytest.warns(di.SparsityWarning):
            J = _dense(di.jacobian(f, b, jnp.asarray(x)))
        np.testing.assert_allclose(J, np.diag(np.where(x > 0, 2 * x, 0.0)), atol=1e-12)


def test_unprepared_sparse_jax_calls_run_the_compiled_passes(monkeypatch):
    """On JAX an unprepared sparse call like the last one runs its compiled compressed
    passes directly, as a prepared call does; the kept plan holds f weakly."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    b = di.AutoSparse(di.AutoJax())

    def f(x):
        return jnp.concatenate([x[1:] * x[:-1], x[:1] ** 2])

    def h(x):
        return jnp.sum(x[1:] ** 2 * x[:-1])

    x = jnp.asarray(X)
    di.jacobian(f, b, x)
    di.hessian(h, b, x)
    general = _GeneralPath(monkeypatch)
    for k in (2.0, 3.0):
        np.testing.assert_allclose(_dense(di.jacobian(f, b, k * x)), _chain_jacobian(k * X))
        H = jax.hessian(h)(k * x)
        np.testing.assert_allclose(_dense(di.hessian(h, b, k * x)), H, rtol=1e-12)
    assert general.count == 0
    refs = weakref.ref(f), weakref.ref(h)
    del f, h
    gc.collect()
    assert refs[0]() is None and refs[1]() is None


def test_pytree_outputs_run_the_plan_on_jax(monkeypatch):
    """f returning a dict: a prepared or kept JAX plan runs its compiled function and
    splits the raveled result in one compiled call (the structure is fixed by the
    trace); results equal jax.jvp's, leaf by leaf."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def g(x):
        return {"a": jnp.sin(x), "b": (x**2).reshape(2, 2), "c": jnp.sum(x)}

    b, x, v = di.AutoJax(), jnp.asarray(X), jnp.asarray(V)
    y, want = jax.jvp(g, (x,), (v,))
    prep = di.prepare_jvp(g, b, x, v)
    di.value_and_jvp(g, b, x, v)
    di.jvp(g, b, x, v)
    general = _GeneralPath(monkeypatch)
    for got in (
        di.jvp(g, b, x, v, prep=prep),
        di.jvp(g, b, x, v),
        di.value_and_jvp(g, b, x, v)[1],
    ):
        assert set(got) == {"a", "b", "c"}
        for k in want:
            assert got[k].shape == want[k].shape
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12)
    value = di.value_and_jvp(g, b, x, v)[0]
    np.testing.assert_allclose(value["b"], y["b"], rtol=1e-12)
    assert general.count == 0


@pytest.mark.parametrize("prepared", [False, True])
def test_jax_has_aux_calls_run_the_plan_and_give_fresh_aux(monkeypatch, prepared):
    """An f with aux: after the first call, prepared and unprepared calls on JAX run the
    compiled runner (the general path is not entered), and each returns its own aux."""
    b, asarray, sin, total = _framework("jax")
    jnp = pytest.importorskip("jax.numpy")

    def f(x):
        return total(sin(x) * x), {"norm": jnp.sqrt(total(x * x)), "first": x[0]}

    def g(x):
        return sin(x) * x[0], x * 2

    grad = lambda a: np.cos(a) * a + np.sin(a)  # noqa: E731
    prep_g = di.prepare_gradient(f, b, asarray(X), has_aux=True) if prepared else None
    prep_j = di.prepare_jvp(g, b, asarray(X), asarray(V), has_aux=True) if prepared else None
    di.gradient(f, b, asarray(X), has_aux=True, prep=prep_g)  # keeps the plan
    di.jvp(g, b, asarray(X), asarray(V), has_aux=True, prep=prep_j)
    general = _GeneralPath(monkeypatch)
    for k in range(3):
        a = X + 0.1 * k
        got, aux = di.gradient(f, b, asarray(a), has_aux=True, prep=prep_g)
        np.testing.assert_allclose(_np(got), grad(a), rtol=1e-12)
        np.testing.assert_allclose(_np(aux["norm"]), np.linalg.norm(a), rtol=1e-12)
        assert float(aux["first"]) == a[0]
        t, aux = di.jvp(g, b, asarray(a), asarray(V), has_aux=True, prep=prep_j)
        want = np.cos(a) * a[0] * V + np.sin(a) * V[0]
        np.testing.assert_allclose(_np(t), want, rtol=1e-12)
        np.testing.assert_allclose(_np(aux), 2 * a, rtol=1e-12)
    assert general.count == 0


def test_jax_unprepared_tangents_calls_run_the_kept_plan(monkeypatch):
    """Unprepared calls with ``Tangents`` keep their plan (under a key of their own, so
    one-tangent calls of the same f keep theirs too); results match jax's transforms."""
    jax = pytest.importorskip("jax")
    b, asarray, sin, total = _framework("jax")
    f = lambda x: total(sin(x) * x)  # noqa: E731
    g = lambda x: sin(x) * x[0]  # noqa: E731
    vs = [V, np.roll(V, 1), -V]

    def tangents():
        return di.Tangents(*[asarray(v) for v in vs])

    di.hvp(f, b, asarray(X), tangents())
    di.jvp(g, b, asarray(X), tangents())
    di.vjp(g, b, asarray(X), tangents())
    di.jvp(g, b, asarray(X), asarray(V))  # a one-tangent call of the same f: its own plan
    general = _GeneralPath(monkeypatch)
    for k in range(3):
        x = asarray(X + 0.1 * k)
        hvps = di.hvp(f, b, x, tangents())
        jvps = di.jvp(g, b, x, tangents())
        vjps = di.vjp(g, b, x, tangents())
        one = di.jvp(g, b, x, asarray(V))
        for v, h, j, w in zip(vs, hvps, jvps, vjps, strict=True):
            v = asarray(v)
            want_h = jax.jvp(jax.grad(f), (x,), (v,))[1]
            np.testing.assert_allclose(_np(h), _np(want_h), rtol=1e-12)
            np.testing.assert_allclose(_np(j), _np(jax.jvp(g, (x,), (v,))[1]), rtol=1e-12)
            np.testing.assert_allclose(_np(w), _np(jax.vjp(g, x)[1](v)[0]), rtol=1e-12)
        np.testing.assert_allclose(_np(one), _np(jax.jvp(g, (x,), (asarray(V),))[1]), rtol=1e-12)
    assert general.count == 0


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_sibling_operators_get_a_runner_after_their_first_call(monkeypatch, name):
    """value_and_jvp on a jvp prep (and the other siblings): the first call runs the
    general path, the next ones the runner it left (results against closed forms)."""
    b, asarray, sin, total = _framework(name)
    f = lambda x: total(sin(x) * x)  # noqa: E731
    g = lambda x: sin(x) * x[0]  # noqa: E731
    x0, v = asarray(X), asarray(V)
    pj, pg = di.prepare_jvp(g, b, x0, v), di.prepare_gradient(f, b, x0)
    ph = di.prepare_hvp(f, b, x0, v)
    calls = [
        (lambda x: di.value_and_jvp(g, b, x, v, prep=pj), "jvp"),
        (lambda x: di.value_and_gradient(f, b, x, prep=pg), "gradient"),
        (lambda x: di.gradient_and_hvp(f, b, x, v, prep=ph), "hvp"),
    ]
    for call, _ in calls:
        call(x0)
    general = _GeneralPath(monkeypatch)
    for k in range(3):
        a = X + 0.1 * k
        for call, what in calls:
            first, second = call(asarray(a))
            if what == "jvp":
                want = (np.sin(a) * a[0], np.cos(a) * a[0] * V + np.sin(a) * V[0])
            elif what == "gradient":
                want = (np.sum(np.sin(a) * a), np.cos(a) * a + np.sin(a))
            else:
                hess_v = (2 * np.cos(a) - a * np.sin(a)) * V
                want = (np.cos(a) * a + np.sin(a), hess_v)
            np.testing.assert_allclose(_np(first), want[0], rtol=1e-12)
            np.testing.assert_allclose(_np(second), want[1], rtol=1e-12)
    assert general.count == 0


def test_jax_prepared_python_float_runs_the_runner(monkeypatch):
    """A preparation at a Python float x runs the runner (the Signature's float form):
    the general path is not entered, results are floats, against closed forms."""
    pytest.importorskip("jax")
    b, _, sin, _ = _framework("jax")
    f = lambda x: sin(x) * x  # noqa: E731
    pd, ps = di.prepare_derivative(f, b, 0.3), di.prepare_second_derivative(f, b, 0.3)
    general = _GeneralPath(monkeypatch)
    for a in (0.3, 1.7, -2.0):
        d = di.derivative(f, b, a, prep=pd)
        s = di.second_derivative(f, b, a, prep=ps)
        assert type(d) is float and type(s) is float
        np.testing.assert_allclose(d, np.sin(a) + a * np.cos(a), rtol=1e-12)
        np.testing.assert_allclose(s, 2 * np.cos(a) - a * np.sin(a), rtol=1e-12)
    assert general.count == 0
