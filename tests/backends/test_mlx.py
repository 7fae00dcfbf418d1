"""AutoMLX: every operator against closed forms on MLX and NumPy arrays, second order in
every combination, preparation, and its errors (float64 off the CPU, complex128, MLX
arrays given to another backend). The shared operator tests and the consistency matrix
run on it too (tests/conftest.py). MLX's float64 sin, cos and exp are float32-accurate
(tests/helpers.py: MLX_FLOAT64), so float64 results are held to 1e-6."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, MLX_FLOAT64, counted, python_calls

import diffiface as di

pytestmark = pytest.mark.skipif(not HAVE["mlx"], reason="mlx missing")

if HAVE["mlx"]:
    import mlx.core as mx

X = np.array([0.5, -1.2, 2.0])
V = np.array([1.0, 0.5, -2.0])
TOL = MLX_FLOAT64


def _f(x):  # sum(sin(x) x^2) + x0 x1 (indexing: MLX has no JVP of its pullback)
    return (mx.sin(x) * x**2).sum() + x[0] * x[1]


def _grad(x):
    g = np.sin(x) * 2 * x + np.cos(x) * x**2
    return g + np.array([x[1], x[0], 0.0])


def _hess(x):
    h = np.diag(2 * np.sin(x) + 4 * x * np.cos(x) - x**2 * np.sin(x))
    h[0, 1] = h[1, 0] = 1.0
    return h


def _field(x):  # R^3 -> R^2
    return mx.stack([mx.exp(x[0]) * x[1], x[2] ** 3])


def _jac(x):
    return np.array([[np.exp(x[0]) * x[1], np.exp(x[0]), 0.0], [0.0, 0.0, 3 * x[2] ** 2]])


def _mx(a, dtype=np.float64):
    a = np.asarray(a, dtype=dtype)
    return mx.array(a, dtype=mx.float64 if dtype == np.float64 else mx.float32)


def _close(got, want, tol=TOL):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["mlx", "numpy"])
def test_every_operator_against_closed_forms(kind):
    b = di.AutoMLX()
    x, v = (_mx(X), _mx(V)) if kind == "mlx" else (X, V)
    want = mx.array if kind == "mlx" else np.ndarray
    g = di.gradient(_f, b, x)
    assert isinstance(g, want) and np.asarray(g).dtype == np.float64
    _close(g, _grad(X))
    y, g = di.value_and_gradient(_f, b, x)
    _close(y, (np.sin(X) * X**2).sum() + X[0] * X[1])
    _close(g, _grad(X))
    _close(di.hvp(_f, b, x, v), _hess(X) @ V)
    _close(di.hessian(_f, b, x), _hess(X))
    _close(di.value_gradient_and_hessian(_f, b, x)[2], _hess(X))
    _close(di.jacobian(_field, b, x), _jac(X))
    _close(di.jvp(_field, b, x, v), _jac(X) @ V)
    w = np.array([0.3, -1.0])
    _close(di.vjp(_field, b, x, _mx(w) if kind == "mlx" else w), w @ _jac(X))
    s = _mx(0.7) if kind == "mlx" else np.asarray(0.7)
    _close(di.derivative(lambda t: mx.sin(t) * t, b, s), np.cos(0.7) * 0.7 + np.sin(0.7))
    want2 = 2 * np.cos(0.7) - 0.7 * np.sin(0.7)
    _close(di.second_derivative(lambda t: mx.sin(t) * t, b, s), want2)


def test_batched_jacobian_and_float32():
    xs = np.array([[0.1, 0.2], [0.3, -0.4], [1.5, 0.5]], dtype=np.float32)
    J = di.batched_jacobian(lambda x: mx.sin(x) * x[:, :1], di.AutoMLX(), _mx(xs, np.float32))
    assert np.asarray(J).dtype == np.float32 and J.shape == (3, 2, 2)
    for i, (a, c) in enumerate(xs.astype(np.float64)):
        want = np.array([[np.cos(a) * a + np.sin(a), 0.0], [np.sin(c), np.cos(c) * a]])
        _close(J[i], want, 2e-5)


@pytest.mark.parametrize("mode", ["forward", "reverse", None])
def test_tangents_pytrees_and_aux(mode):
    b = di.AutoMLX(mode=mode)
    vs = [V, np.array([0.0, 1.0, 0.0]), np.array([2.0, 0.0, 1.0])]
    t = di.jvp(_field, b, _mx(X), di.Tangents(*(_mx(v) for v in vs)))
    for got, v in zip(t, vs, strict=True):
        _close(got, _jac(X) @ v)
    hv = di.hvp(_f, b, _mx(X), di.Tangents(*(_mx(v) for v in vs)))
    for got, v in zip(hv, vs, strict=True):
        _close(got, _hess(X) @ v)
    p = {"a": _mx(X), "b": [_mx(0.7)]}

    def tree_f(p):  # a pytree in, a pytree out with aux
        y = (mx.sin(p["a"]) * p["b"][0]).sum()
        return y, {"twice": 2 * y}

    (g, aux) = di.gradient(tree_f, b, p, has_aux=True)
    _close(g["a"], np.cos(X) * 0.7)
    _close(g["b"][0], np.sin(X).sum())
    _close(aux["twice"], 2 * 0.7 * np.sin(X).sum())
    y = di.jacobian(lambda x: {"u": mx.sin(x), "v": x[:2] ** 2}, b, _mx(X))
    _close(y["u"], np.diag(np.cos(X)))
    _close(y["v"], np.array([[2 * X[0], 0, 0], [0, 2 * X[1], 0]]))


COMBOS = [(o, i) for o in ("forward", "reverse") for i in ("forward", "reverse")]


@pytest.mark.parametrize(("outer", "inner"), COMBOS)
def test_second_order_in_every_combination(outer, inner):
    b = di.second_order(di.AutoMLX(mode=outer), di.AutoMLX(mode=inner))

    def f(x):  # no indexing: every combination runs as named (MLX has no JVP of scatter)
        return (mx.sin(x) * x**2).sum() + (x**2).sum() ** 2

    def hess(x):
        return np.diag(2 * np.sin(x) + 4 * x * np.cos(x) - x**2 * np.sin(x)) + (
            4 * (x**2).sum() * np.eye(3) + 8 * np.outer(x, x)
        )

    _close(di.hessian(f, b, _mx(X)), hess(X))
    _close(di.hvp(f, b, _mx(X), _mx(V)), hess(X) @ V)
    _close(di.hvp(f, b, X, V), hess(X) @ V)  # NumPy in, NumPy out


def test_second_order_of_an_f_that_indexes_takes_reverse_mode():
    # forward over reverse needs the JVP of scatter (the pullback of x[0]), which MLX
    # lacks: the plain backend goes reverse over reverse; a forward outer named
    # explicitly is a clear error
    _close(di.hessian(_f, di.AutoMLX(), _mx(X)), _hess(X))
    unnamed = di.second_order(di.AutoMLX(), di.AutoMLX())  # forward over reverse first
    _close(di.hessian(_f, unnamed, _mx(X)), _hess(X))
    _close(di.hessian(_f, unnamed, _mx(X), chunk_size=2), _hess(X))  # chunked: the same
    b = di.second_order(di.AutoMLX(mode="forward"), di.AutoMLX())
    with pytest.raises(di.DiffifaceTypeError, match="cannot run in forward mode"):
        di.hessian(_f, b, _mx(X))


def test_finite_differences_over_mlx():
    # differences of MLX's gradient: its float32-accurate sin and cos (errors ~1e-8) over
    # the float64 step (~6e-6) leave about 3e-3 of the Hessian (measured 2.6e-3)
    b = di.second_order(di.AutoFiniteDifferences(), di.AutoMLX())
    _close(di.hessian(_f, b, X), _hess(X), 1e-2)
    _close(di.hvp(_f, b, X, V), _hess(X) @ V, 1e-2)


@pytest.mark.parametrize("op", ["gradient", "hvp", "jacobian", "jvp"])
def test_prepared_calls_match_unprepared(op):
    b, x = di.AutoMLX(), _mx(X)
    f = _field if op in ("jacobian", "jvp") else _f
    t = (_mx(V),) if op in ("hvp", "jvp") else ()
    prep = getattr(di, "prepare_" + op)(f, b, x, *t)
    want = {"gradient": _grad(X), "hvp": _hess(X) @ V, "jacobian": _jac(X), "jvp": _jac(X) @ V}
    for _ in range(2):
        _close(getattr(di, op)(f, b, x, *t, prep=prep), want[op])


def test_mlx_inside_mx_grad():
    # an outer mx.grad differentiates through diffiface's gradient (x an mx.array)
    def outer(s):
        return di.gradient(lambda x: (mx.sin(s * x)).sum(), di.AutoMLX(), _mx(X)).sum()

    got = mx.grad(outer)(_mx(1.3))
    _close(got, (np.cos(1.3 * X) - 1.3 * X * np.sin(1.3 * X)).sum())


def test_float64_off_the_cpu_is_a_clear_error(monkeypatch):
    from diffiface.backends.mlx import errors

    monkeypatch.setattr(errors, "on_cpu", lambda: False)
    with pytest.raises(di.DiffifaceValueError, match=r"float64 on the CPU only.*mx\.cpu"):
        di.gradient(_f, di.AutoMLX(), X)
    g = di.gradient(_f, di.AutoMLX(), X.astype(np.float32))  # float32 runs anywhere
    _close(g, _grad(X), 2e-5)


def test_complex128_is_refused_not_truncated():
    with pytest.raises(di.DiffifaceValueError, match=r"complex128.*complex64"):
        di.gradient(lambda z: mx.abs(z).sum(), di.AutoMLX(), np.ones(2, np.complex128))


@pytest.mark.parametrize("other", ["AutoJax", "AutoTorch", "AutoAutograd", "AutoFiniteDifferences"])
def test_mlx_arrays_given_to_another_backend(other):
    module = {"AutoJax": "jax", "AutoTorch": "torch", "AutoAutograd": "autograd"}.get(other)
    if module is not None and not HAVE[module]:
        pytest.skip(f"{module} missing")
    # they cross the bridge (diffiface/backends/mlx/bridge.py), as torch tensors into
    # AutoJax do: the other backend computes, the results come back as MLX arrays
    g = di.gradient(lambda x: (x**2).sum(), getattr(di, other)(), _mx(X))
    assert isinstance(g, mx.array)
    _close(g, 2 * X, 1e-5 if other == "AutoFiniteDifferences" else 1e-6)


def test_f_of_another_framework_names_its_backend():
    if not HAVE["torch"]:
        pytest.skip("torch missing")
    import torch

    with pytest.raises(di.DiffifaceTypeError, match=r"f calls torch functions.*AutoTorch\(\)"):
        di.gradient(lambda x: torch.sum(x**2), di.AutoMLX(), X)
    with pytest.raises(di.DiffifaceTypeError, match=r"f calls mlx functions.*AutoMLX\(\)"):
        di.gradient(lambda x: mx.sum(x**2), di.AutoTorch(), X)


def test_a_gradient_runs_f_once_per_call_and_compiles_nothing():
    # prepared or not, one mx.value_and_grad of f per call (f's Python runs once: MLX
    # traces it anew); nothing compiled, so an array f closes over is read at each call
    f, calls = counted(_f)
    b, x = di.AutoMLX(), _mx(X)
    prep = di.prepare_gradient(f, b, x)
    for call in (lambda: di.gradient(f, b, x, prep=prep), lambda: di.gradient(f, b, x)):
        call()
        before = calls[0]
        _close(call(), _grad(X))
        assert calls[0] == before + 1
    scale = [_mx(1.0)]

    def scaled(x):
        return scale[0] * _f(x)

    prep = di.prepare_gradient(scaled, b, x)
    scale[0] = _mx(2.0)
    _close(di.gradient(scaled, b, x, prep=prep), 2 * _grad(X))


def test_a_prepared_gradient_under_mx_grad_through_a_closure():
    # (a compiled runner took the closed-over s as a constant: the outer derivative was 0)
    def outer(s):
        def f(x):
            return (mx.sin(s * x)).sum()

        prep = di.prepare_gradient(f, di.AutoMLX(), _mx(X))
        return di.gradient(f, di.AutoMLX(), _mx(X), prep=prep).sum()

    got = mx.grad(outer)(_mx(1.3))
    _close(got, (np.cos(1.3 * X) - 1.3 * X * np.sin(1.3 * X)).sum())


@pytest.mark.parametrize("strategy", ["reverse_over_reverse", "forward_over_reverse", "auto"])
def test_fixed_params_under_mx_grad(strategy):
    # d/dp sum(g(p)^2), g = d/dx sum(sin(p x) x), by MLX's own nesting of diffiface's call
    def f(x, p):
        return (mx.sin(p * x) * x).sum()

    def loss(p):
        g = di.gradient(di.FixedParams(f, p, strategy=strategy), di.AutoMLX(), _mx(X))
        return (g**2).sum()

    def loss_np(p):
        return ((np.cos(p * X) * p * X + np.sin(p * X)) ** 2).sum()

    h = 1e-6  # float64 central differences of the closed-form loss
    want = (loss_np(1.3 + h) - loss_np(1.3 - h)) / (2 * h)
    _close(mx.grad(loss)(_mx(1.3)), want, 1e-5)


W = np.array([0.3, -1.0])
FIRST_AND_SECOND = {  # operator: (f, its tangent, its results' closed forms)
    "jvp": (_field, V, lambda: [_jac(X) @ V]),
    "value_and_jvp": (_field, V, lambda: [[np.exp(X[0]) * X[1], X[2] ** 3], _jac(X) @ V]),
    "vjp": (_field, W, lambda: [W @ _jac(X)]),
    "value_and_vjp": (_field, W, lambda: [[np.exp(X[0]) * X[1], X[2] ** 3], W @ _jac(X)]),
    "hvp": (_f, V, lambda: [_hess(X) @ V]),
    "gradient_and_hvp": (_f, V, lambda: [_grad(X), _hess(X) @ V]),
    "value_gradient_and_hvp": (
        _f,
        V,
        lambda: [(np.sin(X) * X**2).sum() + X[0] * X[1], _grad(X), _hess(X) @ V],
    ),
}


@pytest.mark.parametrize("kind", ["mlx", "numpy"])
@pytest.mark.parametrize("op", list(FIRST_AND_SECOND))
def test_jvp_vjp_and_hvp_run_as_one_mlx_call(op, kind):
    # prepared or not, a warm call is MLX's own (mx.jvp, mx.vjp, mx.vjp of the
    # gradient): f runs once, and a few Python calls in diffiface (the general path:
    # 57-156, and vjp and hvp ran f twice)
    fn, t, want = FIRST_AND_SECOND[op]
    f, calls = counted(fn)
    b = di.AutoMLX()
    x, t = (_mx(X), _mx(t)) if kind == "mlx" else (X, t)
    family = {"value_and_jvp": "jvp", "value_and_vjp": "vjp"}.get(op, op.split("_")[-1])
    prep = getattr(di, f"prepare_{family}")(f, b, x, t)
    call = getattr(di, op)
    for run in (lambda: call(f, b, x, t, prep=prep), lambda: call(f, b, x, t)):
        run()
        before = calls[0]
        got = run()
        assert calls[0] == before + 1
        got = got if isinstance(got, tuple) else (got,)
        assert all(isinstance(g, mx.array if kind == "mlx" else np.ndarray) for g in got)
        for g, w in zip(got, want(), strict=True):
            _close(g, w)
        assert python_calls(run) <= (9 if kind == "mlx" else 16)


def test_a_tangent_unlike_x_takes_the_general_path():
    # the runners hand over a tangent of another dtype or kind: the general path
    # explains a dtype unlike x's, and converts a NumPy cotangent, as before
    b, x = di.AutoMLX(), _mx(X)
    prep = di.prepare_jvp(_field, b, x, _mx(V))
    for call in (
        lambda: di.jvp(_field, b, x, _mx(V, np.float32), prep=prep),
        lambda: di.hvp(_f, b, x, _mx(V, np.float32)),
    ):
        with pytest.raises(di.DiffifaceValueError, match="must have the dtype of x"):
            call()
    _close(di.vjp(_field, b, x, W), W @ _jac(X))


def _runs_of_f_in_a_warm_call(fn, call) -> int:
    f, calls = counted(fn)
    call(f)
    before = calls[0]
    call(f)
    return calls[0] - before


def test_jacobians_and_hessians_run_f_once_per_pass():
    # one mx.vmap over the identity, also for an f with aux: a warm call runs f at x
    # for its aux, then one pass, which gives a Hessian's gradient too (before: one pass
    # per row, and per Tangents direction; a Hessian ran f for its gradient too)
    b, x = di.AutoMLX(), _mx(X)
    got, aux = di.jacobian(lambda x: (_field(x), 2 * x), b, x, has_aux=True)
    _close(got, _jac(X))
    _close(aux, 2 * X)
    got, aux = di.hessian(lambda x: (_f(x), 2 * x), b, x, has_aux=True)
    _close(got, _hess(X))
    _close(aux, 2 * X)
    vs = di.Tangents(_mx(V), _mx(2 * V), _mx(-V))
    for k, got in zip((1, 2, -1), di.jvp(_field, b, x, vs), strict=True):
        _close(got, k * _jac(X) @ V)
    for fn, op, runs in ((_field, "jacobian", 2), (_f, "hessian", 2)):
        f, calls = counted(lambda x, fn=fn: (fn(x), 2 * x))
        prep = getattr(di, f"prepare_{op}")(f, b, x, has_aux=True)
        before = calls[0]
        getattr(di, op)(f, b, x, has_aux=True, prep=prep)
        assert calls[0] == before + runs
    # (a Tangents of MLX arrays: the runner's one vmapped mx.jvp, f's value not asked)
    assert _runs_of_f_in_a_warm_call(_field, lambda f: di.jvp(f, b, x, vs)) == 1
    assert _runs_of_f_in_a_warm_call(_field, lambda f: di.value_and_jvp(f, b, x, vs)) == 2


@pytest.mark.parametrize("op", ["gradient", "jvp", "vjp", "hvp"])
def test_a_closure_made_per_call_runs_as_one_mlx_call(op):
    # a new closure of the same code each call takes its code's runner, built for that
    # closure (its own constant read, nothing kept of another object): a few Python
    # calls in diffiface (the general path: 83-122)
    b, x = di.AutoMLX(), _mx(X)
    fn, t, want = {
        "gradient": (_f, None, _grad(X)),
        "jvp": (_field, V, _jac(X) @ V),
        "vjp": (_field, W, W @ _jac(X)),
        "hvp": (_f, V, _hess(X) @ V),
    }[op]
    args = (x,) if t is None else (x, _mx(t))

    def made(c):
        return lambda x: c * fn(x)

    for c in (1.0, 2.0, -3.0):
        _close(getattr(di, op)(made(c), b, *args), c * want)
    assert python_calls(lambda: getattr(di, op)(made(2.0), b, *args)) <= 15


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_batched_jacobian_is_one_vmapped_pass(mode):
    # samples of shape (2, 2) to outputs of 3: against each sample's own jacobian;
    # a warm call runs f once: one pass, which gives f(x) too (before: f at x, then one
    # pass; before that one per input or output entry)
    def f(x):
        flat = x.reshape(x.shape[0], 4)
        return mx.stack([mx.sin(flat[:, 0]) * flat[:, 1], flat[:, 2] ** 2, flat.sum(1)], 1)

    xs = np.linspace(-1.0, 1.0, 12).reshape(3, 2, 2)
    b = di.AutoMLX(mode=mode)
    got = di.batched_jacobian(f, b, _mx(xs))
    assert got.shape == (3, 3, 2, 2)
    for i in range(3):
        _close(got[i], di.jacobian(lambda s: f(s[None])[0], b, _mx(xs[i])))
    g, calls = counted(f)
    prep = di.prepare_batched_jacobian(g, b, _mx(xs))
    before = calls[0]
    di.batched_jacobian(g, b, _mx(xs), prep=prep)
    assert calls[0] == before + 1


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("op", ["jvp", "value_and_jvp", "vjp", "hvp", "gradient_and_hvp"])
def test_tangents_of_mlx_arrays_run_as_one_vmapped_call(op, stacked):
    # k tangents, apart or stacked: one mx.vmap of MLX's call, results given back as the
    # tangents came; under 20 Python calls in diffiface (the general path: 40-90)
    b, x = di.AutoMLX(), _mx(X)
    fn, vs, each = {
        "jvp": (_field, [V, 2 * V, -V], lambda v: _jac(X) @ v),
        "value_and_jvp": (_field, [V, 2 * V], lambda v: _jac(X) @ v),
        "vjp": (_field, [W, -W, 3 * W], lambda w: w @ _jac(X)),
        "hvp": (_f, [V, 2 * V, -V], lambda v: _hess(X) @ v),
        "gradient_and_hvp": (_f, [V, -V], lambda v: _hess(X) @ v),
    }[op]
    t = di.Tangents.stacked(_mx(np.stack(vs))) if stacked else di.Tangents(*map(_mx, vs))
    family = op.split("_")[-1]
    prep = getattr(di, f"prepare_{family}")(fn, b, x, t)
    for call in (
        lambda: getattr(di, op)(fn, b, x, t, prep=prep),
        lambda: getattr(di, op)(fn, b, x, t),
    ):
        out = call()
        ts = out[-1] if isinstance(out, tuple) else out
        if stacked:
            assert isinstance(ts.stack, mx.array)
        for got, v in zip(ts, vs, strict=True):
            _close(got, each(v))
        if op == "gradient_and_hvp":
            _close(out[0], _grad(X))
        assert python_calls(call) <= 20


def test_stacked_results_of_the_general_path_are_mlx_arrays():
    # a pytree x takes the general path: its stacked results were NumPy (float64)
    b = di.AutoMLX()
    x = {"a": _mx(X), "b": _mx(V)}
    vs = {"a": _mx(np.stack([V, -V])), "b": _mx(np.stack([X, 2 * X]))}
    out = di.jvp(lambda p: mx.sin(p["a"]) * p["b"], b, x, di.Tangents.stacked(vs))
    assert isinstance(out.stack, mx.array) and out.stack.dtype == mx.float64
    for k, (va, vb) in enumerate(((V, X), (-V, 2 * X))):
        _close(out[k], np.cos(X) * va * V + np.sin(X) * vb)
