"""The runners of torch plans: NumPy in and out without the general path, jvp on dual
numbers, the one reverse pass, and a warm prepared gradient that runs few Python calls
inside diffiface. Every derivative is compared with torch's own transform in float64;
each test proves the runner answered (the general path made to fail)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di

torch = pytest.importorskip("torch")

X = np.array([0.3, -0.7, 1.1, 0.2, 0.9, -1.3])
V = np.array([1.0, 0.5, -2.0, 0.25, -0.4, 0.8])
W = np.array([0.6, -1.1, 0.2, 1.4, 0.3, -0.5])
B = di.AutoTorch()


def field(x):
    return torch.sin(x) * x[0] + x**2


def loss(x):
    return (torch.sin(x) * x**2).sum()


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


def _torch_own(op, x, t=None):
    """torch's own transform at x (a float64 tensor), for ``op``."""
    if op == "gradient":
        return torch.func.grad(loss)(x)
    if op == "vjp":
        return torch.func.vjp(field, x)[1](t)[0]
    if op == "jvp":
        return torch.func.jvp(field, (x,), (t,))[1]
    return torch.func.jvp(torch.func.grad(loss), (x,), (t,))[1]  # hvp


def _call(op, x, t, prep):
    if op == "gradient":
        return di.gradient(loss, B, x, prep=prep)
    f = loss if op == "hvp" else field
    return getattr(di, op)(f, B, x, t, prep=prep)


def _prepare(op, x, t):
    if op == "gradient":
        return di.prepare_gradient(loss, B, x)
    return getattr(di, f"prepare_{op}")(loss if op == "hvp" else field, B, x, t)


def _layouts():
    """x and its tangent as NumPy arrays of each layout: C order, F order (2-d),
    non-contiguous (a strided view), read-only."""
    m, t = X.reshape(2, 3), V.reshape(2, 3)
    wide = np.stack([X, X * 0 + 7.0], axis=1)[:, 0]  # every other element of a buffer
    ro, rot = X.copy(), V.copy()
    ro.flags.writeable = False
    rot.flags.writeable = False
    return {
        "C": (X.copy(), V.copy()),
        "F": (np.asfortranarray(m), np.asfortranarray(t)),
        "strided": (wide, np.stack([V, V], axis=1)[:, 1]),
        "read-only": (ro, rot),
    }


@pytest.mark.parametrize("layout", ["C", "F", "strided", "read-only"])
@pytest.mark.parametrize("op", ["gradient", "vjp", "jvp", "hvp"])
def test_numpy_in_and_out_by_the_runner(monkeypatch, op, layout):
    x, t = _layouts()[layout]
    before_x, before_t = x.copy(), t.copy()
    prep = _prepare(op, x.copy(), t.copy())
    _general_path_fails(monkeypatch)
    out = _call(op, x, t, prep)
    assert type(out) is np.ndarray and out.dtype == np.float64 and out.shape == x.shape
    want = _torch_own(op, torch.tensor(x), torch.tensor(t)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, before_x)  # the caller's arrays are unchanged
    np.testing.assert_array_equal(t, before_t)
    assert not np.shares_memory(out, x) and not np.shares_memory(out, t)
    again = _call(op, x, t, prep)  # a result is never a buffer the next call overwrites
    np.testing.assert_array_equal(out, again)
    assert not np.shares_memory(out, again)


def test_numpy_value_variants_by_the_runner(monkeypatch):
    x = X.copy()
    pg = di.prepare_gradient(loss, B, x)
    pj = di.prepare_jvp(field, B, x, V)
    pv = di.prepare_vjp(field, B, x, W)
    ph = di.prepare_hvp(loss, B, x, V)
    _general_path_fails(monkeypatch)
    xt = torch.tensor(X)
    y, g = di.value_and_gradient(loss, B, x, prep=pg)
    assert type(y) is np.ndarray and y.shape == () and type(g) is np.ndarray
    np.testing.assert_allclose(y, loss(xt).item(), rtol=1e-12)
    np.testing.assert_allclose(g, _torch_own("gradient", xt), rtol=1e-12)
    y, t = di.value_and_jvp(field, B, x, V, prep=pj)
    np.testing.assert_allclose(y, field(xt).numpy(), rtol=1e-12)
    np.testing.assert_allclose(t, _torch_own("jvp", xt, torch.tensor(V)), rtol=1e-12)
    y, g = di.value_and_vjp(field, B, x, W, prep=pv)
    np.testing.assert_allclose(y, field(xt).numpy(), rtol=1e-12)
    np.testing.assert_allclose(g, _torch_own("vjp", xt, torch.tensor(W)), rtol=1e-12)
    g, hv = di.gradient_and_hvp(loss, B, x, V, prep=ph)
    np.testing.assert_allclose(g, _torch_own("gradient", xt), rtol=1e-12)
    np.testing.assert_allclose(hv, _torch_own("hvp", xt, torch.tensor(V)), rtol=1e-12)


