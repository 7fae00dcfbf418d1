"""The torch hvp and second-derivative runners check for a backward marked
``@once_differentiable`` (``graph.check_twice``) once per runner of one object of f,
not on every call; a runner made per call (a closure made anew per call) looks the
fact up under the call's own f, never under its code's first object. Results against
closed forms, Python calls inside diffiface counted."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di

torch = pytest.importorskip("torch")

B = di.AutoTorch()
X = np.array([0.5, -1.2, 2.0])
V = np.array([0.3, 1.1, -0.7])
W = np.array([1.5, -0.5, 2.0])
MATCH = r"autograd.Function OnceCube, which is marked @once_differentiable"


def _cubes():
    """Two autograd.Functions of x^3: one with a differentiable backward, one whose
    backward is marked @once_differentiable."""
    from torch.autograd.function import once_differentiable

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2

    class OnceCube(Cube):
        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2

    return Cube, OnceCube


def _make(cube, w):
    return lambda x: (w * cube.apply(x)).sum()  # hvp 6 w x v; second derivative 6 w x


def _hvp(f, prep=None):
    return di.hvp(f, B, torch.tensor(X), torch.tensor(V), prep=prep)


def test_a_warm_torch_hvp_checks_f_once_per_runner():
    """25 Python calls prepared on the old code: f's code looked up on every call (and
    its graph walked on every unprepared call)."""
    cube, _ = _cubes()
    w = torch.tensor(W)
    f = _make(cube, w)
    want = 6 * W * X * V
    prep = di.prepare_hvp(f, B, torch.tensor(X), torch.tensor(V))
    np.testing.assert_allclose(_hvp(f, prep).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(_hvp(f).numpy(), want, rtol=1e-12)
    assert python_calls(lambda: _hvp(f, prep)) <= 12
    assert python_calls(lambda: _hvp(f)) <= 14


def test_a_warm_torch_second_derivative_checks_f_once_per_runner():
    cube, _ = _cubes()
    w = torch.tensor(1.5, dtype=torch.float64)
    f = _make(cube, w)
    s = torch.tensor(0.7, dtype=torch.float64)
    prep = di.prepare_second_derivative(f, B, s)
    for got in (di.second_derivative(f, B, s, prep=prep), di.second_derivative(f, B, s)):
        np.testing.assert_allclose(got.item(), 6 * 1.5 * 0.7, rtol=1e-12)
    assert python_calls(lambda: di.second_derivative(f, B, s, prep=prep)) <= 11
    assert python_calls(lambda: di.second_derivative(f, B, s)) <= 13


def test_a_closure_of_a_checked_code_holding_a_once_differentiable_function_is_refused():
    """Closures made anew per call: their code's runner met the plain Function first;
    a closure of that code holding the @once_differentiable one is refused on every
    call (its own fact, not its code's first object's), and the plain one still runs."""
    cube, once = _cubes()
    w = torch.tensor(W)
    for _ in range(3):
        np.testing.assert_allclose(_hvp(_make(cube, w)).numpy(), 6 * W * X * V, rtol=1e-12)
    for _ in range(3):
        with pytest.raises(di.DiffifaceTypeError, match=MATCH):
            _hvp(_make(once, w))
        np.testing.assert_allclose(_hvp(_make(cube, w)).numpy(), 6 * W * X * V, rtol=1e-12)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_a_long_lived_closure_holding_a_once_differentiable_function_is_refused(prepared):
    """After a closure of the same code with the plain Function kept its runners: every
    call (or preparation) of the other closure is refused, hvp and second_derivative."""
    cube, once = _cubes()
    w, s = torch.tensor(W), torch.tensor(0.7, dtype=torch.float64)
    plain = _make(cube, w)
    np.testing.assert_allclose(_hvp(plain).numpy(), 6 * W * X * V, rtol=1e-12)
    di.second_derivative(plain, B, s)
    f = _make(once, w)
    if prepared:  # (preparing runs the call)
        x, v = torch.tensor(X), torch.tensor(V)
        calls = [lambda: di.prepare_hvp(f, B, x, v), lambda: di.prepare_second_derivative(f, B, s)]
    else:
        calls = [lambda: _hvp(f), lambda: di.second_derivative(f, B, s)]
    for _ in range(4):
        for call in calls:
            with pytest.raises(di.DiffifaceTypeError, match=MATCH):
                call()
    np.testing.assert_allclose(_hvp(plain).numpy(), 6 * W * X * V, rtol=1e-12)
