"""Exact where the math is exact: the torch and JAX global detectors classify each
elementwise op by the operands it has a nonzero derivative in (SparseConnectivityTracer's
classes), so piecewise linear functions give zero Hessian blocks and the same function
gives the same pattern on both frameworks.

Each case is checked three ways: torch's pattern equals JAX's for the same function;
both equal the expected pattern (closed form); and both contain the nonzeros of the
dense float64 derivative (torch.func, jax) at random points.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from diffiface.backends.jax.sparse import detect as jd  # noqa: E402
from diffiface.backends.torch.sparse import detect as td  # noqa: E402

F = torch.nn.functional
N = 4  # x = (a0, a1, b0, b1): u = a * b, so each u_i couples x_i and x_{i+2}
CROSS = {(0, 2), (2, 0), (1, 3), (3, 1)}  # the Hessian of sum(phi(u)), phi piecewise linear
NONE: set = set()


def _u(x):
    return x[:2] * x[2:]


# name: (torch phi, JAX phi, expected Hessian of sum(phi(u)))
UNARY = {
    "relu": (F.relu, jax.nn.relu, CROSS),
    "relu6": (F.relu6, jax.nn.relu6, CROSS),
    "hardtanh": (F.hardtanh, jax.nn.hard_tanh, CROSS),
    "leaky_relu": (lambda u: F.leaky_relu(u, 0.1), lambda u: jax.nn.leaky_relu(u, 0.1), CROSS),
    "hardsigmoid": (F.hardsigmoid, jax.nn.hard_sigmoid, CROSS),
    "rrelu_eval": (
        lambda u: F.rrelu(u, training=False),
        lambda u: jax.nn.leaky_relu(u, (1 / 8 + 1 / 3) / 2),
        CROSS,
    ),
    "softshrink": (
        lambda u: F.softshrink(u, 0.5),
        lambda u: jnp.where(u > 0.5, u - 0.5, jnp.where(u < -0.5, u + 0.5, 0.0)),
        CROSS,
    ),
    "hardshrink": (
        lambda u: F.hardshrink(u, 0.5),
        lambda u: jnp.where(jnp.abs(u) > 0.5, u, 0.0),
        CROSS,
    ),
    "threshold": (
        lambda u: F.threshold(u, 0.1, 2.0),
        lambda u: jnp.where(u > 0.1, u, 2.0),
        CROSS,
    ),
    "abs": (torch.abs, jnp.abs, CROSS),
    "clamp": (lambda u: u.clamp(-0.5, 0.5), lambda u: jnp.clip(u, -0.5, 0.5), CROSS),
    "relu_pow1": (lambda u: F.relu(u) ** 1, lambda u: jax.nn.relu(u) ** 1, CROSS),
    "sign_times": (lambda u: torch.sign(u) * u, lambda u: jnp.sign(u) * u, CROSS),
    "floor": (torch.floor, jnp.floor, NONE),
    "ceil": (torch.ceil, jnp.ceil, NONE),
    "round": (torch.round, jnp.round, NONE),
    "trunc": (torch.trunc, jnp.trunc, NONE),
    "square": (torch.square, jnp.square, {(i, j) for i in range(N) for j in range(N)} & {
        (0, 0), (0, 2), (2, 0), (2, 2), (1, 1), (1, 3), (3, 1), (3, 3)}),
}  # fmt: skip

# name: (torch f, JAX f, expected Hessian) of whole functions of x
WHOLE = {
    "copysign": (
        lambda x: torch.copysign(x[0] * x[1], x[2] * x[3]),
        lambda x: jnp.copysign(x[0] * x[1], x[2] * x[3]),
        {(0, 1), (1, 0)},
    ),
    "maximum": (
        lambda x: torch.maximum(_u(x), x[2:]).sum(),
        lambda x: jnp.maximum(_u(x), x[2:]).sum(),
        CROSS,
    ),
    "minimum": (
        lambda x: torch.minimum(_u(x), x[:2]).sum(),
        lambda x: jnp.minimum(_u(x), x[:2]).sum(),
        CROSS,
    ),
    "max_reduce": (lambda x: _u(x).max(), lambda x: _u(x).max(), CROSS),
    "fmod": (
        lambda x: torch.fmod(x[:2], x[2:] + 3).sum(),
        lambda x: jnp.fmod(x[:2], x[2:] + 3).sum(),
        NONE,
    ),
    "remainder": (
        lambda x: torch.remainder(x[:2], x[2:] + 3).sum(),
        lambda x: jnp.remainder(x[:2], x[2:] + 3).sum(),
        NONE,
    ),
    "floor_div_times": (
        lambda x: (torch.div(x[:2], x[2:] + 3, rounding_mode="floor") * x[:2]).sum(),
        lambda x: (jnp.floor_divide(x[:2], x[2:] + 3) * x[:2]).sum(),
        NONE,
    ),
    "where_const": (
        lambda x: torch.where(torch.tensor([True, False, True, False]), x, x**2).sum(),
        lambda x: jnp.where(jnp.array([True, False, True, False]), x, x**2).sum(),
        {(1, 1), (3, 3)},
    ),
    "times_const_zero": (
        lambda x: (x**2 * torch.tensor([0.0, 1.0, 0.0, 2.0], dtype=x.dtype)).sum(),
        lambda x: (x**2 * jnp.array([0.0, 1.0, 0.0, 2.0])).sum(),
        {(1, 1), (3, 3)},
    ),
    "max_pool_square": (
        lambda x: (F.max_pool1d(x.view(1, 1, N), 2) ** 2).sum(),
        lambda x: (jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (2,), (2,), "VALID") ** 2).sum(),
        {(i, j) for i in range(N) for j in range(N) if i // 2 == j // 2},
    ),
}


def _summed(phi):
    return lambda x: phi(_u(x)).sum()


def _cases():
    for name, (t, j, want) in UNARY.items():
        yield pytest.param(_summed(t), _summed(j), want, id=name)
    for name, (t, j, want) in WHOLE.items():
        yield pytest.param(t, j, want, id=name)


def _set(p) -> set:
    return set(zip(*p.nonzero(), strict=True))


def _points(k=4):
    rng = np.random.default_rng(0)
    return [2 * rng.standard_normal(N) for _ in range(k)]


@pytest.mark.parametrize(("tf", "jf", "want"), list(_cases()))
def test_hessian_patterns_exact_and_equal_across_frameworks(tf, jf, want):
    pt = td.hessian_pattern(tf, torch.zeros(N, dtype=torch.float64))
    pj = jd.hessian_pattern(jf, jnp.zeros(N))
    assert _set(pt) == _set(pj) == want
    for x in _points():  # sound: the dense Hessian's nonzeros are inside
        hj = np.asarray(jax.hessian(jf)(jnp.asarray(x)))
        assert not (hj != 0)[~pt.toarray()].any()
        try:  # torch's own Hessian agrees (none for hardsigmoid; rrelu's is unbatched)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "There is a performance drop", UserWarning)
                ht = torch.func.jacrev(torch.func.jacrev(tf))(torch.tensor(x)).numpy()
        except RuntimeError:
            continue
        np.testing.assert_allclose(ht, hj, atol=1e-12)  # (copysign: rounding noise 1e-16)


# vector functions: (torch, JAX, expected Jacobian)
CROSS_J = {(0, 0), (0, 2), (1, 1), (1, 3)}
JACOBIANS = {
    "copysign": (
        lambda x: torch.copysign(x[:2] ** 2, x[2:]),
        lambda x: jnp.copysign(x[:2] ** 2, x[2:]),
        {(0, 0), (1, 1)},
    ),
    "nextafter": (
        lambda x: torch.nextafter(x[:2], x[2:]),
        lambda x: jnp.nextafter(x[:2], x[2:]),
        {(0, 0), (1, 1)},
    ),
    "relu": (lambda x: F.relu(_u(x)), lambda x: jax.nn.relu(_u(x)), CROSS_J),
    "floor": (lambda x: torch.floor(_u(x)), lambda x: jnp.floor(_u(x)), NONE),
}


@pytest.mark.parametrize(("tf", "jf", "want"), list(JACOBIANS.values()), ids=list(JACOBIANS))
def test_jacobian_patterns_equal_across_frameworks(tf, jf, want):
    pt = td.jacobian_pattern(tf, torch.zeros(N, dtype=torch.float64))
    pj = jd.jacobian_pattern(jf, jnp.zeros(N))
    assert _set(pt) == _set(pj) == want
    if tf is JACOBIANS["nextafter"][0]:
        return  # (no framework differentiates nextafter: d/dx = 1, d/dy = 0 by hand)
    for x in _points():
        jt = torch.func.jacrev(tf)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(jt, np.asarray(jax.jacfwd(jf)(jnp.asarray(x))), atol=1e-12)
        assert not (jt != 0)[~pt.toarray()].any()


def test_pool_and_padding_backward_hessians_are_their_windows():
    """The gradients of pools and paddings reach their windows (not the whole input)."""
    x = torch.randn(16, dtype=torch.float64)

    def grid(x):
        return x.view(1, 1, 4, 4)

    cases = {
        "max_pool2d": (lambda x: (F.max_pool2d(grid(x), 2) ** 2).sum(), 64),
        "adaptive_max_pool2d": (lambda x: (F.adaptive_max_pool2d(grid(x), 2) ** 2).sum(), 64),
        "adaptive_avg_pool2d": (lambda x: (F.adaptive_avg_pool2d(grid(x), 2) ** 2).sum(), 64),
        "replicate_pad": (lambda x: (F.pad(x.view(1, 4, 4), (1, 1), "replicate") ** 2).sum(), 16),
        "adaptive_max_pool2d_linear": (lambda x: F.adaptive_max_pool2d(grid(x), 2).sum(), 0),
    }
    for name, (f, nnz) in cases.items():
        p = td.hessian_pattern(f, x)
        assert p.nnz == nnz, name
        h = torch.func.hessian(f)(x).numpy() != 0
        assert not h[~p.toarray()].any(), name
    windows = td.hessian_pattern(cases["max_pool2d"][0], x).toarray()
    i = np.arange(16)
    window = (i // 4 // 2) * 2 + (i % 4) // 2
    np.testing.assert_array_equal(windows, window[:, None] == window[None, :])


def _derivatives_yaml():
    try:
        import torchgen
        import yaml
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged/autograd/derivatives.yaml")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return yaml.safe_load(fh)


def test_every_elementwise_op_torch_declares_flat_is_classified():
    """torch's derivatives.yaml gives ``zeros_like`` as the derivative of an operand in
    which the op is piecewise constant; each such elementwise op is classified so by the
    detector: its pattern leaves that operand out."""
    from diffiface.backends.torch.sparse import elementwise as E
    from diffiface.backends.torch.sparse.table import rule_for

    entries = _derivatives_yaml()
    if entries is None:
        pytest.skip("torchgen's derivatives.yaml is not installed")
    checked = 0
    for e in entries:
        name, _, overload = e["name"].split("(")[0].partition(".")
        zero = [k for k, v in e.items() if isinstance(v, str) and v.startswith("zeros_like")]
        packet = getattr(torch.ops.aten, name, None)
        if not zero or name.endswith("_") or packet is None:
            continue
        op = getattr(packet, overload or "default")
        rule = rule_for(op)
        if rule not in (E.pointwise, E.copysign):
            continue  # (its own rule: fill, no_derivative, pools, random ops)
        flat = set(E.FLAT_OPERANDS.get(name, ()))
        assert set(zero) - {"result"} <= flat, (name, zero)
        checked += 1
    assert checked >= 6
