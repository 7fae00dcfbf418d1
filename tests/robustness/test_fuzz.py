"""Property test: random functions from a small grammar (elementwise functions,
products, sums, matrix products with fixed matrices) agree on every backend for
gradient, jvp, vjp, jacobian and hvp, in float64. The reference is the grammar's own
closed form (value, jacobian and second derivatives built rule by rule in NumPy): AD
backends agree with it at 1e-9 (relative to the largest entry), finite differences at
1e-5 (first order) and 1e-3 (hvp). The tests of each backend (and of each operator on
JAX) see the same derandomized examples; an expression drawn again reuses its functions.
``DIFFIFACE_FUZZ_EXAMPLES`` sets the number of examples (default 200, recorded in
docs/promises.md)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from helpers import HAVE, namespace

import diffiface as di

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

N = 3
MATS = [np.random.default_rng(i).uniform(-1, 1, (N, N)) for i in range(2)]
EXAMPLES = int(os.environ.get("DIFFIFACE_FUZZ_EXAMPLES", "200"))

UNARY = ("sin", "cos", "tanh", "exp", "log1p_sq", "square")
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
OPS = ("gradient", "jvp", "vjp", "jacobian", "hvp")


def _case(backend, module, ops):
    skip = module is not None and not HAVE[module]
    marks = pytest.mark.skipif(skip, reason=f"{module} missing")
    return pytest.param(backend, ops, id=f"{backend.__name__}-{'-'.join(ops)}", marks=marks)


# JAX compiles each operator of each new function: one test per operator, so that xdist
# spreads them; the other backends check every operator in one test
CASES = [_case(di.AutoJax, "jax", (op,)) for op in OPS] + [
    _case(di.AutoTorch, "torch", OPS),
    _case(di.AutoAutograd, "autograd", OPS),
    _case(di.AutoFiniteDifferences, None, OPS),
]


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


def unary_rule(op, u):
    """f(u), f'(u) and f''(u) of an elementwise operation, in closed form."""
    if op == "sin":
        return np.sin(u), np.cos(u), -np.sin(u)
    if op == "cos":
        return np.cos(u), -np.sin(u), -np.cos(u)
    if op == "tanh":
        t = np.tanh(u)
        return t, 1 - t**2, -2 * t * (1 - t**2)
    if op == "exp":
        return np.exp(u), np.exp(u), np.exp(u)
    if op == "log1p_sq":
        return np.log(1 + u**2), 2 * u / (1 + u**2), 2 * (1 - u**2) / (1 + u**2) ** 2
    return u**2, 2 * u, np.full_like(u, 2.0)  # square


def outer(a, b):
    """[i, j, k] = a[i, j] * b[i, k]: the product of two rows' first derivatives."""
    return a[:, :, None] * b[:, None, :]


def closed_form(e, x):
    """y = e(x), its jacobian J[i, j] = dy_i/dx_j and H[i, j, k] = d2y_i/dx_j dx_k."""
    op = e[0]
    if op == "x":
        return x, np.eye(N), np.zeros((N, N, N))
    if op == "matmul":
        y, J, H = closed_form(e[2], x)
        m = MATS[e[1]]
        return m @ y, m @ J, np.einsum("ij,jkl->ikl", m, H)
    if op in UNARY:
        u, Ju, Hu = closed_form(e[1], x)
        f, d1, d2 = unary_rule(op, u)
        return f, d1[:, None] * Ju, d2[:, None, None] * outer(Ju, Ju) + d1[:, None, None] * Hu
    (a, Ja, Ha), (b, Jb, Hb) = closed_form(e[1], x), closed_form(e[2], x)
    if op == "add":
        return a + b, Ja + Jb, Ha + Hb
    if op == "mul":
        H = b[:, None, None] * Ha + a[:, None, None] * Hb + outer(Ja, Jb) + outer(Jb, Ja)
        return a * b, b[:, None] * Ja + a[:, None] * Jb, H
    s, Js, Hs = a.sum() / N, Ja.sum(0) / N, Ha.sum(0) / N  # mean_times: s(x) * b(x)
    Js_rows = np.broadcast_to(Js, (N, N))
    H = s * Hb + b[:, None, None] * Hs + outer(Jb, Js_rows) + outer(Js_rows, Jb)
    return s * b, s * Jb + b[:, None] * Js, H


