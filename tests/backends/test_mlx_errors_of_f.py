"""AutoMLX: an error f raises goes on as it came, raised once, from every kind of call
(a runner that handed it to the general path ran f again: its side effects happened
twice); an f MLX cannot run forward (every "no JVP" message of mlx 0.32) runs in
reverse, and a warm call does not try forward again."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, MLX_FLOAT64

import diffiface as di

pytestmark = pytest.mark.skipif(not HAVE["mlx"], reason="mlx missing")

if HAVE["mlx"]:
    import mlx.core as mx

X = np.array([0.5, -1.2, 2.0], dtype=np.float32)
B = di.AutoMLX()


class _Mine(Exception):
    pass


def _vector(x):
    return mx.sin(x) * x


def _scalar(x):
    return mx.sum(mx.sin(x) * x)


def _tree(x):
    return {"s": mx.sin(x), "c": [mx.cos(x) * x]}


def _aux(g):
    return lambda x: (g(x), 2 * x)


def _leaves(g):
    return lambda d: g(d["a"])


def _m(a):
    return mx.array(np.asarray(a, dtype=np.float32))


V, S = _m(X), _m(0.4)
# (name, f's body, the call of diffiface): the kinds of call with a runner of their own
CASES = {
    "gradient": (_scalar, lambda f: di.gradient(f, B, V)),
    "value_and_gradient": (_scalar, lambda f: di.value_and_gradient(f, B, V)),
    "jvp": (_vector, lambda f: di.jvp(f, B, V, V)),
    "value_and_jvp": (_vector, lambda f: di.value_and_jvp(f, B, V, V)),
    "vjp": (_vector, lambda f: di.vjp(f, B, V, V)),
    "hvp": (_scalar, lambda f: di.hvp(f, B, V, V)),
    "value_gradient_and_hvp": (_scalar, lambda f: di.value_gradient_and_hvp(f, B, V, V)),
    "jacobian": (_vector, lambda f: di.jacobian(f, B, V)),
    "jacobian_forward": (_vector, lambda f: di.jacobian(f, di.AutoMLX(mode="forward"), V)),
    "batched_jacobian": (_vector, lambda f: di.batched_jacobian(f, B, V[:, None])),
    "hessian": (_scalar, lambda f: di.hessian(f, B, V)),
    "derivative": (_vector, lambda f: di.derivative(f, B, S)),
    "second_derivative": (_vector, lambda f: di.second_derivative(f, B, S)),
    "numpy_gradient": (_scalar, lambda f: di.gradient(f, B, X)),
    "numpy_jvp": (_vector, lambda f: di.jvp(f, B, X, X)),
    "python_derivative": (_vector, lambda f: di.derivative(f, B, 0.4)),
    "leaves_gradient": (_leaves(_scalar), lambda f: di.gradient(f, B, {"a": V})),
    "leaves_jvp": (_leaves(_vector), lambda f: di.jvp(f, B, {"a": V}, {"a": V})),
    "leaves_vjp": (_leaves(_vector), lambda f: di.vjp(f, B, {"a": V}, V)),
    "leaves_hvp": (_leaves(_scalar), lambda f: di.hvp(f, B, {"a": V}, {"a": V})),
    "tree_jvp": (_tree, lambda f: di.jvp(f, B, V, V)),
    "tree_vjp": (_tree, lambda f: di.vjp(f, B, V, {"s": V, "c": [V]})),
    "tree_jacobian": (_tree, lambda f: di.jacobian(f, B, V)),
    "aux_gradient": (_aux(_scalar), lambda f: di.gradient(f, B, V, has_aux=True)),
    "aux_jvp": (_aux(_vector), lambda f: di.jvp(f, B, V, V, has_aux=True)),
    "aux_vjp": (_aux(_vector), lambda f: di.vjp(f, B, V, V, has_aux=True)),
    "aux_hvp": (_aux(_scalar), lambda f: di.hvp(f, B, V, V, has_aux=True)),
    "tangents_jvp": (_vector, lambda f: di.jvp(f, B, V, di.Tangents(V, 2 * V))),
    "tangents_vjp": (_vector, lambda f: di.vjp(f, B, V, di.Tangents(V, 2 * V))),
    "tangents_hvp": (_scalar, lambda f: di.hvp(f, B, V, di.Tangents(V, 2 * V))),
    "prepared_gradient": (_scalar, lambda f: di.gradient(f, B, V, prep=_prep(f, "gradient"))),
    "prepared_jvp": (_vector, lambda f: di.jvp(f, B, V, V, prep=_prep(f, "jvp", V))),
    "prepared_hvp": (_scalar, lambda f: di.hvp(f, B, V, V, prep=_prep(f, "hvp", V))),
    "prepared_jacobian": (_vector, lambda f: di.jacobian(f, B, V, prep=_prep(f, "jacobian"))),
}
_PREPS: dict = {}


def _prep(f, op, *t):
    """One preparation per f and operator (made while f does not raise)."""
    key = (f, op)
    if key not in _PREPS:
        _PREPS[key] = getattr(di, "prepare_" + op)(f, B, V, *t)
    return _PREPS[key]


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_error_of_f_is_raised_once_as_it_came(case):
    body, call = CASES[case]
    armed, made = [False], []

    def f(x):
        if armed[0]:
            made.append(_Mine("from f"))
            raise made[-1]
        return body(x)

    call(f)  # the first call learns (and keeps a plan), the second runs the plan's runner
    call(f)
    armed[0] = True
    with pytest.raises(_Mine) as got:
        call(f)
    assert len(made) == 1, f"f ran {len(made)} times"
    assert got.value is made[0]
    assert got.value.__cause__ is None and got.value.__context__ is None


def _scatter(x):  # x.at[i].add: its pullback is fine, its JVP is "not yet implemented"
    return mx.sin(x.at[mx.array([0, 2])].add(x[:2])) * x


def _cumprod(x):  # "JVP is not implemented for cumulative prod/min/max"
    return mx.cumprod(x) * x


def _slice_max(x):  # "[SliceUpdate] JVP for product, minimum and maximum not implemented."
    return mx.sin(x.at[1:].maximum(x[:2])) * x


@pytest.mark.parametrize("g", [_scatter, _cumprod, _slice_max], ids=lambda g: g.__name__[1:])
def test_an_f_mlx_cannot_run_forward_runs_in_reverse(g):
    x = _m(X)
    with pytest.raises(RuntimeError, match=r"(?i)jvp.*not"):  # (MLX itself)
        mx.eval(mx.jvp(lambda x: [g(x)], [x], [x]))
    runs = [0]

    def f(x):
        runs[0] += 1
        return g(x)

    # the reference: MLX's own rows of vjps
    rows = [mx.vjp(lambda x: [g(x)], [x], [e])[1][0] for e in mx.eye(3)]
    jac = np.stack([np.asarray(r) for r in rows])
    tol = 2e-5  # float32 (tests/helpers.py TOLERANCE)
    for _ in range(2):  # the second call: warm, the direction known
        runs[0] = 0
        np.testing.assert_allclose(np.asarray(di.jvp(f, B, x, x)), jac @ X, rtol=tol, atol=tol)
        assert runs[0] <= 3  # f(x) and one vmapped pass of vjps (first: a failed mx.jvp too)
    assert runs[0] == 1  # one vmapped pass, which gives f(x) too (before: 2; before that 4)
    wide = lambda x: mx.concatenate([f(x), f(x)])  # noqa: E731  (mode None: forward first)
    want = np.concatenate([jac, jac])
    np.testing.assert_allclose(np.asarray(di.jacobian(wide, B, x)), want, rtol=tol, atol=tol)
    d = di.derivative(lambda s: f(s * x)[2], B, _m(1.0))
    np.testing.assert_allclose(np.asarray(d), (jac @ X)[2], rtol=tol, atol=tol)


def test_messages_of_a_direction_mlx_lacks():
    from diffiface.backends.mlx.errors import FORWARD, REVERSE, lacks

    forward = [
        RuntimeError("[scatter] JVP not yet implemented"),
        RuntimeError("JVP is not implemented for cumulative prod/min/max"),
        ValueError("[Primitive::jvp] Not implemented for Inverse."),
        RuntimeError("[DynamicSliceUpdate::jvp] Not supported for start indices"),
    ]
    reverse = [
        ValueError("[Primitive::vjp] Not implemented for Cholesky."),
        RuntimeError("[scatter] VJP not implemented for scatter_prod"),
    ]
    neither = [
        ValueError("[gather] Cannot calculate JVP with respect to indices."),
        ValueError("[broadcast_shapes] Shapes (3) and (4) cannot be broadcast."),
        TypeError("JVP not yet implemented"),  # (not an error MLX raises)
        di.DiffifaceValueError("f: [scatter] JVP not yet implemented"),  # (diffiface's)
    ]
    assert [lacks(e) for e in forward] == [FORWARD] * len(forward)
    assert [lacks(e) for e in reverse] == [REVERSE] * len(reverse)
    assert [lacks(e) for e in neither] == [None] * len(neither)


def test_a_jacobian_of_scalar_leaves_at_a_scalar_x():
    # mlx 0.32 crashes (a segmentation fault) on reshape() with an empty shape: the
    # runner of a pytree output reshaped each 0-d leaf's Jacobian so on a warm call
    f = lambda s: {"a": s * 2.0, "b": mx.sin(s)}  # noqa: E731
    for _ in range(3):
        got = di.jacobian(f, B, _m(1.0))
        np.testing.assert_allclose(np.asarray(got["a"]), 2.0)
        np.testing.assert_allclose(np.asarray(got["b"]), np.cos(1.0), rtol=MLX_FLOAT64)
