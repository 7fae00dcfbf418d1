"""Global sparsity detection for JAX (diffiface.backends.jax.sparse.detect).

The essential property: the detected pattern contains the nonzeros of the dense
Jacobian (jax.jacfwd) at random points. Where the exact global pattern is known it is
checked too, against a closed form or against asdex (a reference detector, used in
the tests only): equal, or finer where our concrete loop counters keep indices exact.
Inputs are float32, so nothing here depends on the x64 setting.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("scipy")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from diffiface._errors import SparsityWarning  # noqa: E402
from diffiface.backends.jax.sparse.detect import hessian_pattern, jacobian_pattern  # noqa: E402
from diffiface.testing._sparse import brusselator as _brusselator  # noqa: E402

try:
    import asdex
except Exception:  # asdex (and numba) are optional, for comparison only
    asdex = None

RNG = np.random.default_rng(0)
C_SPARSE = np.where(RNG.random((6, 5)) < 0.4, RNG.standard_normal((6, 5)), 0.0).astype(np.float32)
C_DENSE = RNG.standard_normal((4, 6)).astype(np.float32)
IDX = np.array([5, 0, 3, 3, -1])
MASK = np.array([True, False, True, False, False, True])


def brusselator(n):
    """The Brusselator of diffiface.testing (its grid size is read from x)."""
    del n
    return _brusselator


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@jax.jit
def _inner(a):
    return jnp.sin(a[::2]) * a[1::2]


def _fori_shift(x):
    return lax.fori_loop(0, 4, lambda i, c: c.at[i].add(c[i + 1] ** 2), x)


def _scan_cumulative(x):
    carry, ys = lax.scan(lambda c, xi: (c * 0.5 + xi, c * xi), jnp.float32(0.0), x)
    return jnp.append(ys, carry)


def _while_counter(x):
    return lax.while_loop(
        lambda c: c[1] < 3, lambda c: (jnp.roll(c[0], 1) * c[0], c[1] + 1), (x, 0)
    )[0]


def _while_data(x):
    return lax.while_loop(lambda c: jnp.sum(c**2) > 1.0, lambda c: 0.5 * c * jnp.roll(c, 1), x)


def _take_fill(x):
    return x.at[jnp.array([1, 9, 4])].get(mode="fill", fill_value=0.0)


def _conv(x):
    return jnp.convolve(x, jnp.array([1.0, -2.0, 1.0], jnp.float32), mode="same")


def _maxpool(x):
    return lax.reduce_window(x.reshape(4, 6), -jnp.inf, lax.max, (2, 2), (2, 2), "VALID").ravel()


def _avgpool(x):
    return lax.reduce_window(x.reshape(4, 6), 0.0, lax.add, (3, 3), (1, 1), "SAME").ravel()


def _batched_cholesky(x):
    a = x.reshape(2, 2, 3)
    spd = a @ jnp.swapaxes(a, 1, 2) + 3.0 * jnp.eye(2, dtype=x.dtype)
    return jnp.linalg.cholesky(spd).ravel()


def _circulant(n, lags):
    """0/1 matrix with (i, j) set when (i - j) mod n is in lags."""
    d = (np.arange(n)[:, None] - np.arange(n)[None, :]) % n
    return np.isin(d, lags)


def _conv_grouped(x):
    img = x.reshape(1, 6, 4, 2)  # NHWC, two feature groups, strides and dilations
    k = jnp.ones((3, 2, 1, 4), jnp.float32)
    return lax.conv_general_dilated(
        img, k, (2, 1), [(1, 1), (0, 1)], rhs_dilation=(1, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2,
    ).ravel()  # fmt: skip


def _scatter_rows(x):
    return x[:12].reshape(3, 4).at[np.array([2, 0])].add(x[12:].reshape(2, 4)).ravel()


def _scatter_points(x):
    return x[:12].reshape(3, 4).at[np.array([2, 0]), np.array([1, 1])].set(x[12:]).ravel()


def _long_while(x):
    body = lambda c: (c[0] + 0.01 * jnp.roll(c[0], 1), c[1] + 1)  # noqa: E731
    return lax.while_loop(lambda c: c[1] < 150, body, (x, 0))[0]


def _fori_dynamic(x):
    return lax.fori_loop(0, jnp.int32(3), lambda i, c: c.at[i].set(c[i + 1] * 2.0), x)


KEY = jax.random.key(0)


@jax.custom_jvp
def _straight_through(x):
    return jnp.round(x)


_straight_through.defjvp(lambda p, t: (_straight_through(p[0]), t[0][::-1]))

# name: (function, input size, expectation). Expectation: "asdex" (equal to asdex),
# "finer" (strictly inside asdex's), a dense 0/1 array (exact), or None (superset only).
CASES = {
    "elementwise": (lambda x: jnp.sin(x) * jnp.exp(x) + x**2 / (1 + jnp.abs(x)), 6, np.eye(6)),
    "diff": (lambda x: x[1:] - x[:-1], 6, np.eye(5, 6) + np.eye(5, 6, k=1)),
    "roll_stencil": (
        lambda x: jnp.roll(x, 1) + jnp.roll(x, -1) - 2 * x,
        7,
        _circulant(7, [0, 1, 6]),
    ),
    "pad_stencil_2d": (
        lambda x: (lambda p: p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])(
            jnp.pad(x.reshape(4, 5), 1)
        ).ravel(),
        20,
        "asdex",
    ),
    "cumsum": (jnp.cumsum, 6, np.tril(np.ones((6, 6)))),
    "cumprod_reverse": (lambda x: jnp.cumprod(x[::-1])[::-1], 5, np.triu(np.ones((5, 5)))),
    "const_sparse_matmul": (lambda x: x @ C_SPARSE, 6, C_SPARSE.T != 0),
    "dense_matmul": (lambda x: C_DENSE @ x, 6, np.ones((4, 6))),
    "pattern_matmul": (lambda x: x[:6].reshape(2, 3) @ x[6:].reshape(3, 2), 12, "asdex"),
    "batched_einsum": (
        lambda x: jnp.einsum("bij,bj->bi", x[:12].reshape(2, 2, 3), x[12:].reshape(2, 3)),
        18,
        "asdex",
    ),
    "reductions": (
        lambda x: jnp.concatenate(
            [
                jnp.sum(x.reshape(3, 4), 0),
                jnp.max(x.reshape(3, 4), 1),
                jnp.prod(x.reshape(3, 4), 1),
                jnp.mean(x)[None],
            ]
        ),
        12,
        "asdex",
    ),
    "gather_const": (lambda x: x[IDX] * 2.0, 6, np.eye(6)[IDX]),
    "gather_2d": (lambda x: x.reshape(3, 4)[:, np.array([3, 0])].ravel(), 12, "asdex"),
    "gather_points": (
        lambda x: x.reshape(3, 4)[np.array([2, 0, 1]), np.array([1, 3, 3])],
        12,
        "asdex",
    ),
    "take_along_axis": (
        lambda x: jnp.take_along_axis(
            x.reshape(3, 4), jnp.array([[1, 0], [3, 3], [2, 1]]), 1
        ).ravel(),
        12,
        "asdex",
    ),
    "gather_of_const_index": (lambda x: x[jnp.arange(6)[jnp.array([5, 3, 1])]], 6, "finer"),
    "gather_fill": (_take_fill, 6, np.eye(6)[[1, 4]][[0, 0, 1]] * np.array([[1], [0], [1]])),
    "scatter_set": (
        lambda x: x.at[np.array([1, 4])].set(x[:2] * 3.0),
        6,
        np.eye(6)[[0, 0, 2, 3, 1, 5]],
    ),
    "scatter_set_drop": (lambda x: x.at[jnp.array([1, 9])].set(0.0), 5, np.diag([1, 0, 1, 1, 1])),
    "scatter_add": (lambda x: x.at[np.array([0, 0, 5])].add(x[1:4] ** 2), 6, "asdex"),
    "scatter_mul": (
        lambda x: x.at[np.array([2, 3])].multiply(x[4:], unique_indices=True),
        6,
        "asdex",
    ),
    "where_data_pred": (lambda x: jnp.where(x > 0, x**2, jnp.sin(x)), 6, np.eye(6)),
    "where_const_pred": (lambda x: jnp.where(MASK, x, 0.0), 6, np.diag(MASK)),
    "sort": (jnp.sort, 5, np.ones((5, 5))),
    "argsort_gather": (lambda x: x[jnp.argsort(x)], 5, np.ones((5, 5))),
    "data_index": (lambda x: x[jnp.argmax(x)] * x, 5, np.ones((5, 5))),
    "dynamic_slice_data": (
        lambda x: lax.dynamic_slice(x, (jnp.argmax(x),), (3,)),
        6,
        np.array([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]),
    ),
    "dynamic_slice_const": (lambda x: lax.dynamic_slice(x, (2,), (3,)), 6, np.eye(6)[2:5]),
    "dynamic_update_slice": (
        lambda x: lax.dynamic_update_slice(x, x[:2] ** 2, (3,)),
        6,
        np.eye(6)[[0, 1, 2, 0, 1, 5]],
    ),
    "movement": (
        lambda x: jnp.concatenate(
            [
                jnp.stack([x[:3], x[3:6]]).T.ravel(),
                jnp.pad(x[:2], (1, 2)),
                x.reshape(2, 3)[::-1, ::2].ravel(),
                jnp.split(x, 3)[1],
                jnp.expand_dims(x[0], 0),
            ]
        ),
        6,
        "asdex",
    ),
    "fori_loop": (_fori_shift, 6, "finer"),
    "scan": (_scan_cumulative, 5, None),
    "while_counter": (_while_counter, 6, _circulant(6, [0, 1, 2, 3])),
    "while_data": (_while_data, 5, None),
    "cond": (
        lambda x: lax.cond(x[0] > 0, lambda a: a * a[0], lambda a: jnp.roll(a, 1), x),
        5,
        None,
    ),
    "relu": (jax.nn.relu, 6, np.eye(6)),
    "custom_jvp_rule": (_straight_through, 5, np.eye(5)[::-1]),  # the rule, not the primal
    "logsumexp": (
        lambda x: jax.nn.logsumexp(x.reshape(2, 3), axis=1),
        6,
        np.kron(np.eye(2), np.ones((1, 3))),
    ),
    "softmax": (
        lambda x: jax.nn.softmax(x.reshape(2, 3)).ravel(),
        6,
        np.kron(np.eye(2), np.ones((3, 3))),
    ),
    "jit_inner": (lambda x: _inner(x) + 1.0, 8, np.kron(np.eye(4), [[1, 1]])),
    "vmap": (
        jax.vmap(lambda r: r[::-1] * r[0]),
        (3, 4),
        np.kron(np.eye(3), np.eye(4)[::-1] + np.eye(4)[[0] * 4]),
    ),
    "top_k": (
        lambda x: lax.top_k(x.reshape(2, 4), 2)[0].ravel(),
        8,
        np.kron(np.eye(2), np.ones((2, 4))),
    ),
    "convolve_1d": (_conv, 7, "asdex"),
    "maxpool": (_maxpool, 24, None),
    "avgpool": (_avgpool, 24, None),
    "cholesky_batched": (
        _batched_cholesky,
        12,
        np.kron(np.eye(2), [[1] * 6, [0] * 6, [1] * 6, [1] * 6]),
    ),
    "brusselator": (brusselator(5), 50, "asdex"),
    "conv_grouped": (_conv_grouped, 48, "asdex"),
    "scatter_rows": (_scatter_rows, 20, "asdex"),
    "scatter_points": (_scatter_points, 14, "asdex"),
    "dynamic_update_slice_data": (
        lambda x: lax.dynamic_update_slice(x, x[:2] * 3.0, (jnp.argmin(x),)),
        6,
        "asdex",
    ),
    "take_clip": (
        lambda x: jnp.take(x, jnp.array([0, 7, -9]), mode="clip"),
        5,
        np.eye(5)[[0, 4, 0]],
    ),
    "vmap_dynamic_slice": (
        lambda x: jax.vmap(lambda r, i: lax.dynamic_slice(r, (i,), (2,)))(
            x.reshape(3, 4), jnp.array([0, 2, 1])
        ).ravel(),
        12,
        np.eye(12)[[0, 1, 6, 7, 9, 10]],
    ),
    "long_while": (_long_while, 6, _circulant(6, range(6))),
    "fori_dynamic_bounds": (_fori_dynamic, 6, "finer"),
    "scan_reverse": (
        lambda x: lax.scan(lambda c, xi: (c + xi, c * xi), jnp.float32(1.0), x, reverse=True)[1],
        5,
        np.triu(np.ones((5, 5))),
    ),
    "switch_const": (
        lambda x: lax.switch(1, [jnp.sin, lambda a: a * a[0], jnp.cos], x),
        5,
        "asdex",
    ),
    "solve": (
        lambda x: jnp.linalg.solve(jnp.eye(3) * 3 + x[:9].reshape(3, 3), x[9:]),
        12,
        np.ones((3, 12)),
    ),
    "fft": (
        lambda x: jnp.abs(jnp.fft.rfft(x.reshape(2, 6), axis=1)).ravel(),
        12,
        np.kron(np.eye(2), np.ones((4, 6))),
    ),
    "random_constants": (lambda x: jax.random.normal(KEY, (5,)) * x, 5, np.eye(5)),
    "maxpool_grad": (lambda x: jax.grad(lambda z: jnp.sum(_maxpool(z) ** 2))(x), 24, None),
}


_FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _local(fn, x0, k=3, mode=jax.jacfwd):
    """Union of the dense Jacobian's nonzeros at k random points near x0."""
    lowered = jax.jit(mode(fn)).lower(x0)
    try:  # compiling dominates the test time: skip XLA's optimizations
        jac = lowered.compile(_FAST_COMPILE)
    except Exception:
        jac = lowered.compile()
    out = None
    for _ in range(k):
        x = (x0 + RNG.standard_normal(x0.shape)).astype(np.float32)
        j = np.asarray(jac(x)).reshape(-1, x.size) != 0
        out = j if out is None else out | j
    return out


