"""Pytree points: the structure comes back (dicts, lists, namedtuples), None leaves stay
None, unused leaves get zeros, aliased leaves their own partials, and size-zero
leaves, empty pytrees and empty inputs or outputs give results of size zero."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, to_numpy

import diffiface as di

X = np.array([0.3, -0.7, 1.1])


def test_none_leaves_stay_none_in_lists_and_products(backend):
    x = [native(backend, X), None]
    g = di.gradient(lambda v: (v[0] ** 2).sum(), backend, x)
    assert g[1] is None
    np.testing.assert_allclose(to_numpy(g[0]), 2 * X, rtol=1e-6)
    t = di.jvp(lambda v: v[0] * 2, backend, x, [native(backend, X), None])
    np.testing.assert_allclose(to_numpy(t), 2 * X, rtol=1e-6)
    w = di.vjp(lambda v: v[0] * 2, backend, x, native(backend, X))
    assert w[1] is None


# ------------------------------------------------------------- aliasing
def test_aliased_leaves_get_their_own_partials(backend):
    a = native(backend, X)
    g = di.gradient(lambda t: (t[0] * t[1] ** 2).sum(), backend, (a, a))  # (a, a): one object
    np.testing.assert_allclose(to_numpy(g[0]), X**2, rtol=1e-6)
    np.testing.assert_allclose(to_numpy(g[1]), 2 * X * X, rtol=1e-6)
    w = native(backend, np.array([[1.0, 2.0], [3.0, 4.0]]))
    tied = {"enc": w, "dec": w}  # tied weights: each slot its own derivative
    v = native(backend, np.array([1.0, -1.0]))
    g = di.gradient(lambda p: ((p["dec"] @ (p["enc"] @ v)) ** 2).sum() / 2, backend, tied)
    W, V = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([1.0, -1.0])
    h = W @ V
    r = W @ h
    np.testing.assert_allclose(to_numpy(g["dec"]), np.outer(r, h), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(g["enc"]), np.outer(W.T @ r, V), rtol=1e-6)


# ------------------------------------------------------------- empty inputs
def test_size_zero_leaves_give_size_zero_results(backend):
    e = native(backend, np.zeros((0, 2)))
    x = {"e": e, "a": native(backend, X)}
    g = di.gradient(lambda d: (d["a"] ** 2).sum() + d["e"].sum(), backend, x)
    assert to_numpy(g["e"]).shape == (0, 2)
    np.testing.assert_allclose(to_numpy(g["a"]), 2 * X, rtol=1e-6)
    w = di.vjp(lambda v: v * 2, backend, e, native(backend, np.zeros((0, 2))))
    assert to_numpy(w).shape == (0, 2) and not np.isnan(to_numpy(w)).any()
    h = di.hvp(lambda v: (v**2).sum(), backend, e, e)
    assert to_numpy(h).shape == (0, 2)


@pytest.mark.parametrize("empty", [{}, (), []], ids=["dict", "tuple", "list"])
def test_empty_pytrees_give_empty_gradients(backend, empty):
    one = native(backend, np.array(2.0))
    y, g = di.value_and_gradient(lambda x: one * 1.0, backend, empty)
    assert g == empty and type(g) is type(empty)
    assert float(to_numpy(y)) == 2.0


def test_unused_leaf_gets_zeros(backend):
    x = {"used": np.array([1.0, 2.0]), "unused": np.array([[3.0, 4.0]], dtype=np.float32)}
    g = di.gradient(lambda t: (t["used"] ** 2).sum(), backend, x)
    np.testing.assert_allclose(g["used"], [2.0, 4.0], rtol=1e-6)
    assert g["unused"].shape == (1, 2) and g["unused"].dtype == np.float32
    assert not np.any(g["unused"])


def test_none_leaves_stay_none(backend):
    x = {"a": np.array([1.0, 2.0]), "b": None}
    g = di.gradient(lambda t: (t["a"] ** 3).sum(), backend, x)
    assert g["b"] is None
    np.testing.assert_allclose(g["a"], [3.0, 12.0], rtol=1e-6)


def test_namedtuple_structure_kept(backend):
    from collections import namedtuple

    P = namedtuple("P", ["w", "b"])
    x = P(np.array([1.0, -1.0]), np.array(0.5))
    g = di.gradient(lambda p: (p.w * p.b).sum(), backend, x)
    assert type(g) is P
    np.testing.assert_allclose(g.w, [0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(g.b, 0.0, atol=1e-6)


def test_empty_inputs_and_outputs(backend):
    ns_ones = np.ones
    j = di.jacobian(lambda x: x[:0] * 2, backend, ns_ones(3))
    assert j.shape == (0, 3)
    j = di.jacobian(
        lambda x: (x * 2).sum() + x[:0].sum() * 0 + 0 * x[:1].sum(), backend, ns_ones(0)
    )
    assert j.shape == (0,)
    j = di.batched_jacobian(lambda x: x**2, backend, ns_ones((0, 3)))
    assert j.shape == (0, 3, 3)


def test_torch_empty_hessian_and_jacobian():
    torch = pytest.importorskip("torch")
    assert di.hessian(lambda x: (x**2).sum(), di.AutoTorch(), torch.ones(0)).shape == (0, 0)
    j = di.jacobian(lambda x: x.sum() * torch.ones(2), di.AutoTorch(), torch.ones(0))
    assert j.shape == (2, 0)
