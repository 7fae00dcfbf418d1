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


def test_python_float_in_python_float_out(backend):
    f = xp(backend).sin
    d = di.derivative(f, backend, 0.5)
    assert isinstance(d, float)
    rtol, atol = tolerance(backend, np.float32)
    assert d == pytest.approx(np.cos(0.5), rel=rtol, abs=atol)
    y, g = di.value_and_gradient(f, backend, 0.5)
    assert isinstance(y, float) and isinstance(g, float)
    assert g == pytest.approx(np.cos(0.5), rel=rtol, abs=atol)


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


def test_inputs_not_mutated(backend):
    x = np.array([1.0, 2.0, 3.0])
    before = x.copy()
    di.gradient(lambda x: (x**2).sum(), backend, x)
    di.jacobian(lambda x: x**2, backend, x)
    assert np.array_equal(x, before)


def test_finite_differences_never_pass_the_callers_array():
    x = np.array([1.0, 2.0])
    before = x.copy()

    def f(z):
        z *= 2  # in place on purpose
        return (z**2).sum()

    g = di.gradient(f, di.AutoFiniteDifferences(), x)
    assert np.array_equal(x, before)
    np.testing.assert_allclose(g, 8 * x, rtol=1e-6)


def test_finite_difference_methods_agree():
    x = np.array([0.3, -0.4])
    f = lambda x: (np.exp(x) * x).sum()  # noqa: E731
    exact = np.exp(x) * (1 + x)
    for method, tol in (("central", 1e-8), ("forward", 1e-6), ("backward", 1e-6)):
        g = di.gradient(f, di.AutoFiniteDifferences(method=method), x)
        np.testing.assert_allclose(g, exact, rtol=tol)
    g = di.gradient(f, di.AutoFiniteDifferences(step=1e-4), x)
    np.testing.assert_allclose(g, exact, rtol=1e-7)


def test_finite_differences_call_count():
    calls = []

    def f(x):
        calls.append(1)
        return (x**2).sum()

    x = np.ones(5)
    di.gradient(f, di.AutoFiniteDifferences(), x)
    assert len(calls) == 1 + 2 * 5  # f(x) plus 2n for central differences
    calls.clear()
    di.jvp(f, di.AutoFiniteDifferences(method="forward"), x, np.ones(5))
    assert len(calls) == 2
