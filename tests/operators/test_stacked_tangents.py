"""``Tangents.stacked(V)``: k tangents on a leading axis, the results stacked the same
way, on every backend, for jvp, vjp, hvp and their value variants, for an array x and
a pytree x. Each result is compared with the closed form (f = sin(a) b, s = sum(sin(a)
b) + sum(a^2); one array x: a = b = x) and with the k-array form ``Tangents(*V)``."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers import python_calls, to_numpy, tolerance, xp

import diffiface as di

K, N = 3, 5
A = np.linspace(-1.0, 1.2, N)
B = np.linspace(0.5, 2.0, N)
VA = np.stack([np.cos(np.arange(N) + i) for i in range(K)])  # (K, N)
VB = np.stack([np.sin(2 * np.arange(N) - i) for i in range(K)])
OPS = ["jvp", "value_and_jvp", "vjp", "value_and_vjp", "hvp", "gradient_and_hvp"]


@functools.cache
def functions(backend, tree: bool):
    """(f, s) in the backend's array namespace, made once (a plan is kept for f)."""
    m = xp(backend)
    if tree:
        return (lambda x: m.sin(x["a"]) * x["b"]), (
            lambda x: m.sum(m.sin(x["a"]) * x["b"]) + m.sum(x["a"] ** 2)
        )
    return (lambda x: m.sin(x) * x), (lambda x: m.sum(m.sin(x) * x))


def closed_form(op: str, tree: bool) -> list:
    """The k results of ``op`` as NumPy (pytrees for a pytree x)."""
    a, b = (A, B) if tree else (A, A)
    outs = []
    for i in range(K):
        va, vb = (VA[i], VB[i]) if tree else (VA[i], VA[i])
        if "jvp" in op:
            out = np.cos(a) * b * va + np.sin(a) * vb
        elif "vjp" in op:  # (w = VA[i], like f(x))
            ga, gb = VA[i] * np.cos(a) * b, VA[i] * np.sin(a)
            out = {"a": ga, "b": gb} if tree else ga + gb
        else:
            ha = (-np.sin(a) * b + 2 * tree) * va + np.cos(a) * vb
            out = {"a": ha, "b": np.cos(a) * va} if tree else ha + np.cos(a) * va
        outs.append(out)
    return outs


def arguments(backend, op: str, tree: bool):
    """x and the stack V in the backend's arrays."""
    conv = to_backend(backend)
    x = {"a": conv(A), "b": conv(B)} if tree else conv(A)
    if "vjp" in op or not tree:
        return x, conv(VA)
    return x, {"a": conv(VA), "b": conv(VB)}


def to_backend(backend):
    if backend.framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray
    if backend.framework == "torch":
        import torch

        return lambda a: torch.from_numpy(np.array(a))
    return np.array


def run(backend, op: str, x, t, tree: bool, prep=None):
    f, s = functions(backend, tree)
    fn = s if "hvp" in op else f
    return getattr(di, op)(fn, backend, x, t, prep=prep)


def as_numpy(tree):
    return {k: to_numpy(v) for k, v in tree.items()} if isinstance(tree, dict) else to_numpy(tree)


