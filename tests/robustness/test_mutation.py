"""Reliability: threads on torch's forward mode, the caller's arrays, bounded tables,
the batched dense limit, bridges at Python floats. Each result against a closed form."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import ALL_BACKENDS
from helpers import HAVE, native, to_numpy

import diffiface as di

X = np.array([0.5, -1.2, 2.0])


def _threads(work, n=8):
    """Run ``work`` on n threads (bounded: each joins within 120 s); its errors."""
    errors = []

    def run():
        try:
            work()
        except Exception as exc:  # collected: the test reports every one
            errors.append(repr(exc)[:200])

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


# ---- 1. torch's forward mode from many threads ---------------------------------
@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_bridged_torch_forward_mode_from_many_threads():
    """Before the one forward-mode lock: 158 errors ("no level exists") and 76 wrong
    results in 8 threads x 30 calls of these two."""
    import torch

    so = di.second_order(di.AutoJax(mode="forward"), di.AutoTorch())
    x = torch.tensor([0.3, 1.2], dtype=torch.float64)
    v = torch.tensor([1.0, 0.0], dtype=torch.float64)
    f = lambda x: (torch.sin(x) * x).sum()  # noqa: E731
    xn = x.numpy()
    want_hv = (2 * np.cos(xn) - xn * np.sin(xn)) * v.numpy()
    W = torch.tensor([[0.5, -1.0]], dtype=torch.float64, requires_grad=True)

    def g(t, p):
        return (torch.sin(t @ p.T) ** 2).sum()

    def loss():
        t = torch.tensor([[0.3, -0.5]], dtype=torch.float64)
        fixed = di.FixedParams(g, W, strategy="forward_over_reverse")
        gr = di.gradient(fixed, di.AutoTorch(), t)
        return torch.autograd.grad((gr**2).sum(), W)[0]

    want_gw = loss().numpy()
    wrong = []

    def work():
        for _ in range(12):
            if not np.allclose(di.hvp(f, so, x, v).numpy(), want_hv, atol=1e-12):
                wrong.append("hvp")
            if not np.allclose(loss().numpy(), want_gw, atol=1e-12):
                wrong.append("FixedParams")

    assert _threads(work) == []
    assert wrong == []


# ---- 2. f cannot change the caller's arrays through .detach() or .data ------------
@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("how", ["detach", "data"])
@pytest.mark.parametrize("op", ["gradient", "value_and_gradient", "vjp", "hvp", "prepared"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_f_writing_through_detach_leaves_the_callers_array(how, op, kind):
    import torch

    def f(t):
        (t.detach() if how == "detach" else t.data).add_(1.0)
        return (t**2).sum()

    x = X.copy() if kind == "numpy" else torch.tensor(X)
    B, xw = di.AutoTorch(), X + 1  # f reads the data it wrote: diffiface's copy, x + 1
    want = 2 * xw  # the gradient of sum(t**2) at the written data
    if op == "gradient":
        got = di.gradient(f, B, x)
    elif op == "value_and_gradient":
        got = di.value_and_gradient(f, B, x)[1]
    elif op == "vjp":
        w = np.ones(3) if kind == "numpy" else torch.ones(3, dtype=torch.float64)
        got = di.vjp(lambda t: f(t) * t, B, x, w)
        want = 2 * xw * xw.sum() + (xw**2).sum()  # d/dt_i sum_j f(t) t_j
    elif op == "hvp":
        got, want = di.hvp(f, B, x, x), 2 * X  # H = 2 I, along the caller's x
    else:
        xt = torch.tensor(X)
        got = di.gradient(f, B, xt, prep=di.prepare_gradient(f, B, xt))
        x = xt
    np.testing.assert_array_equal(to_numpy(x), X)  # the caller's array, unchanged
    np.testing.assert_allclose(to_numpy(got), want, rtol=1e-12)


# ---- 3. bounded tables ----------------------------------------------------------------
def test_distinct_backend_values_keep_a_bounded_table():
    from diffiface.core import registry as _registry

    for i in range(_registry.MAX_INSTANCES + 50):
        step = 1e-6 * (1 + i / 1000)
        g = di.gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(step=step), X)
        np.testing.assert_allclose(g, 2 * X, rtol=1e-5)
    assert len(_registry._INSTANCES) <= _registry.MAX_INSTANCES


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_a_bridged_functions_plain_table_is_bounded():
    import jax.numpy as jnp
    import torch

    from diffiface.bridge import node as _bridge

    layer = di.differentiate_with(
        lambda d: sum(torch.sin(v).sum() for v in d.values()), di.AutoTorch()
    )
    for i in range(_bridge.MAX_NODES + 20):
        d = {f"k{i}": jnp.asarray(X)}
        np.testing.assert_allclose(float(layer(d)), np.sin(X).sum(), rtol=1e-12)
    assert len(layer._plain) <= _bridge.MAX_NODES


# ---- 4. batched_jacobian: the dense limit and chunk_size -------------------------
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_batched_jacobian_over_the_dense_limit_is_refused_before_any_work(backend):
    calls = []

    def f(x):
        calls.append(1)
        return x * 2.0

    with pytest.raises(di.DiffifaceValueError, match=r"batched Jacobian.*chunk_size"):
        di.batched_jacobian(f, backend, native(backend, np.ones((4, 12000))))
    assert len(calls) <= 1  # at most the output-size evaluation


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("k", [1, 2, 5])
def test_batched_jacobian_in_chunks_equals_the_closed_form(backend, k):
    rng = np.random.default_rng(3)
    xv = rng.normal(size=(3, 4))
    f = lambda x: x[:, :3] * x[:, 1:]  # noqa: E731
    want = np.zeros((3, 3, 4))
    for i in range(3):
        want[i, np.arange(3), np.arange(3)] = xv[i, 1:]
        want[i, np.arange(3), np.arange(1, 4)] += xv[i, :3]
    tol = 1e-5 if backend.framework == "finite_differences" else 1e-12
    got = di.batched_jacobian(f, backend, native(backend, xv), chunk_size=k)
    np.testing.assert_allclose(to_numpy(got), want, atol=tol)
    y, got = di.value_and_batched_jacobian(f, backend, native(backend, xv), chunk_size=k)
    np.testing.assert_allclose(to_numpy(y), xv[:, :3] * xv[:, 1:], atol=tol)
    np.testing.assert_allclose(to_numpy(got), want, atol=tol)


# ---- 5. bridges at Python floats ------------------------------------------------------
@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_bridges_take_python_floats():
    import jax
    import torch

    layer = di.differentiate_with(lambda x: torch.sin(x) * 2, di.AutoTorch())
    assert float(jax.grad(layer)(1.0)) == pytest.approx(2 * np.cos(1.0), rel=1e-12)
    numpy_layer = di.differentiate_with(lambda x: np.sin(x) * 2, di.AutoFiniteDifferences())
    assert float(jax.grad(numpy_layer)(1.0)) == pytest.approx(2 * np.cos(1.0), rel=1e-8)

    def inner_fd(p):
        fixed = di.FixedParams(lambda t, p: (p * np.sin(t)).sum(), p)
        return di.gradient(fixed, di.AutoFiniteDifferences(), 0.5)

    assert float(jax.grad(inner_fd)(1.0)) == pytest.approx(np.cos(0.5), rel=1e-6)

    def inner_torch(p):
        fixed = di.FixedParams(lambda t, p: (p * torch.sin(t)).sum(), p)
        return di.gradient(fixed, di.AutoTorch(), 0.5)

    # a Python float x takes torch's default dtype (float32)
    assert float(jax.grad(inner_torch)(1.0)) == pytest.approx(np.cos(0.5), rel=1e-6)


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


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_clear_caches_releases_a_bridged_closure():
    """An operator on another framework's arrays holds its f strongly (its derivative
    runs after the call returns): di.clear_caches() lets it go."""
    import gc
    import weakref

    import jax.numpy as jnp
    import torch

    def call():
        big = torch.ones(1000, dtype=torch.float64)
        g = di.gradient(lambda x: (torch.sin(x) * big[:3]).sum(), di.AutoTorch(), jnp.asarray(X))
        np.testing.assert_allclose(np.asarray(g), np.cos(X), rtol=1e-12)
        return weakref.ref(big)

    alive = call()
    gc.collect()
    assert alive() is not None  # held by the bridge table
    di.clear_caches()
    gc.collect()
    assert alive() is None
