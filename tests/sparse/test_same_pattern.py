"""One f, one pattern: ``AutoSparse(backend)`` with its defaults detects the same global
Jacobian and Hessian patterns on JAX (jaxpr), torch (aten graph), autograd and finite
differences (the NumPy tracer) and MLX (the NumPy tracer over an Array API f), for
functions written once with the Array API, each given x and its constant as the
backend's own arrays.

Every pattern is checked against the dense float64 derivatives (JAX's) at random
random points: it holds each nonzero (sound); and it equals the JAX detector's. The
sparse values on autograd, finite differences and MLX equal the dense ones."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HAVE
from helpers import MLX_FLOAT64, native

import diffiface as di

array_namespace = pytest.importorskip("array_api_compat").array_namespace
pytestmark = pytest.mark.skipif(not (HAVE["jax"] and HAVE["autograd"]), reason="needs jax")

N = 16
RNG = np.random.default_rng(7)
BAND = np.diag(RNG.standard_normal(N)) + np.diag(RNG.standard_normal(N - 1), 1)
BAND[3, 9] = 0.5  # (one entry off the band)
BACKENDS = [
    pytest.param(b, id=b.framework, marks=[] if m is None or HAVE[m] else pytest.mark.skip(m))
    for b, m in (
        (di.AutoJax(), "jax"),
        (di.AutoTorch(), "torch"),
        (di.AutoAutograd(), "autograd"),
        (di.AutoFiniteDifferences(), None),
        (di.AutoMLX(), "mlx"),
    )
]


# ---- f : R^n -> R^m ------------------------------------------------------------------


def banded(x):
    return x[:-2] - 2 * x[1:-1] + x[2:] + x[1:-1] ** 3


def arrowhead(x):
    xp = array_namespace(x)
    return xp.concat([xp.sum(x**2, axis=0, keepdims=True), x[1:] * x[0]])


def brusselator(x):  # two species on a periodic 2 x 4 grid: five-point stencils
    xp = array_namespace(x)
    u, v = xp.reshape(x[:8], (2, 4)), xp.reshape(x[8:], (2, 4))

    def lap(w):
        rolled = [xp.roll(w, s, axis=a) for s in (1, -1) for a in (0, 1)]
        return rolled[0] + rolled[1] + rolled[2] + rolled[3] - 4 * w

    du = 1.0 + u**2 * v - 4.4 * u + 0.1 * lap(u)
    dv = 3.4 * u - u**2 * v + 0.1 * lap(v)
    return xp.concat([xp.reshape(du, (-1,)), xp.reshape(dv, (-1,))])


def products(x):
    return x[:-2] * x[1:-1] * x[2:] ** 2


def divisions(x):
    xp = array_namespace(x)
    return x[:-1] / (1.0 + x[1:] ** 2) + xp.exp(x[:-1]) / x[1:]


def indexing(x):
    xp = array_namespace(x)
    picked = xp.stack([x[0] * x[3], x[5] + x[2], xp.tanh(x[7]) * x[1]])
    return xp.concat([picked, x[8:12], xp.reshape(xp.reshape(x[12:], (2, 2)).T, (-1,)) ** 2])


def reductions(x):
    xp = array_namespace(x)
    m = xp.reshape(x, (4, 4))
    return xp.concat(
        [xp.sum(m, axis=1), xp.max(m, axis=0), xp.mean(m * m, axis=0), xp.prod(m[:2], axis=0)]
    )


def branches(x):
    xp = array_namespace(x)
    return xp.where(x > 0, x**2, xp.sin(x)) + xp.maximum(x, 0.5) * xp.roll(x, 3)


def matrix(x, a):
    xp = array_namespace(x)
    return xp.tanh(a @ x) * x


JACOBIANS = [banded, arrowhead, brusselator, products, divisions, indexing, reductions,
             branches, matrix]  # fmt: skip


# ---- scalar f: Hessians ------------------------------------------------------------------


def rosenbrock(x):
    xp = array_namespace(x)
    return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def chain(x):
    xp = array_namespace(x)
    return xp.sum(xp.sin(x[1:] * x[:-1])) + xp.sum(xp.sqrt(1.0 + x**2))


def product_terms(x):
    xp = array_namespace(x)
    return xp.prod(x[:4]) * x[5] + xp.sum(x[6:] ** 3)


def ratios(x):
    xp = array_namespace(x)
    return xp.sum(x[:-1] / x[1:]) + xp.sum(xp.abs(x))


def quadratic(x, a):
    xp = array_namespace(x)
    return xp.sum((a @ x) ** 2)


def piecewise(x):
    xp = array_namespace(x)
    return xp.sum(xp.where(x > 0, x**3, x)) + xp.sum(xp.maximum(x, 0.0) * x[0])


def dense_hessian(x):
    xp = array_namespace(x)
    return xp.log(xp.sum(xp.exp(x)))


# the dense derivatives: JAX's (autograd's Hessian of prod holds rounding noise where
# the true one is zero)
REFERENCE = di.AutoJax()
HESSIANS = [rosenbrock, chain, product_terms, ratios, quadratic, piecewise, dense_hessian]


def _contexts(f, backend=REFERENCE):
    """f's constant as the backend's own array (an mx.array on MLX)."""
    return (di.Constant(native(backend, BAND)),) if f in (matrix, quadratic) else ()


def _points():
    return [RNG.uniform(0.2, 2.0, N) * RNG.choice([-1.0, 1.0], N) for _ in range(3)]


def _pattern(f, backend, hessian, dtype=np.float64):
    x = native(backend, np.linspace(0.3, 1.7, N).astype(dtype))
    ctx = _contexts(f, backend)
    return di.sparsity_pattern(f, backend, x, *ctx, hessian=hessian).toarray()


def _dense_nonzeros(f, hessian):
    """The union of the dense float64 derivatives' nonzeros at three random points."""
    op = di.hessian if hessian else di.jacobian
    found = None
    for x in _points():
        d = np.asarray(op(f, REFERENCE, native(REFERENCE, x), *_contexts(f))).reshape(-1, N)
        d = d != 0
        found = d if found is None else found | d
    return found


