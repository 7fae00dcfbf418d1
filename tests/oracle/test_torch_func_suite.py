"""torch.func's own autodiff tests, ported onto diffiface.

Source: ``test/functorch/test_eager_transforms.py`` in pytorch/pytorch (classes
TestGradTransform, TestJac, TestHessian, TestJvp, TestComposability,
TestVmapOfGrad, TestAutogradFunction, TestExamplesCorrectness). Each test names
the upstream test it ports. Where an upstream test exercises a torch.func-only
feature (argnums validation, has_aux, functionalize, make_fx, pytree outputs of
f) it has no diffiface meaning and is left out; where diffiface takes a pytree
``x`` or ``di.Constant`` contexts instead of ``argnums``, the test is rewritten
in those terms.

Every result computed through diffiface (``AutoTorch`` in its modes, called
plain, prepared, nested in ``torch.func`` / ``torch.autograd`` / diffiface
itself) is compared with torch.func's own call and, where that could itself be
in doubt, with float64 central differences computed here without diffiface.
Known diffiface defects are in the known-gaps table (``diffiface/_gaps.py``): strict xfails
with the assertion kept.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.autograd.forward_ad as fwAD  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from helpers import HAVE  # noqa: E402
from torch.func import functional_call  # noqa: E402

import diffiface as di  # noqa: E402

B = di.AutoTorch()
MODES = [
    pytest.param(di.AutoTorch(), id="auto"),
    pytest.param(di.AutoTorch(mode="forward"), id="forward"),
    pytest.param(di.AutoTorch(mode="reverse"), id="reverse"),
]
HOW = ["plain", "prepared"]
D = torch.float64


# ---------------------------------------------------------------- helpers


def rand(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(tuple(shape), generator=g, dtype=D)


def close(actual, expected, rtol=1e-10, atol=1e-10):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def close_cd(actual, expected):
    """Tolerance for float64 central differences (step 1e-6)."""
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-7)


@torch.no_grad()
def cd_jacobian(f, x, eps=1e-6):
    """float64 central differences of ``f`` at the tensor ``x``: shape f(x).shape + x.shape."""
    x = x.detach().to(D)
    flat = x.reshape(-1)
    cols = []
    for i in range(flat.numel()):
        e = torch.zeros_like(flat)
        e[i] = eps
        hi = f((flat + e).reshape(x.shape))
        lo = f((flat - e).reshape(x.shape))
        cols.append((hi - lo) / (2 * eps))
    out_shape = f(x).shape
    return torch.stack(cols, dim=-1).reshape(*out_shape, *x.shape)


def cd_gradient(f, x):
    return cd_jacobian(f, x)


def cd_hessian(f, x, eps=1e-4):
    """Central differences of the exact torch.func gradient."""
    return cd_jacobian(torch.func.grad(f), x, eps)


def op(name, how, f, b, x, *rest):
    """di.<name>(f, b, x, *rest), plain or through prepare_<family>."""
    call = getattr(di, name)
    if how == "plain":
        return call(f, b, x, *rest)
    family = {
        "value_and_gradient": "gradient",
        "value_and_jacobian": "jacobian",
        "value_and_jvp": "jvp",
        "value_and_vjp": "vjp",
        "value_and_derivative": "derivative",
        "gradient_and_hvp": "hvp",
        "value_gradient_and_hessian": "hessian",
        "value_derivative_and_second_derivative": "second_derivative",
    }.get(name, name)
    prep = getattr(di, "prepare_" + family)(f, b, x, *rest)
    return call(f, b, x, *rest, prep=prep)


@contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def layouts(x):
    """x itself and non-contiguous tensors holding the same values."""
    yield "contiguous", x
    big = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype) if x.dim() else None
    if big is not None:
        big[..., ::2] = x
        step = big[..., ::2]
        assert not step.is_contiguous()
        yield "step-slice", step
    if x.dim() >= 2:
        tr = x.transpose(0, -1).contiguous().transpose(0, -1)
        assert not tr.is_contiguous()
        yield "transposed", tr


# ------------------------------------------------- TestGradTransform


# upstream: TestGradTransform.test_primitive (and grad_and_value)
@pytest.mark.parametrize("how", HOW)
def test_primitive(how):
    x = rand(seed=1)
    expected = torch.func.grad(torch.sin)(x)
    close(expected, torch.cos(x))
    close(op("gradient", how, torch.sin, B, x), expected)
    close(op("derivative", how, torch.sin, B, x), expected)
    g_tf, v_tf = torch.func.grad_and_value(torch.sin)(x)
    v, g = op("value_and_gradient", how, torch.sin, B, x)
    close(v, v_tf)
    close(g, g_tf)


# upstream: TestGradTransform.test_primitive (Python float in, Python float out)
def test_primitive_python_float():
    with default_dtype(D):
        g = di.gradient(torch.sin, B, 0.7)
        d = di.derivative(torch.sin, B, 0.7)
        dd = di.second_derivative(torch.sin, B, 0.7)
    assert isinstance(g, float) and isinstance(d, float) and isinstance(dd, float)
    assert g == pytest.approx(math.cos(0.7), rel=1e-14)
    assert d == pytest.approx(math.cos(0.7), rel=1e-14)
    assert dd == pytest.approx(-math.sin(0.7), rel=1e-14)


# upstream: TestGradTransform.test_composite_simple
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("layout", ["contiguous", "step-slice", "transposed"])
def test_composite_simple(how, layout):
    x = dict(layouts(rand(2, 3, 4, seed=2)))[layout]

    def f(x):
        return torch.flatten(x).sum() + (x**2).sum()

    expected = torch.func.grad(f)(x)
    close(expected, torch.ones_like(x) + 2 * x)
    g = op("gradient", how, f, B, x)
    assert g.shape == x.shape
    close(g, expected)


# upstream: TestGradTransform.test_composite_complicated (closure and Constant, and
# the derivative reaching the Constant through torch.autograd)
@pytest.mark.parametrize("how", HOW)
def test_composite_complicated(how):
    x = rand(3, seed=3)
    y = rand(3, 5, seed=4)

    def foo(x, y):
        return (x @ y).sum()

    xr = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(foo(xr, y), xr)
    close(torch.func.grad(foo)(x, y), expected)
    close(op("gradient", how, foo, B, x, di.Constant(y)), expected)
    close(op("gradient", how, lambda x: foo(x, y), B, x), expected)

    # d/dy of sum(grad_x foo(x, y) ** 2), with y a Constant that requires grad
    yr = y.clone().requires_grad_()
    g = di.gradient(foo, B, x, di.Constant(yr))
    (gy,) = torch.autograd.grad((g**2).sum(), yr)
    (gy_tf,) = torch.autograd.grad((torch.func.grad(foo)(x, yr) ** 2).sum(), yr)
    close(gy, gy_tf)
    close_cd(gy, cd_gradient(lambda y: (y.sum(1) ** 2).sum(), y))


# upstream: TestGradTransform.test_composite_two_ops
@pytest.mark.parametrize("how", HOW)
def test_composite_two_ops(how):
    y = rand(2, 5, seed=5)
    targets = torch.tensor([1, 3])

    def foo(y, targets):
        return F.cross_entropy(y, targets)

    yr = y.clone().requires_grad_()
    (expected,) = torch.autograd.grad(foo(yr, targets), yr)
    close(torch.func.grad(foo)(y, targets), expected)
    close(op("gradient", how, foo, B, y, di.Constant(targets)), expected)
    close_cd(expected, cd_gradient(lambda y: foo(y, targets), y))


# upstream: TestGradTransform.test_fn_with_kwargs
def test_fn_with_kwargs():
    def foo(x, y):
        return (x * y).sum()

    x, y = rand(3, seed=6), rand(3, seed=7)
    expected = torch.func.grad(foo)(x, y=y)
    close(di.gradient(foo, B, x, di.Constant(y)), expected)
    close(di.gradient(lambda x: foo(x, y=y), B, x), expected)


# upstream: TestGradTransform.test_linear_nd_inplace_activation (pytree x in place of argnums)
@pytest.mark.parametrize("how", HOW)
def test_linear_nd_inplace_activation(how):
    x, w, b = rand(2, 3, 8, seed=8), rand(16, 8, seed=9), rand(16, seed=10)

    def f(xwb):
        x, w, b = xwb
        return F.linear(x, w, b).relu_().sum()

    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    (xr @ wr.t() + br).relu().sum().backward()
    expected = (xr.grad, wr.grad, br.grad)
    close(torch.func.grad(lambda x, w, b: f((x, w, b)), argnums=(0, 1, 2))(x, w, b), expected)
    got = op("gradient", how, f, B, (x, w, b))
    assert isinstance(got, tuple)
    close(got, expected)


# upstream: TestGradTransform.test_inplace
def test_inplace():
    x = rand(seed=11)

    def foo(x):
        return x.clone().sin_()

    close(torch.func.grad(foo)(x), x.cos())
    close(di.gradient(foo, B, x), x.cos())
    close(di.derivative(foo, B, x), x.cos())
    close(di.second_derivative(foo, B, x), -x.sin())


# upstream: TestGradTransform.test_inplace_on_view, test_inplace_on_view_base
@pytest.mark.parametrize("base", [False, True], ids=["view", "base"])
def test_inplace_on_view(base):
    x = rand(3, seed=12)

    def foo(x):
        y = x.clone()
        y0 = y[0]
        if base:
            y.sin_()
            return y0
        y0.sin_()
        return y.sum()

    xr = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(foo(xr), xr)
    close(torch.func.grad(foo)(x), expected)
    close(di.gradient(foo, B, x), expected)
    close_cd(expected, cd_gradient(foo, x))


# upstream: TestGradTransform.test_view_inplace_simple
def test_view_inplace_simple():
    def foo(x):
        x = x.clone()
        x.view([]).sin_()
        return x

    x = rand(seed=13).requires_grad_()
    close(torch.func.grad(foo)(x), x.cos())
    close(di.gradient(foo, B, x), x.cos())
    with torch.no_grad():
        close(di.gradient(foo, B, x), x.cos())


# upstream: TestGradTransform.test_advanced_indexing
def test_advanced_indexing():
    def f(value):
        log_prob = torch.ones((), dtype=D)
        val = torch.zeros(()) > 0
        log_prob[val] = 0
        return value

    x = rand(seed=14)
    close(di.gradient(f, B, x), torch.func.grad(f)(x))
    close(di.gradient(f, B, x), torch.ones_like(x))

    def f2(value):
        value = value.clone()
        value[value > 0] = 0
        return value.sum()

    x = rand(20, seed=15)
    close(di.gradient(f2, B, x), (x <= 0).type_as(x))
    close(di.gradient(f2, B, x), torch.func.grad(f2)(x))


# upstream: TestGradTransform.test_tensor_ctor_inside_grad
def test_tensor_ctor_inside_grad():
    def foo(x):
        return x * torch.tensor(2.0, dtype=D)

    x = torch.tensor(3.14, dtype=D)
    close(di.gradient(foo, B, x), torch.func.grad(foo)(x))
    close(di.derivative(foo, B, x), torch.tensor(2.0, dtype=D))


# upstream: TestGradTransform.test_manual_seed_inside_grad
def test_manual_seed_inside_grad():
    def f(x):
        torch.manual_seed(0)
        return x * torch.randn_like(x)

    x = rand(seed=16)
    with torch.random.fork_rng():
        expected = torch.func.grad(f)(x)
        got = di.gradient(f, B, x)
        got_prep = op("gradient", "prepared", f, B, x)
    close(got, expected)
    close(got_prep, expected)


# upstream: TestGradTransform.test_nesting_simple, TestComposability.test_grad_grad
@pytest.mark.parametrize("b", MODES)
def test_nesting_simple(b):
    x = rand(seed=17)
    expected = torch.func.grad(torch.func.grad(torch.sin))(x)
    close(expected, -torch.sin(x))
    close(di.gradient(lambda x: di.gradient(torch.sin, b, x), b, x), expected)
    close(di.derivative(lambda x: di.derivative(torch.sin, b, x), b, x), expected)
    close(di.second_derivative(torch.sin, b, x), expected)
    close(di.hessian(torch.sin, b, x), expected)
    # diffiface inside torch.func and torch.func inside diffiface
    close(torch.func.grad(lambda x: di.gradient(torch.sin, b, x))(x), expected)
    close(di.gradient(torch.func.grad(torch.sin), b, x), expected)


# upstream: TestGradTransform.test_composed_with_autograd
@pytest.mark.parametrize("how", HOW)
def test_composed_with_autograd(how):
    x = rand(seed=18).requires_grad_()
    y = op("gradient", how, torch.sin, B, x)
    assert y.requires_grad
    (result,) = torch.autograd.grad(y, x)
    close(result, -x.sin())


# upstream: TestGradTransform.test_grad_of_vjp_composition (outer diffiface)
def test_grad_of_vjp_composition():
    x, y = rand(seed=19), rand(seed=20)

    def foo(x, y):
        return di.gradient(lambda w: di.vjp(torch.sin, B, x, w), B, y)

    close(foo(x, y), x.cos())


# upstream: TestGradTransform.test_grad_of_vjp_composition (outer torch.func.grad)
def test_grad_of_vjp_composition_torch_func_outer():
    x, y = rand(seed=19), rand(seed=20)
    close(torch.func.grad(lambda w: di.vjp(torch.sin, B, x, w))(y), x.cos())


# upstream: TestGradTransform.test_vjp_of_grad_composition, TestComposability.test_vjp_grad
@pytest.mark.parametrize("how", HOW)
def test_vjp_of_grad_composition(how):
    x, y = rand(seed=21), rand(seed=22)
    _, vjp_fn = torch.func.vjp(torch.func.grad(torch.sin), x)
    expected = vjp_fn(y)[0]
    close(expected, -y * x.sin())
    close(op("vjp", how, lambda x: di.gradient(torch.sin, B, x), B, x, y), expected)
    close(op("vjp", how, torch.func.grad(torch.sin), B, x, y), expected)


# upstream: TestGradTransform.test_grad_of_vjp_of_grad_composition
def test_grad_of_vjp_of_grad_composition():
    x, y = rand(seed=23), rand(seed=24)

    def inner(x):
        return di.gradient(lambda x: -torch.cos(x), B, x)

    result = di.gradient(lambda w: di.vjp(inner, B, x, w), B, y)
    close(result, x.cos())


# upstream: TestGradTransform.test_views
def test_views():
    x = rand(seed=25).requires_grad_()
    y = rand(seed=26).requires_grad_()

    def silly_sin(x):
        x = x.view([])
        return x.sin()

    result = di.gradient(silly_sin, B, x) + torch.cos(y)
    gx, gy = torch.autograd.grad(result, [x, y])
    close(gx, -x.sin())
    close(gy, -y.sin())


# upstream: TestGradTransform.test_argnums, test_out_of_order_argnums (pytree x)
@pytest.mark.parametrize("how", HOW)
def test_argnums_as_pytree(how):
    x, y = rand(seed=27), rand(seed=28)
    gx, gy = op("gradient", how, lambda xy: torch.mul(*xy), B, (x, y))
    close((gx, gy), torch.func.grad(torch.mul, argnums=(0, 1))(x, y))
    close((gx, gy), (y, x))
    gy2, gx2 = op("gradient", how, lambda yx: torch.mul(yx[1], yx[0]), B, (y, x))
    close((gx2, gy2), (y, x))
    # one argument, the other a Constant (argnums=1)
    close(op("gradient", how, lambda y, x: torch.mul(x, y), B, y, di.Constant(x)), x)


# upstream: TestGradTransform.test_grad_pytree_inputs
def test_grad_pytree_inputs():
    x = rand(seed=29)

    def f(a, b):
        x, y = a
        return 1 * x + 2 * y + 3 * b["foo"]

    args = ((x, x), {"foo": x})
    expected = torch.func.grad(f, argnums=(0, 1))(*args)
    got = di.gradient(lambda ab: f(*ab), B, args)
    close(got, expected)
    one = torch.ones((), dtype=D)
    close(got, ((one, 2 * one), {"foo": 3 * one}))
    # the first argument only, the second a Constant
    close(di.gradient(f, B, args[0], di.Constant(args[1])), (one, 2 * one))


# upstream: TestGradTransform.test_zero_grad
def test_zero_grad():
    def f(x):
        return (x["a"] ** 2.0).sum()

    inps = {"a": rand(10, seed=30) + 3, "b": rand(10, seed=31)}
    grads = di.gradient(f, B, inps)
    close(grads, torch.func.grad(f)(inps))
    assert grads["a"].sum() != 0.0
    close(grads["b"], torch.zeros(10, dtype=D))


# upstream: TestGradTransform.test_unrelated_grad, test_unrelated_vjp
@pytest.mark.parametrize("operator", ["gradient", "vjp"])
def test_unrelated(operator):
    x = torch.tensor(1.0, dtype=D)
    y = torch.tensor(2.0, dtype=D)
    v = torch.tensor(1.0, dtype=D)

    def unrelated(x):
        return y

    expected = torch.func.grad(unrelated)(x)
    close(expected, torch.zeros_like(x))
    args = (v,) if operator == "vjp" else ()
    with pytest.warns(di.DisconnectedWarning):
        result = getattr(di, operator)(unrelated, B, x, *args)
    close(result, expected)


# upstream: TestGradTransform.test_unrelated_vjp_multiple_inputs_outputs (outputs stacked:
# diffiface takes one output array)
def test_unrelated_vjp_multiple_inputs():
    w = torch.tensor(3.0, dtype=D)
    x = torch.tensor(4.0, dtype=D)
    y = torch.tensor(2.0, dtype=D)
    v = torch.ones(3, dtype=D)

    def unrelated(wx):
        _, x = wx
        return torch.stack([y, y, x])

    result = di.vjp(unrelated, B, (w, x), v)
    close(result, (torch.zeros_like(w), torch.ones_like(x)))


# upstream: TestGradTransform.test_unrelated_hessian (5 outputs > 3 inputs: auto goes forward)
@pytest.mark.parametrize(
    "b",
    [
        pytest.param(di.AutoTorch(), id="auto"),  # auto and forward: a known gap
        pytest.param(di.AutoTorch(mode="forward"), id="forward"),
        pytest.param(di.AutoTorch(mode="reverse"), id="reverse"),
    ],
)
def test_unrelated_hessian(b):
    N, M = 5, 3
    W = rand(N, M, seed=32)

    def f(x):
        return W @ x

    x = rand(M, seed=33)
    expected = torch.func.jacrev(torch.func.jacrev(f))(x)
    close(expected, torch.zeros(N, M, M, dtype=D))
    with pytest.warns(di.DisconnectedWarning):
        result = di.jacobian(lambda x: di.jacobian(f, b, x), b, x)
    close(result, expected)


# upstream: TestGradTransform.test_vjp_pytree_input
def test_vjp_pytree_input():
    def f(x):
        return x[0] * x[1][0]

    x, v = rand(seed=34), rand(seed=35)
    xs = (x, (x, x))
    _, vjp_fn = torch.func.vjp(f, xs)
    (expected,) = vjp_fn(v)
    result = di.vjp(f, B, xs, v)
    close(result, expected)
    close(result, (x * v, (x * v, torch.zeros_like(x))))


# upstream: TestGradTransform.test_vjp_pytree_output (outputs stacked)
def test_vjp_pytree_output():
    x = rand(seed=36)
    v = rand(3, seed=37)
    result = di.vjp(lambda x: torch.stack([x, x, x]), B, x, v)
    close(result, v.sum())


# upstream: TestGradTransform.test_no_grad_outside
@pytest.mark.parametrize("how", HOW)
def test_no_grad_outside(how):
    x = rand(seed=38).requires_grad_()
    with torch.no_grad():
        y = op("gradient", how, torch.sin, B, x)
    close(y, x.cos())
    assert not y.requires_grad


# upstream: TestGradTransform.test_no_grad_inside
def test_no_grad_inside():
    def f(x):
        with torch.no_grad():
            shift = x**2
        return x**2 - shift

    x = rand(seed=39)
    close(di.gradient(f, B, x), 2 * x)
    close(di.gradient(lambda x: di.gradient(f, B, x), B, x), torch.full_like(x, 2.0))
    close(torch.func.grad(torch.func.grad(f))(x), torch.full_like(x, 2.0))
    close(di.hessian(f, B, x), torch.func.hessian(f)(x))
    close(di.hessian(f, B, x), torch.full_like(x, 2.0))
    # torch.no_grad stops reverse mode only (torch.func.jacfwd gives f' = 0): diffiface's
    # forward-mode operators run f in reverse mode, so every operator gives the same answer
    close(di.derivative(f, B, x), 2 * x)
    close(di.second_derivative(f, B, x), torch.full_like(x, 2.0))
    close(di.jvp(f, B, x, torch.ones_like(x)), 2 * x)

    x = rand(seed=39).requires_grad_()
    y = di.gradient(f, B, x)
    (z,) = torch.autograd.grad(y, x)
    close(z, torch.full_like(x, 2.0))


# upstream: TestGradTransform.test_no_grad_mixed
def test_no_grad_mixed():
    def f(x):
        with torch.no_grad():
            shift = x**2
        return x**2 - shift

    x = rand(seed=40).requires_grad_()
    with torch.no_grad():
        y = di.gradient(f, B, x)
    close(y, 2 * x)
    assert not y.requires_grad


# upstream: TestGradTransform.test_no_grad_nested_simple
def test_no_grad_nested_simple():
    def h(x):
        with torch.no_grad():
            shift = di.gradient(lambda x: 0.25 * x**4, B, x)
        return x**3 - shift

    x = torch.tensor(1.5, dtype=D, requires_grad=True)
    y = di.gradient(h, B, x)
    close(y, 3 * x**2)
    (z,) = torch.autograd.grad(y, x)
    close(z, 6 * x)


# upstream: TestGradTransform.test_no_grad_nested_complicated
def test_no_grad_nested_complicated():
    def f(x):
        with torch.no_grad():
            shift = x**3
        return x**3 - shift

    def g(x):
        r1 = di.gradient(f, B, x)
        with torch.no_grad():
            shift = di.gradient(f, B, x)
        return r1 - shift

    x = rand(seed=41).requires_grad_()
    y = di.gradient(g, B, x)
    close(y, 6 * x)
    (z,) = torch.autograd.grad(y, x)
    close(z, torch.full_like(x, 6.0))


# upstream: TestGradTransform.test_no_grad_value
def test_no_grad_value():
    def h(x):
        with torch.no_grad():
            value, _ = di.value_and_gradient(lambda x: x**3, B, x)
        return x**3 - value

    x = torch.tensor(1.6, dtype=D, requires_grad=True)
    y = di.gradient(h, B, x)
    close(y, 3 * x**2)
    (z,) = torch.autograd.grad(y, x)
    close(z, 6 * x)


# upstream: TestGradTransform.test_no_grad_outside_vjp, test_no_grad_outside_vjp_fn
def test_no_grad_outside_vjp():
    def h(x):
        return x**2

    x = torch.tensor(2.0, dtype=D, requires_grad=True)
    with torch.no_grad():
        out, y = di.value_and_vjp(h, B, x, torch.tensor(1.0, dtype=D))
    close(y, 2 * x)
    assert not y.requires_grad
    assert not out.requires_grad

    out, y = di.value_and_vjp(h, B, x, torch.tensor(1.0, dtype=D))
    close(y, 2 * x)
    (z,) = torch.autograd.grad(y, x)
    close(z, torch.tensor(2.0, dtype=D))


# upstream: TestGradTransform.test_inference_mode_outside_{grad,vjp,jvp,jacrev},
# test_inference_mode_nested_grad, test_inference_mode_jacrev_grad
@pytest.mark.parametrize(
    "case", ["gradient", "vjp", "jvp", "jacobian", "nested", "hessian", "jacobian_of_gradient"]
)
def test_inference_mode_outside(case):
    x = rand(3, seed=42)
    t = torch.ones(3, dtype=D)
    sq = lambda x: (x**2).sum()  # noqa: E731
    cube = lambda x: (x**3).sum()  # noqa: E731
    with torch.inference_mode():
        if case == "gradient":
            got, expected = di.gradient(sq, B, x), 2 * x
        elif case == "vjp":
            got, expected = di.vjp(sq, B, x, torch.tensor(1.0, dtype=D)), 2 * x
        elif case == "jvp":
            got, expected = di.jvp(sq, B, x, t), (2 * x * t).sum()
        elif case == "jacobian":
            got, expected = di.jacobian(lambda x: x**2, B, x), torch.diag(2 * x)
        elif case == "nested":
            x0 = x[0].clone()
            got = di.derivative(lambda x: di.derivative(lambda x: x**3, B, x), B, x0)
            expected = 6 * x0
        elif case == "hessian":
            got, expected = di.hessian(cube, B, x), torch.diag(6 * x)
        else:
            got = di.jacobian(lambda x: di.gradient(cube, B, x), B, x)
            expected = torch.diag(6 * x)
    close(got, expected)


# upstream: TestGradTransform.test_inference_mode_inside_grad
def test_inference_mode_inside_grad():
    def f(x):
        with torch.inference_mode():
            c = x**2
        return x - c

    x = rand(3, seed=43)
    close(di.gradient(lambda x: f(x).sum(), B, x), torch.ones_like(x))
    with torch.inference_mode():
        close(di.gradient(lambda x: f(x).sum(), B, x), torch.ones_like(x))


# upstream: TestGradTransform.test_no_grad_inside, on .detach() (the derivative through the
# detached factor is dropped, as in torch.func; a wholly detached f warns)
def test_detach_inside():
    x = rand(3, seed=44)
    f = lambda x: (x * x.detach()).sum()  # noqa: E731
    close(di.gradient(f, B, x), torch.func.grad(f)(x))
    close(di.gradient(f, B, x), x)
    g = lambda x: torch.sin(x.detach()).sum()  # noqa: E731
    with pytest.warns(di.DisconnectedWarning):
        close(di.gradient(g, B, x), torch.func.grad(g)(x))


# upstream: TestGradTransform.test_no_grad_inside, on forward-mode operators: f that leaves the
# graph with .detach() gives zeros and says so as the reverse paths do; .item() drops a
# derivative, which is an error (as on JAX and autograd)
@pytest.mark.parametrize("case", ["jvp_detach", "derivative_item", "jacobian_forward_detach"])
def test_detach_inside_forward(case):
    x, v = rand(3, seed=144), rand(3, seed=145)
    if case == "derivative_item":
        with pytest.raises(di.DiffifaceTypeError, match="drops the derivative"):
            di.derivative(lambda x: torch.tensor(x.item() ** 2, dtype=D), B, x[0])
        return
    with pytest.warns(di.DisconnectedWarning):
        if case == "jvp_detach":
            got, expected = di.jvp(lambda x: x.detach() ** 2, B, x, v), torch.zeros(3, dtype=D)
        else:
            fwd = di.AutoTorch(mode="forward")
            got, expected = (
                di.jacobian(lambda x: x.detach() ** 2, fwd, x),
                torch.zeros(3, 3, dtype=D),
            )
    close(got, expected)


# ------------------------------------------------------- TestAutogradFunction


class MySinNoSetupContext(torch.autograd.Function):
    """An old-style Function (ctx in forward, no setup_context, no jvp)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy * x.cos()


