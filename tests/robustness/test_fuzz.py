"""Property test: random functions from a small grammar (elementwise functions,
products, sums, matrix products with fixed matrices) agree on every backend for
gradient, jvp, vjp, jacobian and hvp, in float64: AD backends with each other at
1e-9 (relative to the largest entry), finite differences at 1e-5 (first order) and
1e-3 (hvp). ``DIFFIFACE_FUZZ_EXAMPLES`` sets the number of examples (default 200, recorded in
docs/promises.md)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di
from diffiface.testing import namespace

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

N = 3
MATS = [np.random.default_rng(i).uniform(-1, 1, (N, N)) for i in range(2)]
EXAMPLES = int(os.environ.get("DIFFIFACE_FUZZ_EXAMPLES", "200"))
AD = [
    b
    for b, m in ((di.AutoJax, "jax"), (di.AutoTorch, "torch"), (di.AutoAutograd, "autograd"))
    if HAVE[m]
]

UNARY = ("sin", "cos", "tanh", "exp", "log1p_sq", "square")
leaves = st.just(("x",)) | st.sampled_from([("mat", 0), ("mat", 1)])
exprs = st.recursive(
    st.just(("x",)),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(UNARY), inner),
        st.tuples(st.just("mul"), inner, inner),
        st.tuples(st.just("add"), inner, inner),
        st.tuples(st.just("matmul"), st.integers(0, 1), inner),
        st.tuples(st.just("mean_times"), inner, inner),
    ),
    max_leaves=6,
)


def build(e, x, mats):
    xp = namespace(x)
    op = e[0]
    if op == "x":
        return x
    if op in ("sin", "cos", "tanh", "exp"):
        return getattr(xp, op)(build(e[1], x, mats))
    if op == "log1p_sq":
        return xp.log(1 + build(e[1], x, mats) ** 2)
    if op == "square":
        return build(e[1], x, mats) ** 2
    if op == "mul":
        return build(e[1], x, mats) * build(e[2], x, mats)
    if op == "add":
        return build(e[1], x, mats) + build(e[2], x, mats)
    if op == "matmul":
        return mats[e[1]] @ build(e[2], x, mats)
    return build(e[1], x, mats).sum() / N * build(e[2], x, mats)  # mean_times


def native(backend, a):
    if isinstance(backend, di.AutoJax):
        import jax.numpy as jnp

        return jnp.asarray(a)
    if isinstance(backend, di.AutoTorch):
        import torch

        return torch.from_numpy(np.array(a))
    return np.array(a)


def as_np(a):
    return a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)


def results(backend, e, x, v, w):
    mats = [native(backend, m) for m in MATS]

    def f(x):
        return build(e, x, mats)

    def g(x):
        return (build(e, x, mats) * native(backend, w)).sum()

    xn, vn, wn = native(backend, x), native(backend, v), native(backend, w)
    return {
        "gradient": as_np(di.gradient(g, backend, xn)),
        "jvp": as_np(di.jvp(f, backend, xn, vn)),
        "vjp": as_np(di.vjp(f, backend, xn, wn)),
        "jacobian": as_np(di.jacobian(f, backend, xn)),
        "hvp": as_np(di.hvp(g, backend, xn, vn)),
    }


def close(a, b, tol):
    scale = max(1.0, float(np.max(np.abs(b))))
    return float(np.max(np.abs(a - b))) <= tol * scale


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing (x64 is set by conftest)")
@hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True)
@hypothesis.given(
    e=exprs,
    x=st.lists(st.floats(-1, 1), min_size=N, max_size=N),
    v=st.lists(st.floats(-1, 1), min_size=N, max_size=N),
    w=st.lists(st.floats(-1, 1), min_size=N, max_size=N),
)
def test_random_functions_agree_on_every_backend(e, x, v, w):
    x, v, w = (np.array(a, dtype=np.float64) for a in (x, v, w))
    with np.errstate(all="ignore"):
        y = build(e, x, MATS)
    hypothesis.assume(np.all(np.isfinite(y)) and np.max(np.abs(y)) < 1e6)
    ref = results(AD[0](), e, x, v, w)
    hypothesis.assume(all(np.all(np.isfinite(r)) and np.max(np.abs(r)) < 1e6 for r in ref.values()))
    for backend in AD[1:]:
        got = results(backend(), e, x, v, w)
        for op, r in ref.items():
            assert close(got[op], r, 1e-9), (backend, op, e)
    fd = results(di.AutoFiniteDifferences(), e, x, v, w)
    for op, r in ref.items():
        assert close(fd[op], r, 1e-3 if op == "hvp" else 1e-5), ("fd", op, e)
