"""torch runners for pytrees: f returning a pytree (a dict) at one tensor x, and x a
pytree of tensors (or one tensor with a Constant). Each test proves the runner
answered (the general path made to fail), compares with torch.func's own transform
and counts f's runs (once per call, as torch itself runs it)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import counted

import diffiface as di
from diffiface.core.operator import OPS, pick

torch = pytest.importorskip("torch")

B = di.AutoTorch()
X = torch.tensor([0.3, -0.7, 1.1, 0.2, 0.9, -1.3], dtype=torch.float64)
V = torch.tensor([1.0, 0.5, -2.0, 0.25, -0.4, 0.8], dtype=torch.float64)
W = {"y": torch.cos(X), "z": torch.sin(3 * X)}


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


def _tree_out(x):
    return {"y": torch.sin(x) * x, "z": torch.cos(x) ** 2}


def _close(got, want):
    """Two pytrees of tensors (or tuples of them) agree to float64 rounding."""
    flat_got = torch.utils._pytree.tree_flatten(got)
    flat_want = torch.utils._pytree.tree_flatten(want)
    assert flat_got[1] == flat_want[1], (flat_got[1], flat_want[1])
    for a, b in zip(flat_got[0], flat_want[0], strict=True):
        assert not a.requires_grad
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14)


def _parts(op, got, want):
    """A result and its reference, each as the tuple of ``op``'s declared parts."""
    one = len(OPS[op].returns) == 1
    return (got,) if one else got, (want,) if one else want


def _run(monkeypatch, f, runs, op, x, args, prepared, **kw):
    """Three calls of ``op`` after the general path was made to fail: their results, and
    f's runs in them."""
    fn = getattr(di, op)
    prep = getattr(di, f"prepare_{OPS[op].family}")(f, B, x, *args, **kw) if prepared else None
    for _ in range(2):  # (an unprepared f keeps its own plan by its second call)
        fn(f, B, x, *args, prep=prep, **kw)
    _general_path_fails(monkeypatch)
    runs[0] = 0
    out = [fn(f, B, x, *args, prep=prep, **kw) for _ in range(3)]
    return out, runs[0]


# ------------------------------------------------------------------ pytree output


def _tree_own(op):
    """torch.func's own transforms of ``_tree_out`` at X, as ``op`` returns them."""
    fn = torch.func
    parts = {"value": _tree_out(X), "jvp": fn.jvp(_tree_out, (X,), (V,))[1]}
    parts["vjp"] = fn.vjp(_tree_out, X)[1](W)[0]
    parts["jacobian"] = fn.jacrev(_tree_out)(X)
    return pick(op, parts)


TREE_OPS = ("jvp", "value_and_jvp", "vjp", "value_and_vjp", "jacobian", "value_and_jacobian")


@pytest.mark.parametrize("op", TREE_OPS)
@pytest.mark.parametrize("prepared", [True, False])
def test_a_pytree_output_runs_the_runner(monkeypatch, op, prepared):
    """f returning a dict, prepared and unprepared: the runner answers with torch.func's
    own result in f's structure, f run once per call (value_and_jacobian too: f(x) is
    the aux of jacrev's one run)."""
    f, runs = counted(_tree_out)
    args = {"jvp": (V,), "vjp": (W,), "jacobian": ()}[OPS[op].family]
    out, n = _run(monkeypatch, f, runs, op, X, args, prepared)
    want = _tree_own(op)
    for got in out:
        _close(*_parts(op, got, want))
    assert n == 3


def test_a_pytree_output_is_taken_per_call(monkeypatch):
    """torch runs f anew on every call: an output whose structure changes between calls
    (a key more) is split as that call gives it, by the general path, with the right
    values; the runner takes the calls like the prepared one again."""
    extra = [False]

    def f(x):
        out = _tree_out(x)
        if extra[0]:
            out["w"] = x * 2
        return out

    prep = di.prepare_jvp(f, B, X, V)
    extra[0] = True
    got = di.jvp(f, B, X, V, prep=prep)
    want = torch.func.jvp(f, (X,), (V,))[1]
    _close(got, want)
    extra[0] = False
    _general_path_fails(monkeypatch)
    _close(di.jvp(f, B, X, V, prep=prep), _tree_own("jvp"))


def test_a_pytree_output_leaf_off_x_hands_over(monkeypatch):
    """A leaf that does not depend on x: the general path answers (zeros for its
    derivative, as it ravels the output); the runner hands over after f ran."""
    c = torch.ones(2, dtype=torch.float64)

    def f(x):
        return {"y": torch.sin(x), "c": c}

    prep = di.prepare_vjp(f, B, X, {"y": V, "c": c})
    got = di.vjp(f, B, X, {"y": V, "c": c}, prep=prep)
    _close(got, torch.cos(X) * V)
    tangent = di.jvp(f, B, X, V)
    _close(tangent, {"y": torch.cos(X) * V, "c": torch.zeros(2, dtype=torch.float64)})


