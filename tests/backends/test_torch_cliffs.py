"""torch call forms that once left the runner: a Python float x. Each test proves the
runner answered (the general path made to fail), compares with torch's own transform
and counts f's runs (once per call, as torch itself runs it)."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di
from diffiface.core.operator import OPS, pick

torch = pytest.importorskip("torch")

B = di.AutoTorch()


def _general_path_fails(monkeypatch):
    from diffiface.core import shell

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(shell, "enter", fail)


@pytest.fixture
def float64():
    """torch's default float dtype float64 for the test (a Python float x becomes one)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _counted():
    runs = [0]

    def curve(x):
        runs[0] += 1
        return torch.sin(x) * x**2

    return curve, runs


def _curve(x):
    return torch.sin(x) * x**2


def _own(op, x, t=None):
    """torch's own transforms at a 0-d tensor x (tangent t), as ``op`` returns them (a
    tuple of its declared parts)."""
    d1 = torch.func.grad(_curve)
    parts = {"value": _curve(x), "derivative": d1(x), "gradient": d1(x)}
    parts["second_derivative"] = torch.func.grad(d1)(x)
    if t is not None:
        parts["jvp"] = parts["vjp"] = torch.func.jvp(_curve, (x,), (t,))[1]  # (0-d: alike)
        parts["hvp"] = torch.func.jvp(d1, (x,), (t,))[1]
    return tuple(parts[part] for part in OPS[op].returns)


SCALAR = tuple(n for n, d in OPS.items() if d.scalar_x)  # (declared order, for xdist)


@pytest.mark.parametrize("op", (*SCALAR, "gradient", "jvp", "vjp", "hvp"))
@pytest.mark.parametrize("prepared", [True, False])
def test_a_python_float_x_runs_the_runner(monkeypatch, float64, op, prepared):
    """Prepared and unprepared calls at a Python float x (a float tangent where the
    operator takes one) run the runner: floats back, torch's own values, f run once
    per call."""
    f, runs = _counted()
    x, t = 0.7, 1.3
    args = (t,) if op in ("jvp", "vjp", "hvp") else ()
    fn = getattr(di, op)
    prep = None
    if prepared:
        prep = getattr(di, f"prepare_{OPS[op].family}")(f, B, x, *args)
    for _ in range(2):  # (an unprepared f keeps its own plan by its second call)
        fn(f, B, x, *args, prep=prep)
    _general_path_fails(monkeypatch)
    runs[0] = 0
    want = _own(op, torch.tensor(x), torch.tensor(t))
    for _ in range(3):
        got = fn(f, B, x, *args, prep=prep)
        got = got if isinstance(got, tuple) else (got,)
        assert all(type(a) is float for a in got)
        np.testing.assert_allclose(got, [w.item() for w in want], rtol=1e-12)
    assert runs[0] == 3


def test_a_python_float_follows_the_default_dtype(monkeypatch):
    """The runner makes x in torch's default float dtype of each call, as the general
    path does: float32 values, then float64 ones, from one preparation."""
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        prep = di.prepare_second_derivative(_curve, B, 0.7)
        _general_path_fails(monkeypatch)
        for dtype in (torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            got = di.second_derivative(_curve, B, 0.7, prep=prep)
            want = _own("second_derivative", torch.tensor(0.7, dtype=dtype))[0].item()
            assert got == want  # the same float operations in the same dtype
        assert got != di.second_derivative(_curve, B, np.float32(0.7).item())  # (float64 now)
    finally:
        torch.set_default_dtype(before)


def test_a_python_float_result_an_outer_pass_sees_stays_a_tensor(monkeypatch, float64):
    """f closing over a tensor that requires grad: the runner's result at a float x
    stays on its graph (as the general path gives it), with torch's own derivative."""
    p = torch.tensor(1.5, requires_grad=True)

    def f(x):
        return p * torch.sin(x) * x**2

    prep = di.prepare_second_derivative(f, B, 0.7)
    _general_path_fails(monkeypatch)
    got = di.second_derivative(f, B, 0.7, prep=prep)
    assert isinstance(got, torch.Tensor) and got.requires_grad
    (dp,) = torch.autograd.grad(got, p)
    want = _own("second_derivative", torch.tensor(0.7))[0]
    np.testing.assert_allclose(dp.item(), want.item(), rtol=1e-12)  # f is linear in p
    np.testing.assert_allclose(got.item(), 1.5 * want.item(), rtol=1e-12)


def test_a_python_float_with_a_vector_f_hands_over_once(float64):
    """A vector f of a float x: the runner hands over (the general path's forward
    mode), f runs once per call from then on, NumPy back with the closed form."""
    runs = [0]

    def vec(x):
        runs[0] += 1
        return torch.stack([torch.sin(x), x * x])

    for _ in range(3):
        di.derivative(vec, B, 0.3)
    runs[0] = 0
    for _ in range(3):
        got = di.derivative(vec, B, 0.3)
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, [np.cos(0.3), 0.6], rtol=1e-12)
    assert runs[0] == 3