# upstream: TestComposability.test_autograd_function_no_setup_context (torch.func refuses such
# a Function; diffiface's reverse paths run it through torch.autograd)
@pytest.mark.parametrize(
    "operator",
    [
        "gradient",
        "vjp",
        "jacobian_reverse",
        "hessian",
    ],
)
def test_autograd_function_no_setup_context(operator):
    x = rand(3, seed=45)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: MySinNoSetupContext.apply(x).sum())(x)
    f, fs = MySinNoSetupContext.apply, lambda x: MySinNoSetupContext.apply(x).sum()
    if operator == "gradient":
        close(di.gradient(fs, B, x), x.cos())
    elif operator == "vjp":
        close(di.vjp(f, B, x, x), x * x.cos())
    elif operator == "jacobian_reverse":
        close(di.jacobian(f, di.AutoTorch(mode="reverse"), x), torch.diag(x.cos()))
    else:
        close(di.hessian(fs, B, x), torch.diag(-x.sin()))


# upstream: TestComposability.test_autograd_function_no_setup_context (forward-mode operators):
# the direction is diffiface's choice, so these fall back to the reverse formulation; a
# forward mode the user fixed is a clear error naming mode="reverse"
@pytest.mark.parametrize(
    "operator", ["derivative", "second_derivative", "jacobian_auto", "jvp", "jacobian_forward"]
)
def test_autograd_function_no_setup_context_forward(operator):
    x = rand(3, seed=46)
    f = MySinNoSetupContext.apply
    if operator == "derivative":
        close(di.derivative(f, B, x[0]), x[0].cos())
    elif operator == "second_derivative":
        close(di.second_derivative(f, B, x[0]), -x[0].sin())
    elif operator == "jacobian_auto":  # wide: the automatic direction is forward
        close(di.jacobian(lambda x: f(x[:1]), B, x), torch.diag(x.cos())[:1])
    elif operator == "jvp":
        close(di.jvp(f, B, x, x), x * x.cos())
    else:
        with pytest.raises(di.DiffifaceTypeError, match="mode='reverse'"):
            di.jacobian(f, di.AutoTorch(mode="forward"), x)


