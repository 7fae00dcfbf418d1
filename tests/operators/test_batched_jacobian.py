"""batched_jacobian against the per-sample loop and a closed form, its cost, its dense
limit and chunk_size."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_BACKENDS
from helpers import native, to_numpy, tolerance, xp

import diffiface as di

RNG = np.random.default_rng(1)
W1 = RNG.standard_normal((3, 6))
W2 = RNG.standard_normal((6, 2))


def mlp(ns):
    def f(x, w):
        a, b = w
        return ns.tanh(x @ a) @ b

    return f


def _per_sample_jacobians(x):
    out = []
    for xi in x:
        hidden = np.tanh(xi @ W1)
        out.append(((1 - hidden**2)[:, None] * W2).T @ W1.T)  # (2, 3)
    return np.stack(out)


@pytest.mark.parametrize("mode", [None, "forward", "reverse"])
def test_batched_jacobian_equals_the_per_sample_loop(backend, mode):
    if mode is not None:
        if backend.framework == "finite_differences":
            pytest.skip("no mode")
        backend = type(backend)(mode=mode)
    x = RNG.standard_normal((5, 3))
    want = _per_sample_jacobians(x)
    ctx = di.Constant((W1, W2))
    y, J = di.value_and_batched_jacobian(mlp(xp(backend)), backend, x, ctx)
    rtol, atol = tolerance(backend, np.float64)
    assert J.shape == (5, 2, 3) and isinstance(J, np.ndarray)
    np.testing.assert_allclose(J, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(y, np.tanh(x @ W1) @ W2, rtol=1e-12)


def test_batched_jacobian_native_and_matrix_samples(ad_backend):
    x = RNG.standard_normal((4, 2, 2))
    f = lambda x: x * x[:, :1, :1]  # noqa: E731 - (B, 2, 2) -> (B, 2, 2)
    J = di.batched_jacobian(f, ad_backend, native(ad_backend, x))
    assert tuple(J.shape) == (4, 2, 2, 2, 2)
    for b in range(4):
        want = di.jacobian(lambda s: s * s[:1, :1], di.AutoFiniteDifferences(), x[b])
        np.testing.assert_allclose(to_numpy(J[b]), want, rtol=1e-6, atol=1e-8)


def test_finite_difference_batched_jacobian_cost():
    calls = []

    def f(x):
        calls.append(1)
        return x**2

    di.batched_jacobian(f, di.AutoFiniteDifferences(), np.ones((100, 3)))
    # the output size (the dense-size check), f(x) and 2 per input of one sample, not 2*100*3
    assert len(calls) == 2 + 2 * 3


def test_batched_jacobian_errors(backend):
    with pytest.raises(ValueError, match="x must have a batch axis first"):
        di.batched_jacobian(lambda x: x * 2, backend, np.array(1.0))
    with pytest.raises(ValueError, match="f must keep the batch axis first"):
        di.batched_jacobian(lambda x: x.sum(axis=0), backend, np.ones((4, 3)))


# ---- within_gradient -----------------------------------------------------------------


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


# ---- the Jacobian alone, and its value variant ----------------------------------------


@pytest.mark.parametrize("has_aux", [False, True], ids=["plain", "aux"])
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_batched_jacobian_and_its_value_variant_agree(backend, prepared, has_aux):
    """Two operators, two formulations (JAX: two compiled functions): the same
    Jacobians as the closed form, f(x) and f's aux as f computes them, on every backend."""
    x = RNG.standard_normal((5, 3))
    ns, ctx = xp(backend), di.Constant((W1, W2))
    g = mlp(ns)
    f = (lambda x, w: (g(x, w), {"s": g(x, w).sum()})) if has_aux else g
    prep = di.prepare_batched_jacobian(f, backend, x, ctx, has_aux=has_aux) if prepared else None
    kw = {"prep": prep, "has_aux": has_aux}
    rtol, atol = tolerance(backend, np.float64)
    want_y = np.tanh(x @ W1) @ W2
    for _ in range(2):  # the first call of each builds its plan, the second runs it
        J = di.batched_jacobian(f, backend, x, ctx, **kw)
        yJ = di.value_and_batched_jacobian(f, backend, x, ctx, **kw)
        if has_aux:
            (J, aux), ((y, J2), aux2) = J, yJ
            for a in (aux, aux2):
                np.testing.assert_allclose(to_numpy(a["s"]), want_y.sum(), rtol=1e-12)
        else:
            y, J2 = yJ
        np.testing.assert_allclose(y, want_y, rtol=1e-12)
        for got in (J, J2):
            assert got.shape == (5, 2, 3) and isinstance(got, np.ndarray)
            np.testing.assert_allclose(got, _per_sample_jacobians(x), rtol=rtol, atol=atol)


def test_jax_batched_jacobian_compiles_the_jacobian_alone():
    """batched_jacobian's compiled function returns the Jacobians alone (with f(x) as a
    second output XLA compiles three fusions where the native vmap(jacfwd) has one,
    measured 3.9x slower at B = 1000); value_and_batched_jacobian's returns both."""
    jax = pytest.importorskip("jax")
    from diffiface.backends.jax.running import only_compiled

    f = lambda x: jax.numpy.sin(x) * x[:, :1]  # noqa: E731
    x = jax.numpy.asarray(RNG.standard_normal((6, 4)))
    b = di.AutoJax()
    prep = di.prepare_batched_jacobian(f, b, x)
    J = di.batched_jacobian(f, b, x, prep=prep)
    y, J2 = di.value_and_batched_jacobian(f, b, x, prep=prep)
    want = jax.vmap(jax.jacfwd(lambda s: jax.numpy.sin(s) * s[:1]))(x)
    np.testing.assert_allclose(J, want, rtol=1e-12)
    np.testing.assert_allclose(J2, want, rtol=1e-12)
    np.testing.assert_allclose(y, f(x), rtol=1e-12)
    outs = {}
    for op in ("batched_jacobian", "value_and_batched_jacobian"):
        found = only_compiled(prep.problem(op))
        assert found is not None, op  # one compiled function per operator
        outs[op] = jax.tree_util.tree_leaves(jax.eval_shape(found[1], x))
    assert [o.shape for o in outs["batched_jacobian"]] == [(6, 4, 4)]
    assert [o.shape for o in outs["value_and_batched_jacobian"]] == [(6, 4), (6, 4, 4)]


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("op", ["batched_jacobian", "jacobian"])
def test_jax_square_jacobians_run_forward(op, chunk_size):
    """A square Jacobian (per sample for batched_jacobian) runs forward on JAX, compiled
    or in chunks, by one rule: f with a while_loop, which JAX cannot reverse, is never
    tried in reverse (no direction learned for it), and equals jacfwd."""
    jax = pytest.importorskip("jax")
    from diffiface.core import direction

    jnp = jax.numpy

    def twice_sin(x):  # (a while_loop: forward mode only)
        step = lambda c: (c[0] + 1, jnp.sin(c[1]))  # noqa: E731
        return jax.lax.while_loop(lambda c: c[0] < 2, step, (0, x))[1]

    if op == "jacobian":
        f = twice_sin
        x = jnp.asarray(RNG.standard_normal(4))
        want = jax.jacfwd(twice_sin)(x)
    else:
        f = lambda x: twice_sin(x) * x[:, :1]  # noqa: E731
        x = jnp.asarray(RNG.standard_normal((5, 4)))
        want = jax.vmap(jax.jacfwd(lambda s: twice_sin(s) * s[:1]))(x)
    got = getattr(di, op)(f, di.AutoJax(), x, chunk_size=chunk_size)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert direction.only_of(f, "jax") is None  # reverse was never tried