def test_a_vjp_never_hands_back_the_callers_cotangent(monkeypatch):
    """f(x) = x + 1 passes w through its backward unchanged: the NumPy result must be
    the call's own array, not a view of the caller's w."""

    def shift(x):
        return x + 1.0

    w = W.copy()
    prep = di.prepare_vjp(shift, B, X.copy(), w)
    _general_path_fails(monkeypatch)
    g = di.vjp(shift, B, X.copy(), w, prep=prep)
    np.testing.assert_array_equal(g, W)
    assert not np.shares_memory(g, w)
    g[0] = 99.0
    np.testing.assert_array_equal(w, W)


def test_numpy_runner_hands_over_what_it_does_not_take():
    """A tangent of another kind, or a NumPy x with an f closing over a tensor an outer
    pass differentiates: the general path's results, checked against torch's own."""
    x = X.copy()
    prep = di.prepare_jvp(field, B, x, V)
    t = di.jvp(field, B, x, torch.tensor(V), prep=prep)  # a tensor tangent
    np.testing.assert_allclose(np.asarray(t), _torch_own("jvp", torch.tensor(X), torch.tensor(V)))
    c = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)

    def scaled(x):
        return c * (torch.sin(x) * x**2).sum()

    prep = di.prepare_gradient(scaled, B, x)
    g = di.gradient(scaled, B, x, prep=prep)  # attached: a tensor, as the general path
    assert isinstance(g, torch.Tensor) and g.requires_grad
    (dc,) = torch.autograd.grad(g.sum(), c)
    np.testing.assert_allclose(dc.item(), _torch_own("gradient", torch.tensor(X)).sum().item())


def test_jvp_runner_on_dual_numbers(monkeypatch):
    import torch.autograd.forward_ad as fwAD

    x, v = torch.tensor(X), torch.tensor(V)
    prep = di.prepare_jvp(field, B, x, v)
    calls = []
    real = fwAD.make_dual
    monkeypatch.setattr(fwAD, "make_dual", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(torch.func, "jvp", None)  # not the path taken
    t = di.jvp(field, B, x, v, prep=prep)
    assert calls
    monkeypatch.undo()
    np.testing.assert_allclose(t, _torch_own("jvp", x, v), rtol=1e-12)
    before = x.clone()

    def writes(x):
        x.mul_(2.0)  # f writes to its input: to the runner's copy
        return torch.sin(x)

    prep = di.prepare_jvp(writes, B, x, v)
    t = di.jvp(writes, B, x, v, prep=prep)
    assert torch.equal(x, before)
    np.testing.assert_allclose(t, torch.func.jvp(writes, (x.clone(),), (v,))[1], rtol=1e-12)


def test_jvp_with_a_jvp_inside_f():
    """torch nests no dual levels: an f that runs a jvp itself leaves the runner for the
    general path (torch.func.jvp), with the right answer every call."""
    one = torch.tensor(1.0, dtype=torch.float64)
    x, v = torch.tensor(4.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)

    def outer(x):
        return x * di.jvp(lambda y: x * y, B, one, one)

    prep = di.prepare_jvp(outer, B, x, v)
    for _ in range(3):  # x * x: 2x = 8
        assert di.jvp(outer, B, x, v, prep=prep).item() == pytest.approx(8.0, rel=1e-12)


def test_jvp_inside_an_autograd_function_forward():
    """torch turns forward-mode AD off inside an autograd.Function's forward: a jvp there
    (prepared or not) must not lose its tangent on dual numbers."""
    x, v = torch.tensor(X), torch.tensor(V)
    prep = di.prepare_jvp(field, B, x, v)

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.stack([di.jvp(field, B, x, v, prep=prep), di.jvp(field, B, x, v)])

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("not differentiated here")

    want = _torch_own("jvp", x, v)
    got = Twice.apply(x.clone().requires_grad_())
    np.testing.assert_allclose(got[0].detach(), want, rtol=1e-12)
    np.testing.assert_allclose(got[1].detach(), want, rtol=1e-12)


def test_unprepared_runner_of_a_once_differentiable_function():
    """A runner kept under f (held weakly) still refuses to differentiate a backward
    marked @once_differentiable when its result stays attached."""
    from torch.autograd.function import once_differentiable

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**2

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    c = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)

    def f(x):
        return c * Square.apply(x).sum()

    x = torch.tensor(X)
    for _ in range(3):  # the general path, then the runner: the same error each call
        with pytest.raises(TypeError, match="once_differentiable"):
            di.gradient(f, B, x)