# upstream: TestJvp.test_jvp_inside_autograd_function
def test_jvp_inside_autograd_function():
    class MySin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            t = torch.ones_like(x)
            neg_sin_x = di.jvp(torch.cos, B, x, t)
            ctx.save_for_backward(x)
            return -neg_sin_x

        @staticmethod
        def backward(ctx, gx):
            (x,) = ctx.saved_tensors
            t = torch.ones_like(x)
            cos_x = di.jvp(torch.sin, B, x, t)
            return gx * cos_x

    x = rand(seed=47).requires_grad_()
    y = MySin.apply(x)
    close(y, x.sin())
    (gx,) = torch.autograd.grad(y, x)
    close(gx, x.cos())


# ----------------------------------------------------------------- TestJac


# upstream: TestJac.test_simple, test_simple_not_flat
@pytest.mark.parametrize("b", MODES)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("shape", [(3,), (2, 3)], ids=["flat", "not_flat"])
def test_jac_simple(b, how, shape):
    x0 = rand(*shape, seed=48)
    expected = torch.diagflat(x0.reshape(-1).cos()).reshape(*shape, *shape)
    close(torch.func.jacrev(torch.sin)(x0), expected)
    close(torch.func.jacfwd(torch.sin)(x0), expected)
    for _, x in layouts(x0):
        J = op("jacobian", how, torch.sin, b, x)
        assert J.shape == (*shape, *shape)
        close(J, expected)


