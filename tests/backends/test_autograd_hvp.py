"""autograd hvp: a runner for one float array (forward over reverse for one direction,
reverse over reverse for a ``Tangents`` of k: one trace of the gradient and k
pullbacks), and the general path choosing alike. Every product is compared with
autograd's own ``hessian`` in float64 at rtol 1e-12; f's runs are counted."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import counted

import diffiface as di

pytest.importorskip("autograd")
import autograd
import autograd.numpy as anp

X = np.array([0.3, -0.7, 1.1, 0.2, 0.9, -1.3])
VS = tuple(np.cos(np.arange(6) * (i + 1.0)) for i in range(4))
B = di.AutoAutograd()


def s(x):
    return anp.sum(anp.sin(x) * x) + x[0] * anp.sum(x**3)


H = autograd.hessian(s)(X)
G = autograd.grad(s)(X)


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("k", [1, 4])
def test_a_tangents_of_k_traces_f_once(monkeypatch, prepared, k):
    """Before: one forward-over-reverse trace (one run of f) per direction."""
    f, calls = counted(s)
    v = di.Tangents(*VS[:k])
    prep = di.prepare_hvp(f, B, X, v) if prepared else None
    for _ in range(2):  # (an unprepared f keeps its own plan by its second call)
        di.hvp(f, B, X, v, prep=prep)
    _general_path_fails(monkeypatch)
    calls[0] = 0
    got = di.hvp(f, B, X, v, prep=prep)
    assert calls[0] == 1
    assert isinstance(got, di.Tangents) and len(got) == k
    for hv, v in zip(got, VS, strict=False):
        np.testing.assert_allclose(hv, H @ v, rtol=1e-12)


@pytest.mark.parametrize("op", ["hvp", "gradient_and_hvp"])
def test_one_direction_by_the_runner(monkeypatch, op):
    f, calls = counted(s)
    prep = di.prepare_hvp(f, B, X, VS[0])
    getattr(di, op)(f, B, X, VS[0], prep=prep)
    _general_path_fails(monkeypatch)
    calls[0] = 0
    got = getattr(di, op)(f, B, X, VS[0], prep=prep)
    assert calls[0] == 1
    got = got if isinstance(got, tuple) else (got,)
    want = (G, H @ VS[0]) if op == "gradient_and_hvp" else (H @ VS[0],)
    for a, b in zip(got, want, strict=True):
        assert type(a) is np.ndarray and a.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_the_general_path_takes_k_directions_in_one_trace():
    """A pytree x (no runner): one trace for the k directions too."""
    x = {"a": X[:3], "b": X[3:]}
    f, calls = counted(lambda x: s(anp.concatenate([x["a"], x["b"]])))
    v = di.Tangents(*({"a": u[:3], "b": u[3:]} for u in VS))
    calls[0] = 0
    got = di.hvp(f, B, x, v)
    assert calls[0] <= 2  # the trace, and at most one run that checks f's output
    for hv, u in zip(got, VS, strict=True):
        np.testing.assert_allclose(np.concatenate([hv["a"], hv["b"]]), H @ u, rtol=1e-12)


@pytest.mark.parametrize("outer", ["forward", "reverse"])
def test_a_fixed_combination_gives_the_same_products(outer):
    b = di.second_order(di.AutoAutograd(mode=outer), di.AutoAutograd(mode="reverse"))
    got = di.hvp(s, b, X, di.Tangents(*VS))
    for hv, v in zip(got, VS, strict=True):
        np.testing.assert_allclose(hv, H @ v, rtol=1e-12)


@pytest.mark.parametrize("k", [1, 4])
def test_a_linear_f_has_zero_products_without_a_warning(k):
    def linear(x):
        return anp.sum(x * np.arange(6.0))

    prep = di.prepare_hvp(linear, B, X, di.Tangents(*VS[:k]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = di.hvp(linear, B, X, di.Tangents(*VS[:k]), prep=prep)
    for hv in got:
        np.testing.assert_array_equal(hv, np.zeros(6))


def test_an_f_without_forward_mode_runs_reverse_over_reverse():
    """A primitive with a vjp and no jvp: the runner learns that forward mode fails, as
    the general path does, and f's products stay right."""

    @autograd.extend.primitive
    def cube(x):
        return x**3

    autograd.extend.defvjp(cube, lambda ans, x: lambda g: g * 3 * x**2)

    def f(x):
        return anp.sum(cube(x))

    prep = di.prepare_hvp(f, B, X, VS[0])
    for _ in range(2):
        np.testing.assert_allclose(di.hvp(f, B, X, VS[0], prep=prep), 6 * X * VS[0], rtol=1e-12)


def test_third_derivative_through_second_derivative():
    """The gap this closed: d/dt of di.second_derivative matches autograd's own."""

    def f(t):
        return anp.sin(t) * t**2

    want = autograd.grad(autograd.grad(autograd.grad(f)))(0.4)
    got = di.derivative(lambda t: di.second_derivative(f, B, t), B, 0.4)
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("k", [1, 4])
def test_an_outer_autograd_pass_sees_through_the_runner(k):
    """f closing over a box of an outer pass: the runner hands over, and d/dc of
    <H(c s) v, v> is <H v, v> summed over the directions."""
    v = di.Tangents(*VS[:k])

    def outer(c):
        g = lambda x: c * s(x)  # noqa: E731
        prep = di.prepare_hvp(g, B, X, v)
        hvs = di.hvp(g, B, X, v, prep=prep)
        return sum(anp.sum(hv * u) for hv, u in zip(hvs, VS[:k], strict=True))

    want = sum(u @ H @ u for u in VS[:k])
    np.testing.assert_allclose(autograd.grad(outer)(2.0), want, rtol=1e-12)
