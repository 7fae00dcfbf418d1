"""The one-pass local detector (JAX, torch): the global detector over f's derivative
program at x. Checked against the dense float64 derivative at x (every nonzero inside,
and what the masks and zero factors of x remove is gone) and against the global pattern
(never larger); f's Python body runs once, where dense Jacobians at three points ran
it at each."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import diffiface as di

X = np.array([1.0, -1.0, 2.0, 0.0, -3.0])


def _torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def vec(x):
        return F.relu(x[1:]) * x[:-1] + torch.where(x[:1] > 0, x[1:], x[:-1] ** 2)

    def scal(x):
        return (F.relu(x) ** 3).sum() + x[0] * x[1] + (x[2:] * x[:-2]).clamp(-1, 1).sum()

    return torch, di.AutoTorch(), torch.tensor(X), vec, scal, torch.func.jacrev, torch.func.hessian


def _jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def vec(x):
        return jax.nn.relu(x[1:]) * x[:-1] + jnp.where(x[:1] > 0, x[1:], x[:-1] ** 2)

    def scal(x):
        return (jax.nn.relu(x) ** 3).sum() + x[0] * x[1] + jnp.clip(x[2:] * x[:-2], -1, 1).sum()

    return jax, di.AutoJax(), jnp.asarray(X), vec, scal, jax.jacfwd, jax.hessian


FRAMEWORKS = [pytest.param(_torch, id="torch"), pytest.param(_jax, id="jax")]


def _patterns(backend, f, x, hessian):
    local = di.AutoSparse(backend, sparsity_detector="local")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        p_local = di.sparsity_pattern(f, local, x, hessian=hessian).toarray()
    said = [str(w.message) for w in seen if issubclass(w.category, di.SparsityWarning)]
    assert len(said) == 1 and "the nonzeros at x, read from" in said[0], said  # (no widening)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p_global = di.sparsity_pattern(f, backend, x, hessian=hessian).toarray()
    return p_local, p_global


@pytest.mark.parametrize("make", FRAMEWORKS)
def test_local_jacobian_at_x(make):
    _, backend, x, vec, _, jac, _ = make()
    p_local, p_global = _patterns(backend, vec, x, hessian=False)
    dense = np.asarray(jac(vec)(x)) != 0
    assert not (dense & ~p_local).any()  # sound at x
    assert not (p_local & ~p_global).any()  # never larger than the global pattern
    # x1 < 0 and x4 < 0 switch relu off; x0 > 0 takes where's first branch; (1, 2)
    # cancels in value (relu' x1 + 1 = 0) but is structural, so it stays
    want = np.zeros((4, 5), bool)
    want[[0, 1, 1, 2, 3], [1, 1, 2, 3, 4]] = True
    np.testing.assert_array_equal(p_local, want)
    assert p_global.sum() > p_local.sum()


@pytest.mark.parametrize("make", FRAMEWORKS)
def test_local_hessian_at_x(make):
    _, backend, x, _, scal, _, hess = make()
    p_local, p_global = _patterns(backend, scal, x, hessian=True)
    dense = np.asarray(hess(scal)(x)) != 0
    np.testing.assert_array_equal(p_local, p_local.T)
    assert not (dense & ~p_local).any()
    assert not (p_local & ~p_global).any()
    # relu^3 is flat at x < 0 and x = 0; clip(x2 x0, -1, 1) and clip(x4 x2) saturate,
    # clip(x3 x1) = 0 does not: its cross term (1, 3) stays with x0 x1's (0, 1)
    want = np.zeros((5, 5), bool)
    for i, j in [(0, 0), (2, 2), (0, 1), (1, 3)]:
        want[i, j] = want[j, i] = True
    np.testing.assert_array_equal(p_local, want)


@pytest.mark.parametrize("make", FRAMEWORKS)
@pytest.mark.parametrize("hessian", [False, True])
def test_local_runs_f_once(make, hessian):
    _, backend, x, vec, scal, _, _ = make()
    calls = []

    def f(x):
        calls.append(1)
        return (scal if hessian else vec)(x)

    local = di.AutoSparse(backend, sparsity_detector="local")
    with pytest.warns(di.SparsityWarning):
        di.sparsity_pattern(f, local, x, hessian=hessian)
    assert len(calls) == 1


def test_jax_local_reads_a_custom_vjp_rule_and_a_while_loop():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    @jax.custom_vjp
    def pair(x):
        return x[1:] * x[:-1]

    def bwd(r, w):
        zero = jnp.zeros(1)
        return (jnp.concatenate([w * r[1:], zero]) + jnp.concatenate([zero, w * r[:-1]]),)

    pair.defvjp(lambda x: (pair(x), x), bwd)
    x = jnp.asarray(X)
    local = di.AutoSparse(di.AutoJax(), sparsity_detector="local")
    with pytest.warns(di.SparsityWarning, match="local"):
        p = di.sparsity_pattern(pair, local, x).toarray()
    dense = np.asarray(jax.jacrev(pair)(x)) != 0
    assert not (dense & ~p).any()
    np.testing.assert_array_equal(p[3], [False, False, False, True, False])  # x3 = 0 cuts

    def grow(x):  # no reverse mode: read through its linearization
        return jax.lax.while_loop(lambda c: jnp.all(jnp.abs(c) < 1), lambda c: 2 * c, x) * x[0]

    x = jnp.array([0.3, 0.0, 0.2])
    with pytest.warns(di.SparsityWarning, match="local"):
        p = di.sparsity_pattern(grow, local, x).toarray()
    dense = np.asarray(jax.jacfwd(grow)(x)) != 0
    assert not (dense & ~p).any()
    want = np.eye(3, dtype=bool)
    want[2, 0] = True  # (row 1: c1 x0 with c1 = 0 at x, so no x0)
    np.testing.assert_array_equal(p, want)


def test_local_sparse_jacobian_values():
    """An AutoSparse call with the local pattern gives the dense Jacobian at x."""
    torch = pytest.importorskip("torch")
    _, backend, x, vec, _, jac, _ = _torch()
    local = di.AutoSparse(backend, sparsity_detector="local")
    with pytest.warns(di.SparsityWarning):
        got = di.jacobian(vec, local, x)
    np.testing.assert_allclose(got.to_dense().numpy(), jac(vec)(x).numpy(), atol=1e-12)
    del torch


def test_torch_local_reads_a_function_without_forward_mode_through_its_pullback():
    torch = pytest.importorskip("torch")

    class Pair(torch.autograd.Function):  # a backward, no jvp
        @staticmethod
        def forward(x):
            return x[1:] * x[:-1]

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, w):
            (x,) = ctx.saved_tensors
            zero = torch.zeros(1, dtype=x.dtype)
            return torch.cat([w * x[1:], zero]) + torch.cat([zero, w * x[:-1]])

    x = torch.tensor(X)
    local = di.AutoSparse(di.AutoTorch(), sparsity_detector="local")
    with pytest.warns(di.SparsityWarning, match="local"):
        p = di.sparsity_pattern(Pair.apply, local, x).toarray()
    dense = torch.func.jacrev(Pair.apply)(x).numpy() != 0
    assert not (dense & ~p).any()
    want = np.eye(4, 5, 0, bool) | np.eye(4, 5, 1, bool)
    want[2, 2] = want[3, 4] = False  # x3 = 0 multiplies x2 and x4
    np.testing.assert_array_equal(p, want)


@pytest.mark.parametrize("make", FRAMEWORKS)
@pytest.mark.parametrize("name", ["banded", "brusselator", "arrow", "rosenbrock"])
def test_local_sound_on_the_sparse_scenarios_at_random_points(make, name):
    """diffiface.testing's sparse functions at random points: the local pattern holds
    every nonzero of the dense float64 derivative there, within the global pattern."""
    from diffiface.testing import _sparse

    lib, backend, _, _, _, jac, hess = make()
    f, hessian = getattr(_sparse, name), name in ("arrow", "rosenbrock")
    rng = np.random.default_rng(1)
    for _ in range(2):
        xn = rng.standard_normal(18 if name == "brusselator" else 7)
        x = lib.tensor(xn) if lib.__name__ == "torch" else lib.numpy.asarray(xn)
        p_local, p_global = _patterns(backend, f, x, hessian)
        dense = np.asarray((hess if hessian else jac)(f)(x)) != 0
        assert not (dense & ~p_local).any()
        assert not (p_local & ~p_global).any()