# upstream: TestJac.test_take (torch's own vmap fallback warning for aten::put is ignored)
@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")
@pytest.mark.parametrize("b", MODES)
def test_jac_take(b):
    x = rand(5, seed=49)

    def func(x):
        y = torch.ones(3, dtype=torch.long)
        return torch.take(x, y)

    expected = torch.autograd.functional.jacobian(func, x)
    close(torch.func.jacrev(func)(x), expected)
    close(di.jacobian(func, b, x), expected)


# upstream: TestJac.test_diff_numel
@pytest.mark.parametrize("b", MODES)
def test_jac_diff_numel(b):
    x = rand(2, 4, seed=50)

    def f(x):
        return x[0, 1:].unsqueeze(-1)

    y = di.jacobian(f, b, x)
    assert y.shape == (3, 1, 2, 4)
    expected = x.new_zeros(3, 1, 2, 4)
    expected[0, 0, 0, 1] = 1
    expected[1, 0, 0, 2] = 1
    expected[2, 0, 0, 3] = 1
    close(y, expected)
    close(y, torch.func.jacfwd(f)(x))


# upstream: TestJac.test_vmap_on_jac_simple
@pytest.mark.parametrize("b", MODES)
def test_vmap_on_jac_simple(b):
    x = rand(2, 3, seed=51)
    expected = torch.stack([torch.diagflat(x[i].cos()) for i in range(2)])
    close(torch.vmap(torch.func.jacrev(torch.sin))(x), expected)
    close(torch.vmap(lambda x: di.jacobian(torch.sin, b, x))(x), expected)
    close(di.batched_jacobian(torch.sin, b, x), expected)


# upstream: TestJac.test_nested_jac_simple
@pytest.mark.parametrize("b", MODES)
def test_nested_jac_simple(b):
    def foo(x):
        return x.sin().sum()

    x = rand(3, seed=52)
    expected = torch.diagflat(-x.sin())
    close(torch.func.jacfwd(torch.func.jacrev(foo))(x), expected)
    close(di.jacobian(lambda x: di.gradient(foo, b, x), b, x), expected)
    close(di.jacobian(lambda x: di.jacobian(lambda x: foo(x).reshape(1), b, x)[0], b, x), expected)
    close(torch.func.jacfwd(lambda x: di.gradient(foo, b, x))(x), expected)
    close(torch.func.jacrev(lambda x: di.gradient(foo, b, x))(x), expected)
    close(di.jacobian(torch.func.jacrev(foo), b, x), expected)


# upstream: TestJac.test_multiple_args, test_argnums_defaults_to_zero
@pytest.mark.parametrize("b", MODES)
def test_jac_multiple_args(b):
    x, y = rand(3, seed=53), rand(3, seed=54)
    expected = torch.func.jacrev(torch.multiply, argnums=1)(x, y)
    close(expected, torch.diagflat(x))
    close(di.jacobian(lambda y: torch.multiply(x, y), b, y), expected)
    close(di.jacobian(lambda y, x: torch.multiply(x, y), b, y, di.Constant(x)), expected)
    close(
        di.jacobian(lambda x, y: x * 2 + y * 3, b, x, di.Constant(y)),
        torch.diagflat(torch.full_like(x, 2)),
    )