def reference(e, x, v, w):
    _, J, H = closed_form(e, x)
    hessian_of_g = np.einsum("i,ijk->jk", w, H)  # g(x) = sum(e(x) * w)
    return {
        "gradient": J.T @ w,
        "jvp": J @ v,
        "vjp": J.T @ w,
        "jacobian": J,
        "hvp": hessian_of_g @ v,
    }


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


@functools.cache
def functions(backend, e):
    """f(x) = e(x) and g(x, w) = sum(e(x) * w) on ``backend``'s arrays, made once per
    expression: an expression drawn again reuses them (and JAX their compilations)."""
    mats = [native(backend, m) for m in MATS]

    def f(x):
        return build(e, x, mats)

    def g(x, w):
        return (build(e, x, mats) * w).sum()

    return f, g


def result(backend, op, e, x, v, w):
    """``op`` of f (jvp, vjp, jacobian) or of g with w as a Constant (gradient, hvp)."""
    f, g = functions(backend, e)
    xn, vn, wn = native(backend, x), native(backend, v), native(backend, w)
    if op == "gradient":
        return as_np(di.gradient(g, backend, xn, di.Constant(wn)))
    if op == "hvp":
        return as_np(di.hvp(g, backend, xn, vn, di.Constant(wn)))
    if op == "jacobian":
        return as_np(di.jacobian(f, backend, xn))
    return as_np(getattr(di, op)(f, backend, xn, vn if op == "jvp" else wn))


def close(a, b, tol):
    scale = max(1.0, float(np.max(np.abs(b))))
    return float(np.max(np.abs(a - b))) <= tol * scale


def test_closed_form_matches_float64_finite_differences():
    """The reference itself, on one expression using every rule: its jacobian and second
    derivatives against central differences of its own value and jacobian."""
    e = ("mean_times", ("log1p_sq", ("matmul", 0, ("x",))), ("mul", ("tanh", ("x",)), ("x",)))
    e = ("add", ("exp", ("sin", e)), ("square", ("cos", ("matmul", 1, e))))
    x, step = np.array([0.3, -0.7, 0.5]), 1e-6
    _, J, H = closed_form(e, x)
    for j in range(N):
        plus, minus = (
            closed_form(e, x + step * np.eye(N)[j]),
            closed_form(e, x - step * np.eye(N)[j]),
        )
        np.testing.assert_allclose((plus[0] - minus[0]) / (2 * step), J[:, j], rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(
            (plus[1] - minus[1]) / (2 * step), H[:, :, j], rtol=1e-6, atol=1e-8
        )


@pytest.mark.parametrize(("backend", "ops"), CASES)
@hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True)
@hypothesis.given(
    e=exprs,
    x=st.lists(st.floats(-1, 1), min_size=N, max_size=N),
    v=st.lists(st.floats(-1, 1), min_size=N, max_size=N),
    w=st.lists(st.floats(-1, 1), min_size=N, max_size=N),
)
def test_random_functions_agree_on_every_backend(backend, ops, e, x, v, w):
    x, v, w = (np.array(a, dtype=np.float64) for a in (x, v, w))
    with np.errstate(all="ignore"):
        y = build(e, x, MATS)
        ref = reference(e, x, v, w)
    hypothesis.assume(np.all(np.isfinite(y)) and np.max(np.abs(y)) < 1e6)
    hypothesis.assume(all(np.all(np.isfinite(r)) and np.max(np.abs(r)) < 1e6 for r in ref.values()))
    fd = backend is di.AutoFiniteDifferences
    for op in ops:
        tol = (1e-3 if op == "hvp" else 1e-5) if fd else 1e-9
        assert close(result(backend(), op, e, x, v, w), ref[op], tol), (backend, op, e)