def _canonical(p, shape):
    assert p.shape == shape and p.dtype == bool
    assert p.has_canonical_format and p.data.all()


@pytest.mark.parametrize("name", list(CASES))
def test_jacobian_pattern(name):
    fn, shape, expected = CASES[name]
    x0 = RNG.standard_normal(shape).astype(np.float32)
    p = jacobian_pattern(fn, x0)
    local = _local(fn, x0)
    _canonical(p, local.shape)
    dense = p.toarray()
    assert not (local & ~dense).any(), "a nonzero of the Jacobian is missing"
    if isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(dense, expected.astype(bool))
    elif expected in ("asdex", "finer"):
        if asdex is None:
            pytest.skip("asdex not installed")
        ref = np.asarray(asdex.jacobian_sparsity(fn, x0).todense(), bool)
        if expected == "asdex":
            np.testing.assert_array_equal(dense, ref)
        else:
            assert not (dense & ~ref).any() and (ref & ~dense).any()
            np.testing.assert_array_equal(dense, local)  # concrete counter: exact


def test_custom_vjp_follows_the_primal():
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x) * x[::-1]

    f.defvjp(lambda x: (f(x), x), lambda x, g: (g * jnp.cos(x) * x[::-1] + (g * jnp.sin(x))[::-1],))
    x0 = RNG.standard_normal(6).astype(np.float32)
    p = jacobian_pattern(f, x0).toarray()
    np.testing.assert_array_equal(p, (np.eye(6) + np.eye(6)[::-1]).astype(bool))
    assert not (_local(f, x0, mode=jax.jacrev) & ~p).any()


