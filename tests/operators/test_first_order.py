"""Every operator on every backend against closed-form derivatives."""

from __future__ import annotations

import numpy as np
import optree
import pytest
from helpers import native, to_numpy, tolerance, xp
from scenarios import CASES, RNG

import diffiface as di

DTYPES = [np.float64, np.float32]


def _tree_map(fn, tree):
    return optree.tree_map(fn, tree, namespace="diffiface")


def _point(backend, case, dtype, kind):
    def conv(a):
        a = np.asarray(a, dtype=dtype)
        return native(backend, a) if kind == "native" else a

    x = _tree_map(conv, case.x)
    ctx = () if case.constant is None else (di.Constant(conv(case.constant)),)
    return x, ctx, conv


def _assert_close(backend, got, want, dtype, kind):
    rtol, atol = tolerance(backend, dtype)
    if kind == "numpy":
        assert isinstance(got, np.ndarray), type(got)
    else:
        assert type(got).__module__.split(".")[0] in ("jax", "jaxlib", "torch", "numpy"), type(got)
        assert not isinstance(got, np.ndarray) or backend.framework in (
            "autograd",
            "finite_differences",
        )
    assert to_numpy(got).dtype == dtype, (to_numpy(got).dtype, dtype)
    np.testing.assert_allclose(to_numpy(got), want, rtol=rtol, atol=atol)


def _assert_tree_close(backend, got, want_leaves, dtype, kind):
    leaves, tree = optree.tree_flatten(got, namespace="diffiface")
    assert len(leaves) == len(want_leaves)
    for g, w in zip(leaves, want_leaves, strict=True):
        _assert_close(backend, g, w, dtype, kind)
    return tree


def _jac_leaves(case):
    jac = case.jac(case.x)
    return jac if isinstance(jac, list) else [jac]


PARAMS = [
    pytest.param(case, dtype, kind, id=f"{case.name}-{np.dtype(dtype).name}-{kind}")
    for case in CASES
    for dtype in DTYPES
    for kind in ("numpy", "native")
]


@pytest.mark.parametrize(("case", "dtype", "kind"), PARAMS)
def test_first_order_operators(backend, case, dtype, kind):
    if kind == "native" and backend.framework in ("autograd", "finite_differences"):
        pytest.skip("NumPy is the native kind of this backend")
    f = case.make(xp(backend))
    x, ctx, conv = _point(backend, case, dtype, kind)
    y_ref = case.value(case.x)
    jacs = _jac_leaves(case)
    leaves = case.leaves
    out_ndim = np.ndim(y_ref)

    # jvp along a random tangent; vjp along a random cotangent
    v_np = [RNG.standard_normal(np.shape(leaf)) for leaf in leaves]
    v = optree.tree_unflatten(optree.tree_structure(case.x, namespace="diffiface"), v_np)
    v = _tree_map(conv, v)
    v_np = [np.asarray(a, dtype=dtype).astype(np.float64) for a in v_np]
    jvp_ref = sum(np.tensordot(j, t, axes=t.ndim) for j, t in zip(jacs, v_np, strict=True))
    w_np = np.asarray(RNG.standard_normal(np.shape(y_ref)), dtype=dtype)
    vjp_ref = [np.tensordot(w_np.astype(np.float64), j, axes=out_ndim) for j in jacs]

    y, t = di.value_and_jvp(f, backend, x, v, *ctx)
    _assert_close(backend, y, y_ref, dtype, kind)
    _assert_close(backend, t, jvp_ref, dtype, kind)
    _assert_close(backend, di.jvp(f, backend, x, v, *ctx), jvp_ref, dtype, kind)

    y, g = di.value_and_vjp(f, backend, x, conv(w_np), *ctx)
    _assert_close(backend, y, y_ref, dtype, kind)
    _assert_tree_close(backend, g, vjp_ref, dtype, kind)
    _assert_tree_close(backend, di.vjp(f, backend, x, conv(w_np), *ctx), vjp_ref, dtype, kind)

    if out_ndim == 0:
        y, g = di.value_and_gradient(f, backend, x, *ctx)
        _assert_close(backend, y, y_ref, dtype, kind)
        tree = _assert_tree_close(backend, g, jacs, dtype, kind)
        assert tree == optree.tree_structure(x, namespace="diffiface")
        _assert_tree_close(backend, di.gradient(f, backend, x, *ctx), jacs, dtype, kind)

    if case.array_input:
        y, j = di.value_and_jacobian(f, backend, x, *ctx)
        _assert_close(backend, y, y_ref, dtype, kind)
        _assert_close(backend, j, jacs[0], dtype, kind)
        _assert_close(backend, di.jacobian(f, backend, x, *ctx), jacs[0], dtype, kind)

    if case.array_input and case.x.ndim == 0:
        y, d = di.value_and_derivative(f, backend, x, *ctx)
        _assert_close(backend, y, y_ref, dtype, kind)
        _assert_close(backend, d, jacs[0], dtype, kind)
        _assert_close(backend, di.derivative(f, backend, x, *ctx), jacs[0], dtype, kind)


JAC_CASES = [c for c in CASES if c.array_input]


@pytest.mark.parametrize("case", JAC_CASES, ids=[c.name for c in JAC_CASES])
@pytest.mark.parametrize(
    "backend_cls_mode",
    [
        pytest.param((cls, m), id=f"{cls.__name__}-{m}")
        for cls in (di.AutoJax, di.AutoTorch, di.AutoAutograd)
        for m in ("forward", "reverse", None)
    ],
)
def test_jacobian_every_mode(backend_cls_mode, case):
    cls, mode = backend_cls_mode
    pytest.importorskip(cls.framework)
    backend = cls(mode=mode)
    f = case.make(xp(backend))
    ctx = () if case.constant is None else (di.Constant(case.constant),)
    j = di.jacobian(f, backend, case.x, *ctx)
    np.testing.assert_allclose(j, case.jac(case.x), rtol=1e-10, atol=1e-12)
