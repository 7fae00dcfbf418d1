"""The global sparsity detector for NumPy code (diffiface.sparse.numpy_trace): operator
patterns ported from SparseConnectivityTracer.jl's tests, NumPy's operators against the
JAX detector and dense derivatives, writes through views, the Array API and
autograd.numpy namespaces, and the errors and warnings that name the fix."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

import diffiface as di
from diffiface.sparse.numpy_trace import hessian_pattern, jacobian_pattern
from diffiface.sparse.numpy_trace.tracer import Traced

RNG = np.random.default_rng(3)
C = np.where(RNG.random((5, 6)) < 0.4, RNG.standard_normal((5, 6)), 0.0)


def J(f, n):
    return jacobian_pattern(f, np.zeros(n)).toarray().astype(int).tolist()


def H(f, n):
    return hessian_pattern(f, np.zeros(n)).toarray().astype(int).tolist()


def _ampgo07(x):  # a comparison times inf: no derivative
    return (x[0] <= 0) * np.inf + np.sin(x[0]) + np.sin(10 / 3 * x[0]) + np.log(np.abs(x[0]))


# ---- SparseConnectivityTracer.jl's test/test_gradient.jl and test_hessian.jl ----------
# (x[1] there is x[0] here; ifelse(c, a, b) is np.where, clamp np.clip, fma a * b + c)
SCT_JACOBIANS = [
    (lambda x: np.stack([x[0] ** 2, 2 * x[0] * x[1] ** 2, np.sin(x[2])]), 3,
     [[1, 0, 0], [1, 1, 0], [0, 0, 1]]),
    (lambda x: np.stack([x[0] * x[1], np.ceil(x[0] * x[1]), x[0] * np.round(x[1])]), 2,
     [[1, 1], [0, 0], [1, 0]]),
    (lambda x: np.clip(x[0], x[1], 1.0)[None], 2, [[1, 1]]),
    (lambda x: np.clip(x[0], x[1], x[2])[None], 3, [[1, 1, 1]]),
    (lambda x: (x[0] * x[1] + 1.0)[None], 2, [[1, 1]]),
    (lambda x: np.dot(x[0:2], x[3:5])[None], 5, [[1, 1, 0, 1, 1]]),
    (lambda x: np.where(x[1] < x[2], x[0] + x[1], x[2] * x[3])[None], 4, [[1, 1, 1, 1]]),
    (lambda x: np.where(x[1] < x[2], x[0] + x[1], 1.0)[None], 4, [[1, 1, 0, 0]]),
    (lambda x: np.where(x[1] < x[2], 1.0, x[2] * x[3])[None], 4, [[0, 0, 1, 1]]),
    (lambda x: _ampgo07(x)[None], 1, [[1]]),
    (lambda x: np.round(x), 1, [[0]]),
    (lambda x: x ** (2 / 3), 1, [[1]]),
    (lambda x: (2 / 3) ** x, 1, [[1]]),
]  # fmt: skip
SCT_HESSIANS = [
    (lambda x: x[0] / x[1] + x[2] / 1 + 1 / x[3], 4,
     [[0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]),
    (lambda x: x[0] * x[1] + x[2] * 1 + 1 * x[3], 4,
     [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),
    (lambda x: (x[0] * x[1]) * (x[2] * x[3]), 4,
     [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]),
    (lambda x: (x[0] + x[1]) * (x[2] + x[3]), 4,
     [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]),
    (lambda x: (x[0] + x[1] + x[2] + x[3]) ** 2, 4, [[1] * 4] * 4),
    (lambda x: 1 / (x[0] + x[1] + x[2] + x[3]), 4, [[1] * 4] * 4),
    (lambda x: (x[0] - x[1]) + (x[2] - 1) + (1 - x[3]), 4, [[0] * 4] * 4),
    (lambda x: x[0] + x[1] * x[2] + 1 / x[3] + 1 * x[4], 5,
     [[0, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0]]),
    (lambda x: x[0] + x[1] * x[2] + 1 / x[3] + 1 * x[4] + x[1] ** x[4], 5,
     [[0, 0, 0, 0, 0], [0, 1, 1, 0, 1], [0, 1, 0, 0, 0], [0, 0, 0, 1, 0], [0, 1, 0, 0, 1]]),
    (lambda x: np.copysign(x[0] * x[1], x[2] * x[3]), 4,
     [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),
    (lambda x: np.floor_divide(x[0] * x[1], x[2] * x[3]), 4, [[0] * 4] * 4),
    (lambda x: [x[0] * x[1], x[2] * x[3]][1], 4,  # dead end: x[0] * x[1] is never used
     [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]),
    (lambda x: np.where(x[0] > 0, x[0] ** x[1], x[2] * x[3]), 4,
     [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]),
    (lambda x: np.where(x[0] > 0, x[0] ** x[1], 1.0), 4,
     [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),
    (lambda x: np.sum(np.diff(x) ** 3), 4,
     [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]),
    (lambda x: np.clip(x[0], 0.1, 0.9), 1, [[0]]),
    (lambda x: np.clip(x[0], x[1], x[2]), 3, [[0] * 3] * 3),
    (lambda x: x[0] * np.clip(x[0], x[1], x[2]), 3, [[1, 1, 1], [1, 0, 0], [1, 0, 0]]),
    (lambda x: x[1] * np.clip(x[0], x[1], x[2]), 3, [[0, 1, 0], [1, 1, 1], [0, 1, 0]]),
    (lambda x: x[2] * np.clip(x[0], x[1], x[2]), 3, [[0, 0, 1], [0, 0, 1], [1, 1, 1]]),
    (lambda x: x[0] * x[1] + 1.0, 2, [[0, 1], [1, 0]]),
    (lambda x: x[0] * x[1] + x[2], 3, [[0, 1, 0], [1, 0, 0], [0, 0, 0]]),
    (lambda x: np.sign(x[0]), 1, [[0]]),
    (lambda x: x[0] ** (2 / 3), 1, [[1]]),
    (lambda x: np.sqrt(x[0]), 1, [[1]]),
    (lambda x: 1 * x[0], 1, [[0]]),
    (_ampgo07, 1, [[1]]),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(SCT_JACOBIANS)))
def test_sparse_connectivity_tracer_jacobians(case):
    f, n, want = SCT_JACOBIANS[case]
    assert J(f, n) == want


@pytest.mark.parametrize("case", range(len(SCT_HESSIANS)))
def test_sparse_connectivity_tracer_hessians(case):
    f, n, want = SCT_HESSIANS[case]
    assert H(f, n) == want


def test_a_constant_zero_factor_drops_the_dependence():
    """As the JAX detector (and unlike SparseConnectivityTracer.jl, which keeps it):
    ``0 * y`` and a constant matrix's zeros depend on nothing."""
    assert H(lambda x: 0 * x[0] ** 2, 1) == [[0]]
    assert J(lambda x: np.array([[1.0, 0.0], [0.0, 2.0]]) @ x, 2) == [[1, 0], [0, 1]]


