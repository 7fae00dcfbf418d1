"""Preparation: prepared calls equal unprepared ones, mismatches are itemized,
preps are shared safely between threads, take bound methods and odd constants,
and JAX compiles once."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import native, to_numpy, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])
V = np.array([1.0, 0.5, -2.0])


def _families(ns):
    loss = lambda x: (ns.sin(x) * x**2).sum()  # noqa: E731
    field = lambda x: ns.sin(x[:2]) * x[1:]  # noqa: E731
    scalar = lambda x: ns.sin(x) * x**3  # noqa: E731
    return [
        ("gradient", loss, X, (), di.gradient, di.prepare_gradient),
        ("jacobian", field, X, (), di.jacobian, di.prepare_jacobian),
        ("jvp", field, X, (V,), di.jvp, di.prepare_jvp),
        ("vjp", field, X, (V[:2],), di.vjp, di.prepare_vjp),
        ("hvp", loss, X, (V,), di.hvp, di.prepare_hvp),
        ("hessian", loss, X, (), di.hessian, di.prepare_hessian),
        ("derivative", scalar, np.array(0.4), (), di.derivative, di.prepare_derivative),
        (
            "second_derivative",
            scalar,
            np.array(0.4),
            (),
            di.second_derivative,
            di.prepare_second_derivative,
        ),
        (
            "batched_jacobian",
            lambda x: x * x[:, :1],
            np.stack([X, 2 * X]),
            (),
            di.batched_jacobian,
            di.prepare_batched_jacobian,
        ),
    ]


@pytest.mark.parametrize("kind", ["numpy", "native"])
def test_prepared_equals_unprepared(backend, kind):
    if kind == "native" and backend.framework in ("autograd", "finite_differences"):
        pytest.skip("NumPy is the native kind of this backend")
    conv = (lambda a: native(backend, a)) if kind == "native" else (lambda a: a)
    for name, f, x, extra, op, prepare in _families(xp(backend)):
        x, extra = conv(x), tuple(conv(e) for e in extra)
        prep = prepare(f, backend, x, *extra)
        for _ in range(2):  # the second call catches state leaking through the prep
            got = op(f, backend, x, *extra, prep=prep)
            np.testing.assert_array_equal(to_numpy(got), to_numpy(op(f, backend, x, *extra)))
        assert name in repr(prep)


def test_value_variants_share_the_prep(backend):
    f = lambda x: (x**3).sum()  # noqa: E731
    prep = di.prepare_gradient(f, backend, X)
    y, g = di.value_and_gradient(f, backend, X, prep=prep)
    np.testing.assert_allclose(g, 3 * X**2, rtol=1e-6)
    assert float(y) == pytest.approx((X**3).sum())
    prep = di.prepare_hvp(f, backend, X, V)
    g, hv = di.gradient_and_hvp(f, backend, X, V, prep=prep)
    np.testing.assert_allclose(hv, 6 * X * V, rtol=1e-4)


def _mismatch(call, *rows):
    with pytest.raises(di.MismatchError) as info:
        call()
    text = str(info.value)
    for r in rows:
        assert r in text, text
    return text


def test_mismatch_errors_are_itemized(backend):
    f = lambda x, c: (c * x**2).sum()  # noqa: E731
    c = di.Constant(np.array(2.0))
    prep = di.prepare_gradient(f, backend, X, c)
    _mismatch(
        lambda: di.gradient(lambda x, c: x.sum(), backend, X, c, prep=prep),
        "f          MISMATCH",
        "x          ok",
    )
    other = di.AutoFiniteDifferences(method="forward")
    if backend == other:
        other = di.AutoFiniteDifferences()
    _mismatch(lambda: di.gradient(f, other, X, c, prep=prep), "backend    MISMATCH")
    _mismatch(
        lambda: di.gradient(f, backend, np.ones(4), c, prep=prep),
        "x          MISMATCH: got (4,) numpy float64, prepared (3,) numpy float64",
    )
    _mismatch(
        lambda: di.gradient(f, backend, X.astype(np.float32), c, prep=prep),
        "got (3,) numpy float32, prepared (3,) numpy float64",
    )
    _mismatch(lambda: di.gradient(f, backend, [X], c, prep=prep), "x          MISMATCH")
    _mismatch(
        lambda: di.gradient(f, backend, X, di.Constant(np.ones(2)), prep=prep),
        "contexts   MISMATCH",
    )
    _mismatch(lambda: di.jvp(f, backend, X, V, c, prep=prep), "operator   MISMATCH: got jvp")
    _mismatch(lambda: di.hessian(f, backend, X, c, prep=prep), "operator   MISMATCH")
    with pytest.raises(TypeError, match=r"prep must come from a di\.prepare_"):
        di.gradient(f, backend, X, c, prep="prep")


def test_tangents_count_is_part_of_the_prep(backend):
    f = lambda x: x * 2  # noqa: E731
    prep = di.prepare_jvp(f, backend, X, di.Tangents(V, V))
    di.jvp(f, backend, X, di.Tangents(X, V), prep=prep)
    _mismatch(lambda: di.jvp(f, backend, X, di.Tangents(V), prep=prep), "tangent    MISMATCH")
    _mismatch(lambda: di.jvp(f, backend, X, V, prep=prep), "tangent    MISMATCH")


def test_sixteen_threads_share_one_prep(backend):
    ns = xp(backend)
    f = lambda x: (ns.sin(x) * x).sum()  # noqa: E731
    prep = di.prepare_gradient(f, backend, X)
    want = to_numpy(di.gradient(f, backend, X))
    results, errors = [], []

    def work():
        try:
            for _ in range(10):
                results.append(to_numpy(di.gradient(f, backend, X, prep=prep)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 160
    assert all(np.array_equal(r, want) for r in results)


def test_jax_prepared_calls_compile_once():
    jax = pytest.importorskip("jax")
    traces = []

    def f(x):
        traces.append(1)
        return jax.numpy.sin(x).sum()

    x = jax.numpy.asarray(X)
    prep = di.prepare_gradient(f, di.AutoJax(), x)
    assert len(traces) == 1
    for _ in range(100):
        di.gradient(f, di.AutoJax(), x, prep=prep)
    assert len(traces) == 1
    prep = di.prepare_hessian(f, di.AutoJax(), x)
    for _ in range(10):
        di.hessian(f, di.AutoJax(), x, prep=prep)
    assert len(traces) == 2


def test_prepared_calls_inside_outer_transforms():
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    jnp = jax.numpy
    want = -np.sin(X) * X + 2 * np.cos(X)  # d/dx sum(d/dx sum(sin(x) x))

    f = lambda x: (jnp.sin(x) * x).sum()  # noqa: E731
    x = jnp.asarray(X)
    prep = di.prepare_gradient(f, di.AutoJax(), x)
    outer = jax.grad(lambda x: di.gradient(f, di.AutoJax(), x, prep=prep).sum())
    np.testing.assert_allclose(outer(x), want, rtol=1e-10)

    ft = lambda x: (torch.sin(x) * x).sum()  # noqa: E731
    xt = torch.tensor(X)
    prep = di.prepare_gradient(ft, di.AutoTorch(), xt)
    outer = torch.func.grad(lambda x: di.gradient(ft, di.AutoTorch(), x, prep=prep).sum())
    np.testing.assert_allclose(outer(xt).numpy(), want, rtol=1e-10)
    xr = xt.clone().requires_grad_()
    (g,) = torch.autograd.grad(di.gradient(ft, di.AutoTorch(), xr, prep=prep).sum(), xr)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-10)


def test_prepared_with_tangents_called_with_one():
    jax = pytest.importorskip("jax")
    x = jax.numpy.ones(3)
    prep = di.prepare_jvp(jax.numpy.sin, di.AutoJax(), x, di.Tangents(x, x))
    with pytest.raises(di.MismatchError, match="tangent    MISMATCH"):
        di.jvp(jax.numpy.sin, di.AutoJax(), x, x, prep=prep)


def test_prepared_torch_gradient_with_module_parameters_runs_f_once():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    calls = []

    def f(x):
        calls.append(1)
        return lin(x).sum()

    x = torch.randn(3)
    prep = di.prepare_gradient(f, di.AutoTorch(), x)
    calls.clear()
    g = di.gradient(f, di.AutoTorch(), x, prep=prep)
    assert len(calls) == 1
    torch.testing.assert_close(g, lin.weight.detach()[0])
    (gw,) = torch.autograd.grad(g.sum(), lin.weight)  # attached: d/dW sum(W) = 1
    torch.testing.assert_close(gw, torch.ones_like(gw))


def test_prep_accepts_bound_methods_and_odd_constants():
    jnp = pytest.importorskip("jax").numpy

    class M:
        def loss(self, x, c):
            return (x.astype(c) ** 2).sum()

    m, x = M(), jnp.ones(3)
    prep = di.prepare_gradient(m.loss, di.AutoJax(), x, di.Constant(jnp.float32))
    g = di.gradient(m.loss, di.AutoJax(), x, di.Constant(jnp.float32), prep=prep)
    np.testing.assert_allclose(g, 2 * np.ones(3))
    with pytest.raises(di.MismatchError, match="f          MISMATCH"):
        di.gradient(M().loss, di.AutoJax(), x, di.Constant(jnp.float32), prep=prep)


def test_mismatch_with_no_tangent_is_reported():
    f = lambda x: x * 2  # noqa: E731
    b, x = di.AutoFiniteDifferences(), np.ones(2)
    prep = di.prepare_jvp(f, b, x, di.Tangents(x, x))
    with pytest.raises(di.MismatchError, match="tangent    MISMATCH: got none"):
        di.jvp(lambda x: x * 3, b, x, None, prep=prep)
