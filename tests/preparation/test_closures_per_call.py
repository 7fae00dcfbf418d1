"""JAX: a closure made anew on every call compiles once per code (its cells' arrays
become arguments of the compiled function), never with a stale value: flags count
by value, globals f reads by identity. Checked against closed forms and trace
counts."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di

jax = pytest.importorskip("jax")
jnp = jax.numpy
X = np.array([0.3, -0.7, 1.1, 0.2])
_OFFSET = 1.0


_TRACES: list = []


def test_closures_made_per_call_trace_their_code_twice():
    b, x, traces = di.AutoJax(), jnp.asarray(X), _TRACES
    traces.clear()

    def step(k):
        w = jnp.asarray(float(k))

        def loss(p):
            _TRACES.append(1)
            return jnp.sum(w * jnp.sin(p) ** 2)

        return di.gradient(loss, b, x), di.hvp(loss, b, x, jnp.ones(4))

    for k in range(6):
        g, hv = step(k)
        np.testing.assert_allclose(g, k * np.sin(2 * X), rtol=1e-12)
        np.testing.assert_allclose(hv, 2 * k * np.cos(2 * X), rtol=1e-12)
    # the first object of the code per operator, then one compilation of the code each
    assert len(traces) <= 4


def test_flags_count_by_value_and_ints_stay_static():
    b, x = di.AutoJax(), jnp.asarray(np.arange(6.0))
    for n in (2, 3, 4, 2):
        for scale in (1.0, 2.0):
            f = lambda p: scale * jnp.sum(p[:n] ** 2)  # noqa: B023, E731
            want = np.where(np.arange(6) < n, 2 * scale * np.arange(6.0), 0.0)
            np.testing.assert_allclose(di.gradient(f, b, x), want, rtol=1e-12)


def test_a_rebound_global_is_never_stale():
    global _OFFSET
    b, x = di.AutoJax(), jnp.asarray(X)

    def make(w):
        return lambda p: jnp.sum((w * p + _OFFSET) ** 2)

    for offset in (1.0, 1.0, 3.0, 3.0, -2.0):
        _OFFSET = offset
        w = jnp.asarray(2.0)
        np.testing.assert_allclose(
            di.gradient(make(w), b, x), 2 * 2.0 * (2.0 * X + offset), rtol=1e-12
        )


def test_cells_of_other_kinds_keep_the_per_object_path():
    b, x = di.AutoJax(), jnp.asarray(X)
    for k in range(3):
        params = {"w": jnp.asarray(float(k + 1))}  # a dict: not lifted
        inner = lambda p: params["w"] * p  # noqa: B023, E731  (a closure in a cell)
        f = lambda p: jnp.sum(inner(p) ** 2)  # noqa: B023, E731
        np.testing.assert_allclose(di.gradient(f, b, x), 2 * (k + 1) ** 2 * X, rtol=1e-12)


def test_pytree_outputs_are_not_lifted():
    """jvp, vjp, jacobian may have a pytree f: they keep the per-object path, and the
    result keeps f's structure."""
    b, x, v = di.AutoJax(), jnp.asarray(X), jnp.ones(4)
    for k in range(3):
        w = jnp.asarray(float(k))
        f = lambda p: {"a": w * p, "b": jnp.sum(p)}  # noqa: B023, E731
        t = di.jvp(f, b, x, v)
        np.testing.assert_allclose(t["a"], k * np.ones(4), rtol=1e-12)
        np.testing.assert_allclose(t["b"], 4.0, rtol=1e-12)
