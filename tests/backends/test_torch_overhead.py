"""The per-call checks of the torch runners, kept while their cost was cut (issue 29):
the walk of f's graph for a tensor an outer pass differentiates (one x, compared by
identity, or a pytree x's leaves), a nested call's own leaves not counted as outside,
the @once_differentiable walk of an unprepared hvp (once per runner where it finds
none, on every call where it finds one), and the number of diffiface's Python calls
in a warm call. Each derivative against a closed form."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di
from diffiface.backends.torch import graph

torch = pytest.importorskip("torch")

B = di.AutoTorch()
X = np.array([0.5, -1.2, 2.0])
V = np.array([0.3, 1.1, -0.7])


def _ds(a):  # d/da of sum(sin(a) * a), elementwise
    return np.sin(a) + a * np.cos(a)


def _d2s(a):  # the Hessian's diagonal of sum(sin(a) * a)
    return 2 * np.cos(a) - a * np.sin(a)


def _leaves(x) -> list:
    return list(x.values()) if isinstance(x, dict) else [x]


def _point(kind: str):
    """x (one tensor, or a dict of two) and a tangent like it."""
    if kind == "tensor":
        return torch.tensor(X), torch.tensor(V)
    x = {"a": torch.tensor(X), "b": torch.tensor(X[::-1].copy())}
    return x, {"a": torch.tensor(V), "b": torch.tensor(V[::-1].copy())}


def _closing_over(c, op: str):
    """f closing over ``c`` (requires grad): c * sum(sin(a) * a) over x's leaves, or its
    elementwise form for the vjp."""
    if op == "vjp":
        return lambda x: c * sum(torch.sin(a) * a for a in _leaves(x))
    return lambda x: c * sum((torch.sin(a) * a).sum() for a in _leaves(x))


def _call(op: str, f, x, t, prep):
    kw = {} if prep is None else {"prep": prep}
    if op == "gradient":
        return di.gradient(f, B, x, **kw)
    if op == "vjp":
        return di.vjp(f, B, x, t["a"] if isinstance(t, dict) else t, **kw)
    return di.hvp(f, B, x, t, **kw)


def _prepare(op: str, f, x, t):
    if op == "gradient":
        return di.prepare_gradient(f, B, x)
    if op == "vjp":
        return di.prepare_vjp(f, B, x, t["a"] if isinstance(t, dict) else t)
    return di.prepare_hvp(f, B, x, t)


def _dc_want(op: str, x, t) -> float:
    """d/dc of the sum of the result's entries (the result is c times a function of x)."""
    xs, ts = [a.numpy() for a in _leaves(x)], [a.numpy() for a in _leaves(t)]
    if op == "gradient":
        return float(sum(_ds(a).sum() for a in xs))
    if op == "vjp":  # along w = t's first leaf, for each leaf of x
        return float(sum((ts[0] * _ds(a)).sum() for a in xs))
    return float(sum((_d2s(a) * v).sum() for a, v in zip(xs, ts, strict=True)))


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("kind", ["tensor", "dict"])
@pytest.mark.parametrize("op", ["gradient", "vjp", "hvp"])
def test_a_closure_differentiated_outside_keeps_the_runners_results_attached(
    op, kind, prepared, monkeypatch
):
    """The runner's walk finds c (a leaf other than x's) on every warm call: the result
    stays on c's graph, and its derivative in c is the closed form's."""
    c = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    f = _closing_over(c, op)
    x, t = _point(kind)
    prep = _prepare(op, f, x, t) if prepared else None
    _call(op, f, x, t, prep)  # the general path (or the preparation) ran first
    walks = []
    real = graph.reaches_outside
    monkeypatch.setattr(graph, "reaches_outside", lambda y, xg: walks.append(1) or real(y, xg))
    for _ in range(2):
        got = _call(op, f, x, t, prep)
        total = sum(a.sum() for a in _leaves(got))
        assert total.requires_grad
        (dc,) = torch.autograd.grad(total, c)
        np.testing.assert_allclose(dc.item(), _dc_want(op, x, t), rtol=1e-12)
    assert walks  # the runners took the warm calls


