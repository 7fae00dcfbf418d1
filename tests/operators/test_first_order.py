"""Every first-order operator on every backend against closed-form derivatives: the
scenarios of tests/helpers.py (diffiface.testing.Scenario objects), in float64 and
float32, on NumPy and native arrays."""

from __future__ import annotations

import numpy as np
import optree
import pytest
from helpers import closed_form_scenarios, jacobian_leaves, native, to_numpy, tolerance

import diffiface as di

DTYPES = [np.float64, np.float32]
SCENARIOS = closed_form_scenarios()


def _tree_map(fn, tree):
    return optree.tree_map(fn, tree, namespace="diffiface")


def _point(backend, case, dtype, kind):
    def conv(a):
        a = np.asarray(a, dtype=dtype)
        return native(backend, a) if kind == "native" else a

    x = _tree_map(conv, case.x)
    ctx = tuple(di.Constant(conv(c.value)) for c in case.contexts)
    return x, ctx, conv


def _assert_close(backend, got, want, dtype, kind):
    rtol, atol = tolerance(backend, dtype)
    if kind == "numpy":
        assert isinstance(got, np.ndarray), type(got)
    else:
        module = type(got).__module__.split(".")[0]
        assert module in ("jax", "jaxlib", "torch", "mlx", "numpy"), type(got)
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


def _array_input(case):
    return isinstance(case.x, np.ndarray)


PARAMS = [
    pytest.param(case, dtype, kind, id=f"{case.name}-{np.dtype(dtype).name}-{kind}")
    for case in SCENARIOS
    for dtype in DTYPES
    for kind in ("numpy", "native")
]


@pytest.mark.parametrize(("case", "dtype", "kind"), PARAMS)
def test_first_order_operators(backend, case, dtype, kind):
    if kind == "native" and backend.framework in ("autograd", "finite_differences"):
        pytest.skip("NumPy is the native kind of this backend")
    f = case.f  # written with diffiface.testing.namespace: runs on every backend
    x, ctx, conv = _point(backend, case, dtype, kind)
    y_ref = np.asarray(case.call(case.x))
    jacs = jacobian_leaves(case)
    out_ndim = np.ndim(y_ref)

    # jvp along the scenario's tangent v; vjp along its cotangent w
    v_np = optree.tree_leaves(case.v, namespace="diffiface")
    v = _tree_map(conv, case.v)
    v_np = [np.asarray(a, dtype=dtype).astype(np.float64) for a in v_np]
    jvp_ref = sum(np.tensordot(j, t, axes=t.ndim) for j, t in zip(jacs, v_np, strict=True))
    w_np = np.asarray(case.w, dtype=dtype).reshape(np.shape(y_ref))
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

    if _array_input(case):
        y, j = di.value_and_jacobian(f, backend, x, *ctx)
        _assert_close(backend, y, y_ref, dtype, kind)
        _assert_close(backend, j, jacs[0], dtype, kind)
        _assert_close(backend, di.jacobian(f, backend, x, *ctx), jacs[0], dtype, kind)

    if _array_input(case) and case.x.ndim == 0:
        y, d = di.value_and_derivative(f, backend, x, *ctx)
        _assert_close(backend, y, y_ref, dtype, kind)
        _assert_close(backend, d, jacs[0], dtype, kind)
        _assert_close(backend, di.derivative(f, backend, x, *ctx), jacs[0], dtype, kind)


JAC_CASES = [c for c in SCENARIOS if _array_input(c)]


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
    j = di.jacobian(case.f, backend, case.x, *case.contexts)
    np.testing.assert_allclose(j, jacobian_leaves(case)[0], rtol=1e-10, atol=1e-12)