# ---- NumPy's operators: the JAX detector's pattern, and sound at random points -------


def _operators(m):  # m: numpy or jax.numpy
    return {
        "sum_axis": lambda x: m.sum(x.reshape(2, 3) ** 2, axis=0),
        "mean_keepdims": lambda x: m.mean(x.reshape(2, 3), axis=1, keepdims=True).ravel() * x[:2],
        "prod_axis": lambda x: m.prod(x.reshape(2, 3), axis=1),
        "cumsum": lambda x: m.cumsum(x.reshape(2, 3), axis=1).ravel(),
        "cumprod": lambda x: m.cumprod(x),
        "std": lambda x: m.std(x.reshape(2, 3), axis=0),
        "max_axis": lambda x: m.max(x.reshape(3, 2), axis=1),
        "sort": lambda x: m.sort(x.reshape(2, 3), axis=1).ravel(),
        "constant_at_x": lambda x: C @ x,
        "x_at_constant": lambda x: x[:5] @ C,
        "x_at_x": lambda x: (x.reshape(2, 3) @ x.reshape(3, 2)).ravel(),
        "dot": lambda x: m.dot(x[:3], x[3:]) * x,
        "einsum": lambda x: m.einsum("ij,jk->ik", x.reshape(2, 3), C[:3, :2]).ravel(),
        "einsum_diagonal": lambda x: m.einsum("ii->i", x[:4].reshape(2, 2)),
        "outer": lambda x: m.outer(x[:2], x[4:]).ravel(),
        "tensordot": lambda x: m.tensordot(x.reshape(2, 3), C[:3, :4], axes=1).ravel(),
        "trace": lambda x: m.trace(x[:4].reshape(2, 2)) * x,
        "norm": lambda x: m.linalg.norm(x[:4]) * x[4:],
        "inv": lambda x: m.linalg.inv(x[:4].reshape(2, 2)).ravel(),
        "take": lambda x: m.take(x, np.array([5, 0, 3, 3])),
        "fancy": lambda x: x[np.array([1, 4, 1])] * x[0],
        "mask": lambda x: x[np.array([True, False, True, False, False, True])],
        "transpose": lambda x: x.reshape(2, 3).T.ravel() * x,
        "moveaxis": lambda x: m.moveaxis(x.reshape(1, 2, 3), 0, 2).ravel(),
        "squeeze": lambda x: m.squeeze(x.reshape(1, 6)[:, :3]),
        "concatenate": lambda x: m.concatenate([x[:2], x[::-1]]),
        "stack": lambda x: m.stack([x[:3], x[3:] ** 2]).ravel(),
        "roll": lambda x: m.roll(x, 2) * x,
        "flip": lambda x: m.flip(x.reshape(2, 3), axis=1).ravel(),
        "diff": lambda x: m.diff(x, n=2),
        "tril": lambda x: m.tril(x.reshape(2, 3)).ravel(),
        "triu": lambda x: m.triu(x.reshape(2, 3), 1).ravel(),
        "pad_wrap": lambda x: m.pad(x, 2, mode="wrap"),
        "pad_constant": lambda x: m.pad(x, 1, constant_values=3.0),
        "tile": lambda x: m.tile(x[:2], 3),
        "repeat": lambda x: m.repeat(x[:3], 2),
        "where_constant": lambda x: m.where(np.array([1, 0, 1, 0, 1, 0], bool), x, x[::-1]),
        "where_traced": lambda x: m.where(x > 0, x, 2 * m.roll(x, 1)),
        "maximum_minimum": lambda x: m.maximum(x[:3], x[3:]) + m.minimum(x[:3], 0.0),
        "abs_sign": lambda x: m.abs(x) * m.sign(x[::-1]),
        "clip": lambda x: m.clip(x, -0.5, 0.5),
        "power": lambda x: m.abs(x[:3]) ** x[3:],
        "divide": lambda x: x[:3] / x[3:],
        "arctan2_hypot": lambda x: m.arctan2(x[:3], x[3:]) + m.hypot(x[3:], x[:3]),
        "expm1_log1p": lambda x: m.expm1(x[:3]) + m.log1p(x[3:] ** 2),
        "copysign": lambda x: m.copysign(x[:3] * x[3:], x[::2]),
        "broadcast": lambda x: (x[:, None] * x[None, :2]).ravel(),
        "convolve_same": lambda x: m.convolve(x, np.array([1.0, 0.5, -2.0]), mode="same"),
        "correlate_xx": lambda x: m.correlate(x[:3], x[2:], mode="full"),
    }