# upstream: TestJac.test_dimensionality
@pytest.mark.parametrize("b", MODES)
def test_jac_dimensionality(b):
    x = rand(seed=55)
    result = di.jacobian(lambda x: x, b, x)
    assert result.dim() == 0
    close(result, torch.ones_like(x))

    x = rand(1, seed=56)
    result = di.jacobian(lambda x: x, b, x)
    assert result.dim() == 2
    close(result, x.new_ones(1, 1))


# upstream: TestJac.test_unrelated_input, test_unrelated_output (reverse and auto directions)
@pytest.mark.parametrize("b", [MODES[0], MODES[2]])
def test_jac_unrelated(b):
    x, y = rand(2, 3, seed=57), rand(2, 3, seed=58)
    expected = torch.func.jacrev(lambda x, y: x, argnums=1)(x, y)
    close(expected, y.new_zeros(2, 3, 2, 3))
    with pytest.warns(di.DisconnectedWarning):
        close(di.jacobian(lambda y, x: x, b, y, di.Constant(x)), expected)
    with pytest.warns(di.DisconnectedWarning):
        close(di.jacobian(lambda x: y, b, x), expected)


# upstream: TestJac.test_unrelated_output under jacfwd, TestJvp.test_unrelated_output
# upstream: TestGradTransform.test_unrelated_grad (derivative, forward mode)
@pytest.mark.parametrize("operator", ["jacobian_forward", "jvp", "derivative"])
def test_unrelated_output_forward(operator):
    x, y = rand(2, 3, seed=59), rand(2, 3, seed=60)
    with pytest.warns(di.DisconnectedWarning):
        if operator == "jvp":
            got, expected = di.jvp(lambda x: y, B, x, x), torch.zeros_like(y)
        elif operator == "derivative":
            got, expected = di.derivative(lambda x: y, B, x[0, 0]), torch.zeros_like(y)
        else:
            got = di.jacobian(lambda x: y, di.AutoTorch(mode="forward"), x)
            expected = y.new_zeros(2, 3, 2, 3)
    close(got, expected)


def _ref_jac_cases():
    def simple(x):
        return 3 * x**2

    def multi_input(x, y):
        return (x.cos() * x) @ y.sin()

    def mimo_0(x, y):
        return (x * x) @ y

    def mimo_1(x, y):
        return x @ (x.sum(1) * y)

    def zero_dim_out(x, y):
        return torch.stack([x.sum(), y.sum()])

    def zero_dim_in(x):
        return torch.stack([x, x, x])

    def default_arg(x, y, z=3.0):
        return x * y * z

    return [
        pytest.param(simple, (rand(2, 3, 5, seed=61),), id="simple"),
        pytest.param(multi_input, (rand(2, 3, seed=62), rand(3, 5, seed=63)), id="multi_input"),
        pytest.param(mimo_0, (rand(5, 3, seed=64), rand(3, 5, seed=65)), id="multi_output_0"),
        pytest.param(mimo_1, (rand(5, 3, seed=64), rand(3, 5, seed=65)), id="multi_output_1"),
        pytest.param(zero_dim_out, (rand(3, seed=66), rand(3, seed=67)), id="zero_dim_out"),
        pytest.param(zero_dim_in, (rand(seed=68),), id="zero_dim_in"),
        pytest.param(default_arg, (rand(3, seed=69), rand(3, seed=70)), id="default_arg"),
    ]


# upstream: TestJac.test_against_reference_{simple,multi_input,multi_input_multi_output,
# zero_dim,default_arg} (one Jacobian per input, the others as Constants)
@pytest.mark.parametrize("b", MODES)
@pytest.mark.parametrize(("f", "inputs"), _ref_jac_cases())
def test_jac_against_reference(b, f, inputs):
    expected = torch.autograd.functional.jacobian(f, inputs)
    for i in range(len(inputs)):

        def fi(xi, others, i=i):
            args = list(others)
            args.insert(i, xi)
            return f(*args)

        others = inputs[:i] + inputs[i + 1 :]
        close(di.jacobian(fi, b, inputs[i], di.Constant(others)), expected[i])
        close(torch.func.jacrev(f, argnums=i)(*inputs), expected[i])
        close_cd(expected[i], cd_jacobian(partial(fi, others=others), inputs[i]))


# upstream: TestJac.test_inplace (f writes x into its Constant y in place)
@pytest.mark.parametrize("b", MODES)
def test_jac_inplace_into_constant(b):
    def f(x, y):
        y.copy_(x)
        return y

    x, y = rand(2, seed=71), rand(2, seed=72)
    close(torch.func.jacrev(f, argnums=0)(x, y.clone()), torch.eye(2, dtype=D))
    close(
        di.gradient(lambda x, y: f(x, y).sum(), b, x, di.Constant(y.clone())),
        torch.ones(2, dtype=D),
    )
    close(di.jacobian(f, b, x, di.Constant(y.clone())), torch.eye(2, dtype=D))


# upstream: TestJac.test_inplace (second case: x[:2] = y with x a Constant)
@pytest.mark.parametrize(
    "operator",
    [
        "jvp",  # on dual numbers the write carries y's tangent into the Constant
        "vjp",
    ],
)
def test_jac_inplace_slice_assign(operator):
    def g(yz, x):
        y, z = yz
        x[:2] = y
        return torch.stack([(x**2).sum(), (z**3).sum()])

    x, y, z = rand(3, seed=73), rand(2, seed=74), rand(2, seed=75)
    # J = [[2y, 0], [0, 3z^2]] applied through jvps and vjps
    v = (rand(2, seed=76), rand(2, seed=77))
    w = rand(2, seed=78)
    if operator == "jvp":
        expected_jvp = torch.stack([(2 * y * v[0]).sum(), (3 * z**2 * v[1]).sum()])
        close(di.jvp(g, B, (y, z), v, di.Constant(x.clone())), expected_jvp)
    else:
        got = di.vjp(g, B, (y, z), w, di.Constant(x.clone()))
        close(got, (2 * y * w[0], 3 * z**2 * w[1]))


# upstream: TestJac.test_jac_with_non_tensor_args
@pytest.mark.parametrize("b", MODES)
def test_jac_with_non_tensor_args(b):
    def f(t, int_x):
        return t + int_x

    t = rand(3, 3, seed=79)
    expected = torch.autograd.functional.jacobian(partial(f, int_x=3), t)
    close(torch.func.jacrev(f)(t, 3), expected)
    close(di.jacobian(f, b, t, di.Constant(3)), expected)


# upstream: TestJac.test_chunk_jacrev (each output, w.r.t. x and y)
def test_chunk_jacrev():
    x, y = rand(10, 2, seed=80), rand(1, 2, seed=81)
    outs = [
        lambda x, y: x.sin(),
        lambda x, y: x + y,
        lambda x, y: x + 2,
        lambda x, y: x.sum().reshape(1),
    ]
    for k, fo in enumerate(outs):
        ex, ey = torch.func.jacrev(fo, argnums=(0, 1))(x, y)
        close(di.jacobian(fo, B, x, di.Constant(y)), ex)
        fy = lambda y, x, fo=fo: fo(x, y)  # noqa: E731
        if k == 1:
            close(di.jacobian(fy, B, y, di.Constant(x)), ey)
            continue
        # outputs that do not depend on y: zeros, and a warning where reverse mode runs (the
        # forward-mode warning is test_unrelated_output_forward's business)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", di.DisconnectedWarning)
            close(di.jacobian(fy, B, y, di.Constant(x)), ey)
        with pytest.warns(di.DisconnectedWarning):
            close(di.jacobian(fy, di.AutoTorch(mode="reverse"), y, di.Constant(x)), ey)
        prep = di.prepare_jacobian(fo, B, x, di.Constant(y))
        close(di.jacobian(fo, B, x, di.Constant(y), prep=prep), ex)


# ------------------------------------------------------------- TestHessian

SECOND_ORDER = [
    pytest.param(B, id="default"),
    pytest.param(di.second_order(di.AutoTorch(mode="forward"), di.AutoTorch()), id="fwd-over-rev"),
    pytest.param(di.second_order(di.AutoTorch(mode="reverse"), di.AutoTorch()), id="rev-over-rev"),
    pytest.param(
        di.second_order(di.AutoTorch(mode="reverse"), di.AutoTorch(mode="forward")),
        id="rev-over-fwd",
    ),
    pytest.param(
        di.second_order(di.AutoTorch(mode="forward"), di.AutoTorch(mode="forward")),
        id="fwd-over-fwd",
    ),
]