def test_a_cotangent_unlike_the_output_is_the_general_paths_error():
    """A cotangent of another structure than f's output: the general path's error, as
    without preparation."""
    prep = di.prepare_vjp(_tree_out, B, X, W)
    bad = {"y": V, "q": V}
    with pytest.raises(Exception) as prepared:
        di.vjp(_tree_out, B, X, bad, prep=prep)
    with pytest.raises(Exception) as plain:
        di.vjp(lambda x: _tree_out(x), B, X, bad)
    assert type(prepared.value) is type(plain.value)


def test_a_pytree_output_an_outer_pass_sees_stays_attached(monkeypatch):
    """f closing over a tensor that requires grad: the vjp of its pytree output stays on
    the graph, and the outer derivative is torch's own."""
    p = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)

    def f(x):
        return {"y": p * torch.sin(x), "z": torch.cos(x)}

    prep = di.prepare_vjp(f, B, X, W)
    _general_path_fails(monkeypatch)
    got = di.vjp(f, B, X, W, prep=prep)
    assert got.requires_grad
    (dp,) = torch.autograd.grad(got.sum(), p)
    want = (torch.cos(X) * W["y"]).sum()  # d/dp of sum(p cos(x) w_y - sin(x) w_z)
    np.testing.assert_allclose(dp.item(), want.item(), rtol=1e-12)


def test_closures_made_per_call_with_a_pytree_output(monkeypatch):
    """A closure made anew per call (its own constant): each call's result is that
    closure's, by the runner of its code, f run once per call."""
    runs = [0]

    def make(c):
        def f(x):
            runs[0] += 1
            return {"y": c * torch.sin(x), "z": torch.cos(x)}

        return f

    for _ in range(2):
        di.vjp(make(1.0), B, X, W)
    _general_path_fails(monkeypatch)
    runs[0] = 0
    for c in (2.0, 3.0, -1.0):
        got = di.vjp(make(c), B, X, W)
        _close(got, c * torch.cos(X) * W["y"] - torch.sin(X) * W["z"])
    assert runs[0] == 3


# ------------------------------------------------------------------ pytree x


XT = {"a": X[:3].clone(), "b": X[3:].clone()}
VT = {"a": V[:3].clone(), "b": V[3:].clone()}
WT = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)


def _vec(x):
    return torch.sin(x["a"]) * x["b"]


def _scalar(x):
    return (torch.sin(x["a"]) * x["b"]).sum() + (x["a"] ** 2).sum()


def _tree_x_own(op):
    """torch.func's own transforms at XT (the vector f for jvp and vjp, the scalar one
    for the others), as ``op`` returns them."""
    fn = torch.func
    vector = OPS[op].family in ("jvp", "vjp")
    parts = {"value": _vec(XT) if vector else _scalar(XT), "gradient": fn.grad(_scalar)(XT)}
    parts["jvp"] = fn.jvp(_vec, (XT,), (VT,))[1]
    parts["vjp"] = fn.vjp(_vec, XT)[1](WT)[0]
    parts["hvp"] = fn.jvp(fn.grad(_scalar), (XT,), (VT,))[1]
    return pick(op, parts)


X_OPS = ("gradient", "value_and_gradient", "jvp", "value_and_jvp", "vjp", "value_and_vjp")
X_OPS += ("hvp", "gradient_and_hvp")


@pytest.mark.parametrize("op", X_OPS)
@pytest.mark.parametrize("prepared", [True, False])
def test_a_pytree_x_runs_the_runner(monkeypatch, op, prepared):
    """x a dict of tensors, prepared and unprepared: the runner answers with torch.func's
    own result (like x where it is x's), f run once per call."""
    family = OPS[op].family
    f, runs = counted(_vec if family in ("jvp", "vjp") else _scalar)
    args = {"gradient": (), "jvp": (VT,), "hvp": (VT,), "vjp": (WT,)}[family]
    out, n = _run(monkeypatch, f, runs, op, XT, args, prepared)
    want = _tree_x_own(op)
    for got in out:
        _close(*_parts(op, got, want))
    assert n == 3


