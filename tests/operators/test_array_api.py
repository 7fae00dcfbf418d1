"""Functions written once with the Array API (``xp = array_namespace(x)``, array-api-compat)
through gradient, hessian, jacobian, jvp and vjp on every backend, against closed forms,
and the same answers across backends; the support table of docs/array-api.md
regenerates (benchmarks/array_api_support.py)."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np
import pytest
from helpers import HAVE, central_grad, tolerance

import diffiface as di

array_api_compat = pytest.importorskip("array_api_compat")
array_namespace = array_api_compat.array_namespace

ROOT = pathlib.Path(__file__).parents[2]
X = np.array([0.7, -1.2, 2.0, 0.3])
V = np.array([1.0, 0.5, -2.0, 0.25])
A = np.array([[1.0, 2.0, 0.5, -1.0], [-0.3, 0.4, 1.5, 0.2], [0.6, -0.8, 0.1, 1.1]])
W = np.array([0.3, -1.0, 0.5])


def quadratic(x, a):  # matmul and a reduction: 0.5 |a x|^2
    xp = array_namespace(x)
    return 0.5 * xp.sum((a @ x) ** 2)


def branches(x):  # where and maximum, away from their kinks
    xp = array_namespace(x)
    return xp.sum(xp.where(x > 0, x**3, -(x**2))) + xp.sum(xp.maximum(x, 0.5) ** 2)


def log_sum_exp(x):  # log, exp, sum and mean
    xp = array_namespace(x)
    return xp.log(xp.sum(xp.exp(x))) + xp.mean(x**2)


def field(x, a):  # R^4 -> R^3: sin(a x) * x[:3]
    xp = array_namespace(x)
    return xp.sin(a @ x) * x[:3]


def _softmax(x):
    e = np.exp(x)
    return e / e.sum()


# name -> (f, contexts, gradient, Hessian), closed forms at X
SCALARS = {
    "quadratic": (quadratic, (A,), A.T @ A @ X, A.T @ A),
    "branches": (
        branches,
        (),
        np.where(X > 0, 3 * X**2, -2 * X) + np.where(X > 0.5, 2 * X, 0.0),
        np.diag(np.where(X > 0, 6 * X, -2.0) + np.where(X > 0.5, 2.0, 0.0)),
    ),
    "log_sum_exp": (
        log_sum_exp,
        (),
        _softmax(X) + 2 * X / X.size,
        np.diag(_softmax(X)) - np.outer(_softmax(X), _softmax(X)) + 2 / X.size * np.eye(4),
    ),
}


def _jacobian(x):
    r = A @ x
    return np.cos(r)[:, None] * A * x[:3, None] + np.diag(np.sin(r)) @ np.eye(3, 4)


def _tols(backend):
    """(first order, Hessian): the tests' tolerance table; finite differences over
    finite differences, 1e-4 relative (tests/operators/test_second_order.py)."""
    first = tolerance(backend, np.float64)[0]
    fd = isinstance(backend, di.AutoFiniteDifferences)
    return first, 1e-4 if fd else max(first, 1e-9)


@pytest.mark.parametrize("name", list(SCALARS))
def test_gradient_and_hessian_of_scalar_losses(backend, name):
    f, ctx, grad, hess = SCALARS[name]
    ctx = tuple(di.Constant(c) for c in ctx)
    tol, htol = _tols(backend)
    g = di.gradient(f, backend, X, *ctx)
    np.testing.assert_allclose(g, grad, rtol=tol, atol=tol)
    h = di.hessian(f, backend, X, *ctx)
    np.testing.assert_allclose(h, hess, rtol=htol, atol=htol * np.abs(hess).max())
    np.testing.assert_allclose(di.jvp(f, backend, X, V, *ctx), grad @ V, rtol=tol, atol=tol)


def test_jacobian_jvp_and_vjp_of_a_vector_function(backend):
    tol = tolerance(backend, np.float64)[0]
    J = _jacobian(X)
    a = di.Constant(A)
    np.testing.assert_allclose(di.jacobian(field, backend, X, a), J, rtol=tol, atol=tol)
    np.testing.assert_allclose(di.jvp(field, backend, X, V, a), J @ V, rtol=tol, atol=tol)
    np.testing.assert_allclose(di.vjp(field, backend, X, W, a), W @ J, rtol=tol, atol=tol)


def _installed():
    from conftest import ALL_BACKENDS

    return [p.values[0] for p in ALL_BACKENDS if not p.marks]


def test_every_backend_gives_the_same_answers():
    """One f, the five backends: gradients, Hessians and Jacobians agree pairwise (to
    the loosest backend's accuracy: MLX's float64, finite differences)."""
    results = {}
    for b in _installed():
        results[repr(b)] = [
            di.gradient(log_sum_exp, b, X),
            di.hessian(quadratic, b, X, di.Constant(A)),
            di.jacobian(field, b, X, di.Constant(A)),
        ]
    assert len(results) >= 2, "needs two backends"
    first = next(iter(results.values()))
    for name, got in results.items():
        for g, want in zip(got, first, strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4, err_msg=name)


NAMESPACES = {
    "jax": "jax.numpy",
    "torch": "array_api_compat.torch",
    "autograd": "autograd.numpy.numpy_wrapper",
    "mlx": "mlx.core",
    "finite_differences": "array_api_compat.numpy",
}


def test_f_sees_its_frameworks_namespace(backend):
    """Under each backend's transform ``array_namespace`` gives that framework's module
    (what docs/array-api.md says), so one f runs on all."""
    seen = set()

    def f(x):
        xp = array_namespace(x)
        seen.add(xp.__name__)
        return xp.sum(xp.sin(x))

    np.testing.assert_allclose(di.gradient(f, backend, X), np.cos(X), rtol=1e-6, atol=1e-6)
    assert seen == {NAMESPACES[backend.framework]}


@pytest.mark.skipif(not (HAVE["autograd"] and HAVE["mlx"]), reason="needs autograd and mlx")
def test_what_one_framework_lacks_does_not_steer_another():
    """autograd has no derivative of cumulative_prod; MLX has it in reverse mode only.
    MLX's gradient of the same f must not take the direction autograd's failure taught."""

    def f(x):
        xp = array_namespace(x)
        return xp.sum(xp.cumulative_prod(x) * x)

    with pytest.raises(di.DiffifaceTypeError, match=r"(?s)in neither.*cumulative_prod"):
        di.gradient(f, di.AutoAutograd(), X)
    g = di.gradient(f, di.AutoMLX(), X)
    np.testing.assert_allclose(g, central_grad(f, X), rtol=1e-6, atol=1e-6)


def _support_module():
    path = ROOT / "benchmarks" / "array_api_support.py"
    spec = importlib.util.spec_from_file_location("array_api_support", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page_rows():
    page = (ROOT / "docs" / "array-api.md").read_text()
    table = re.search(r"<!-- array-api:start -->\n(.*?)\n<!-- array-api:end -->", page, re.S)
    return {r.split(" | ")[0][3:-1]: r for r in table.group(1).splitlines() if r[:3] == "| `"}


def test_the_support_table_lists_every_function_and_no_wrong_value():
    support = _support_module()
    rows = _page_rows()
    assert list(rows) == list(support.OPS), "regenerate: python benchmarks/array_api_support.py"
    wrong = [r for r in rows.values() if "wrong" in r]
    assert wrong == [], "a derivative disagrees with finite differences: a bug to report"


@pytest.mark.skipif(not all(HAVE.values()), reason="the table lists every backend")
def test_sampled_rows_of_the_support_table_regenerate():
    """A ✓ row, rows with autograd's and MLX's gaps: the page says what a fresh run says
    (the whole table: ``python benchmarks/array_api_support.py --check``)."""
    support = _support_module()
    rows = _page_rows()
    names = ("where", "vecdot", "linalg.inv", "sort")
    fresh = support.table(names).split("\n\nWhy")[0].splitlines()[2:]
    assert fresh == [rows[n] for n in names], "regenerate: python benchmarks/array_api_support.py"
