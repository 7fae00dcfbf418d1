"""Unprepared calls on the eager frameworks (torch, autograd) keep plans too: the second
plain call like the first goes to the direct runner, which calls f through a weak
reference. Each test proves the path (the general path made to fail) and checks the
result against a closed form; what a runner does not handle goes back to the general
path with the same result."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import diffiface as di
from diffiface.core import shell
from diffiface.core import unprepared as _implicit

X = np.array([0.3, -0.7, 1.1, 0.2])


def _eager(name):
    """(backend, asarray, sin, total) of an eager framework."""
    if name == "torch":
        torch = pytest.importorskip("torch")
        return di.AutoTorch(), torch.tensor, torch.sin, torch.sum
    anp = pytest.importorskip("autograd.numpy")
    return di.AutoAutograd(), np.array, anp.sin, anp.sum


def _general_path_fails(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


def _np(a):
    return np.asarray(a.detach() if hasattr(a, "detach") else a)


@pytest.mark.parametrize("name", ["torch", "autograd"])
def test_second_unprepared_gradient_takes_the_runner(monkeypatch, name):
    b, asarray, sin, total = _eager(name)
    calls = []

    def f(x):
        calls.append(1)
        return total(sin(x) * x)

    x = asarray(X)
    want = np.cos(X) * X + np.sin(X)
    np.testing.assert_allclose(_np(di.gradient(f, b, x)), want, rtol=1e-12)
    di.value_and_gradient(f, b, x)
    assert _implicit.entries(f) == 2
    _general_path_fails(monkeypatch)
    calls.clear()
    for _ in range(3):
        np.testing.assert_allclose(_np(di.gradient(f, b, x)), want, rtol=1e-12)
    y, g = di.value_and_gradient(f, b, asarray(X * 2))  # new values, same signature
    np.testing.assert_allclose(_np(y), (np.sin(2 * X) * 2 * X).sum(), rtol=1e-12)
    np.testing.assert_allclose(_np(g), np.cos(2 * X) * 2 * X + np.sin(2 * X), rtol=1e-12)
    assert len(calls) == 4  # f once per call


def test_torch_unprepared_jacobian_takes_the_runner(monkeypatch):
    torch = pytest.importorskip("torch")
    b, x = di.AutoTorch(), torch.tensor(X)
    f = lambda x: torch.sin(x) * x[0]  # noqa: E731
    J = np.diag(np.cos(X) * X[0])
    J[:, 0] += np.sin(X)
    np.testing.assert_allclose(di.jacobian(f, b, x), J, rtol=1e-12)
    _general_path_fails(monkeypatch)
    np.testing.assert_allclose(di.jacobian(f, b, x), J, rtol=1e-12)


@pytest.mark.parametrize("name", ["torch", "autograd"])
def test_unprepared_plans_hold_f_weakly(name):
    b, asarray, sin, total = _eager(name)

    def f(x):
        return total(sin(x))

    class Model:
        def loss(self, x):
            return total(sin(x) * 2.0)

    x, model = asarray(X), Model()
    for _ in range(3):
        di.gradient(f, b, x)
        g = di.gradient(model.loss, b, x)  # a new bound method per access: one entry
    np.testing.assert_allclose(_np(g), 2 * np.cos(X), rtol=1e-12)
    assert _implicit.entries(f) == 1 and _implicit.entries(model.loss) == 1
    refs = weakref.ref(f), weakref.ref(model)
    del f, model
    gc.collect()
    assert refs[0]() is None and refs[1]() is None


@pytest.mark.parametrize("name", ["torch", "autograd"])
def test_callable_without_weak_references_runs_the_general_path(name):
    b, asarray, sin, total = _eager(name)

    class Loss:
        __slots__ = ()

        def __call__(self, x):
            return total(sin(x))

    loss = Loss()
    for _ in range(2):
        np.testing.assert_allclose(_np(di.gradient(loss, b, asarray(X))), np.cos(X), rtol=1e-12)
    assert _implicit.entries(loss) == 0


def test_torch_unprepared_runner_hands_over_with_the_same_result():
    """Closures an outer pass differentiates, x seen by an outer pass, no_grad and
    inference mode, a tensor subclass: the general path's results, every time."""
    torch = pytest.importorskip("torch")
    b = di.AutoTorch()
    w = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    f = lambda x: (w * torch.sin(x)).sum()  # noqa: E731
    x = torch.tensor(X)
    for _ in range(3):  # the closure over w: results stay attached
        g = di.gradient(f, b, x)
        (dw,) = torch.autograd.grad(g.sum(), w)
        np.testing.assert_allclose(dw.item(), np.cos(X).sum(), rtol=1e-12)
    for _ in range(2):  # x seen by an outer pass
        xg = torch.tensor(X, requires_grad=True)
        (h,) = torch.autograd.grad(di.gradient(f, b, xg).sum(), xg)
        np.testing.assert_allclose(h.numpy(), -2 * np.sin(X), rtol=1e-12)
    with torch.no_grad():
        g = di.gradient(f, b, x)
    assert not g.requires_grad
    np.testing.assert_allclose(g.numpy(), 2 * np.cos(X), rtol=1e-12)
    with torch.inference_mode():
        xi = torch.tensor(X)
    np.testing.assert_allclose(di.gradient(f, b, xi).detach(), 2 * np.cos(X), rtol=1e-12)
    p = torch.nn.Parameter(torch.tensor(X), requires_grad=False)  # a subclass
    np.testing.assert_allclose(di.gradient(f, b, p).detach(), 2 * np.cos(X), rtol=1e-12)


def test_torch_unprepared_runner_keeps_the_callers_tensor():
    """f that writes into its argument's storage never changes the caller's x."""
    torch = pytest.importorskip("torch")
    b, x = di.AutoTorch(), torch.tensor(X)

    def f(x):
        y = x.sum() * 3.0
        x.detach().mul_(0.0)
        return y

    for _ in range(3):
        np.testing.assert_array_equal(di.gradient(f, b, x).numpy(), np.full(4, 3.0))
    np.testing.assert_array_equal(x.numpy(), X)


@pytest.mark.parametrize("fw", ["jax", "torch"])
def test_a_kept_plans_array_constant_then_a_python_float_constant(fw):
    """A plan kept for a Constant holding a framework array, then the same call with a
    Python float Constant: the match refuses it (it read ``.shape`` of the float before)
    and the general path gives cos(x) * c."""
    if fw == "jax":
        import jax.numpy as xp

        b, arr = di.AutoJax(), xp.asarray
    else:
        import torch as xp

        b, arr = di.AutoTorch(), lambda a: xp.as_tensor(a, dtype=xp.float64)

    def f(x, s):
        return (xp.sin(x) * s).sum()

    x = arr(np.linspace(0.1, 1.0, 3))
    for c in (arr(0.8), arr(0.8), 0.8, 0.8):
        g = di.gradient(f, b, x, di.Constant(c))
        np.testing.assert_allclose(np.asarray(g), np.cos(np.linspace(0.1, 1.0, 3)) * 0.8)
