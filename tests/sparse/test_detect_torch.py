"""The global torch sparsity detector (diffiface.backends.torch.sparse.detect) against dense jacrev.

The essential property: the detected pattern contains every nonzero of the Jacobian at
random points. Where the pattern is known (or equals the union of dense patterns at a few
points) it is checked exactly.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sp = pytest.importorskip("scipy.sparse")

from diffiface._errors import DiffifaceValueError, SparsityWarning  # noqa: E402
from diffiface.backends.torch.sparse.detect import hessian_pattern, jacobian_pattern  # noqa: E402
from diffiface.testing._sparse import brusselator as bruss  # noqa: E402

F = torch.nn.functional
DT = torch.float64


def _dense(jac, fn, x):
    return (jac(fn)(x).reshape(-1, x.numel()) != 0).numpy()


def _union_of_dense(fn, shape, jac=torch.func.jacrev, points=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = None
    for _ in range(points):
        x = torch.randn(shape, dtype=DT, generator=g)
        with warnings.catch_warnings():  # torch: no batching rule for some backward ops
            warnings.filterwarnings("ignore", "There is a performance drop", UserWarning)
            d = _dense(jac, fn, x)
        out = d if out is None else out | d
    return out


def _canonical(p, shape):
    assert isinstance(p, sp.csr_array) and p.dtype == bool and p.shape == shape
    assert p.has_canonical_format and p.data.all()


def _check(fn, shape, exact=False):
    """Detected pattern: canonical, a superset of the dense patterns; exact if asked."""
    x = torch.randn(shape, dtype=DT, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparsityWarning)
        p = jacobian_pattern(fn, x)
    found = _union_of_dense(fn, shape)
    _canonical(p, found.shape)
    dense = p.toarray()
    assert not (found & ~dense).any(), "missed nonzeros"
    if exact:
        np.testing.assert_array_equal(dense, found)
    return dense


def rosenbrock(x):
    return torch.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


BAND = torch.diag(torch.arange(1.0, 9.0, dtype=DT)) + torch.diag(torch.ones(7, dtype=DT), 1)
C32 = torch.arange(6.0, dtype=DT).reshape(3, 2) - 2.0
IDX = torch.tensor([4, 0, 0, 7, 2])


def _put(x):
    y = x.clone()
    y[torch.tensor([1, 5])] = x[torch.tensor([6, 0])] ** 2
    y[2:4] = x[2:4] * x[7]
    y[0] = y[0] + x[3]
    return y


def _views(x):
    y = x.clone().view(2, 3)
    y[:, 1] *= x[:2]
    y.T[0].mul_(3)
    return y.ravel()


LAPLACE = torch.tensor([[[[0.0, 1, 0], [1, -4, 1], [0, 1, 0]]]], dtype=DT)


def _loop(x):
    for _ in range(3):
        x = x + 0.1 * torch.roll(x, 1) ** 2
    return x


EXACT = {
    "broadcast": (lambda x: torch.sin(x) * x[:1, :] + torch.exp(x[:, :1]), (3, 4)),
    "diffs": (lambda x: (x[1:] - x[:-1]) * torch.roll(x, 2)[1:], (10,)),
    "stencil": (lambda x: (x[:-2] - 2 * x[1:-1] + x[2:]) ** 2, (12,)),
    "cumsum": (lambda x: torch.cumsum(x**2, 0), (6,)),
    "cumprod_dim": (lambda x: torch.cumprod(x, 1), (3, 4)),
    "band_matvec": (lambda x: torch.tanh(BAND @ x), (8,)),
    "const_matmul": (lambda x: x @ C32, (4, 3)),
    "bmm": (lambda x: torch.bmm(x, x.transpose(1, 2)), (2, 3, 2)),
    "sum_dim": (lambda x: x.sum(1) * x.mean((0, 2)).sum(), (3, 4, 5)),
    "reductions": (
        lambda x: torch.stack(
            [x.prod(0), torch.logsumexp(x, 0), torch.linalg.vector_norm(x, dim=0), x.var(0)]
        ),
        (3, 4),
    ),
    "softmax": (lambda x: torch.softmax(x, dim=1), (3, 4)),
    "log_softmax": (lambda x: F.log_softmax(x, dim=0), (3, 4)),
    "gather_const": (lambda x: x[IDX] * 2, (8,)),
    "take_along": (lambda x: torch.gather(x, 1, torch.tensor([[0, 0], [2, 1]])), (2, 3)),
    "index_put": (_put, (8,)),
    "cat_stack_pad": (
        lambda x: torch.cat([F.pad(x, (1, 2)).ravel(), torch.stack([x[:, 0], x[:, 2]], 1).ravel()]),
        (2, 3),
    ),
    "reshape_permute": (lambda x: x.reshape(2, 3, 2).permute(2, 0, 1).flip(0) ** 2, (12,)),
    "loop": (_loop, (7,)),
    "softplus_gelu": (lambda x: F.softplus(x) + F.gelu(x) + torch.sigmoid(x), (5,)),
    "layer_norm": (lambda x: F.layer_norm(x, (3,)), (2, 3)),
    "brusselator": (bruss, (2 * 5 * 5,)),
    "inplace_views": (_views, (6,)),
    "pad_circular": (lambda x: F.pad(x.view(1, 1, 4), (1, 2), mode="circular"), (4,)),
    "conv2d_stencil": (lambda x: F.conv2d(x.view(1, 1, 4, 4), LAPLACE, padding=1), (16,)),
    "conv1d_groups": (
        lambda x: F.conv1d(x.view(1, 4, 5), torch.ones(4, 2, 3, dtype=DT), stride=2, groups=2),
        (20,),
    ),
    "avg_pool": (lambda x: F.avg_pool2d(x.view(1, 2, 4, 4), 2, stride=1), (32,)),
    "group_norm": (lambda x: F.group_norm(x.view(1, 4, 2), 2), (8,)),  # a decomposition
    "unfold": (lambda x: x.unfold(0, 3, 2) ** 2, (9,)),
    "accumulate": (
        lambda x: (
            torch.zeros(4, dtype=DT).index_add(0, torch.tensor([0, 0, 3]), x[:3])
            + torch.zeros(4, dtype=DT).scatter_add(0, torch.tensor([1, 1, 2]), x[3:])
        ),
        (6,),
    ),
    "embedding": (lambda x: F.embedding(torch.tensor([[2, 0], [1, 1]]), x.view(3, 2)), (6,)),
    "einsum_linear": (
        lambda x: torch.einsum("ij,ik->jk", F.linear(x.view(2, 3), C32.T), x.view(2, 3)),
        (6,),
    ),
    "upsample": (lambda x: F.interpolate(x.view(1, 1, 4), scale_factor=2), (4,)),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_patterns(name):
    fn, shape = EXACT[name]
    _check(fn, shape, exact=True)


def _where(x):
    return torch.where(x > 0, x**2, x.flip(0))


def _sort(x):
    return torch.sort(x, dim=1).values * 2


SUPERSET = {
    "where": (_where, (6,)),
    "relu": (lambda x: F.relu(x) + F.leaky_relu(x.flip(0)), (6,)),
    "amax": (lambda x: x.amax(1) + x.max(0).values.sum(), (3, 4)),
    "sort": (_sort, (3, 4)),
    "abs_clamp": (lambda x: torch.clamp(x, -0.5, 0.5) + x.abs(), (5,)),
    "argsort_gather": (lambda x: torch.gather(x, 1, torch.argsort(x, 1)[:, :2]), (2, 3)),
    "max_pool": (lambda x: F.max_pool1d(x.view(1, 1, 6), 2), (6,)),
}


@pytest.mark.parametrize("name", sorted(SUPERSET))
def test_superset_patterns(name):
    fn, shape = SUPERSET[name]
    _check(fn, shape)


def test_sort_is_union_along_axis():
    p = _check(_sort, (3, 4))
    np.testing.assert_array_equal(p, np.kron(np.eye(3, dtype=bool), np.ones((4, 4), bool)))


@pytest.mark.parametrize("n", [6, 48])
def test_brusselator_stencil(n):
    """Five points per block plus the u-v coupling (the diagonal of the other block)."""
    p = jacobian_pattern(bruss, torch.randn(2 * n * n, dtype=DT))
    _canonical(p, (2 * n * n, 2 * n * n))
    i, j = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    rows, cols = [], []
    for di, dj in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)):
        rows.append(i * n + j)
        cols.append(((i + di) % n) * n + (j + dj) % n)
    star = sp.csr_array((np.ones(5 * n * n, bool), (np.concatenate(rows), np.concatenate(cols))))
    eye = sp.eye_array(n * n, dtype=bool)
    expected = sp.block_array([[star, eye], [eye, star]], format="csr")
    assert (p != expected).nnz == 0


@pytest.mark.parametrize("n", [9, 4000])
def test_rosenbrock_hessian_tridiagonal(n):
    p = hessian_pattern(rosenbrock, torch.randn(n, dtype=DT))
    _canonical(p, (n, n))
    tri = sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1])
    assert (p != tri.astype(bool).tocsr()).nnz == 0


def test_hessian_diagonal():
    c = torch.linspace(1, 2, 7, dtype=DT)
    p = hessian_pattern(lambda x: torch.sum(x**2 * c), torch.randn(7, dtype=DT))
    np.testing.assert_array_equal(p.toarray(), np.eye(7, dtype=bool))


def test_hessian_quadratic_form_band():
    p = hessian_pattern(lambda x: x @ BAND @ x, torch.randn(8, dtype=DT))
    band = np.abs(np.subtract.outer(np.arange(8), np.arange(8))) <= 1
    np.testing.assert_array_equal(p.toarray(), band)


HESSIANS = {
    "logsumexp": (lambda x: torch.logsumexp(x.view(3, 3), 1).sum(), 9),
    "mlp": (lambda x: torch.tanh(BAND @ x).pow(2).sum() + F.softplus(x).sum(), 8),
    "cross_entropy": (lambda x: F.cross_entropy(x.view(2, 4), torch.tensor([1, 3])), 8),
    "gather_cumsum": (lambda x: (torch.cumsum(x[IDX], 0) ** 2).sum(), 8),
    "bruss_energy": (lambda x: (bruss(x) ** 2).sum(), 2 * 4 * 4),
    "conv_tanh": (lambda x: torch.tanh(F.conv2d(x.view(1, 1, 4, 4), LAPLACE)).sum(), 16),
    "pool_softplus": (lambda x: F.softplus(F.avg_pool1d(x.view(1, 1, 8), 3, 1)).sum(), 8),
    "sort_values": (lambda x: (torch.sort(x.view(2, 4), 1).values.cumsum(1) ** 2).sum(), 8),
    "unfold": (lambda x: (x.unfold(0, 3, 2) ** 3).sum(), 9),
    "embedding": (lambda x: (F.embedding(torch.tensor([2, 0]), x.view(3, 2)) ** 3).sum(), 6),
    "upsample": (lambda x: (F.interpolate(x.view(1, 1, 4), scale_factor=2) ** 3).sum(), 4),
    "layer_norm": (lambda x: (F.layer_norm(x.view(2, 3), (3,)) ** 3).sum(), 6),
}


@pytest.mark.parametrize("name", sorted(HESSIANS))
def test_hessian_superset(name):
    fn, n = HESSIANS[name]
    x = torch.randn(n, dtype=DT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparsityWarning)
        p = hessian_pattern(fn, x)
    _canonical(p, (n, n))
    found = _union_of_dense(fn, (n,), jac=torch.func.hessian)
    assert not (found & ~p.toarray()).any()
    assert (p != p.T).nnz == 0


def test_unknown_op_warns_and_stays_sound():
    def fn(x):
        return torch.cat([torch.linalg.det(x[:4].view(2, 2)).reshape(1), x[4:] ** 2])

    with pytest.warns(SparsityWarning, match="det"):
        p = jacobian_pattern(fn, torch.randn(6, dtype=DT))
    expected = np.zeros((3, 6), bool)
    expected[0, :4] = True
    expected[1, 4] = expected[2, 5] = True
    np.testing.assert_array_equal(p.toarray(), expected)


@torch.library.custom_op("diffiface_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_custom_op_warns():
    with pytest.warns(SparsityWarning, match="twice"):
        p = jacobian_pattern(lambda x: _twice(x[:2]) * x[2], torch.randn(4, dtype=DT))
    np.testing.assert_array_equal(p.toarray(), [[1, 1, 1, 0], [1, 1, 1, 0]])


def test_value_dependent_sizes_trace_at_x_with_warning():
    mask = torch.tensor([True, False, True, False])
    with pytest.warns(SparsityWarning, match="traced at this x"):
        p = jacobian_pattern(lambda x: x[mask] ** 2, torch.randn(4, dtype=DT))
    np.testing.assert_array_equal(p.toarray(), [[1, 0, 0, 0], [0, 0, 1, 0]])


def test_untraceable_is_a_clear_error():
    def branchy(x):
        return x * 2 if x.sum() > 0 else x.flip(0)

    with pytest.raises(DiffifaceValueError, match="control flow"):
        jacobian_pattern(branchy, torch.randn(4, dtype=DT))


def test_shapes_and_dtypes():
    x = torch.randn(2, 3, dtype=torch.float32)
    p = jacobian_pattern(lambda x: (x.double() ** 2).sum(1, keepdim=True), x)
    _canonical(p, (2, 6))
    np.testing.assert_array_equal(p.toarray(), np.kron(np.eye(2, dtype=bool), np.ones((1, 3))))
    p = jacobian_pattern(lambda x: torch.ones(3, dtype=DT) * 2, x)
    assert p.shape == (3, 6) and p.nnz == 0


def test_constant_output_and_detach():
    p = jacobian_pattern(lambda x: x.detach() * 2 + torch.ones(3, dtype=DT), torch.ones(3))
    assert p.shape == (3, 3) and p.nnz == 0