# the JAX detector takes a convolution of two traced operands by receptive fields
FINER_THAN_JAX = {"correlate_xx"}


@pytest.mark.parametrize("name", list(_operators(np)))
def test_operators_against_the_jax_detector_and_dense_jacobians(name):
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    from diffiface.backends.jax.sparse.detect import jacobian_pattern as jax_pattern

    f, fj = _operators(np)[name], _operators(jnp)[name]
    got = jacobian_pattern(f, np.zeros(6)).toarray()
    theirs = jax_pattern(fj, jnp.zeros(6)).toarray()
    if name in FINER_THAN_JAX:
        assert not (got & ~theirs).any() and got.sum() < theirs.sum()
    else:
        np.testing.assert_array_equal(got, theirs)
    for _ in range(3):
        dense = np.asarray(jax.jacfwd(fj)(jnp.asarray(RNG.uniform(0.5, 2.0, 6)))).reshape(got.shape)
        assert not ((dense != 0) & ~got).any()


def _dense_fd(f, x):
    """Finite differences' Jacobian: a column is exactly zero where f ignores that input."""
    return np.asarray(di.jacobian(f, di.AutoFiniteDifferences(), x)).reshape(-1, x.size) != 0


def test_writes_through_views_reach_their_base():
    def f(x):
        out = np.zeros_like(x)
        out[1:] = x[:-1] ** 2
        out[0] = 1.0
        out[2:4] += x[4:]  # a view's in-place add
        v = out[4:]
        v *= x[0]  # through a view kept in a name
        r = out.reshape(2, 3)  # (a view here: NumPy's reshape of a contiguous array)
        r[1, 2] = r[1, 2] + x[2]
        return out

    x = RNG.uniform(0.5, 2.0, 6)
    np.testing.assert_array_equal(jacobian_pattern(f, x).toarray(), _dense_fd(f, x))