@pytest.mark.parametrize("op", ["jvp", "vjp", "hvp"])
def test_one_tensor_with_a_constant_runs_the_leaves_runner(monkeypatch, op):
    """One tensor x with a Constant context (the leaves form): the runner answers with
    torch.func's own result at that constant."""
    c = torch.tensor(1.7, dtype=torch.float64)
    f, runs = counted(lambda x, c: c * (torch.sin(x) * x).sum() if op == "hvp" else c * x**3)
    t = V if op != "vjp" else W["y"]
    prep = getattr(di, f"prepare_{op}")(f, B, X, t, di.Constant(c))
    _general_path_fails(monkeypatch)
    runs[0] = 0
    got = getattr(di, op)(f, B, X, t, di.Constant(c), prep=prep)
    assert runs[0] == 1
    g = lambda x: f(x, c)  # noqa: E731
    fn = torch.func
    if op == "hvp":
        want = fn.jvp(fn.grad(g), (X,), (t,))[1]
    else:
        want = fn.jvp(g, (X,), (t,))[1] if op == "jvp" else fn.vjp(g, X)[1](t)[0]
    _close((got,), (want,))


def test_a_pytree_x_partly_linear_hvp(monkeypatch):
    """hvp where one leaf of x enters linearly (its gradient is constant): the double
    backward runs from the other leaves' gradients, with torch.func's own values."""

    def f(x):
        return (torch.sin(x["a"]) ** 2).sum() + (3.0 * x["b"]).sum()

    prep = di.prepare_hvp(f, B, XT, VT)
    _general_path_fails(monkeypatch)
    got = di.hvp(f, B, XT, VT, prep=prep)
    want = torch.func.jvp(torch.func.grad(f), (XT,), (VT,))[1]
    _close((got,), (want,))


@pytest.mark.parametrize("op", ["jvp", "vjp"])
def test_pytree_tangents_give_the_general_paths_result(op):
    """A Tangents of pytrees (x or f's output a pytree): torch.func's own results, one
    per tangent (the runner hands such calls to the general path's batched pass)."""
    if op == "jvp":
        ts = di.Tangents(VT, {"a": VT["b"], "b": VT["a"]})
        got = di.jvp(_vec, B, XT, ts)
        want = [torch.func.jvp(_vec, (XT,), (t,))[1] for t in ts]
    else:
        ts = di.Tangents(W, {"y": W["z"], "z": W["y"]})
        got = di.vjp(_tree_out, B, X, ts)
        want = [torch.func.vjp(_tree_out, X)[1](w)[0] for w in ts]
    assert isinstance(got, di.Tangents) and len(got) == 2
    for a, b in zip(got, want, strict=True):
        _close((a,), (b,))


# ------------------------------------------------------------------ has_aux


@pytest.mark.parametrize("op", ["gradient", "jvp", "vjp"])
def test_one_tensor_aux_is_settled_as_the_general_path_settles_it(monkeypatch, op):
    """An aux that is one tensor: off the call's own graph, and kept on the graph of a
    tensor an outer pass differentiates (f closes over it), as the general path gives
    it; the runner answers."""
    p = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)

    def f(x):
        y = (torch.sin(x) * x).sum() if op == "gradient" else torch.sin(x) * x
        return y, (torch.cos(x) * p if op == "vjp" else torch.cos(x))

    args = () if op == "gradient" else (V,)
    prep = getattr(di, f"prepare_{op}")(f, B, X, *args, has_aux=True)
    _general_path_fails(monkeypatch)
    _, aux = getattr(di, op)(f, B, X, *args, prep=prep, has_aux=True)
    np.testing.assert_allclose(aux.detach().numpy(), (torch.cos(X) * (2.0 if op == "vjp" else 1)))
    if op == "vjp":  # it reaches p: kept on p's graph, torch's own derivative
        assert aux.requires_grad
        (dp,) = torch.autograd.grad(aux.sum(), p)
        np.testing.assert_allclose(dp.item(), torch.cos(X).sum().item(), rtol=1e-12)
    else:
        assert not aux.requires_grad


@pytest.mark.parametrize("kind", ["numpy", "python"])
def test_a_kept_plan_whose_f_turns_to_a_pytree_output(kind):
    """An unprepared plan kept for a NumPy (or Python float) x while f returned one
    array: when f returns a dict later, the general path converts it (NumPy leaves,
    the values of torch.func), as without the plan."""
    tree = [False]

    def f(x):
        return {"y": torch.sin(x), "z": x * x} if tree[0] else torch.sin(x)

    x, t = (X.numpy().copy(), V.numpy().copy()) if kind == "numpy" else (0.4, 1.5)
    for _ in range(2):
        di.jvp(f, B, x, t)  # (the plan kept)
    tree[0] = True
    got = di.jvp(f, B, x, t)
    dtype = torch.float64 if kind == "numpy" else torch.get_default_dtype()  # (as made of x)
    xt, tt = torch.as_tensor(x, dtype=dtype), torch.as_tensor(t, dtype=dtype)
    want = torch.func.jvp(f, (xt,), (tt,))[1]
    assert set(got) == {"y", "z"}
    for k in got:
        assert not isinstance(got[k], torch.Tensor)
        np.testing.assert_allclose(np.asarray(got[k]), want[k].numpy(), rtol=1e-12)