@pytest.mark.parametrize("kind", ["tensor", "dict"])
def test_a_nested_calls_own_leaves_are_not_outside(kind):
    """f calls diffiface.gradient at a constant point u0, with an inner f reading x: the
    inner result's graph reaches the inner call's own leaf, which is no tensor of an
    outer pass. The outer result is detached; its value against the closed form:
    f(x) = sum(2 u0 * prod(x's leaves)), so d/da = 2 u0 * (the other leaf)."""
    u0 = torch.tensor([0.4, -0.9, 1.3], dtype=torch.float64)
    x, _ = _point(kind)

    def f(x):
        p = x if kind == "tensor" else x["a"] * x["b"]
        return di.gradient(lambda u: (u**2 * p).sum(), B, u0).sum()

    prep = di.prepare_gradient(f, B, x)
    for got in (di.gradient(f, B, x), di.gradient(f, B, x), di.gradient(f, B, x, prep=prep)):
        gs = _leaves(got)
        assert not any(g.requires_grad for g in gs)
        u = 2 * u0.numpy()
        if kind == "tensor":
            np.testing.assert_allclose(gs[0].numpy(), u, rtol=1e-12)
        else:
            np.testing.assert_allclose(gs[0].numpy(), u * x["b"].numpy(), rtol=1e-12)
            np.testing.assert_allclose(gs[1].numpy(), u * x["a"].numpy(), rtol=1e-12)


def _square_once():
    from torch.autograd.function import once_differentiable

    class SquareOnce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a**2

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g

    return SquareOnce


def test_an_unprepared_hvp_refuses_a_once_differentiable_backward_on_every_call():
    """The runner holds f weakly, so it walks f's graph on every call: the Function on a
    path to x is found each time (through a diamond: x reaches it twice)."""
    square = _square_once()

    def f(x):
        s = torch.sin(x)
        return (square.apply(s + x) * s).sum()

    x, v = _point("tensor")
    for _ in range(3):
        with pytest.raises(TypeError, match="SquareOnce"):
            di.hvp(f, B, x, v)


def test_a_once_differentiable_backward_off_the_path_to_x_is_no_error():
    """The Function applied to a constant only: no path from it to x, the hvp runs (on
    every call), against the closed form c0 * diag(2 cos x - x sin x) v."""
    square = _square_once()
    k = torch.tensor(1.5, dtype=torch.float64)

    def f(x):
        return square.apply(k) * (torch.sin(x) * x).sum()

    x, v = _point("tensor")
    want = 2.25 * _d2s(X) * V
    for _ in range(3):
        np.testing.assert_allclose(di.hvp(f, B, x, v).numpy(), want, rtol=1e-12)


def s(x):
    return (torch.sin(x) * x).sum()


def e(x):
    return torch.sin(x) * x


@pytest.mark.parametrize(
    "op, most",
    [("gradient", (9, 11)), ("vjp", (11, 13)), ("jvp", (8, 10)), ("hvp", (18, 17))],
)
def test_a_warm_torch_call_makes_few_python_calls(op, most):
    """diffiface's Python calls in a warm call (prepared, unprepared), as
    /work/tools/count_calls.py counts them; the unprepared hvp no longer runs a
    comprehension per node of f's graph (33 calls before)."""
    x, t = _point("tensor")
    f = e if op in ("vjp", "jvp") else s
    fn = getattr(di, op)
    args = (x,) if op == "gradient" else (x, t)
    prep = getattr(di, f"prepare_{op}")(f, B, *args)
    got = fn(f, B, *args, prep=prep)
    if op == "gradient":
        want = _ds(X)
    elif op == "hvp":
        want = _d2s(X) * V
    else:  # the Jacobian is diagonal: jvp and vjp agree
        want = _ds(X) * V
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert python_calls(lambda: fn(f, B, *args, prep=prep)) <= most[0]
    assert python_calls(lambda: fn(f, B, *args)) <= most[1]


@pytest.mark.parametrize("n", [3, 20_000], ids=["batched", "looped"])
@pytest.mark.parametrize("op", ["hvp", "gradient_and_hvp"])
def test_a_warm_torch_hvp_of_tangents_takes_the_runner(op, n):
    """An hvp along a Tangents of k runs on the one double-backward graph of the runner
    (one batched backward for small directions, one backward per direction for large
    ones), not the general path (179 Python calls prepared, 309 unprepared before);
    each result against the closed form, f run once per call."""
    from helpers import counted

    rng = np.random.default_rng(0)
    xn, vn = rng.standard_normal(n), rng.standard_normal((4, n))
    x, T = torch.tensor(xn), di.Tangents(*torch.tensor(vn))
    g, runs = counted(s)
    fn = getattr(di, op)
    prep = di.prepare_hvp(g, B, x, T)
    for got in (fn(g, B, x, T, prep=prep), fn(g, B, x, T)):
        hvs = got[1] if op == "gradient_and_hvp" else got
        assert type(hvs) is di.Tangents and len(hvs) == 4
        for hv, v in zip(hvs, vn, strict=True):
            np.testing.assert_allclose(hv.numpy(), _d2s(xn) * v, rtol=1e-12, atol=1e-12)
        if op == "gradient_and_hvp":
            np.testing.assert_allclose(got[0].numpy(), _ds(xn), rtol=1e-12)
            assert not got[0].requires_grad
    before = runs[0]
    fn(g, B, x, T, prep=prep)
    assert runs[0] == before + 1
    prep = di.prepare_hvp(s, B, x, T)
    most = 30 if n < 100 else 40  # (the loop: a pullback per direction)
    assert python_calls(lambda: fn(s, B, x, T, prep=prep)) <= most
    assert python_calls(lambda: fn(s, B, x, T)) <= most


