"""Second-order operators on every backend and every SecondOrder combination,
against closed-form Hessians."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, native, to_numpy, xp

import diffiface as di

MODES = ("forward", "reverse")
FRAMEWORKS = [(di.AutoJax, "jax"), (di.AutoTorch, "torch"), (di.AutoAutograd, "autograd")]


def _backends():
    out = [pytest.param(di.AutoFiniteDifferences(), id="FD")]
    for cls, mod in FRAMEWORKS:
        marks = [] if HAVE[mod] else [pytest.mark.skip(f"{mod} missing")]
        out.append(pytest.param(cls(), id=cls.__name__, marks=marks))
        out.append(
            pytest.param(
                di.second_order(di.AutoFiniteDifferences(), cls()), id=f"FD-over-{mod}", marks=marks
            )
        )
        for o in MODES:
            for i in MODES:
                b = di.second_order(cls(mode=o), cls(mode=i))
                out.append(pytest.param(b, id=f"{mod}-{o}-over-{i}", marks=marks))
    return out


BACKENDS = _backends()


def _framework(backend):
    return backend.inner if isinstance(backend, di.SecondOrder) else backend


def _tol(backend):
    """FD over FD: 1e-4 relative (step eps**(1/4) over a central gradient); FD over AD:
    1e-6; AD over AD: 1e-10."""
    if isinstance(backend, di.AutoFiniteDifferences):
        return 1e-4
    if isinstance(backend, di.SecondOrder) and isinstance(backend.outer, di.AutoFiniteDifferences):
        return 1e-6
    return 1e-10


def rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] += -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


def rosenbrock_hessian(x):
    n = x.size
    h = np.zeros((n, n))
    for i in range(n - 1):
        h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        h[i + 1, i + 1] += 200
        h[i, i + 1] = h[i + 1, i] = -400 * x[i]
    return h


def poly(z):
    """sum(x**4 * y**6) with x, y the two halves of z."""
    return (z[:2] ** 4 * z[2:] ** 6).sum()


def poly_hessian(z):
    x, y = z[:2], z[2:]
    h = np.zeros((4, 4))
    for i in range(2):
        h[i, i] = 12 * x[i] ** 2 * y[i] ** 6
        h[2 + i, 2 + i] = 30 * x[i] ** 4 * y[i] ** 4
        h[i, 2 + i] = h[2 + i, i] = 24 * x[i] ** 3 * y[i] ** 5
    return h


POINTS = {
    "rosenbrock": (rosenbrock, np.array([0.5, -1.2, 0.8, 1.5]), rosenbrock_hessian),
    "poly": (poly, np.array([0.9, -1.1, 1.2, 0.7]), poly_hessian),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(POINTS))
def test_hvp_and_hessian(backend, name):
    f, x, hess = POINTS[name]
    h = hess(x)
    v = np.array([1.0, -2.0, 0.5, 3.0])
    tol = _tol(backend)
    atol = tol * np.abs(h).max()
    np.testing.assert_allclose(di.hvp(f, backend, x, v), h @ v, rtol=tol, atol=atol)
    g, hv = di.gradient_and_hvp(f, backend, x, v)
    np.testing.assert_allclose(hv, h @ v, rtol=tol, atol=atol)
    np.testing.assert_allclose(g, di.gradient(f, di.AutoFiniteDifferences(), x), rtol=1e-6)
    y, g, H = di.value_gradient_and_hessian(f, backend, x)
    assert np.asarray(y) == pytest.approx(f(x), rel=1e-12)
    np.testing.assert_allclose(H, h, rtol=tol, atol=atol)
    np.testing.assert_allclose(di.hessian(f, backend, x), h, rtol=tol, atol=atol)
    if name == "rosenbrock":
        np.testing.assert_allclose(g, rosenbrock_grad(x), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matrix_hessian_shape_and_native_arrays(backend):
    fw = _framework(backend)
    x = np.array([[0.3, -0.4, 1.0], [0.7, 0.2, -1.3]])
    if not isinstance(fw, di.AutoFiniteDifferences) and not isinstance(backend, di.SecondOrder):
        x_in = native(fw, x)
    else:
        x_in = x
    sin = xp(fw).sin
    H = di.hessian(lambda x: sin(x).sum(), backend, x_in)
    want = np.diag(-np.sin(x).ravel()).reshape(2, 3, 2, 3)
    assert tuple(H.shape) == (2, 3, 2, 3)
    assert type(H) is type(x_in)
    np.testing.assert_allclose(to_numpy(H), want, rtol=_tol(backend), atol=_tol(backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hvp_on_a_pytree(backend):
    if isinstance(backend, di.SecondOrder) and (
        backend.inner.framework == "autograd" and backend.inner.mode == "forward"
    ):  # (finite differences over AD take a pytree: their gradient is one vector)
        with pytest.raises(TypeError, match="single array"):
            di.hvp(
                lambda t: (t["a"] ** 2 * t["b"]).sum(),
                backend,
                {"a": np.ones(2), "b": np.ones(2)},
                {"a": np.ones(2), "b": np.ones(2)},
            )
        return
    a, b = np.array([0.5, -1.0]), np.array([2.0, 0.3])
    va, vb = np.array([1.0, 2.0]), np.array([-1.0, 0.5])
    hv = di.hvp(
        lambda t: (t["a"] ** 2 * t["b"]).sum(), backend, {"a": a, "b": b}, {"a": va, "b": vb}
    )
    # H = [[2 diag(b), 2 diag(a)], [2 diag(a), 0]]
    tol = _tol(backend)
    np.testing.assert_allclose(hv["a"], 2 * b * va + 2 * a * vb, rtol=tol, atol=tol)
    np.testing.assert_allclose(hv["b"], 2 * a * va, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_second_derivative_of_a_vector_function(backend):
    sin = xp(_framework(backend)).sin
    c = np.array([1.0, 2.0, -0.5])
    x = 0.4
    y, d, d2 = di.value_derivative_and_second_derivative(
        lambda x, c: sin(c * x), backend, np.float64(x), di.Constant(c)
    )
    tol = max(_tol(backend), 1e-7)
    np.testing.assert_allclose(y, np.sin(c * x), rtol=1e-12)
    np.testing.assert_allclose(d, c * np.cos(c * x), rtol=tol, atol=tol)
    np.testing.assert_allclose(d2, -(c**2) * np.sin(c * x), rtol=tol, atol=tol)
    d2 = di.second_derivative(lambda x: x**4, backend, 1.5)
    assert isinstance(d2, float) and d2 == pytest.approx(12 * 1.5**2, rel=max(tol, 1e-7))


@pytest.mark.parametrize("backend", [p for p in BACKENDS if "over" not in p.id])
def test_perturbation_confusion(backend):
    def D(f, x):
        return di.derivative(f, backend, x)

    tol = 1e-5 if isinstance(backend, di.AutoFiniteDifferences) else 1e-12
    assert D(lambda x: x * D(lambda y: x + y, 1.0), 1.0) == pytest.approx(1.0, abs=tol)
    assert D(lambda x: x * D(lambda y: x * y, 1.0), 4.0) == pytest.approx(8.0, rel=tol)


@pytest.mark.parametrize("backend", [p for p in BACKENDS if "over" not in p.id])
def test_float32_stays_float32(backend):
    x = np.array([0.5, -1.2, 0.8], dtype=np.float32)
    h = di.hessian(rosenbrock, backend, x)
    hv = di.hvp(rosenbrock, backend, x, np.ones(3, np.float32))
    assert h.dtype == np.float32 and hv.dtype == np.float32
    np.testing.assert_allclose(h, rosenbrock_hessian(x.astype(np.float64)), rtol=2e-2, atol=2e-1)


# ---- errors ------------------------------------------------------------------------


def test_second_order_backend_in_a_first_order_operator():
    b = di.second_order(di.AutoJax(mode="forward"), di.AutoJax())
    with pytest.raises(
        TypeError, match=r"Use its inner backend: gradient\(f, AutoJax\(mode=None\), x\)"
    ):
        di.gradient(rosenbrock, b, np.ones(3))


def test_second_order_checks_its_arguments():
    with pytest.raises(TypeError, match=r"Did you mean AutoJax\(\)"):
        di.second_order(di.AutoJax, di.AutoJax())
    with pytest.raises(TypeError, match="first-order backend"):
        di.second_order(di.second_order(di.AutoJax(), di.AutoJax()), di.AutoJax())


@pytest.mark.parametrize("backend", [p for p in BACKENDS if "over" not in p.id])
def test_second_order_errors(backend):
    with pytest.raises(ValueError, match=r"f must return a scalar"):
        di.hvp(lambda x: x * 2, backend, np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=r"f must return a scalar"):
        di.hessian(lambda x: x * 2, backend, np.ones(3))
    with pytest.raises(
        ValueError, match=r"v must have the shape of x: expected \(3,\), got \(2,\)"
    ):
        di.hvp(rosenbrock, backend, np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="x must be a scalar"):
        di.second_derivative(lambda x: x * 2, backend, np.ones(3))
    with pytest.raises(TypeError, match="single array for hessian"):
        di.hessian(lambda t: (t[0] * t[1]).sum(), backend, (np.ones(2), np.ones(2)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_value_gradient_and_hvp_gives_its_value_as_an_array_of_x_kind(backend):
    """The value of value_gradient_and_hvp is a 0-d array of x's kind like the value of
    value_gradient_and_hessian (it came back as a NumPy scalar on NumPy backends)."""
    x = np.array([0.5, -1.0, 2.0])
    f = lambda z: (z**3).sum()  # noqa: E731
    want = float((x**3).sum())  # the closed form
    b = _framework(backend)
    xn = native(b, x)
    y1 = di.value_gradient_and_hvp(f, backend, xn, native(b, np.ones(3)))[0]
    y2 = di.value_gradient_and_hessian(f, backend, xn)[0]
    assert type(y1) is type(y2) is type(xn), (type(y1), type(y2), type(xn))
    assert np.shape(y1) == () and float(to_numpy(y1)) == pytest.approx(want, rel=1e-12)