# upstream: TestHessian.test_hessian_vectorize_correctness_simple
@pytest.mark.parametrize("b", SECOND_ORDER)
@pytest.mark.parametrize("how", HOW)
def test_hessian_simple(b, how):
    def f(x):
        return (3 * x**2 + x.sin()).sum()

    x = rand(2, 3, 5, seed=82)
    expected = torch.autograd.functional.hessian(f, x)
    close(torch.func.hessian(f)(x), expected)
    close(op("hessian", how, f, b, x), expected)
    v = rand(2, 3, 5, seed=83)
    close(op("hvp", how, f, b, x, v), (expected.reshape(30, 30) @ v.reshape(30)).reshape(2, 3, 5))


# upstream: TestHessian.test_hessian_vectorize_correctness_simple, on every installed backend
# (the function is framework-neutral)
@pytest.mark.parametrize("framework", ["jax", "autograd", "finite_differences"])
def test_hessian_simple_neutral(framework):
    if framework != "finite_differences" and not HAVE[framework]:
        pytest.skip(f"{framework} missing")
    b = {
        "jax": di.AutoJax,
        "autograd": di.AutoAutograd,
        "finite_differences": di.AutoFiniteDifferences,
    }[framework]()

    def f(x):
        return (3 * x**2 + x**3).sum()

    x = rand(2, 3, seed=84)
    expected = torch.func.hessian(f)(x)
    rtol = 1e-5 if framework == "finite_differences" else 1e-10
    got = di.hessian(f, b, x.numpy())
    np.testing.assert_allclose(got, expected.numpy(), rtol=rtol, atol=rtol)
    g = di.gradient(f, b, x.numpy())
    np.testing.assert_allclose(g, torch.func.grad(f)(x).numpy(), rtol=rtol, atol=rtol)


# upstream: TestHessian.test_hessian_vectorize_correctness_multi_input
@pytest.mark.parametrize("b", SECOND_ORDER)
def test_hessian_multi_input(b):
    def f(x, y, z):
        return ((x.relu() * x) @ y.sin() @ z).sum()

    x, y, z = rand(2, 3, seed=85), rand(3, 5, seed=86), rand(5, 5, seed=87)
    expected = torch.autograd.functional.hessian(f, (x, y, z))
    close(di.hessian(f, b, x, di.Constant(y), di.Constant(z)), expected[0][0])
    close(
        di.hessian(lambda y, x, z: f(x, y, z), b, y, di.Constant(x), di.Constant(z)), expected[1][1]
    )
    # the full Hessian through hvps on the pytree (x, y, z)
    v = (rand(2, 3, seed=88), rand(3, 5, seed=89), rand(5, 5, seed=90))
    hv = di.hvp(lambda xyz: f(*xyz), b, (x, y, z), v)
    for i in range(3):
        expected_i = sum(torch.tensordot(expected[i][j], v[j], dims=v[j].dim()) for j in range(3))
        close(hv[i], expected_i)


# upstream: TestHessian.test_hessian_vectorize_correctness_unrelated_outputs
def test_hessian_unrelated_outputs():
    x, y = rand(2, seed=91), rand(3, seed=92)

    def f(x, y):
        return (x**2).sum()

    expected = torch.autograd.functional.hessian(f, (x, y))
    close(di.hessian(f, B, x, di.Constant(y)), expected[0][0])
    with pytest.warns(di.DisconnectedWarning):
        close(di.hessian(lambda y, x: f(x, y), B, y, di.Constant(x)), expected[1][1])

    def g(x, y):
        return torch.ones([], dtype=D)

    with pytest.warns(di.DisconnectedWarning):
        close(di.hessian(g, B, x, di.Constant(y)), torch.zeros(2, 2, dtype=D))


# upstream: TestHessian.test_jacfwd_different_levels (vmap of a diffiface Hessian)
def test_hessian_vmap_different_levels():
    b, n, d = 4, 20, 2
    x1 = rand(b, n, d, seed=93)
    x2 = x1
    A = 0.1 * rand(b, d, d, seed=94)

    def loss(A, x1, x2):
        x2_hat = (A @ (x1.T)).T
        res = x2 - x2_hat
        return (res**2).sum()

    expected = torch.vmap(torch.func.hessian(loss))(A, x1, x2)
    close(torch.vmap(torch.func.jacrev(torch.func.jacrev(loss)))(A, x1, x2), expected)
    got = torch.vmap(lambda A, x1, x2: di.hessian(loss, B, A, di.Constant(x1), di.Constant(x2)))(
        A, x1, x2
    )
    close(got, expected)


# ----------------------------------------------------------------- TestJvp


# upstream: TestJvp.test_simple
@pytest.mark.parametrize("how", HOW)
def test_jvp_simple(how):
    x0, t0 = rand(2, 3, seed=95), rand(2, 3, seed=96)
    expected = torch.func.jvp(torch.sin, (x0,), (t0,))
    close(expected, (x0.sin(), x0.cos() * t0))
    for (_, x), (_, t) in zip(layouts(x0), layouts(t0), strict=True):
        close(op("jvp", how, torch.sin, B, x, t), expected[1])
        close(op("value_and_jvp", how, torch.sin, B, x, t), expected)


# upstream: TestJvp.test_multiple_inputs, test_pytree_inputs, test_unrelated_input
def test_jvp_multiple_inputs():
    x, y, tx, ty = (rand(2, 3, seed=s) for s in (97, 98, 99, 100))
    close(di.jvp(lambda xy: xy[0] * xy[1], B, (x, y), (tx, ty)), y * tx + x * ty)
    close(di.jvp(lambda xy: xy[0], B, (x, y), (tx, ty)), tx)

    def f(x, y, z):
        a, b = x
        return a + 2 * b + 3 * y + 4 * z

    one = torch.tensor(1.0, dtype=D)
    args = ((one, one), one, one)
    primal, tangent = di.value_and_jvp(lambda a: f(*a), B, args, args)
    close(primal, one * 10)
    close(tangent, one * 10)


# upstream: TestJvp.test_multiple_outputs, test_multiple_inputs_outputs (outputs stacked)
def test_jvp_multiple_outputs():
    x, t = rand(2, 3, seed=101), rand(2, 3, seed=102)
    f = lambda x: torch.stack([torch.sin(x), torch.cos(x)])  # noqa: E731
    close(di.jvp(f, B, x, t), torch.stack([x.cos() * t, -x.sin() * t]))
    close(di.jvp(f, B, x, t), torch.func.jvp(f, (x,), (t,))[1])

    y, ty = rand(2, 3, seed=103), rand(2, 3, seed=104)

    def g(xy):
        x, y = xy
        return torch.stack([2 * x + 3 * y, 4 * x + 5 * y])

    close(di.jvp(g, B, (x, y), (t, ty)), g((t, ty)))


# upstream: TestJvp.test_jvp_new_tensor
def test_jvp_new_tensor():
    def f(x):
        y = x.new_tensor(0.5)
        return x + y

    x = torch.rand(4, 4, dtype=D)
    tangents = torch.ones_like(x)
    close(di.value_and_jvp(f, B, x, tangents), torch.func.jvp(f, (x,), (tangents,)))


# upstream: TestJvp.test_disable_fwd_grad_outside, test_disable_fwd_grad_inside,
# test_disable_fwd_grad_mixed
def test_disable_fwd_grad():
    x = rand(seed=105)
    t = torch.ones_like(x)
    with fwAD._set_fwd_grad_enabled(False):
        close(di.jvp(torch.sin, B, x, t), x.cos())
        close(di.derivative(torch.sin, B, x), x.cos())

    def f(x):
        with fwAD._set_fwd_grad_enabled(False):
            shift = x**2
        return x**2 - shift

    close(di.jvp(f, B, x, t), 2 * x)
    close(di.jvp(lambda x: di.jvp(f, B, x, t), B, x, t), torch.full_like(x, 2.0))
    close(di.derivative(f, B, x), 2 * x)
    with fwAD._set_fwd_grad_enabled(True):
        close(di.jvp(f, B, x, t), 2 * x)


