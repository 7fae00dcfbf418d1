"""Dense Jacobians and Hessians: the size limit (an error naming the bytes and the
ways out, the same on every backend) and chunk_size (equal to the dense result:
bitwise for finite differences, within a few ulps for AD; at most chunk_size
products per pass)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, native, rounding, to_numpy, tolerance, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1, 0.2, 0.5])


def _field(ns):
    return lambda x: ns.sin(x[:3]) * x[1:4] + x[4] ** 2


def _jac_ref(x):
    J = np.zeros((3, 5))
    for i in range(3):
        J[i, i] += np.cos(x[i]) * x[i + 1]
        J[i, i + 1] += np.sin(x[i])
        J[i, 4] += 2 * x[4]
    return J


def _loss(ns):
    return lambda x: (ns.sin(x) * x**2).sum() + x[0] * x[1]


def _hess_ref(x):
    H = np.diag(-np.sin(x) * x**2 + 4 * x * np.cos(x) + 2 * np.sin(x))
    H[0, 1] += 1
    H[1, 0] += 1
    return H


@pytest.mark.parametrize("k", [1, 2, 5, 7])
def test_chunked_jacobian_equals_dense(backend, k):
    f, x = _field(xp(backend)), native(backend, X)
    dense = to_numpy(di.jacobian(f, backend, x))
    np.testing.assert_allclose(dense, _jac_ref(X), rtol=1e-6, atol=1e-6)
    chunked = to_numpy(di.jacobian(f, backend, x, chunk_size=k))
    tol = rounding(backend, 1e-10)
    np.testing.assert_allclose(chunked, dense, rtol=tol, atol=1e-12)
    y, J = di.value_and_jacobian(f, backend, x, chunk_size=k)
    np.testing.assert_allclose(to_numpy(J), dense, rtol=tol, atol=1e-12)
    want = np.sin(X[:3]) * X[1:4] + X[4] ** 2
    np.testing.assert_allclose(to_numpy(y), want, rtol=rounding(backend, 1e-12))


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_chunked_jacobian_both_directions(mode):
    pytest.importorskip("jax")
    b = di.AutoJax(mode=mode)
    J = di.jacobian(_field(xp(b)), b, X, chunk_size=2)
    np.testing.assert_allclose(J, _jac_ref(X), rtol=1e-10)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_chunked_hessian_equals_dense(backend, k):
    f, x = _loss(xp(backend)), native(backend, X)
    dense = to_numpy(di.hessian(f, backend, x))
    np.testing.assert_allclose(dense, _hess_ref(X), rtol=1e-5, atol=1e-5)
    # finite differences of differences: chunks differ from the dense pass in rounding
    tol, _ = tolerance(backend, np.float64)
    chunked = to_numpy(di.hessian(f, backend, x, chunk_size=k))
    np.testing.assert_allclose(chunked, dense, rtol=tol, atol=tol)
    y, _, H = di.value_gradient_and_hessian(f, backend, x, chunk_size=k)
    np.testing.assert_allclose(to_numpy(H), dense, rtol=tol, atol=tol)
    want = (np.sin(X) * X**2).sum() + X[0] * X[1]
    np.testing.assert_allclose(to_numpy(y), want, rtol=rounding(backend, 1e-12))


def test_chunks_bound_the_products_per_pass(monkeypatch):
    pytest.importorskip("jax")
    from diffiface.backends.jax.impl import JaxImpl

    seen = []
    vjps, hvps = JaxImpl.value_and_vjps, JaxImpl.gradient_and_hvps

    def count_vjps(self, prob, xs, ws, *rest):
        seen.append(len(ws))
        return vjps(self, prob, xs, ws, *rest)

    def count_hvps(self, prob, xs, vss, *rest):
        seen.append(len(vss))
        return hvps(self, prob, xs, vss, *rest)

    monkeypatch.setattr(JaxImpl, "value_and_vjps", count_vjps)
    monkeypatch.setattr(JaxImpl, "gradient_and_hvps", count_hvps)
    b = di.AutoJax(mode="reverse")
    di.jacobian(_field(xp(b)), b, X, chunk_size=2)
    assert seen == [2, 1]  # 3 rows
    seen.clear()
    di.hessian(_loss(xp(b)), b, X, chunk_size=2)
    assert seen == [2, 2, 1]  # 5 columns


def test_dense_limit_is_one_error_on_every_backend(backend, monkeypatch):
    monkeypatch.setattr(di.config, "max_dense_bytes", 64)
    x = native(backend, X)
    itemsize = to_numpy(x).dtype.itemsize
    with pytest.raises(ValueError) as err:
        di.jacobian(_field(xp(backend)), backend, x)
    msg = str(err.value)
    assert f"(3 x 5 x {itemsize} bytes)" in msg and "jvp or vjp" in msg and "chunk_size" in msg
    assert repr(backend) in msg
    with pytest.raises(ValueError, match=r"Hessian would take .* \(5 x 5 .*Use hvp"):
        di.hessian(_loss(xp(backend)), backend, x)
    with pytest.raises(ValueError, match="Hessian"):
        di.value_gradient_and_hessian(_loss(xp(backend)), backend, x)
    J = di.jacobian(_field(xp(backend)), backend, x, chunk_size=2)  # opted in: allowed
    np.testing.assert_allclose(to_numpy(J), _jac_ref(X), rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(di.config, "max_dense_bytes", None)
    di.hessian(_loss(xp(backend)), backend, x)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_chunk_size(bad):
    b = di.AutoFiniteDifferences()
    with pytest.raises((TypeError, ValueError), match="chunk_size must be a positive int"):
        di.jacobian(_field(np), b, X, chunk_size=bad)
    with pytest.raises((TypeError, ValueError), match="chunk_size must be a positive int"):
        di.hessian(_loss(np), b, X, chunk_size=bad)


FD = di.AutoFiniteDifferences()


EPS = np.finfo(np.float64).eps


X7 = np.array([0.3, -0.7, 1.1, 0.2, 0.5, -1.3, 0.9])


def _field7(ns):
    return lambda x: ns.exp(ns.sin(x) * (x**2).sum()) * ns.cos(x).sum()


def _loss7(ns):
    return lambda x: (ns.exp(ns.sin(x) * (x**2).sum()) * ns.cos(x)).sum() * x[0]


def _assert_equal_or_ulps(backend, chunked, dense):
    if isinstance(backend, di.AutoFiniteDifferences) or (
        isinstance(backend, di.SecondOrder) and isinstance(backend.outer, di.AutoFiniteDifferences)
    ):
        np.testing.assert_array_equal(chunked, dense)  # built the same way: bitwise
    else:  # the same products batched otherwise: rounding only (measured <= 3 eps max)
        tol = rounding(backend, 16 * EPS)
        np.testing.assert_array_less(np.abs(chunked - dense), tol * np.abs(dense).max())


def _fd_over(inner):
    return pytest.param(
        inner,
        id=f"FD over {inner!r}",
        marks=[]
        if inner.framework == "finite_differences" or HAVE[inner.framework]
        else [pytest.mark.skip(f"{inner.framework} missing")],
    )


@pytest.mark.parametrize("k", [1, 2, 3, 7, 50])
def test_chunked_jacobian_equals_dense_bitwise_or_to_ulps(backend, k):
    # before (finite differences): max |chunked - dense| = 5.5e-08 over k = 1, 2, 3
    f, x = _field7(xp(backend)), native(backend, X7)
    dense = to_numpy(di.jacobian(f, backend, x))
    chunked = to_numpy(di.jacobian(f, backend, x, chunk_size=k))
    _assert_equal_or_ulps(backend, chunked, dense)
    y, J = di.value_and_jacobian(f, backend, x, chunk_size=k)
    _assert_equal_or_ulps(backend, to_numpy(J), dense)
    _assert_equal_or_ulps(backend, to_numpy(y), to_numpy(di.value_and_jacobian(f, backend, x)[0]))


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_chunked_hessian_equals_dense_and_is_symmetrized_like_it(backend, k):
    # before (finite differences): max |chunked - dense| = 1.3e-05 over k = 1, 2, 3 (max|H|
    # = 146), and the chunked Hessian was not symmetrized (|H - H.T| up to 8.1e-06)
    f, x = _loss7(xp(backend)), native(backend, X7)
    dense = to_numpy(di.hessian(f, backend, x))
    chunked = to_numpy(di.hessian(f, backend, x, chunk_size=k))
    _assert_equal_or_ulps(backend, chunked, dense)
    y, g, H = di.value_gradient_and_hessian(f, backend, x, chunk_size=k)
    _assert_equal_or_ulps(backend, to_numpy(H), dense)
    y0, g0, _ = di.value_gradient_and_hessian(f, backend, x)
    _assert_equal_or_ulps(backend, to_numpy(y), to_numpy(y0))  # JAX: f(x) jitted or not
    _assert_equal_or_ulps(backend, to_numpy(g), to_numpy(g0))
    if isinstance(backend, di.AutoFiniteDifferences):
        np.testing.assert_array_equal(chunked, chunked.T)


@pytest.mark.parametrize(
    "inner",
    [_fd_over(b) for b in (di.AutoJax(), di.AutoTorch(), di.AutoAutograd(), FD)],
)
def test_chunked_hessian_of_finite_differences_over_any_gradient(inner):
    # before: FD over JAX or torch was an error (f(x) evaluated on NumPy arrays),
    # FD over autograd differed by 2.4e-08 from the dense Hessian, FD over FD by 1.3e-05
    b = di.second_order(FD, inner)
    f = _loss7(xp(inner))
    dense = di.hessian(f, b, X7)
    for k in (1, 3):
        np.testing.assert_array_equal(di.hessian(f, b, X7, chunk_size=k), dense)
        y, g, H = di.value_gradient_and_hessian(f, b, X7, chunk_size=k)
        np.testing.assert_array_equal(H, dense)
        y0, g0, _ = di.value_gradient_and_hessian(f, b, X7)
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(g, g0)