def test_ufunc_out_lists_and_several_outputs():
    def f(x):
        out = np.zeros_like(x)
        assert np.add(x, [1.0, 2.0, 3.0], out=out) is out  # NumPy returns out itself
        frac, whole = np.modf(x * x[::-1])
        return np.add(out, [0.0, 1.0, 2.0]) + frac + whole

    x = RNG.uniform(0.5, 2.0, 3)
    np.testing.assert_array_equal(jacobian_pattern(f, x).toarray(), _dense_fd(f, x))


def test_a_write_through_a_copy_keeps_the_base():
    """NumPy copies a non-contiguous reshape: writing into it leaves x's products alone,
    so the pattern must keep them (it adds, where it cannot tell)."""

    def f(x):
        y = (x * x[::-1]).reshape(2, 3)
        z = y.T.reshape(-1)  # a copy in NumPy
        z[:] = 0.0
        return y.ravel()

    x = RNG.uniform(0.5, 2.0, 6)
    got = jacobian_pattern(f, x).toarray()
    assert not (_dense_fd(f, x) & ~got).any()


def test_f_runs_once_on_a_traced_array_not_on_values():
    seen = []

    def f(x):
        seen.append(type(x))
        return np.sin(x) * x.shape[0]

    jacobian_pattern(f, np.zeros(1000))
    assert seen == [Traced]


def test_a_scipy_sparse_constant_reads_its_nonzeros():
    sparse = pytest.importorskip("scipy.sparse")
    lap = sparse.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(6, 6), format="csr")
    lap_array = sparse.csr_array(lap)

    def f(u):
        return np.concatenate([lap @ u, u @ lap_array, lap.dot(u**2)])

    want = np.vstack([lap.toarray() != 0] * 3)
    np.testing.assert_array_equal(jacobian_pattern(f, np.zeros(6)).toarray(), want)


# ---- namespaces: array_api_compat and autograd.numpy ---------------------------------


def test_array_api_namespace_traces():
    array_api_compat = pytest.importorskip("array_api_compat")

    def f(x, a):
        xp = array_api_compat.array_namespace(x, a)
        y = xp.reshape(x, (2, 3))
        parts = [
            xp.sum(xp.permute_dims(y, (1, 0)), axis=1),
            xp.cumulative_sum(x[:3]),
            xp.where(x[:3] > 0, xp.exp(x[:3]), xp.zeros_like(x[:3])),
            xp.matmul(a, x[3:]),
            xp.vecdot(x[:3], x[3:])[None],
            xp.expand_dims(x[0], axis=0) * xp.sum(x[4:]),
        ]
        return xp.concat(parts)

    a = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    x = RNG.uniform(0.5, 2.0, 6)
    got = jacobian_pattern(lambda t: f(t, a), x).toarray()
    np.testing.assert_array_equal(got, _dense_fd(lambda t: f(t, a), x))


@pytest.mark.skipif(importlib.util.find_spec("autograd") is None, reason="needs autograd")
def test_autograd_numpy_functions_trace():
    import autograd.numpy as anp

    def f(x):
        head = anp.concatenate([anp.sum(anp.sin(x) ** 2)[None], anp.dot(x[:3], x[3:])[None]])
        return anp.concatenate([head, anp.tanh(x[1:]) * x[:-1], anp.where(x > 1, x, -x)])

    x = RNG.uniform(0.5, 2.0, 6)
    np.testing.assert_array_equal(jacobian_pattern(f, x).toarray(), _dense_fd(f, x))