def assert_close(got, want, backend):
    rtol, atol = tolerance(backend, np.float64)
    if isinstance(want, dict):
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_allclose(to_numpy(got[k]), want[k], rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(to_numpy(got), want, rtol=rtol, atol=atol)


def stacked_closed_form(outs: list):
    if isinstance(outs[0], dict):
        return {k: np.stack([o[k] for o in outs]) for k in outs[0]}
    return np.stack(outs)


@pytest.mark.parametrize("tree", [False, True], ids=["array", "pytree"])
@pytest.mark.parametrize("op", OPS)
def test_stacked_results_match_the_closed_form_and_the_k_array_form(backend, op, tree):
    """Three calls (the first builds the plan, the next ones take its runner) and a
    prepared one: the stacked result, its entries, len and iteration."""
    x, v = arguments(backend, op, tree)
    t = di.Tangents.stacked(v)
    want = closed_form(op, tree)
    prep_name = "prepare_" + op.replace("value_and_", "").replace("gradient_and_", "")
    f, s = functions(backend, tree)
    prep = getattr(di, prep_name)(s if "hvp" in op else f, backend, x, t)
    k_form = run(backend, op, x, di.Tangents(*t), tree)
    for p in (None, None, None, prep, prep):
        got, mine = run(backend, op, x, t, tree, prep=p), k_form
        if op.startswith(("value_and", "gradient_and")):  # the first result given once
            assert_close(got[0], as_numpy(k_form[0]), backend)
            got, mine = got[1], k_form[1]
        assert type(got) is di.Tangents
        assert_close(got.stack, stacked_closed_form(want), backend)
        assert len(got) == K
        for i, one in enumerate(got):
            assert_close(one, want[i], backend)
            assert_close(got[i], as_numpy(mine[i]), backend)


def test_stack_of_a_k_array_tangents_is_an_error():
    t = di.Tangents(np.ones(2), np.zeros(2))
    with pytest.raises(di.DiffifaceValueError, match=r"Tangents.stack: .* 2 separate arrays"):
        _ = t.stack


@pytest.mark.parametrize(
    ("v", "match"),
    [
        (np.float64(1.0), "leading axis"),
        ({"a": np.ones((2, 3)), "b": np.ones((3, 3))}, r"lengths \[2, 3\]"),
        (np.ones((0, 3)), "length 0"),
        ({}, "no arrays"),
    ],
)
def test_a_stack_without_one_leading_axis_is_refused(v, match):
    with pytest.raises(di.DiffifaceValueError, match=r"^Tangents.stacked\(V\): .*" + match):
        di.Tangents.stacked(v)


@pytest.mark.parametrize("op", ["jvp", "vjp", "hvp"])
def test_a_stack_on_the_wrong_axis_names_the_call_and_the_fix(backend, op):
    """V of shape (n, k) where (k, n) is meant: the call's error says how the stack is
    read and how to move the axis."""
    x, _ = arguments(backend, op, False)
    wrong = to_backend(backend)(np.ones((N, 2)))
    with pytest.raises(di.DiffifaceValueError) as info:
        run(backend, op, x, di.Tangents.stacked(wrong), False)
    msg = str(info.value)
    assert msg.startswith(f"{op}(f, {backend!r}, x, "), msg
    assert "Tangents.stacked(V) with k = 5" in msg and "np.moveaxis(V, -1, 0)" in msg, msg


@pytest.mark.parametrize("op", ["jvp", "vjp", "hvp", "value_and_jvp"])
def test_jax_stacked_calls_take_the_runner_and_compile_once(monkeypatch, op):
    """A warm stacked call of one JAX array runs the plan's compiled function as it is:
    no general path, no compilation, and few Python calls."""
    jax = pytest.importorskip("jax")
    b = di.AutoJax()
    x, v = arguments(b, op, False)
    t = di.Tangents.stacked(v)
    run(b, op, x, t, False)
    run(b, op, x, t, False)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))
    with jax.log_compiles():
        import logging

        seen = []
        handler = logging.Handler()
        handler.emit = lambda record: seen.append(record.getMessage())
        logging.getLogger("jax").addHandler(handler)
        try:
            got = run(b, op, x, t, False)
            n = python_calls(lambda: run(b, op, x, t, False))
        finally:
            logging.getLogger("jax").removeHandler(handler)
    assert not [m for m in seen if "Compiling" in m], seen
    assert type(got[-1] if isinstance(got, tuple) else got).__name__ == "Tangents"
    assert n <= 20, n


@pytest.mark.parametrize("op", ["vjp", "hvp"])
def test_torch_stacked_calls_take_one_batched_backward(monkeypatch, op):
    """torch: a warm stacked vjp (hvp) of one tensor runs f once and one batched
    backward (after the gradient's, for hvp) in the runner, no general path; its
    result is the closed form."""
    torch = pytest.importorskip("torch")
    b = di.AutoTorch()
    x, v = arguments(b, op, False)
    runs = [0]

    def f(x):
        runs[0] += 1
        return torch.sin(x) * x if op == "vjp" else torch.sum(torch.sin(x) * x)

    t = di.Tangents.stacked(v)
    getattr(di, op)(f, b, x, t)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **k: pytest.fail("the general path ran"))
    runs[0] = 0
    got = getattr(di, op)(f, b, x, t)
    assert runs[0] == 1
    assert_close(got.stack, stacked_closed_form(closed_form(op, False)), b)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "k arrays"])
def test_torch_hvp_of_large_directions_loops_on_one_graph(monkeypatch, stacked):
    """torch: k directions over 2**16 elements in all run one backward each on the one
    gradient graph (the batched pass's k-fold temporaries cost more), f once; each
    result against the closed form diag(2 cos x - x sin x) v."""
    torch = pytest.importorskip("torch")
    from diffiface.backends.torch import direct

    n, k = 20_000, 4  # k * n > direct._BATCH_MAX
    assert k * n > direct._BATCH_MAX
    x = torch.linspace(-2.0, 2.0, n, dtype=torch.float64)
    vs = torch.stack([torch.cos(x * (i + 1)) for i in range(k)])
    runs = [0]

    def f(x):
        runs[0] += 1
        return torch.sum(torch.sin(x) * x)

    t = di.Tangents.stacked(vs) if stacked else di.Tangents(*vs)
    for _ in range(2):  # (an unprepared f keeps its own plan by its second call)
        di.hvp(f, di.AutoTorch(), x, t)
    from diffiface.core import shell

    monkeypatch.setattr(shell, "enter", lambda *a, **kw: pytest.fail("the general path ran"))
    runs[0] = 0
    got = di.hvp(f, di.AutoTorch(), x, t)
    assert runs[0] == 1
    h = (2 * torch.cos(x) - x * torch.sin(x)).numpy()
    want = h * vs.numpy()
    np.testing.assert_allclose(
        got.stack.numpy() if stacked else np.stack(list(got)), want, rtol=1e-12, atol=1e-12
    )