@pytest.mark.parametrize("hessian", [False, True], ids=["jacobian", "hessian"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_detects_the_same_sound_pattern(backend, hessian):
    for f in HESSIANS if hessian else JACOBIANS:
        got = _pattern(f, backend, hessian)
        jax_pattern = _pattern(f, di.AutoJax(), hessian)
        nonzeros = _dense_nonzeros(f, hessian)
        assert not (nonzeros & ~got).any(), f"{f.__name__}: a nonzero outside the pattern"
        np.testing.assert_array_equal(got, jax_pattern, err_msg=f.__name__)


def test_mlx_patterns_do_not_depend_on_the_dtype():
    """An MLX x in float32 (MLX's default) gives the float64 pattern: the tracer keeps
    no values, and reads the dtype only to tell floats from integers."""
    pytest.importorskip("mlx.core")
    for hessian, fs in ((False, JACOBIANS), (True, HESSIANS)):
        for f in fs:
            got = _pattern(f, di.AutoMLX(), hessian, np.float32)
            want = _pattern(f, di.AutoJax(), hessian)
            np.testing.assert_array_equal(got, want, err_msg=f.__name__)


NUMPY_AND_MLX = [
    pytest.param(b, id=b.framework, marks=[] if m is None or HAVE[m] else pytest.mark.skip(m))
    for b, m in (
        (di.AutoAutograd(), None),
        (di.AutoFiniteDifferences(), None),
        (di.AutoMLX(), "mlx"),
    )
]


@pytest.mark.parametrize("backend", NUMPY_AND_MLX)
def test_sparse_values_on_numpy_tracer_backends_equal_the_dense_ones(backend):
    """Autograd exactly (its AD), finite differences within their truncation error, MLX
    within its float64 accuracy (its sin, cos and exp are float32-accurate)."""
    tol = {"autograd": 1e-10, "finite_differences": 1e-5, "mlx": MLX_FLOAT64}[backend.framework]
    x = _points()[0]
    for f in JACOBIANS:
        got = di.jacobian(f, di.AutoSparse(backend), native(backend, x), *_contexts(f, backend))
        want = di.jacobian(f, REFERENCE, native(REFERENCE, x), *_contexts(f))
        np.testing.assert_allclose(got.toarray(), want, rtol=tol, atol=tol, err_msg=f.__name__)
    for f in HESSIANS:
        got = di.hessian(f, di.AutoSparse(backend), native(backend, x), *_contexts(f, backend))
        want = di.hessian(f, REFERENCE, native(REFERENCE, x), *_contexts(f))
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(
            got.toarray(), want, rtol=tol, atol=tol * scale, err_msg=f.__name__
        )
