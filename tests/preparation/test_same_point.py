"""Same-point preparations: prepare_hvp_same_point / prepare_jvp_same_point /
prepare_vjp_same_point give the closed-form results at their x (one array, NumPy into a
framework, Tangents, a pytree), do the x-only work once (counted), and refuse another
x, never giving a stale result."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_BACKENDS, HAVE
from helpers import native, rounding, to_numpy, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])
DIRECTIONS = [np.array([1.0, 0.5, -2.0]), np.array([0.0, 1.0, 0.0]), np.array([-0.3, 0.2, 0.9])]
W = np.array([0.7, -1.3])


def _loss(ns):
    return lambda x: (ns.sin(x) * x**2).sum() + 0.5 * x.sum() ** 2


def _value(x):
    return np.sum(np.sin(x) * x**2) + 0.5 * np.sum(x) ** 2


def _grad(x):
    return np.cos(x) * x**2 + 2 * x * np.sin(x) + np.sum(x)


def _hessian(x):
    diag = -np.sin(x) * x**2 + 4 * x * np.cos(x) + 2 * np.sin(x)
    return np.diag(diag) + np.ones((x.size, x.size))


def _field(ns):
    return lambda x: ns.sin(x[:2]) * x[1:]


def _jac(x):
    j = np.zeros((2, 3))
    j[[0, 1], [0, 1]] = np.cos(x[:2]) * x[1:]
    j[[0, 1], [1, 2]] = np.sin(x[:2])
    return j


def _tol(backend):
    """float64: AD to 1e-10; finite differences to 1e-4 (hvp: a one-sided outer level,
    about 1e-5 relative) or 1e-6 (first order, central); MLX's float64 sin and cos are
    float32-accurate (``helpers.rounding``)."""
    return 1e-4 if backend.framework == "finite_differences" else rounding(backend, 1e-10)


def _close(got, want, tol):
    np.testing.assert_allclose(to_numpy(got), want, rtol=tol, atol=tol)


def _strategies():
    """(backend, strategy): JAX's two, the kept map and the fused operator at the kept x
    where a call is dispatch bound (chosen by XLA's flop estimate); one for the others."""
    for p in ALL_BACKENDS:
        (backend,) = p.values
        names = ["kept map", "fused"] if backend.framework == "jax" else ["kept map"]
        for name in names:
            yield pytest.param(backend, name, id=f"{p.id}-{name}", marks=p.marks)


BACKEND_AND_STRATEGY = pytest.mark.parametrize("backend, strategy", list(_strategies()))


@pytest.fixture(autouse=True)
def _strategy(request, monkeypatch):
    strategy = (
        request.node.callspec.params.get("strategy") if hasattr(request.node, "callspec") else None
    )
    if strategy is not None and request.node.callspec.params["backend"].framework == "jax":
        from diffiface.backends.jax import same_point

        bound = 0 if strategy == "kept map" else np.inf
        monkeypatch.setattr(same_point, "DISPATCH_BOUND", bound)


def _point(backend, kind, a):
    return np.array(a) if kind == "numpy" else native(backend, a)


@pytest.mark.parametrize("kind", ["numpy", "native"])
@BACKEND_AND_STRATEGY
def test_hvp_family_at_the_point(backend, kind, strategy):
    f, x = _loss(xp(backend)), _point(backend, kind, X)
    prep = di.prepare_hvp_same_point(f, backend, x, _point(backend, kind, DIRECTIONS[0]))
    tol = _tol(backend)
    for d in DIRECTIONS:
        v = _point(backend, kind, d)
        _close(di.hvp(f, backend, x, v, prep=prep), _hessian(X) @ d, tol)
        g, hv = di.gradient_and_hvp(f, backend, x, v, prep=prep)
        _close(g, _grad(X), 1e-6)
        _close(hv, _hessian(X) @ d, tol)
        y, g, hv = di.value_gradient_and_hvp(f, backend, x, v, prep=prep)
        assert float(to_numpy(y)) == pytest.approx(_value(X), rel=rounding(backend, 1e-12))
        assert type(hv) is type(x)


@BACKEND_AND_STRATEGY
def test_hvp_tangents(backend, strategy):
    f, x = _loss(xp(backend)), native(backend, X)
    vs = di.Tangents(*(native(backend, d) for d in DIRECTIONS))
    prep = di.prepare_hvp_same_point(f, backend, x, vs)
    got = di.hvp(f, backend, x, vs, prep=prep)
    assert isinstance(got, di.Tangents) and len(got) == 3
    for hv, d in zip(got, DIRECTIONS, strict=True):
        _close(hv, _hessian(X) @ d, _tol(backend))
    with pytest.raises(di.MismatchError):  # prepared for Tangents: one tangent differs
        di.hvp(f, backend, x, vs[0], prep=prep)


@pytest.mark.parametrize("kind", ["numpy", "native"])
@BACKEND_AND_STRATEGY
def test_jvp_and_vjp_at_the_point(backend, kind, strategy):
    f, x = _field(xp(backend)), _point(backend, kind, X)
    tol = 1e-6 if backend.framework == "finite_differences" else rounding(backend, 1e-10)
    jprep = di.prepare_jvp_same_point(f, backend, x, _point(backend, kind, DIRECTIONS[0]))
    vprep = di.prepare_vjp_same_point(f, backend, x, _point(backend, kind, W))
    for d in DIRECTIONS:
        v = _point(backend, kind, d)
        _close(di.jvp(f, backend, x, v, prep=jprep), _jac(X) @ d, tol)
        y, t = di.value_and_jvp(f, backend, x, v, prep=jprep)
        _close(y, np.sin(X[:2]) * X[1:], rounding(backend, 1e-12))
        _close(t, _jac(X) @ d, tol)
    for w in (W, -2 * W):
        _close(di.vjp(f, backend, x, _point(backend, kind, w), prep=vprep), w @ _jac(X), tol)
        y, g = di.value_and_vjp(f, backend, x, _point(backend, kind, w), prep=vprep)
        _close(g, w @ _jac(X), tol)


@BACKEND_AND_STRATEGY
def test_jvp_and_vjp_tangents(backend, strategy):
    f, x = _field(xp(backend)), native(backend, X)
    tol = 1e-6 if backend.framework == "finite_differences" else rounding(backend, 1e-10)
    vs = di.Tangents(*(native(backend, d) for d in DIRECTIONS))
    ws = di.Tangents(native(backend, W), native(backend, -W))
    got = di.jvp(f, backend, x, vs, prep=di.prepare_jvp_same_point(f, backend, x, vs))
    for t, d in zip(got, DIRECTIONS, strict=True):
        _close(t, _jac(X) @ d, tol)
    got = di.vjp(f, backend, x, ws, prep=di.prepare_vjp_same_point(f, backend, x, ws))
    for g, w in zip(got, (W, -W), strict=True):
        _close(g, w @ _jac(X), tol)


@BACKEND_AND_STRATEGY
def test_pytree_x(backend, strategy):
    ns = xp(backend)
    f = lambda t: (ns.sin(t["a"]) * t["a"] ** 2).sum() * (t["b"] ** 2).sum()  # noqa: E731
    a, b = X[:2], np.array([0.5, -1.5])
    x = {"a": native(backend, a), "b": native(backend, b)}
    v = {"a": native(backend, np.array([1.0, -1.0])), "b": native(backend, np.array([2.0, 0.5]))}
    prep = di.prepare_hvp_same_point(f, backend, x, v)
    hv = di.hvp(f, backend, x, v, prep=prep)
    # closed form: f = p(a) q(b), H v = (p'' va q + p' q'.vb, p'.va q' + p q'' vb)
    p1 = np.cos(a) * a**2 + 2 * a * np.sin(a)
    p2 = -np.sin(a) * a**2 + 4 * a * np.cos(a) + 2 * np.sin(a)
    p, q, q1 = np.sum(np.sin(a) * a**2), np.sum(b**2), 2 * b
    va, vb = np.array([1.0, -1.0]), np.array([2.0, 0.5])
    _close(hv["a"], p2 * va * q + p1 * (q1 @ vb), _tol(backend))
    _close(hv["b"], q1 * (p1 @ va) + p * 2 * vb, _tol(backend))
    vs = di.Tangents(v, x)
    two = di.hvp(f, backend, x, vs, prep=di.prepare_hvp_same_point(f, backend, x, vs))
    want = di.hvp(f, backend, x, x)  # (the ordinary hvp, checked above along v)
    _close(two[0]["a"], to_numpy(hv["a"]), _tol(backend))
    _close(two[1]["b"], to_numpy(want["b"]), _tol(backend))


# ---- the x-only work happens once ----------------------------------------------------
@pytest.mark.parametrize("name", ["torch", "autograd"])
def test_eager_ad_runs_f_once_for_twenty_hvps(name):
    if not HAVE[name]:
        pytest.skip(f"{name} missing")
    backend = di.AutoTorch() if name == "torch" else di.AutoAutograd()
    calls, loss = [0], _loss(xp(backend))

    def f(x):
        calls[0] += 1
        return loss(x)

    x = native(backend, X)
    prep = di.prepare_hvp_same_point(f, backend, x, x)
    assert calls[0] == 1
    for d in DIRECTIONS * 7:
        _close(di.hvp(f, backend, x, native(backend, d), prep=prep), _hessian(X) @ d, 1e-10)
    assert calls[0] == 1
    field, g = _field(xp(backend)), [0]

    def h(x):
        g[0] += 1
        return field(x)

    jprep = di.prepare_jvp_same_point(h, backend, x, x)
    vprep = di.prepare_vjp_same_point(h, backend, x, native(backend, W))
    for _ in range(20):
        di.jvp(h, backend, x, x, prep=jprep)
        di.vjp(h, backend, x, native(backend, W), prep=vprep)
    assert g[0] == 2


def test_finite_differences_one_gradient_per_hvp():
    backend, calls, loss = di.AutoFiniteDifferences(), [0], _loss(np)

    def f(x):
        calls[0] += 1
        return loss(x)

    di.gradient(f, backend, X)
    per_gradient, calls[0] = calls[0], 0
    prep = di.prepare_hvp_same_point(f, backend, X, X)
    for d in (DIRECTIONS * 7)[:20]:
        di.hvp(f, backend, X, d, prep=prep)
    # f(x) and the gradient at x once, then one gradient per hvp (a central gradient: 2n)
    assert calls[0] == 1 + 21 * per_gradient
    calls[0] = 0
    di.hvp(f, backend, X, DIRECTIONS[0])
    assert calls[0] == 2 * per_gradient  # (an ordinary hvp: the gradients at x +- h v)


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
@pytest.mark.parametrize("kept", ["kept map", "fused"])
def test_jax_traces_once_per_signature(kept, monkeypatch):
    """Both strategies (the gradient's kept pullback; the fused hvp at the kept x, where
    dispatch bound) trace f at the first preparation only."""
    import jax.numpy as jnp

    from diffiface.backends.jax import same_point

    monkeypatch.setattr(same_point, "DISPATCH_BOUND", 0 if kept == "kept map" else np.inf)
    traces, loss = [0], _loss(jnp)

    def f(x):
        traces[0] += 1  # runs while JAX traces f
        return loss(x)

    backend, x = di.AutoJax(), jnp.asarray(X)
    prep = di.prepare_hvp_same_point(f, backend, x, x)
    after_prep = traces[0]
    assert after_prep >= 1
    for d in (DIRECTIONS * 7)[:20]:
        _close(di.hvp(f, backend, x, jnp.asarray(d), prep=prep), _hessian(X) @ d, 1e-10)
    assert traces[0] == after_prep
    x2 = x + 0.25  # a new point of the same signature: nothing is traced again
    prep2 = di.prepare_hvp_same_point(f, backend, x2, x)
    _close(di.hvp(f, backend, x2, x, prep=prep2), _hessian(X + 0.25) @ X, 1e-10)
    y, g, hv = di.value_gradient_and_hvp(f, backend, x2, x, prep=prep2)
    assert float(y) == pytest.approx(_value(X + 0.25), rel=1e-12)
    _close(g, _grad(X + 0.25), 1e-10)
    assert traces[0] == after_prep
    vs = di.Tangents(*(jnp.asarray(d) for d in DIRECTIONS))
    got = di.hvp(f, backend, x, vs, prep=di.prepare_hvp_same_point(f, backend, x, vs))
    for hv, d in zip(got, DIRECTIONS, strict=True):
        _close(hv, _hessian(X) @ d, 1e-10)


# ---- another x is an error, never a stale result -------------------------------------
def _moved(call):
    with pytest.raises(di.MismatchError) as info:
        call()
    msg = str(info.value)
    assert "prepare_hvp_same_point(f, backend, x" in msg and "prep=prep)" in msg
    return msg


@pytest.mark.parametrize("kind", ["numpy", "native"])
def test_another_x_is_an_error(backend, kind):
    f, x = _loss(xp(backend)), _point(backend, kind, X)
    v = _point(backend, kind, DIRECTIONS[0])
    prep = di.prepare_hvp_same_point(f, backend, x, v)
    msg = _moved(lambda: di.hvp(f, backend, _point(backend, kind, X + 1.0), v, prep=prep))
    assert msg.startswith(f"hvp(f, {backend!r}, x, v, prep=prep)")
    _moved(lambda: di.gradient_and_hvp(f, backend, _point(backend, kind, -X), v, prep=prep))
    same = _point(backend, kind, X.copy())  # another object with the prepared values
    _close(di.hvp(f, backend, same, v, prep=prep), _hessian(X) @ DIRECTIONS[0], _tol(backend))


@pytest.mark.parametrize("kind", ["numpy", "native"])
def test_changed_in_place_is_an_error(backend, kind):
    """A NumPy x (on every backend) or a torch tensor changed in place after preparation
    is another point; changed back, it is the prepared point again. (JAX arrays cannot
    change in place.)"""
    if kind == "native" and backend.framework == "jax":
        pytest.skip("JAX arrays are immutable")
    x, v = _point(backend, kind, X), _point(backend, kind, DIRECTIONS[0])
    f = _loss(xp(backend))
    prep = di.prepare_hvp_same_point(f, backend, x, v)
    x[1] += 1.0
    _moved(lambda: di.hvp(f, backend, x, v, prep=prep))
    x[1] -= 1.0  # back at the prepared values: accepted
    _close(di.hvp(f, backend, x, v, prep=prep), _hessian(X) @ DIRECTIONS[0], _tol(backend))


def test_another_constant_is_an_error(backend):
    ns = xp(backend)
    f = lambda x, c: (ns.sin(x) * x**2).sum() * c  # noqa: E731
    x, c = native(backend, X), native(backend, np.array(2.0))
    prep = di.prepare_vjp_same_point(f, backend, x, native(backend, np.array(1.0)), di.Constant(c))
    got = di.vjp(f, backend, x, native(backend, np.array(1.0)), di.Constant(c), prep=prep)
    _close(got, 2 * (np.cos(X) * X**2 + 2 * X * np.sin(X)), _tol(backend))
    with pytest.raises(di.MismatchError, match="prepare_vjp_same_point"):
        di.vjp(f, backend, x, native(backend, np.array(1.0)), di.Constant(c * 3), prep=prep)


def test_refused_arguments_are_clear_errors(backend):
    f, x = _loss(xp(backend)), native(backend, X)
    with pytest.raises(di.DiffifaceValueError, match="has_aux=True is not supported") as info:
        di.prepare_hvp_same_point(lambda x: (f(x), 1.0), backend, x, x, has_aux=True)
    assert str(info.value).startswith(f"prepare_hvp_same_point(f, {backend!r}, x, v):")
    assert "use prepare_hvp with has_aux=True" in str(info.value)
    prep = di.prepare_hvp_same_point(f, backend, x, x)
    with pytest.raises(di.MismatchError, match=r"operator +MISMATCH"):
        di.gradient(f, backend, x, prep=prep)
    with pytest.raises(di.DiffifaceTypeError, match="plain backend"):
        di.prepare_hvp_same_point(f, di.second_order(backend, backend), x, x)
    with pytest.raises(di.DiffifaceValueError, match="has_aux=True is not supported"):
        di.hvp(f, backend, x, x, prep=prep, has_aux=True)
    fixed = di.FixedParams(lambda x, p: f(x) * p, native(backend, np.array(2.0)))
    with pytest.raises(di.DiffifaceTypeError, match="FixedParams"):
        di.prepare_hvp_same_point(fixed, backend, x, x)
    with pytest.raises(di.DiffifaceTypeError, match=r"contexts must be di\.Constant"):
        di.prepare_vjp_same_point(lambda x, c: x * c, backend, x, x, 2.0)
    tree = lambda x: {"a": x * 2, "b": x}  # noqa: E731
    with pytest.raises(di.DiffifaceTypeError, match="f returns a pytree"):
        di.prepare_jvp_same_point(tree, backend, x, x)


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="needs jax and torch")
def test_a_tangent_of_another_framework_is_a_clear_error():
    import jax.numpy as jnp
    import torch

    f, backend, x = _loss(jnp), di.AutoJax(), jnp.asarray(X)
    prep = di.prepare_hvp_same_point(f, backend, x, x)
    with pytest.raises(di.DiffifaceTypeError, match="does not cross frameworks"):
        di.hvp(f, backend, x, torch.from_numpy(DIRECTIONS[0]), prep=prep)