def test_scatter_apply_keeps_the_operand():
    # scatter with an update function (x.at[i].apply): the operand is transformed, not
    # overwritten, so it stays a dependence (jax has no jvp for it: no local check)
    p = jacobian_pattern(lambda x: x.at[jnp.array([1, 3])].apply(jnp.sin), np.ones(5, np.float32))
    np.testing.assert_array_equal(p.toarray(), np.eye(5, dtype=bool))


CONCRETE = [
    lambda a: a[np.array([3, 0, -1])],
    lambda a: a[:, np.array([5, 1])] * 2.0,
    lambda a: a[np.array([1, 3]), np.array([0, 5])],
    lambda a: jnp.take_along_axis(a, jnp.array([[1], [0], [5], [2]]), 1),
    lambda a: jnp.take(a, jnp.array([0, 30, -30]), mode="clip"),
    lambda a: jax.vmap(lambda r, i: lax.dynamic_slice(r, (i,), (2,)))(a, jnp.array([0, 4, 5, 1])),
    lambda a: lax.pad(a, np.float32(-1.0), [(1, -1, 1), (-2, 1, 0)]),
    lambda a: lax.dynamic_update_slice(a, a[:2, :2] + 1.0, (3, 5)),
    lambda a: jnp.where(a > 7, jnp.roll(a, 2, 1), -a.T.reshape(4, 6)),
    lambda a: jnp.concatenate([jnp.split(a, 3, axis=1)[2], a[::-1, 1:3]], 0).sum(1),
]