def s2(x):
    return (torch.sin(x["a"]) * x["b"]).sum()


def e2(x):
    return torch.sin(x["a"]) * x["b"]


@pytest.mark.parametrize(
    "op, most",
    [("gradient", (13, 14)), ("vjp", (14, 15)), ("jvp", (12, 13)), ("hvp", (24, 22))],
)
def test_a_warm_torch_call_of_pytree_x_makes_few_python_calls(op, most):
    """As above for x a dict of two tensors (the leaves runners): x and the results are
    rebuilt from their leaves without a Python frame, the hvp's parts that depend on x
    picked in one loop (17, 18, 14, 30 prepared calls before)."""
    x, t = _point("dict")
    a, b, va, vb = (v.numpy() for v in (x["a"], x["b"], t["a"], t["b"]))
    f = e2 if op in ("vjp", "jvp") else s2
    args = (x,) if op == "gradient" else (x, t["a"]) if op == "vjp" else (x, t)
    fn = getattr(di, op)
    prep = getattr(di, f"prepare_{op}")(f, B, *args)
    got = fn(f, B, *args, prep=prep)
    want = {  # closed forms of f = sin(a) * b (summed for gradient and hvp)
        "gradient": {"a": np.cos(a) * b, "b": np.sin(a)},
        "vjp": {"a": np.cos(a) * b * va, "b": np.sin(a) * va},
        "jvp": np.cos(a) * b * va + np.sin(a) * vb,
        "hvp": {"a": -np.sin(a) * b * va + np.cos(a) * vb, "b": np.cos(a) * va},
    }[op]
    if op == "jvp":
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    else:
        for k in ("a", "b"):
            np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-12, atol=1e-15)
    assert python_calls(lambda: fn(f, B, *args, prep=prep)) <= most[0]
    assert python_calls(lambda: fn(f, B, *args)) <= most[1]


@pytest.mark.parametrize(
    "op, most",
    [
        ("value_and_gradient", (14, 16)),
        ("vjp", (15, 17)),
        ("jvp", (12, 14)),
        ("derivative", (13, 14)),
    ],
)
def test_a_warm_torch_call_of_numpy_or_float_x_makes_few_python_calls(op, most):
    """A NumPy x (a Python float for derivative): the results given back as NumPy (or a
    float) with no frame per result beyond its own conversion (17, 16, 13, 14 prepared
    calls before); each against its closed form."""
    f = e if op in ("vjp", "jvp") else s
    args = (X,) if op == "value_and_gradient" else (X, V)
    if op == "derivative":
        f, args = (lambda x: torch.sin(x) * x), (0.7,)
    fn = getattr(di, op)
    prep = getattr(di, "prepare_" + ("gradient" if op == "value_and_gradient" else op))(f, B, *args)
    got = fn(f, B, *args, prep=prep)
    if op == "value_and_gradient":
        assert type(got[0]) is np.ndarray and type(got[1]) is np.ndarray
        np.testing.assert_allclose(got[0], np.sum(np.sin(X) * X), rtol=1e-12)
        np.testing.assert_allclose(got[1], _ds(X), rtol=1e-12)
    elif op == "derivative":
        assert type(got) is float
        np.testing.assert_allclose(got, _ds(0.7), rtol=1e-6)  # (float32: torch's default)
    else:  # the Jacobian is diagonal: jvp and vjp agree
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, _ds(X) * V, rtol=1e-12)
    assert python_calls(lambda: fn(f, B, *args, prep=prep)) <= most[0]
    assert python_calls(lambda: fn(f, B, *args)) <= most[1]


def test_a_warm_torch_vjp_of_tangents_makes_few_python_calls():
    """A vjp along a Tangents of 4: the cotangents checked in one loop (22 Python calls
    prepared before: a generator frame per cotangent); each against the closed form."""
    W = np.stack([V * (i + 1) for i in range(4)])
    x, T = torch.tensor(X), di.Tangents(*torch.tensor(W))
    prep = di.prepare_vjp(e, B, x, T)
    got = di.vjp(e, B, x, T, prep=prep)
    for g, w in zip(got, W, strict=True):
        np.testing.assert_allclose(g.numpy(), _ds(X) * w, rtol=1e-12)
    assert python_calls(lambda: di.vjp(e, B, x, T, prep=prep)) <= 18
