"""The generic fallbacks: a new backend implementing only vjp, or only jvp, gets every operator."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

import diffiface as di
from diffiface.core.backend import BackendImpl, Traits
from diffiface.core.registry import register

autograd = pytest.importorskip("autograd")
anp = autograd.numpy


@dataclasses.dataclass(frozen=True)
class AutoReverseOnly(di.AbstractBackend):
    mode: str | None = None
    framework: ClassVar[str] = "reverse_only"


@dataclasses.dataclass(frozen=True)
class AutoForwardOnly(di.AbstractBackend):
    mode: str | None = None
    framework: ClassVar[str] = "forward_only"


class _NumpyArrays(BackendImpl):
    traits = Traits("", native_kind="NumPy arrays", output_kind="an array")

    def is_native(self, leaf):
        return isinstance(leaf, np.ndarray | autograd.tracer.Box)

    def from_numpy(self, a):
        return a

    def default_float(self, value):
        return np.asarray(value)


@register(AutoReverseOnly)
class ReverseOnly(_NumpyArrays):
    calls = 0

    def value_and_pullback(self, prob, xs, ctx):
        fn = prob.flat()
        pb, y = autograd.make_vjp(lambda xs: fn(xs, *ctx))(xs)
        type(self).calls += 1
        return np.asarray(y), lambda w: tuple(np.asarray(g) for g in pb(w))


@register(AutoForwardOnly)
class ForwardOnly(_NumpyArrays):
    calls = 0

    def value_and_jvp(self, prob, xs, vs, ctx):
        fn = prob.flat()
        y, t = autograd.make_jvp(lambda xs: fn(xs, *ctx))(xs)(vs)
        type(self).calls += 1
        return np.asarray(y), np.asarray(t)


def f(x):
    return anp.sin(x[:2]) * x[1:] ** 2


def jac(x):
    j = np.zeros((2, 3))
    for i in range(2):
        j[i, i] = np.cos(x[i]) * x[i + 1] ** 2
        j[i, i + 1] = np.sin(x[i]) * 2 * x[i + 1]
    return j


X = np.array([0.3, -0.7, 1.1])


@pytest.mark.parametrize("backend", [AutoReverseOnly(), AutoForwardOnly()], ids=repr)
def test_every_operator_from_one_primitive(backend):
    j = jac(X)
    np.testing.assert_allclose(di.jacobian(f, backend, X), j, rtol=1e-12)
    np.testing.assert_allclose(di.jvp(f, backend, X, np.array([1.0, 2.0, 3.0])), j @ [1, 2, 3])
    np.testing.assert_allclose(di.vjp(f, backend, X, np.array([1.0, -1.0])), [1, -1] @ j)
    g = di.gradient(lambda t: (t["a"] ** 2).sum() * t["b"], backend, {"a": X, "b": np.array(2.0)})
    np.testing.assert_allclose(g["a"], 4 * X)
    np.testing.assert_allclose(g["b"], (X**2).sum())
    np.testing.assert_allclose(di.derivative(anp.sin, backend, np.array(0.2)), np.cos(0.2))


def test_jacobian_cost_follows_the_direction():
    ReverseOnly.calls = ForwardOnly.calls = 0
    di.jacobian(f, AutoReverseOnly(), X)  # one pullback, reused for each of the 2 rows
    assert ReverseOnly.calls == 1
    di.jacobian(f, AutoForwardOnly(), X)  # one jvp per input column
    assert ForwardOnly.calls == 3