def test_concrete_evaluation_matches_jax():
    """Values that do not depend on x are computed exactly (NumPy versions of the ops)."""
    from diffiface.backends.jax.sparse.detect import _Interpreter

    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for fn in CONCRETE:
        closed = jax.make_jaxpr(fn)(a)
        (out,) = _Interpreter(1).run(closed.jaxpr, closed.consts, [a])
        np.testing.assert_array_equal(out, np.asarray(jax.jit(fn)(a)))


def test_shape_dtype_struct_and_scalar_output():
    p = jacobian_pattern(lambda x: jnp.sum(x[:, 1] ** 2), jax.ShapeDtypeStruct((3, 2), jnp.float32))
    assert p.shape == (1, 6)
    assert p.toarray().tolist() == [[False, True, False, True, False, True]]
    q = jacobian_pattern(lambda x: jnp.zeros(3) + 1.0, np.ones(4, np.float32))
    assert q.shape == (3, 4) and q.nnz == 0


def test_under_an_outer_jit_with_a_traced_closure():
    seen = {}

    def outer(y):
        c = y * 2.0  # a tracer the detected function closes over: unknown, no derivative
        seen["p"] = jacobian_pattern(lambda x: jax.nn.relu(x) * c + jnp.roll(x, 1) * c[0], y)
        return y

    jax.jit(outer)(jnp.ones(4, jnp.float32))
    np.testing.assert_array_equal(seen["p"].toarray(), _circulant(4, [0, 1]))