def test_a_warm_prepared_torch_gradient_runs_few_python_calls():
    x = torch.tensor(X)
    prep = di.prepare_gradient(loss, B, x)
    g = di.gradient(loss, B, x, prep=prep)
    np.testing.assert_allclose(g, _torch_own("gradient", x), rtol=1e-12)
    assert python_calls(lambda: di.gradient(loss, B, x, prep=prep)) <= 10
    assert python_calls(lambda: di.gradient(loss, B, x)) <= 15


def curve(x):
    return torch.sin(x) * x**2


def _scalar_own(op, x):
    """torch's own transforms at a 0-d x, for the derivative operators."""
    d1 = torch.func.grad(curve)
    d2 = torch.func.grad(d1)
    return {
        "derivative": (d1(x),),
        "value_and_derivative": (curve(x), d1(x)),
        "second_derivative": (d2(x),),
        "value_derivative_and_second_derivative": (curve(x), d1(x), d2(x)),
    }[op]


SCALAR_OPS = (
    "derivative",
    "value_and_derivative",
    "second_derivative",
    "value_derivative_and_second_derivative",
)


@pytest.mark.parametrize("op", SCALAR_OPS)
@pytest.mark.parametrize("prepared", [True, False])
def test_scalar_derivatives_by_the_runner(monkeypatch, op, prepared):
    """derivative and second_derivative at a 0-d tensor: the runner answers (reverse
    mode, reverse over reverse), with torch's own values, the caller's x unchanged."""
    x = torch.tensor(0.7, dtype=torch.float64)
    family = op.replace("value_and_", "").replace("value_derivative_and_", "")
    prep = getattr(di, f"prepare_{family}")(curve, B, x) if prepared else None
    fn = getattr(di, op)
    fn(curve, B, x, prep=prep)  # (an unprepared call keeps its plan)
    _general_path_fails(monkeypatch)
    for _ in range(2):
        got = fn(curve, B, x, prep=prep)
        got = got if isinstance(got, tuple) else (got,)
        for a, b in zip(got, _scalar_own(op, x), strict=True):
            assert not a.requires_grad
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    assert x.item() == 0.7


def test_scalar_runner_keeps_the_callers_x(monkeypatch):
    """f that writes into its argument's storage never changes the caller's x."""

    def f(x):
        y = torch.exp(x)  # (saves its result, not x)
        x.detach().mul_(0.0)
        return y

    x = torch.tensor(0.7, dtype=torch.float64)
    prep = di.prepare_second_derivative(f, B, x)
    _general_path_fails(monkeypatch)
    for _ in range(3):
        got = di.second_derivative(f, B, x, prep=prep)
        np.testing.assert_allclose(got.item(), np.exp(0.7), rtol=1e-12)
    assert x.item() == 0.7