# ---------------------------------------------------------------------- has_aux

X = np.array([0.3, -0.7, 1.1, 0.2, 0.9, -1.3])
V = np.array([1.0, 0.5, -2.0, 0.25, -0.4, 0.8])


def _aux_fs():
    runs = [0]

    def s_aux(x):
        runs[0] += 1
        return (torch.sin(x) * x**2).sum(), {"c": torch.cos(x), "n": 3}

    def v_aux(x):
        runs[0] += 1
        return torch.sin(x) * x**2, {"c": torch.cos(x), "n": 3}

    return s_aux, v_aux, runs


def _aux_own(op, x, t):
    """torch.func's own transform of f without its aux, for ``op``."""
    fn = torch.func
    s, v = (lambda x: (torch.sin(x) * x**2).sum()), (lambda x: torch.sin(x) * x**2)
    parts = {"gradient": fn.grad(s)(x), "jvp": fn.jvp(v, (x,), (t,))[1]}
    parts["vjp"] = fn.vjp(v, x)[1](t)[0]
    parts["hvp"] = fn.jvp(fn.grad(s), (x,), (t,))[1]
    parts["value"] = s(x) if OPS[op].family == "gradient" else v(x)
    return pick(op, parts)


AUX_OPS = ("gradient", "value_and_gradient", "jvp", "value_and_jvp", "vjp", "value_and_vjp")
AUX_OPS += ("hvp", "gradient_and_hvp")


def _leaves(r):
    return [a.numpy() if hasattr(a, "numpy") else a for a in (r if type(r) is tuple else (r,))]


@pytest.mark.parametrize("op", AUX_OPS)
@pytest.mark.parametrize("kind", ["tensor", "numpy"])
@pytest.mark.parametrize("prepared", [True, False])
def test_has_aux_calls_run_the_runner(monkeypatch, op, kind, prepared):
    """has_aux=True, prepared and unprepared, a tensor or a NumPy x: the runner answers
    with torch.func's own result and aux (off the call's graph), f run once per call."""
    s_aux, v_aux, runs = _aux_fs()
    f = s_aux if op in ("gradient", "value_and_gradient", "hvp", "gradient_and_hvp") else v_aux
    x, t = (X.copy(), V.copy()) if kind == "numpy" else (torch.tensor(X), torch.tensor(V))
    args = () if "gradient" in op and "hvp" not in op else (t,)
    fn = getattr(di, op)
    prep = None
    if prepared:
        prep = getattr(di, f"prepare_{OPS[op].family}")(f, B, x, *args, has_aux=True)
    fn(f, B, x, *args, prep=prep, has_aux=True)  # (an unprepared call keeps its plan)
    _general_path_fails(monkeypatch)
    want = _aux_own(op, torch.tensor(X), torch.tensor(V))
    runs[0] = 0
    for _ in range(2):
        got, aux = fn(f, B, x, *args, prep=prep, has_aux=True)
        for a, w in zip(_leaves(got), _leaves(want), strict=True):
            if kind == "numpy":
                assert type(a) is np.ndarray
            np.testing.assert_allclose(a, w, rtol=1e-12)
        assert aux["n"] == 3 and type(aux["c"]) is torch.Tensor
        assert not aux["c"].requires_grad
        np.testing.assert_allclose(aux["c"].numpy(), np.cos(X), rtol=1e-15)
    assert runs[0] == 2


