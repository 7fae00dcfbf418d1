"""The caller's arrays are never changed: f that mutates its input (in place, through
.detach() or .data), prepared calls, finite differences' copies. Each result against
a closed form."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, native, to_numpy

import diffiface as di

X = np.array([0.5, -1.2, 2.0])


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


def test_inputs_not_mutated(backend):
    x = np.array([1.0, 2.0, 3.0])
    before = x.copy()
    di.gradient(lambda x: (x**2).sum(), backend, x)
    di.jacobian(lambda x: x**2, backend, x)
    assert np.array_equal(x, before)


def test_finite_differences_never_pass_the_callers_array():
    x = np.array([1.0, 2.0])
    before = x.copy()

    def f(z):
        z *= 2  # in place on purpose
        return (z**2).sum()

    g = di.gradient(f, di.AutoFiniteDifferences(), x)
    assert np.array_equal(x, before)
    np.testing.assert_allclose(g, 8 * x, rtol=1e-6)


X3 = np.array([0.3, -0.7, 1.1])


def _mutating(backend):
    name = backend.framework
    if name == "torch":
        return lambda x: x.mul_(2)
    if name == "jax":
        return lambda x: x.at[0].set(5.0)  # jax arrays cannot change: a functional update
    if name == "autograd":
        import autograd.numpy as anp

        return lambda x: anp.concatenate([x[:1] * 0 + 5.0, x[1:]])

    def f(x):
        x[0] = 5.0  # finite differences hand f copies
        return x

    return f


@pytest.mark.parametrize("op", ["gradient", "jvp", "vjp", "jacobian", "hessian"])
def test_mutating_f_leaves_the_callers_x_unchanged(backend, op):
    x = native(backend, X3)
    before = to_numpy(x).copy()
    v = native(backend, np.ones(3))
    f = _mutating(backend)
    calls = {
        "gradient": lambda: di.gradient(lambda x: f(x).sum(), backend, x),
        "jvp": lambda: di.jvp(f, backend, x, v),
        "vjp": lambda: di.vjp(f, backend, x, native(backend, X3)),
        "jacobian": lambda: di.jacobian(f, backend, x),
        "hessian": lambda: di.hessian(lambda x: (f(x) ** 3).sum(), backend, x),
    }
    # f on a copy: torch's f is 2x; the others replace x[0] by 5, so d f/dx = diag(0, 1, 1)
    torch_f = backend.framework == "torch"
    d = np.full(3, 2.0) if torch_f else np.array([0.0, 1.0, 1.0])
    want = {
        "gradient": d,
        "jvp": d,
        "vjp": d * X3,
        "jacobian": np.diag(d),
        "hessian": np.diag(48 * X3 if torch_f else np.array([0.0, 6 * X3[1], 6 * X3[2]])),
    }[op]
    try:
        got = calls[op]()
    except ValueError as err:  # torch's autograd refuses in-place ops on its leaves
        assert torch_f and "changes its input in place" in str(err)
    else:
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(to_numpy(x), before)
    np.testing.assert_array_equal(to_numpy(v), np.ones(3))


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_prepared_torch_jvp_leaves_the_callers_x_unchanged():
    import torch

    x, v = torch.tensor(X3), torch.ones(3, dtype=torch.float64)
    f = lambda x: x.mul_(2)  # noqa: E731
    prep = di.prepare_jvp(f, di.AutoTorch(), x, v)
    np.testing.assert_allclose(di.jvp(f, di.AutoTorch(), x, v, prep=prep).numpy(), 2 * np.ones(3))
    np.testing.assert_array_equal(x.numpy(), X3)
    np.testing.assert_array_equal(v.numpy(), np.ones(3))  # the tangent too


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("outer", [False, True])
def test_torch_in_place_f_is_the_same_error_inside_an_outer_pass(outer):
    """torch refuses an in-place op on a leaf that requires grad; diffiface's alias of
    x inside an outer pass is a view of such a leaf, refused the same way."""
    import torch

    def f(x):
        x.mul_(2)
        return x.sum()

    x = torch.tensor(X3, requires_grad=outer)
    with pytest.raises(di.DiffifaceValueError, match="f changes its input in place"):
        di.gradient(f, di.AutoTorch(), x)
    np.testing.assert_array_equal(x.detach().numpy(), X3)