def test_rosenbrock_hessian_is_tridiagonal():
    n = 40
    h = hessian_pattern(rosenbrock, np.zeros(n, np.float32))
    _canonical(h, (n, n))
    tri = np.eye(n) + np.eye(n, k=1) + np.eye(n, k=-1)
    np.testing.assert_array_equal(h.toarray(), tri.astype(bool))


def test_hessian_symmetric_superset():
    def f(x):
        return jnp.sum(x[:-2] * x[2:]) + jnp.sum(jnp.sin(x) ** 3) + x[0] * jnp.max(x[3:5])

    x0 = RNG.standard_normal(7).astype(np.float32)
    h = hessian_pattern(f, x0).toarray()
    np.testing.assert_array_equal(h, h.T)
    local = np.asarray(jax.jit(jax.hessian(f))(x0)) != 0
    assert not (local & ~h).any()
    if asdex is not None:
        np.testing.assert_array_equal(h, np.asarray(asdex.hessian_sparsity(f, x0).todense(), bool))


def test_brusselator_matches_asdex():
    if asdex is None:
        pytest.skip("asdex not installed")
    n = 16
    x = np.ones(2 * n * n, np.float32)
    p = jacobian_pattern(brusselator(n), x)
    ref = asdex.jacobian_sparsity(brusselator(n), x).todense()
    np.testing.assert_array_equal(p.toarray(), np.asarray(ref, bool))
    assert p.nnz == 2 * n * n * 6  # 5-point stencil plus the other species


def test_unknown_primitive_warns_and_is_dense():
    from jax.extend.core import Primitive

    twice = Primitive("diffiface_test_twice")
    twice.def_impl(lambda a: 2 * a)
    twice.def_abstract_eval(lambda a: a)

    def f(x):
        return twice.bind(x[:3]) + x[3:]

    with pytest.warns(SparsityWarning, match="diffiface_test_twice"):
        p = jacobian_pattern(f, np.ones(6, np.float32))
    np.testing.assert_array_equal(p.toarray(), np.hstack([np.ones((3, 3)), np.eye(3)]).astype(bool))


def test_long_scan_fixpoint_is_superset():
    def f(x):
        return lax.scan(lambda c, _: (jnp.roll(c, 1) * 0.5 + c, c[0]), x, None, length=150)[1]

    p = jacobian_pattern(f, np.ones(4, np.float32)).toarray()
    assert p.shape == (150, 4) and p.all()  # every column reaches c[0] eventually