def test_scalar_runner_stays_on_an_outer_graph(monkeypatch):
    """f closing over a tensor that requires grad: the runner's derivatives stay on its
    graph, and their derivatives by it are torch's own."""
    p = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)

    def f(x):
        return p * torch.sin(x) * x**2

    x = torch.tensor(0.7, dtype=torch.float64)
    prep = di.prepare_second_derivative(f, B, x)
    _general_path_fails(monkeypatch)
    y, d1, d2 = di.value_derivative_and_second_derivative(f, B, x, prep=prep)
    want = _scalar_own("value_derivative_and_second_derivative", x)
    for got, w in zip((y, d1, d2), want, strict=True):
        (dp,) = torch.autograd.grad(got, p, retain_graph=True)
        np.testing.assert_allclose(dp.numpy(), w.numpy(), rtol=1e-12)  # f is linear in p
        np.testing.assert_allclose(got.detach().numpy(), 1.5 * w.numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "f, want", [(lambda x: 3.0 * x, 0.0), (lambda x: torch.stack([x, x**2]), [0.0, 2.0])]
)
def test_scalar_runner_hands_over_what_it_does_not_take(f, want):
    """A vector f(x) takes the general path, a linear f (no second-order graph) the
    general path first, then the runner: each gives an array of the right values (the
    general path's forward mode once gave torch's lazy ZeroTensor for a linear f)."""
    x = torch.tensor(0.7, dtype=torch.float64)
    for prep in (None, None, di.prepare_second_derivative(f, B, x)):
        got = di.second_derivative(f, B, x, prep=prep)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=0)  # closed form


@pytest.mark.parametrize("op", ["jvp", "value_and_jvp"])
def test_jvp_tangents_by_the_runner(monkeypatch, op):
    """A prepared jvp with a Tangents of k runs the dual-number runner once per tangent."""
    x = torch.tensor(X)
    ts = [torch.tensor(V), torch.tensor(W), torch.cos(torch.tensor(V))]
    prep = di.prepare_jvp(field, B, x, di.Tangents(*ts))
    _general_path_fails(monkeypatch)
    got = getattr(di, op)(field, B, x, di.Tangents(*ts), prep=prep)
    if op == "value_and_jvp":
        np.testing.assert_allclose(got[0].numpy(), field(x).numpy(), rtol=1e-12)
        got = got[1]
    assert type(got) is di.Tangents and len(got) == 3
    for a, t in zip(got, ts, strict=True):
        np.testing.assert_allclose(a.numpy(), _torch_own("jvp", x, t).numpy(), rtol=1e-12)
    assert torch.equal(x, torch.tensor(X))


def test_jvp_tangents_of_a_large_x_take_one_batched_pass():
    """A Tangents call on a large x takes the general path's one vmapped pass (the
    runner hands it over), with torch's own values."""
    from diffiface.backends.torch import direct

    n = direct._LOOP_MAX + 1
    x = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    ts = [torch.cos(x), torch.sin(x)]
    prep = di.prepare_jvp(field, B, x, di.Tangents(*ts))
    run = prep._runners["jvp"]
    assert run(x, di.Tangents(*ts)) is direct.SLOW
    got = di.jvp(field, B, x, di.Tangents(*ts), prep=prep)
    for a, t in zip(got, ts, strict=True):
        np.testing.assert_allclose(a.numpy(), _torch_own("jvp", x, t).numpy(), rtol=1e-12)


@pytest.mark.parametrize("op", ["derivative", "second_derivative", "hvp"])
def test_a_result_the_runner_hands_over_stops_running_f_twice(op):
    """A scalar runner that meets a result the general path handles (a vector f(x) of
    a scalar x; a linear f for hvp) runs f a second time once; from then on each call
    runs f once, as torch itself would. Values against closed forms."""
    calls = [0]

    def vec(x):
        calls[0] += 1
        return torch.stack([torch.sin(x), x * x])

    def lin(x):
        calls[0] += 1
        return (2.0 * x).sum()

    b, x = di.AutoTorch(), torch.tensor(0.3, dtype=torch.float64)
    v = torch.tensor(1.5, dtype=torch.float64)
    f, args = (lin, (v,)) if op == "hvp" else (vec, ())
    want = {
        "derivative": [np.cos(0.3), 0.6],
        "second_derivative": [-np.sin(0.3), 2.0],
        "hvp": 0.0,
    }[op]
    for _ in range(3):  # the general path, then the runner that hands over once
        getattr(di, op)(f, b, x, *args)
    calls[0] = 0
    for _ in range(4):
        got = getattr(di, op)(f, b, x, *args)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-15)
    assert calls[0] == 4