# upstream: TestComposability.test_jvp_supports_saved_tensor_hooks,
# test_transforms_dont_support_saved_tensor_hooks (torch.func refuses saved tensor hooks;
# diffiface's torch.autograd paths do not need to)
@pytest.mark.parametrize("operator", ["gradient", "jvp", "vjp", "hvp"])
def test_saved_tensor_hooks(operator):
    def f(x):
        return torch.sin(x).sum()

    x, t = rand(3, seed=106), rand(3, seed=107)
    with pytest.raises(RuntimeError, match="saved tensor hooks"):
        with torch.autograd.graph.save_on_cpu():
            torch.func.grad(f)(x)
    with torch.autograd.graph.save_on_cpu():
        if operator == "gradient":
            got, expected = di.gradient(f, B, x), x.cos()
        elif operator == "jvp":
            got, expected = di.jvp(f, B, x, t), (x.cos() * t).sum()
        elif operator == "vjp":
            got, expected = di.vjp(torch.sin, B, x, t), x.cos() * t
        else:
            got, expected = di.hvp(f, B, x, t), -x.sin() * t
    close(got, expected)


# ------------------------------------------------------- TestComposability


# upstream: TestComposability.test_grad_vmap
def test_grad_vmap():
    def foo(x):
        return torch.vmap(torch.sin)(x).sum()

    x = rand(3, seed=108)
    close(di.gradient(foo, B, x), x.cos())
    close(di.gradient(foo, B, x), torch.func.grad(foo)(x))


# upstream: TestComposability.test_grad_vjp (the cotangent is x itself, so its derivative counts)
def test_grad_vjp():
    x = rand(3, seed=109)

    def foo(x):
        return di.vjp(torch.sin, B, x, x).sum()

    expected = torch.func.grad(lambda x: (x * x.cos()).sum())(x)
    close(di.gradient(foo, B, x), expected)


# upstream: TestComposability.test_grad_vjp (torch.func.grad outside)
def test_grad_vjp_torch_func_outer():
    x = rand(3, seed=109)
    expected = torch.func.grad(lambda x: (x * x.cos()).sum())(x)
    close(torch.func.grad(lambda x: di.vjp(torch.sin, B, x, x).sum())(x), expected)


# upstream: TestComposability.test_vmap_grad
@pytest.mark.parametrize("b", MODES)
def test_vmap_grad(b):
    x = rand(3, seed=110)
    close(torch.vmap(lambda x: di.gradient(torch.sin, b, x))(x), x.cos())
    close(torch.vmap(lambda x: di.derivative(torch.sin, b, x))(x), x.cos())


# upstream: TestComposability.test_vmap_vjp
def test_vmap_vjp():
    x = rand(3, seed=111)
    _, vjp_fn = torch.func.vjp(torch.sin, x)
    close(torch.vmap(lambda x: di.vjp(torch.sin, B, x, x))(x), vjp_fn(x)[0])
    xs = rand(5, 3, seed=112)
    expected = torch.stack([vjp_fn(v)[0] for v in xs])
    close(torch.vmap(lambda w: di.vjp(torch.sin, B, x, w))(xs), expected)
    got = di.vjp(torch.sin, B, x, di.Tangents(*xs))
    assert isinstance(got, di.Tangents) and len(got) == 5
    close(list(got), list(expected))


# upstream: TestComposability.test_vjp_vmap
def test_vjp_vmap():
    x, v = rand(3, seed=113), rand(3, seed=114)
    y, g = di.value_and_vjp(torch.vmap(torch.sin), B, x, v)
    close(y, x.sin())
    close(g, x.cos() * v)


# upstream: TestComposability.test_vjp_vjp (the second vjp is w.r.t. the first's cotangent)
def test_vjp_vjp():
    x0 = rand(3, seed=115)
    x = rand(3, seed=116)
    y, g = di.value_and_vjp(lambda w: di.vjp(torch.sin, B, x0, w), B, x, x)
    close(y, x * x0.cos())
    close(g, x * x0.cos())


# di.gradient of a function whose value is a vjp in its cotangent (review brief)
def test_gradient_wrt_cotangent():
    x = rand(3, seed=117)
    w = rand(3, seed=118)
    c = rand(3, seed=119)
    expected = torch.func.grad(lambda w: (torch.func.vjp(torch.sin, x)[1](w)[0] * c).sum())(w)
    close(expected, c * x.cos())
    close(di.gradient(lambda w: (di.vjp(torch.sin, B, x, w) * c).sum(), B, w), expected)


# the derivative with respect to an hvp tangent is the Hessian applied to the cotangent
def test_gradient_wrt_hvp_tangent():
    x = rand(3, seed=120)
    v = rand(3, seed=121)
    c = rand(3, seed=122)

    def f(x):
        return (x.sin() * x.roll(1)).sum()

    H = torch.func.hessian(f)(x)
    close(di.gradient(lambda v: (di.hvp(f, B, x, v) * c).sum(), B, v), H.T @ c)


# the derivative with respect to a jvp tangent is the vjp (a linear map in v)
def test_gradient_wrt_jvp_tangent():
    x, v, c = rand(3, seed=123), rand(3, seed=124), rand(3, seed=125)

    def f(x):
        return x.sin() * x.roll(1)

    J = torch.func.jacrev(f)(x)
    close(di.gradient(lambda v: (di.jvp(f, B, x, v) * c).sum(), B, v), J.T @ c)


# diffiface inside diffiface: gradient of a jvp / jvp of a gradient / vjp of a gradient
@pytest.mark.parametrize("b", MODES)
def test_forward_over_reverse_compositions(b):
    x, v = rand(4, seed=126), rand(4, seed=127)

    def f(x):
        return (x.exp() * x.roll(1)).sum() + (x**3).prod()

    H = torch.func.hessian(f)(x)
    close_cd(H, cd_hessian(f, x))
    close(di.gradient(lambda x: di.jvp(f, b, x, v), b, x), H @ v)
    close(di.jvp(lambda x: di.gradient(f, b, x), b, x, v), H @ v)
    close(di.vjp(lambda x: di.gradient(f, b, x), b, x, v), H.T @ v)
    close(di.hvp(f, b, x, v), H @ v)
    close(torch.func.jvp(lambda x: di.gradient(f, b, x), (x,), (v,))[1], H @ v)
    close(torch.func.vjp(lambda x: di.gradient(f, b, x), x)[1](v)[0], H.T @ v)


# The guide's perturbation-confusion check: D(x -> x * D(y -> x * y)(1))(4) == 8
@pytest.mark.parametrize("b", MODES)
def test_perturbation_confusion(b):
    one = torch.tensor(1.0, dtype=D)

    def outer(x):
        return x * di.derivative(lambda y: x * y, b, one)

    x = torch.tensor(4.0, dtype=D)
    close(torch.func.grad(lambda x: x * torch.func.grad(lambda y: x * y)(one))(x), 2 * x)
    close(di.derivative(outer, b, x), torch.tensor(8.0, dtype=D))
    close(di.gradient(outer, b, x), torch.tensor(8.0, dtype=D))


# ---------------------------------------------- TestVmapOfGrad, per-sample gradients


# upstream: TestVmapOfGrad.test_per_sample_grads_simple
def test_per_sample_grads_simple():
    def compute_loss(weight, x, t):
        y = x @ weight
        return ((y - t) ** 2).sum()

    weight, x, t = rand(16, 2, seed=128), rand(8, 16, seed=129), rand(8, 2, seed=130)
    expected = torch.stack([torch.func.grad(compute_loss)(weight, x[i], t[i]) for i in range(8)])
    result = torch.vmap(
        lambda x, t: di.gradient(compute_loss, B, weight, di.Constant(x), di.Constant(t))
    )(x, t)
    close(result, expected)


# upstream: TestVmapOfGrad.test_log_softmax
def test_log_softmax_vmap_vjp():
    x, v = rand(3, 5, seed=131), rand(5, seed=132)
    f = partial(torch.log_softmax, dim=-1)
    result = torch.vmap(lambda x: di.vjp(f, B, x, v))(x)
    xr = x.clone().requires_grad_()
    f(xr).backward(v.expand_as(x))
    close(result, xr.grad)
    close(di.vjp(f, B, x, v.expand_as(x).contiguous()), xr.grad)
    close(di.vjp(f, B, x, v.expand_as(x)), xr.grad)


# ------------------------------------------------- TestExamplesCorrectness


def grads_or_zeros(out, params):
    gs = torch.autograd.grad(out, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(gs, params, strict=True)]


def _mlp(seed, sizes=(1, 8, 8, 1), act=nn.ReLU):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers).to(D)