def test_has_aux_runner_keeps_an_aux_an_outer_pass_sees(monkeypatch):
    """An aux computed from a tensor an outer pass differentiates stays on its graph;
    one computed from x alone does not (settled as the general path settles it)."""
    p = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)

    def f(x):
        return (torch.sin(x) * x).sum(), (p * x.sum(), torch.cos(x))

    x = torch.tensor(X)
    prep = di.prepare_gradient(f, B, x, has_aux=True)
    _general_path_fails(monkeypatch)
    g, (outer, own) = di.gradient(f, B, x, prep=prep, has_aux=True)
    np.testing.assert_allclose(g.numpy(), (torch.cos(x) * x + torch.sin(x)).numpy(), rtol=1e-12)
    assert outer.requires_grad and not own.requires_grad
    (dp,) = torch.autograd.grad(outer, p)
    np.testing.assert_allclose(dp.item(), X.sum(), rtol=1e-12)  # closed form


def test_has_aux_runner_explains_an_output_that_is_no_pair(monkeypatch):
    """f that stops returning a pair once the runner takes its calls: the runner
    raises the general path's error."""
    pair = [True]

    def f(x):
        y = (x**2).sum()
        return (y, None) if pair[0] else y

    x = torch.tensor(X)
    for _ in range(2):
        di.gradient(f, B, x, has_aux=True)
    _general_path_fails(monkeypatch)
    pair[0] = False
    with pytest.raises(di.DiffifaceTypeError, match=r"has_aux=True: f must return a pair"):
        di.gradient(f, B, x, has_aux=True)


# ------------------------------------------------------------- f made per call


def _maker(runs):
    def make(c):
        def f(x, scale=c):  # (a default and a cell, both read at each call)
            runs[0] += 1
            return c * scale * (torch.sin(x) * x**2).sum()

        return f

    return make


def _maker_v(runs):
    def make(c):
        def f(x):
            runs[0] += 1
            return c * torch.sin(x) * x**2

        return f

    return make


def _per_call_own(op, f, x, t):
    """torch's own transform of f at x (tangent t), for ``op``: the parts it declares."""
    g = torch.func.grad(f)
    parts = {
        "value": lambda: f(x),
        "gradient": lambda: g(x),
        "jvp": lambda: torch.func.jvp(f, (x,), (t,))[1],
        "vjp": lambda: torch.func.vjp(f, x)[1](t)[0],
        "hvp": lambda: torch.func.jvp(g, (x,), (t,))[1],
    }
    return pick(op, {part: parts[part]() for part in OPS[op].returns})


@pytest.mark.parametrize("op", ["gradient", "value_and_gradient", "jvp", "vjp", "hvp"])
@pytest.mark.parametrize("kind", ["tensor", "numpy", "float"])
def test_a_closure_made_per_call_runs_its_codes_runner(monkeypatch, op, kind, float64):
    """Closures made anew per call run the runner of their code, each with its own
    captured value (a closure over another value gives that value's derivative), f run
    once per call; against torch's own transform of the same closure."""
    runs = [0]
    scalar = op in ("gradient", "value_and_gradient", "hvp")
    make = _maker(runs) if scalar else _maker_v(runs)
    x, t = (X.copy(), V.copy()) if kind == "numpy" else (torch.tensor(X), torch.tensor(V))
    if kind == "float":
        x, t = 0.7, 1.3
    args = () if "gradient" in op else (t,)
    fn = getattr(di, op)
    fn(make(2.0), B, x, *args)  # (the general path, then the code's plan is kept)
    _general_path_fails(monkeypatch)
    runs[0] = 0
    xt, tt = torch.as_tensor(x), torch.as_tensor(t)
    kind_of = {"tensor": torch.Tensor, "numpy": np.ndarray, "float": float}[kind]
    for c in (3.0, -0.5, 2.0):
        got = fn(make(c), B, x, *args)
        counted = runs[0]
        own = _per_call_own(op, make(c), xt, tt)
        runs[0] = counted  # (the reference's runs are not the call's)
        assert all(type(a) is kind_of for a in (got if type(got) is tuple else (got,)))
        for a, w in zip(_leaves(got), _leaves(own), strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-12)
    assert runs[0] == 3