@pytest.mark.skipif(importlib.util.find_spec("autograd") is None, reason="needs autograd")
def test_a_context_boxed_by_an_outer_autograd_pass_is_followed():
    import autograd
    import autograd.numpy as anp

    seen = []

    def outer(c):
        seen.append(jacobian_pattern(lambda t: t[::-1] * c + c * t, np.zeros(3)).toarray())
        return anp.sum(c**2)

    np.testing.assert_allclose(autograd.grad(outer)(np.ones(3)), 2.0)  # (closed form)
    np.testing.assert_array_equal(seen[0], np.eye(3, dtype=bool) | np.eye(3, dtype=bool)[::-1])


# ---- the soundness rule and the errors --------------------------------------------------


def test_an_unknown_function_widens_and_warns_once_naming_it():
    def f(x):
        return np.kron(x, [1.0, 2.0])[:5] + np.kron(x, [1.0])

    with pytest.warns(di.SparsityWarning, match="numpy.kron") as record:
        got = jacobian_pattern(f, np.zeros(5)).toarray()
    assert len(record) == 1 and got.all()


def test_an_unknown_ufunc_is_elementwise_and_warns():
    special = pytest.importorskip("scipy.special")
    with pytest.warns(di.SparsityWarning, match="np.jv"):
        got = hessian_pattern(lambda x: np.sum(special.jv(1.5, x[:2]) * x[2]), np.zeros(3))
    assert got.toarray().astype(int).tolist() == [[1, 0, 1], [0, 1, 1], [1, 1, 0]]


def _into_buffer(x, out):  # a buffer made without x: NumPy takes float(x[1])
    out[0] = x[1]
    return out


@pytest.mark.parametrize(
    "f, what",
    [
        (lambda x: x if x[0] > 0 else -x, "Python bool"),
        (lambda x: np.asarray(x) * 2, "converts a traced array"),
        (lambda x: float(x[0]) * x, "Python number"),
        (lambda x: x[np.argmax(x)], "indexes with a traced array"),
        (lambda x: x[np.where(x > 0)], "np.where"),
        (lambda x: x[np.nonzero(x > 1)], "np.nonzero"),
        (lambda x: np.take(x, np.argsort(x)), "index or setting of np.take"),
        (lambda x: _into_buffer(x, np.zeros(3)), "Python number"),
    ],
)
def test_values_of_x_are_an_error_naming_the_fix(f, what):
    x = np.linspace(0.5, 1.5, 4)
    with pytest.raises(di.DiffifaceValueError, match=what) as err:
        di.jacobian(f, di.AutoSparse(di.AutoFiniteDifferences()), x)
    message = str(err.value)
    assert message.startswith("jacobian(f, AutoSparse(")
    assert "sparsity_detector='local'" in message


def test_a_hessian_pattern_needs_a_scalar():
    with pytest.raises(di.DiffifaceTypeError, match="scalar"):
        hessian_pattern(lambda x: x**2, np.zeros(3))


@pytest.mark.skipif(importlib.util.find_spec("mlx") is None, reason="needs mlx")
def test_mlx_traces_on_the_numpy_tracer():
    """AutoMLX has a global detector (it was an error): the NumPy tracer, given f's
    MLX x as a traced array; no SparsityWarning (warnings are errors here)."""
    import mlx.core as mx

    J = di.jacobian(lambda x: x[::-1] * 2, di.AutoSparse(di.AutoMLX()), mx.ones(3))
    np.testing.assert_array_equal(J.toarray(), 2 * np.eye(3)[::-1])
    assert J.nnz == 3


# ---- end to end: AutoSparse with its defaults -------------------------------------------


def test_autosparse_defaults_on_finite_differences_prepared():
    def f(x):
        return x[:-2] - 2 * x[1:-1] + x[2:] + x[1:-1] ** 3

    x = np.linspace(0.5, 1.5, 50)
    backend = di.AutoSparse(di.AutoFiniteDifferences())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # global: no SparsityWarning
        prep = di.prepare_jacobian(f, backend, x)
        got = di.jacobian(f, backend, x, prep=prep)
    assert got.nnz == 3 * 48
    rows = np.arange(48)
    want = np.zeros((48, 50))
    want[rows, rows] = want[rows, rows + 2] = 1.0
    want[rows, rows + 1] = -2 + 3 * x[1:-1] ** 2  # the closed form
    np.testing.assert_allclose(got.toarray(), want, rtol=1e-6, atol=1e-6)
