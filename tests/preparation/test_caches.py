"""Caches: JAX compiles once per function and shape, the tables are bounded and
thread-safe, and dead functions and closures over large arrays are freed."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di

X_FREED = np.array([0.3, -0.7, 1.1])


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
def test_closures_over_large_arrays_are_freed():
    import jax.numpy as jnp

    big = np.ones(1_000_000)
    alive = weakref.ref(big)

    def make(big):
        return lambda x: (x * jnp.asarray(big[:3])).sum()

    f = make(big)
    del big
    di.gradient(f, di.AutoJax(), jnp.asarray(X_FREED))
    di.hessian(f, di.AutoJax(), jnp.asarray(X_FREED))
    prep = di.prepare_gradient(f, di.AutoJax(), jnp.asarray(X_FREED))
    assert alive() is not None
    del f, prep
    gc.collect()
    assert alive() is None


X_TABLE = np.array([0.5, -1.2, 2.0])


def test_distinct_backend_values_keep_a_bounded_table():
    from diffiface.core import registry as _registry

    for i in range(_registry.MAX_INSTANCES + 50):
        step = 1e-6 * (1 + i / 1000)
        g = di.gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(step=step), X_TABLE)
        np.testing.assert_allclose(g, 2 * X_TABLE, rtol=1e-5)
    assert len(_registry._INSTANCES) <= _registry.MAX_INSTANCES


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
def test_autojax_keeps_a_bounded_number_of_shapes_and_numpy_compiles_once():
    import jax.numpy as jnp

    from diffiface.backends.jax import impl as _jax

    f = lambda x: (jnp.sin(x) * x).sum()  # noqa: E731
    with di.options(max_compiled_shapes=4):
        for n in range(1, 12):
            g = di.gradient(f, di.AutoJax(), np.ones(n, dtype=np.float32))
            np.testing.assert_allclose(g, np.full(n, np.sin(1) + np.cos(1)), rtol=1e-6)
    runs = [v for k, v in _jax.CACHE._data[id(f)][1].items() if hasattr(v, "_cache_size")]
    assert runs and all(r._cache_size() <= 4 for r in runs)
    compiled = []
    for n in (20, 21, 22):
        di.gradient(f, di.AutoJax(), np.ones(n, dtype=np.float32))
        compiled.append(sum(r._cache_size() for r in runs))
    assert compiled[1] - compiled[0] == 1 and compiled[2] - compiled[1] == 1  # one per shape


def test_jax_batched_jacobian_does_not_keep_f_alive():
    jnp = pytest.importorskip("jax").numpy

    def f(x):
        return jnp.sin(x)

    ref = weakref.ref(f)
    di.batched_jacobian(f, di.AutoJax(), jnp.ones((2, 3)))
    del f
    gc.collect()
    assert ref() is None


X_JIT = np.array([0.5, -1.0, 2.0])


def test_jax_compiles_once_for_repeated_calls():
    pytest.importorskip("jax")
    traces = []

    def f(x):
        traces.append(1)  # runs only while jax traces f
        return (x**2).sum()

    for _ in range(100):
        g = di.gradient(f, di.AutoJax(), X_JIT)
    np.testing.assert_allclose(g, 2 * X_JIT)
    assert len(traces) == 1
    di.gradient(f, di.AutoJax(), X_JIT.astype(np.float32))  # a new dtype traces once more
    assert len(traces) == 2


def test_jax_cache_forgets_dead_functions():
    pytest.importorskip("jax")
    from diffiface.backends.jax.impl import CACHE

    def f(x):
        return (x**3).sum()

    di.gradient(f, di.AutoJax(), X_JIT)
    di.jvp(f, di.AutoJax(), X_JIT, X_JIT)
    assert CACHE.entries(f) == 2
    gc.collect()  # other tests' dead functions go first
    before = len(CACHE)
    del f
    gc.collect()
    assert len(CACHE) == before - 1


def test_jax_cache_hits_bound_methods():
    pytest.importorskip("jax")
    from diffiface.backends.jax.impl import CACHE

    class Model:
        def __init__(self):
            self.traces = 0

        def loss(self, x):
            self.traces += 1
            return (x**2).sum()

    m = Model()
    for _ in range(5):
        di.gradient(m.loss, di.AutoJax(), X_JIT)
    assert m.traces == 1
    assert CACHE.entries(m.loss) == 1
    before = len(CACHE)
    del m
    gc.collect()
    assert len(CACHE) == before - 1


def test_jax_cache_is_thread_safe():
    pytest.importorskip("jax")

    def f(x):
        return (x**2 * x[0]).sum()

    want = np.asarray(di.gradient(f, di.AutoJax(), X_JIT))
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(np.asarray(di.gradient(f, di.AutoJax(), X_JIT)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 160
    assert all(np.array_equal(r, want) for r in results)


def test_code_of_tells_apart_what_behaves_apart():
    """Facts kept per code (the nested choice, the first-call checks, the one direction
    f supports) are shared by closures of one code and kinds, and by nothing else."""
    import functools
    import math

    from diffiface._cache import code_of

    def make(c):
        return lambda x: x * c

    class A:
        @classmethod
        def apply(cls, x):
            return x

    class B(A):
        pass

    assert code_of(make(1.0)) == code_of(make(2.0))  # same code, same kinds
    assert code_of(make(1.0)) != code_of(make(np.ones(2)))  # another kind
    assert code_of(make(np.ones(2))) != code_of(make(np.ones(3)))  # another shape
    assert code_of(A.apply) != code_of(B.apply)  # one method bound to two classes
    assert code_of(functools.partial(make(1.0), 2)) == code_of(functools.partial(make(3.0), 4))
    assert code_of(math.sin) is math.sin  # a builtin: itself
    assert code_of(np.ones(2).sum) == ("builtin", np.ndarray, "sum")  # holds no array
    assert code_of(np.sin) is None  # a callable of C type: kept per object


def test_code_facts_kept_per_object_once_the_code_table_is_full():
    """A fact learned after the table of codes filled up is not lost (a direction f
    lacks, learned once, must hold on its later calls)."""
    from diffiface._cache import CodeFacts

    facts = CodeFacts(codes=1)

    def make(c):
        return lambda x: x * c

    def other(x):
        return x

    facts.put(make(1.0), "first")
    late = other
    facts.put(late, "reverse")
    assert facts.get(make(2.0)) == "first"  # shared by its code
    assert facts.get(late) == "reverse"  # kept by the object itself


def test_strict_code_of_tells_apart_flags_and_callable_objects():
    """The checks whose miss would drop a derivative key f strictly: a flag counts by
    value, and a callable object (whose layers differ by instance) keeps facts per
    object; the nested strategy (a speed choice) shares them by kind and class."""
    from diffiface._cache import code_of

    def make(flag):
        return lambda x: x * 2 if flag else x

    class Layer:
        def __call__(self, x):
            return x

    def over(layer):
        return lambda x: layer(x)

    assert code_of(make(True)) == code_of(make(False))
    assert code_of(make(True), strict=True) != code_of(make(False), strict=True)
    assert code_of(make(True), strict=True) == code_of(make(True), strict=True)
    assert code_of(Layer()) is Layer and code_of(Layer(), strict=True) is None
    assert code_of(over(Layer())) == code_of(over(Layer()))
    assert code_of(over(Layer()), strict=True) is None


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_a_closure_that_drops_the_derivative_is_caught_after_one_that_does_not():
    """torch's first-call watch runs per strict code: a closure of the same code whose
    flag takes the .item() branch is watched too, not trusted from its neighbour."""
    import torch

    def make(scalar):
        def f(x):
            if scalar:
                return x * x.sum().item()
            return x * x.sum()

        return f

    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    got = di.jacobian(make(False), di.AutoTorch(), x)
    np.testing.assert_allclose(got.numpy(), np.diag([3.0, 3.0]) + np.outer([1.0, 2.0], [1, 1]))
    with pytest.raises(di.DiffifaceTypeError, match="drops the derivative"):
        di.jacobian(make(True), di.AutoTorch(), x)
