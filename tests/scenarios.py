"""Test scenarios with closed-form derivatives.

Each scenario builds ``f`` from an array namespace (jax.numpy, torch,
autograd.numpy or numpy) so the same math runs on every backend, and gives
the Jacobian in closed form: shape ``f(x).shape + x.shape`` (for a pytree x,
a list of per-leaf Jacobians in flatten order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

RNG = np.random.default_rng(0)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Any], Callable]  # namespace -> f
    x: Any  # NumPy point (float64), array or pytree
    jac: Callable[[Any], Any]  # x -> closed-form Jacobian(s)
    value: Callable[[Any], np.ndarray]  # x -> f(x) in NumPy
    constant: Any = None  # NumPy value passed as di.Constant, or None

    @property
    def leaves(self):
        return optree.tree_leaves(self.x, namespace="diffiface")

    @property
    def array_input(self):
        return isinstance(self.x, np.ndarray)


C = np.array([0.5, -1.5, 2.0])


def _scalar_scalar():
    return Case(
        "scalar->scalar",
        lambda xp: lambda x: xp.sin(x) * x**2,
        np.array(0.7),
        lambda x: np.cos(x) * x**2 + 2 * x * np.sin(x),
        lambda x: np.sin(x) * x**2,
    )


def _scalar_vector():
    return Case(
        "scalar->vector+Constant",
        lambda xp: lambda x, c: xp.sin(c * x),
        np.array(0.3),
        lambda x: C * np.cos(C * x),
        lambda x: np.sin(C * x),
        constant=C,
    )


def _vector_scalar():
    return Case(
        "vector->scalar",
        lambda xp: lambda x: (xp.sin(x) * x).sum(),
        np.array([0.4, -0.9, 1.3, 0.2]),
        lambda x: np.cos(x) * x + np.sin(x),
        lambda x: (np.sin(x) * x).sum(),
    )


def _matrix_scalar():
    return Case(
        "matrix->scalar",
        lambda xp: lambda x: (xp.tanh(x) * x[:1, :] ** 2).sum(),
        np.array([[0.3, -0.2, 0.8], [1.1, 0.5, -0.7]]),
        _matrix_scalar_grad,
        lambda x: (np.tanh(x) * x[:1, :] ** 2).sum(),
    )


def _matrix_scalar_grad(x):
    g = (1 - np.tanh(x) ** 2) * x[:1, :] ** 2
    g[0, :] += np.tanh(x[0, :]) * 2 * x[0, :] + (np.tanh(x[1, :]) * 2 * x[0, :])
    return g


def _vector_vector():
    def jac(x):
        j = np.zeros((2, 3))
        for i in range(2):
            j[i, i] = np.cos(x[i]) * x[i + 1]
            j[i, i + 1] = np.sin(x[i])
        return j

    return Case(
        "vector->vector",
        lambda xp: lambda x: xp.sin(x[:2]) * x[1:],
        np.array([0.2, -0.6, 1.4]),
        jac,
        lambda x: np.sin(x[:2]) * x[1:],
    )


def _vector_matrix():
    def jac(x):
        n = x.size
        eye = np.eye(n)
        return eye[:, None, :] * x[None, :, None] + x[:, None, None] * eye[None, :, :]

    return Case(
        "vector->matrix",
        lambda xp: lambda x: x[:, None] * x[None, :],
        np.array([0.5, -1.2, 2.0]),
        jac,
        lambda x: np.outer(x, x),
    )


def _matrix_matrix():
    def jac(x):
        m = x.shape[0]
        eye = np.eye(m)
        # d(X X^T)_{ij} / dX_{kl} = δ_ik X_jl + δ_jk X_il
        return (
            eye[:, None, :, None] * x[None, :, None, :]
            + x[:, None, None, :] * eye[None, :, :, None]
        )

    return Case(
        "matrix->matrix",
        lambda xp: lambda x: x @ x.T,
        np.array([[0.3, -0.2, 0.8], [1.1, 0.5, -0.7]]),
        jac,
        lambda x: x @ x.T,
    )


def _pytree_scalar():
    x = {"a": np.array([0.5, -0.3]), "b": (np.array(1.5), np.array([[0.2, 0.4]]))}

    def make(xp):
        return lambda t: (t["a"] ** 2).sum() * t["b"][0] + xp.sin(t["b"][1]).sum()

    def jac(t):
        a, (b0, b1) = t["a"], t["b"]
        return [2 * a * b0, np.array((a**2).sum()), np.cos(b1)]

    return Case(
        "pytree->scalar",
        make,
        x,
        jac,
        lambda t: (t["a"] ** 2).sum() * t["b"][0] + np.sin(t["b"][1]).sum(),
    )


def _constant_scalar():
    return Case(
        "vector->scalar+Constant",
        lambda xp: lambda x, c: (c * x**2).sum(),
        np.array([1.0, -2.0, 0.5]),
        lambda x: 2 * C * x,
        lambda x: (C * x**2).sum(),
        constant=C,
    )


CASES = [
    _scalar_scalar(),
    _scalar_vector(),
    _vector_scalar(),
    _matrix_scalar(),
    _vector_vector(),
    _vector_matrix(),
    _matrix_matrix(),
    _pytree_scalar(),
    _constant_scalar(),
]
