"""A pytree x with one tangent on JAX: the plan matches x and the tangent by one flatten
of the pair (``Signature.xt_native``). Counted, never timed: Python calls inside
diffiface per warm call, and the general path taken by a call that does not match.
Results are checked against JAX's own transforms in float64."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls as calls_inside

import diffiface as di

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

B = di.AutoJax()
N = 5
TOL = {"rtol": 1e-12, "atol": 1e-14}


def s(x):
    return jnp.sum(jnp.sin(x["a"]) * x["b"]) + jnp.sum(x["a"] ** 2)


def v(x):
    return jnp.sin(x["a"]) * x["b"]


def point(k: float = 0.0):
    a = jnp.linspace(-1.0, 1.0, N) + k
    return {"a": a, "b": jnp.cos(a) + 2.0}


CASES = {  # op: (f, the tangent, JAX's own result)
    "hvp": (s, point(0.3), lambda x, t: jax.jvp(jax.grad(s), (x,), (t,))[1]),
    "jvp": (v, point(0.5), lambda x, t: jax.jvp(v, (x,), (t,))[1]),
    "vjp": (v, jnp.linspace(0.5, 2.0, N), lambda x, w: jax.vjp(v, x)[1](w)[0]),
}


def check(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **TOL)


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("op", sorted(CASES))
def test_python_calls_per_warm_call(op, prepared):
    """Before (b100143): hvp and vjp 15 prepared, 16 unprepared, jvp 13 and 14 (x and the
    tangent matched apart). After: 11 and 12, jvp 9 and 10."""
    f, t, own = CASES[op]
    x = point()
    prep = getattr(di, f"prepare_{op}")(f, B, x, t) if prepared else None
    call = lambda: getattr(di, op)(f, B, x, t, prep=prep)  # noqa: E731
    check(call(), own(x, t))
    assert calls_inside(call) <= (11 if prepared else 12)


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_call_unlike_the_plan_takes_the_general_path(monkeypatch, op):
    """x or the tangent of another dtype or structure does not match the pair: the
    general path runs it, and its result is JAX's."""
    f, t, own = CASES[op]
    x = point()
    prep = getattr(di, f"prepare_{op}")(f, B, x, t)
    from diffiface.core import shell

    entered = [0]
    real = shell.enter

    def counting(*args, **kwargs):
        entered[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(shell, "enter", counting)
    check(getattr(di, op)(f, B, x, t, prep=prep), own(x, t))
    assert entered[0] == 0
    x32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), x)
    t32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), t)
    unlike = [(x, t32), (x32, t)]
    if op != "vjp":  # (a tangent with its own structure: the general path explains)
        unlike.append((x, {"a": t["a"], "b": t["b"], "c": t["a"]}))
    for xi, ti in unlike:
        entered[0] = 0
        try:
            getattr(di, op)(f, B, xi, ti, prep=prep)
        except (di.DiffifaceTypeError, di.DiffifaceValueError):
            pass
        assert entered[0] == 1, (xi, ti)