# upstream: TestExamplesCorrectness.test_maml_regression (params are diffiface's x and require
# grad; the outer torch.autograd.grad goes through the inner diffiface gradient)
@pytest.mark.parametrize("how", HOW)
def test_maml_regression(how):
    net = _mlp(0, act=nn.Tanh)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    x1, y1, x2, y2 = (rand(10, 1, seed=s) for s in (133, 134, 135, 136))

    def inner_loss(params, x, y):
        return ((functional_call(net, params, (x,)) - y) ** 2).mean()

    def task_loss(grads):
        new = {k: params[k] - 0.1 * grads[k] for k in params}
        return inner_loss(new, x2, y2)

    grads = op("gradient", how, inner_loss, B, params, di.Constant(x1), di.Constant(y1))
    result = torch.autograd.grad(task_loss(grads), list(params.values()))

    loss = inner_loss(params, x1, y1)
    ref = torch.autograd.grad(loss, list(params.values()), create_graph=True)
    ref_grads = dict(zip(params, ref, strict=True))
    expected = torch.autograd.grad(task_loss(ref_grads), list(params.values()))
    close(result, expected)


# Gradient penalty: torch.autograd.grad through di.gradient with f closing over an
# nn.Module's parameters (upstream: TestExamplesCorrectness.test_lennard_jones_batched_jac's
# pattern, and the "closes over tensors that require grad" tests)
@pytest.mark.parametrize("how", [*HOW, "twice", "x_requires_grad", "value_and_gradient"])
def test_gradient_penalty_closure_over_module(how):
    model = _mlp(1, sizes=(3, 4, 1), act=nn.Tanh)
    params = list(model.parameters())
    x = rand(5, 3, seed=137)

    def f(x):
        return model(x).sum()

    xr = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(f(xr), xr, create_graph=True)
    expected = grads_or_zeros((gx**2).sum() + f(x), params)
    tf = (torch.func.grad(f)(x) ** 2).sum() + f(x)
    close(grads_or_zeros(tf, params), expected)

    for _ in range(2 if how == "twice" else 1):
        if how == "value_and_gradient":
            value, g = di.value_and_gradient(f, B, x)
        else:
            xx = x.clone().requires_grad_() if how == "x_requires_grad" else x
            g = op("gradient", "plain" if how != "prepared" else "prepared", f, B, xx)
            value = f(x)
        close(grads_or_zeros((g**2).sum() + value, params), expected)


# Second-order operators and derivatives of f closing over an nn.Module's parameters, with the
# parameters' gradient taken by torch.autograd (a Hessian / curvature penalty)
@pytest.mark.parametrize("operator", ["hvp", "hessian", "derivative", "second_derivative"])
def test_second_order_closure_over_module(operator):
    model = _mlp(4, sizes=(3, 4, 1), act=nn.Tanh)
    params = list(model.parameters())
    x, v = rand(3, seed=146), rand(3, seed=147)
    t = torch.tensor(0.8, dtype=D)

    def f(x):
        return model(x).sum()

    def along(t):
        return f(t * x)

    if operator == "hvp":
        got = di.hvp(f, B, x, v)
        ref = torch.func.jvp(torch.func.grad(f), (x,), (v,))[1]
    elif operator == "hessian":
        got, ref = di.hessian(f, B, x), torch.func.hessian(f)(x)
    elif operator == "derivative":
        got, ref = di.derivative(along, B, t), torch.func.grad(along)(t)
    else:
        got = di.second_derivative(along, B, t)
        ref = torch.func.grad(torch.func.grad(along))(t)
    close(got, ref)
    close(grads_or_zeros((got**2).sum(), params), grads_or_zeros((ref**2).sum(), params))


# The same penalty through di.FixedParams (the documented spelling)
def test_gradient_penalty_fixed_params():
    model = _mlp(1, sizes=(3, 4, 1), act=nn.Tanh)
    params = dict(model.named_parameters())
    x = rand(5, 3, seed=137)

    def g(x, p):
        return functional_call(model, p, (x,)).sum()

    penalty = (di.gradient(di.FixedParams(g, params), B, x) ** 2).sum()
    result = grads_or_zeros(penalty, list(params.values()))
    xr = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(model(xr).sum(), xr, create_graph=True)
    expected = grads_or_zeros((gx**2).sum(), list(model.parameters()))
    close(result, expected)


# A closure over a plain tensor that requires grad (upstream: test_views' pattern, captured)
@pytest.mark.parametrize("operator", ["gradient", "jvp", "vjp", "hvp"])
def test_closure_over_tensor_requiring_grad(operator):
    x, v = rand(3, seed=138), rand(3, seed=139)
    a = rand(3, seed=140).requires_grad_()

    def f(x):
        return (a * x.sin() * x).sum()

    def fv(x):
        return a * x.sin() * x

    if operator == "gradient":
        out = di.gradient(f, B, x)
        ref = lambda a: torch.func.grad(lambda x: (a * x.sin() * x).sum())(x)  # noqa: E731
    elif operator == "jvp":
        out = di.jvp(fv, B, x, v)
        ref = lambda a: torch.func.jvp(lambda x: a * x.sin() * x, (x,), (v,))[1]  # noqa: E731
    elif operator == "vjp":
        out = di.vjp(fv, B, x, v)
        ref = lambda a: torch.func.vjp(lambda x: a * x.sin() * x, x)[1](v)[0]  # noqa: E731
    else:
        out = di.hvp(f, B, x, v)
        ref = lambda a: torch.func.jvp(  # noqa: E731
            torch.func.grad(lambda x: (a * x.sin() * x).sum()), (x,), (v,)
        )[1]
    close(out, ref(a))
    (ga,) = torch.autograd.grad((out**2).sum(), a)
    (ga_ref,) = torch.autograd.grad((ref(a) ** 2).sum(), a)
    close(ga, ga_ref)
    close_cd(ga, cd_gradient(lambda a: (ref(a) ** 2).sum(), a.detach()))


# upstream: TestExamplesCorrectness.test_lennard_jones_batched_jac (model closed over; forces from
# per-sample Jacobians; gradient of the loss w.r.t. the model's parameters)
@pytest.mark.parametrize("operator", ["batched_jacobian", "vmap_jacobian"])
def test_lennard_jones_batched_jac(operator):
    sigma, epsilon = 0.5, 4.0

    def lennard_jones(r):
        return epsilon * ((sigma / r) ** 12 - (sigma / r) ** 6)

    def lennard_jones_force(r):
        return -epsilon * ((-12 * sigma**12 / r**13) + (6 * sigma**6 / r**7))

    r = torch.linspace(0.5, 2 * sigma, steps=12, dtype=D)
    drs = torch.outer(r, torch.tensor([1.0, 0, 0], dtype=D))
    norms = torch.norm(drs, dim=1).reshape(-1, 1)
    energies_t = lennard_jones(norms)
    forces_t = lennard_jones_force(norms) * drs
    model = _mlp(2, sizes=(1, 8, 8, 1), act=nn.Tanh)

    def predict(jac):
        energies = model(norms)
        derivs = jac(norms).reshape(-1, 1)
        return energies, -derivs * drs / norms

    def loss(e, f):
        return F.mse_loss(energies_t, e) + 0.01 * F.mse_loss(forces_t, f) / 3

    if operator == "batched_jacobian":
        jac = lambda n: di.batched_jacobian(model, B, n)  # noqa: E731
    else:
        jac = lambda n: torch.vmap(lambda r: di.jacobian(model, B, r))(n)  # noqa: E731
    result = torch.autograd.grad(loss(*predict(jac)), list(model.parameters()))
    expected = torch.autograd.grad(
        loss(*predict(torch.vmap(torch.func.jacrev(model)))), list(model.parameters())
    )
    close(result, expected)


# upstream: TestExamplesCorrectness.test_ensemble_regression (one training step by
# value_and_gradient, against torch.autograd and torch.func.grad_and_value)
@pytest.mark.parametrize("how", HOW)
def test_ensemble_regression_step(how):
    net = _mlp(3, sizes=(2, 8, 2))
    weights = {k: v.detach().clone() for k, v in net.named_parameters()}
    points, labels = rand(20, 2, seed=141), torch.randint(0, 2, (20,))

    def compute_loss(weights, batch, targets):
        out = F.log_softmax(functional_call(net, weights, (batch,)), -1)
        return F.nll_loss(out, targets)

    loss, g = op(
        "value_and_gradient",
        how,
        compute_loss,
        B,
        weights,
        di.Constant(points),
        di.Constant(labels),
    )
    g_tf, loss_tf = torch.func.grad_and_value(compute_loss)(weights, points, labels)
    close(loss, loss_tf)
    close(g, g_tf)
    wr = {k: v.clone().requires_grad_() for k, v in weights.items()}
    ref = torch.autograd.grad(compute_loss(wr, points, labels), list(wr.values()))
    close(list(g.values()), list(ref))
