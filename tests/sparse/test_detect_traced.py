"""Global detection traces f and never runs it for real: the pattern's rows (f's output
size) come from the trace, so an f that would not finish, or would fail, at x still gets
its pattern, and f's Python body runs once."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di


class Counted:
    """f's Python body runs (``traced``) and its real runs (``ran``: the callback that a
    traced program runs only when executed)."""

    def __init__(self):
        self.traced = 0
        self.ran = 0

    def run(self, *_):
        self.ran += 1
        if self.ran > 100:  # (a run for real would loop forever: fail instead)
            raise RuntimeError("f was run for real")


def test_jax_while_loop_that_never_ends_at_x():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    seen = Counted()

    def f(x):  # doubles x until one element leaves [-1, 1]: never, from zeros
        seen.traced += 1

        def cond(c):
            jax.debug.callback(seen.run)
            return jnp.all(jnp.abs(c) < 1)

        return jax.lax.while_loop(cond, lambda c: 2 * c, x)[1:] * x[:-1]

    p = di.sparsity_pattern(f, di.AutoJax(), jnp.zeros(4))
    np.testing.assert_array_equal(p.toarray(), np.eye(3, 4, 1, bool) | np.eye(3, 4, 0, bool))
    assert (seen.traced, seen.ran) == (1, 0)
    dense = jax.jacfwd(f)(jnp.array([0.3, -0.2, 0.7, 0.1]))  # (terminates here)
    assert not (np.asarray(dense) != 0)[~p.toarray()].any()


def test_jax_hessian_traced_once():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    seen = Counted()

    def f(x):
        seen.traced += 1
        jax.debug.callback(seen.run)
        return jnp.sum(x[1:] * x[:-1]) + jnp.sum(jnp.sin(x))

    p = di.sparsity_pattern(f, di.AutoJax(), jnp.zeros(5), hessian=True)
    want = np.abs(np.subtract.outer(np.arange(5), np.arange(5))) <= 1
    np.testing.assert_array_equal(p.toarray(), want)
    assert (seen.traced, seen.ran) == (1, 0)


def test_jax_non_scalar_hessian_checked_in_the_trace():
    jax = pytest.importorskip("jax")
    with pytest.raises(di.DiffifaceValueError, match="must return a scalar"):
        di.sparsity_pattern(lambda x: x * 2, di.AutoJax(), jax.numpy.zeros(3), hessian=True)


@pytest.mark.parametrize("hessian", [False, True])
def test_torch_f_never_runs_on_real_values(hessian):
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import is_fake

    real = []

    def f(x):
        real.append(not is_fake(x))
        y = x[1:] * x[:-1]
        return (y.sum() + x.exp().sum()) if hessian else y

    x = torch.zeros(5, dtype=torch.float64)
    p = di.sparsity_pattern(f, di.AutoTorch(), x, hessian=hessian)
    band = np.abs(np.subtract.outer(np.arange(5), np.arange(5))) <= 1
    want = band if hessian else np.eye(4, 5, 0, bool) | np.eye(4, 5, 1, bool)
    np.testing.assert_array_equal(p.toarray(), want)
    assert real == [False]  # f's body ran once, on a fake x
    xr = torch.linspace(-1, 1, 5, dtype=torch.float64)
    dense = (torch.func.hessian if hessian else torch.func.jacrev)(f)(xr)
    assert not (dense.numpy() != 0)[~p.toarray()].any()


def test_torch_non_scalar_hessian_checked_in_the_trace():
    torch = pytest.importorskip("torch")
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    with pytest.raises(di.DiffifaceValueError) as err:
        di.sparsity_pattern(f, di.AutoTorch(), torch.zeros(3), hessian=True)
    want = "sparsity_pattern(f, AutoTorch(mode=None), x): f must return a scalar"
    assert str(err.value).startswith(want), str(err.value)
    assert len(calls) == 1  # (not traced again on x's values)