def test_closures_of_one_code_on_an_outer_graph_stay_on_it(monkeypatch):
    """A closure made per call over a tensor an outer pass differentiates: the code's
    runner keeps the result on that tensor's graph, with torch's own derivative."""
    x = torch.tensor(X)
    make = _maker_v([0])
    warm = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)  # (cells of its kinds:
    di.vjp(make(warm), B, x, torch.tensor(V))  # a closure over a float is watched anew)
    _general_path_fails(monkeypatch)
    p = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    g = di.vjp(make(p), B, x, torch.tensor(V))
    assert g.requires_grad
    (dp,) = torch.autograd.grad(g.sum(), p)
    want = torch.func.vjp(make(1.0), x)[1](torch.tensor(V))[0].sum()
    np.testing.assert_allclose(dp.item(), want.item(), rtol=1e-12)  # g is linear in p


def test_closures_per_call_that_nest_a_jvp_run_f_once_per_call():
    """torch nests no dual levels: once a closure of a code that runs a jvp itself fails
    on dual numbers, the closures of that code made later take the general path before
    running f (f once per call), with the closed form 2 c x."""
    runs = [0]
    one = torch.tensor(1.0, dtype=torch.float64)
    x, v = torch.tensor(4.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)

    def make(c):
        def outer(x):
            runs[0] += 1
            return c * x * di.jvp(lambda y: x * y, B, one, one)

        return outer

    for _ in range(3):
        di.jvp(make(1.0), B, x, v)
    runs[0] = 0
    for c in (1.0, 2.0, 3.0):
        assert di.jvp(make(c), B, x, v).item() == pytest.approx(8.0 * c, rel=1e-12)
    assert runs[0] == 3


# ------------------------------------------------------------- Tangents of a vjp


@pytest.mark.parametrize("op", ["vjp", "value_and_vjp"])
@pytest.mark.parametrize("prepared", [True, False])
def test_vjp_tangents_run_the_runner(monkeypatch, op, prepared):
    """vjp with a Tangents of k: the runner answers (one forward pass, one batched
    backward), f run once per call, each result torch.func's own."""
    _, v_aux, runs = _aux_fs()

    def f(x):
        return v_aux(x)[0]

    x = torch.tensor(X)
    ws = (torch.tensor(V), torch.cos(torch.tensor(V)), torch.tensor(X) ** 2)
    prep = di.prepare_vjp(f, B, x, di.Tangents(*ws)) if prepared else None
    for _ in range(2):  # (an unprepared f keeps its own plan by its second call)
        getattr(di, op)(f, B, x, di.Tangents(*ws), prep=prep)
    _general_path_fails(monkeypatch)
    y, pb = torch.func.vjp(lambda x: torch.sin(x) * x**2, torch.tensor(X))
    runs[0] = 0
    for _ in range(2):
        got = getattr(di, op)(f, B, x, di.Tangents(*ws), prep=prep)
        if op == "value_and_vjp":
            np.testing.assert_allclose(got[0].numpy(), y.numpy(), rtol=1e-12)
            got = got[1]
        assert type(got) is di.Tangents and len(got) == 3
        for g, w in zip(got, ws, strict=True):
            np.testing.assert_allclose(g.numpy(), pb(w)[0].numpy(), rtol=1e-12)
    assert runs[0] == 2
    assert torch.equal(x, torch.tensor(X))
