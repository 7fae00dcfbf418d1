"""A pytree x (or one array with Constant contexts) with a tangent keeps a plan on JAX:
prepared and unprepared calls of jvp, vjp, hvp and their siblings run the compiled
function on the leaves (the tangent's leaves checked against the plan's), one tangent
or a ``Tangents``, with or without aux. Each test counts (the general path made to
fail, XLA compilations), never times, and checks every result against JAX's own
transform in float64."""

from __future__ import annotations

import numpy as np
import pytest

import diffiface as di
from diffiface.core import outputs, shell
from diffiface.core.operator import FAMILY

jax = pytest.importorskip("jax")
jnp = jax.numpy
JaxImpl = pytest.importorskip("diffiface.backends.jax.impl").JaxImpl
jax.config.update("jax_enable_x64", True)

B = di.AutoJax()
TOL = {"rtol": 1e-12, "atol": 1e-14}
RNG = np.random.default_rng(2906)
N = 7  # a size no other test compiles for

_COMPILES = [0]


def _on_event(name, *args, **kwargs):
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


def _point(kind: str, k: int = 0):
    """(x, contexts, the function's own arguments) of a call kind: a dict x, or one array
    with a Constant context."""
    a, b = RNG.standard_normal(N) + 0.1 * k, RNG.standard_normal(N)
    if kind == "dict":
        return {"a": jnp.asarray(a), "b": jnp.asarray(b)}, ()
    return jnp.asarray(a), (di.Constant(jnp.asarray(b)),)


def _tangent(kind: str, op: str):
    if "vjp" in op:  # a cotangent like f(x)
        return jnp.asarray(RNG.standard_normal(N))
    x, _ = _point(kind)
    return jax.tree_util.tree_map(lambda a: jnp.asarray(RNG.standard_normal(a.shape)), x)


def _functions(kind: str, aux: bool):
    """(vector f, scalar f) of x (and c for the one-array kind), with aux if asked."""

    def parts(x, *c):
        return (x["a"], x["b"]) if kind == "dict" else (x, c[0])

    def v(x, *c):
        a, b = parts(x, *c)
        out = jnp.sin(a) * b + a**2
        return (out, {"mean": jnp.mean(a)}) if aux else out

    def s(x, *c):
        a, b = parts(x, *c)
        out = jnp.sum(jnp.sin(a) * b) + jnp.sum(a**3)
        return (out, jnp.cos(a)) if aux else out

    return v, s


def _reference(op: str, f, x, ctx, t, aux: bool):
    """The result of ``op`` by JAX's own transforms (``t``: one tangent)."""
    c = tuple(k.value for k in ctx)

    def g(x):
        return f(x, *c)

    if "jvp" in op:
        y, out, *a = jax.jvp(g, (x,), (t,), has_aux=aux)
        res = (y, out) if op.startswith("value") else out
    elif "vjp" in op:
        y, pb, *a = jax.vjp(g, x, has_aux=aux)
        res = (y, pb(t)[0]) if op.startswith("value") else pb(t)[0]
    else:
        grad = jax.grad(g, has_aux=aux)
        gr, out, *a = jax.jvp(grad, (x,), (t,), has_aux=aux)
        res = (gr, out) if op == "gradient_and_hvp" else out
    return (res, a[0]) if aux else res


def _close(got, want) -> None:
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for a, b in zip(got_leaves, want_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


OPS = ["jvp", "value_and_jvp", "vjp", "value_and_vjp", "hvp", "gradient_and_hvp"]
PREPARE = {"jvp": di.prepare_jvp, "vjp": di.prepare_vjp, "hvp": di.prepare_hvp}


def _family(op: str) -> str:
    return next(k for k in PREPARE if k in op)


def _no_general_path(*args, **kwargs):
    raise AssertionError("the general path ran")


@pytest.mark.parametrize("aux", [False, True], ids=["plain", "aux"])
@pytest.mark.parametrize("kind", ["dict", "one array with a context"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("op", OPS)
def test_a_tangent_of_leaves_runs_the_compiled_function(op, prepared, kind, aux, monkeypatch):
    """After the first call (or the preparation), calls at other points of the same
    shapes run the compiled function alone: no general path, no compilation."""
    v, s = _functions(kind, aux)
    f = s if "hvp" in op else v
    fn = getattr(di, op)
    x, ctx = _point(kind)
    t = _tangent(kind, op)
    kw = {"has_aux": True} if aux else {}
    if prepared:
        kw["prep"] = PREPARE[_family(op)](f, B, x, t, *ctx, **kw)
    fn(f, B, x, t, *ctx, **kw)  # (the sibling of a prep, or the unprepared call: its plan)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    for k in range(1, 3):
        x, ctx = _point(kind, k)
        t = _tangent(kind, op)
        before = _COMPILES[0]
        got = fn(f, B, x, t, *ctx, **kw)
        assert _COMPILES[0] == before
        _close(got, _reference(op, f, x, ctx, t, aux))


@pytest.mark.parametrize("kind", ["dict", "one array with a context"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("op", OPS)
def test_tangents_of_leaves_run_the_compiled_function(op, prepared, kind, monkeypatch):
    """A Tangents of 3: one compiled call on the leaves of all three tangents."""
    v, s = _functions(kind, False)
    f = s if "hvp" in op else v
    fn = getattr(di, op)
    x, ctx = _point(kind)
    ts = di.Tangents(*(_tangent(kind, op) for _ in range(3)))
    kw = {"prep": PREPARE[_family(op)](f, B, x, ts, *ctx)} if prepared else {}
    fn(f, B, x, ts, *ctx, **kw)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    for k in range(1, 3):
        x, ctx = _point(kind, k)
        ts = di.Tangents(*(_tangent(kind, op) for _ in range(3)))
        before = _COMPILES[0]
        got = fn(f, B, x, ts, *ctx, **kw)
        assert _COMPILES[0] == before
        first, outs = got if isinstance(got, tuple) else (None, got)
        assert isinstance(outs, di.Tangents) and len(outs) == 3
        for t, out in zip(ts, outs, strict=True):
            want = _reference(op, f, x, ctx, t, False)
            want_first, want_out = want if isinstance(want, tuple) else (None, want)
            _close(out, want_out)
            _close(first, want_first)


def _dict_call(op: str):
    v, s = _functions("dict", False)
    f = s if "hvp" in op else v
    x, _ = _point("dict")
    return f, x, _tangent("dict", op)


@pytest.mark.parametrize("op", OPS)
def test_a_tangent_unlike_the_plans_takes_the_general_path(op):
    """A tangent of another dtype, shape or structure (or NumPy leaves) hands the call to
    the general path, which converts it or explains; the runner never runs on it."""
    f, x, t = _dict_call(op)
    fn, prep = getattr(di, op), PREPARE[_family(op)](f, B, x, t)
    fn(f, B, x, t)  # the unprepared plan
    numpy = jax.tree_util.tree_map(np.asarray, t)  # converted by the general path
    for kw in ({"prep": prep}, {}):
        _close(fn(f, B, x, numpy, **kw), _reference(op, f, x, (), t, False))
    if "vjp" in op:
        wrong = [t[:3], t.astype(jnp.float32), {"a": t}]
    else:
        wrong = [
            {"a": t["a"][:3], "b": t["b"]},
            {"a": t["a"].astype(jnp.float32), "b": t["b"]},
            {"a": t["a"]},
        ]
    for w in wrong:
        with pytest.raises(di.DiffifaceValueError):
            fn(f, B, x, w, prep=prep)
        with pytest.raises(di.DiffifaceValueError):
            fn(f, B, x, w)


def test_one_tangent_and_tangents_keep_plans_of_their_own(monkeypatch):
    """One tangent and a Tangents of the same f keep plans of their own; a Tangents of
    another count takes the general path."""
    f, x, t = _dict_call("jvp")
    ts = di.Tangents(t, jax.tree_util.tree_map(lambda a: 2.0 * a, t))
    di.jvp(f, B, x, t)
    di.jvp(f, B, x, ts)
    want = _reference("jvp", f, x, (), t, False)
    with monkeypatch.context() as m:
        m.setattr(shell, "enter", _no_general_path)
        _close(di.jvp(f, B, x, t), want)
        _close(tuple(di.jvp(f, B, x, ts)), (want, 2.0 * want))
    entered = []
    enter = shell.enter
    monkeypatch.setattr(shell, "enter", lambda *a, **k: entered.append(1) or enter(*a, **k))
    _close(tuple(di.jvp(f, B, x, di.Tangents(t, t, t))), (want,) * 3)
    assert entered == [1]


def _tree_f(x):
    return {"y": jnp.sin(x) * x, "z": (jnp.cos(x[:3]),)}


def _cotangent(k: int = 0):
    return {
        "y": jnp.asarray(RNG.standard_normal(N) + k),
        "z": (jnp.asarray(RNG.standard_normal(3)),),
    }


def _tree_reference(op: str, x, w):
    y, pb = jax.vjp(_tree_f, x)
    return (y, pb(w)[0]) if op == "value_and_vjp" else pb(w)[0]


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("op", ["vjp", "value_and_vjp"])
def test_a_cotangent_like_a_pytree_output_runs_the_compiled_function(op, prepared, monkeypatch):
    """f returns a pytree: its cotangent's leaves are raveled for the compiled function
    and the value split like f(x), with no general path and no compilation."""
    f = lambda x: _tree_f(x)  # noqa: E731  (its own function: its own plans)
    fn, x = getattr(di, op), jnp.asarray(RNG.standard_normal(N))
    kw = {"prep": di.prepare_vjp(f, B, x, _cotangent())} if prepared else {}
    fn(f, B, x, _cotangent(), **kw)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    for k in range(1, 3):
        x, w = jnp.asarray(RNG.standard_normal(N)), _cotangent(k)
        before = _COMPILES[0]
        got = fn(f, B, x, w, **kw)
        assert _COMPILES[0] == before
        _close(got, _tree_reference(op, x, w))


@pytest.mark.parametrize("op", ["vjp", "value_and_vjp"])
def test_a_cotangent_unlike_the_pytree_output_takes_the_general_path(op):
    """NumPy leaves are converted by the general path; another structure or shape is its
    error, for prepared and unprepared calls."""
    f = lambda x: _tree_f(x)  # noqa: E731
    fn, x, w = getattr(di, op), jnp.asarray(RNG.standard_normal(N)), _cotangent()
    prep = di.prepare_vjp(f, B, x, w)
    fn(f, B, x, w)
    numpy = jax.tree_util.tree_map(np.asarray, w)
    wrong = [
        {"y": w["y"]},
        {"y": w["y"][:3], "z": w["z"]},
        {"y": w["y"], "z": w["z"][0]},
        w["y"],
    ]
    for kw in ({"prep": prep}, {}):
        _close(fn(f, B, x, numpy, **kw), _tree_reference(op, x, w))
        for bad in wrong:
            with pytest.raises(di.DiffifaceValueError):
                fn(f, B, x, bad, **kw)


# ---- a pytree output: the ravel, the compiled function and the split in one call -----

_TREE_OPS = ["jvp", "value_and_jvp", "vjp", "value_and_vjp", "jacobian", "value_and_jacobian"]


def _tree_native(op: str, x, t):
    """``op`` of _tree_f by JAX's own transforms."""
    if op == "jacobian":
        return jax.jacfwd(_tree_f)(x)
    if op == "value_and_jacobian":
        return _tree_f(x), jax.jacfwd(_tree_f)(x)
    if "vjp" in op:
        return _tree_reference(op, x, t)
    y, out = jax.jvp(_tree_f, (x,), (t,))
    return (y, out) if op == "value_and_jvp" else out


def _no_layout_work(*args, **kwargs):
    raise AssertionError("a ravel or split ran outside the compiled call")


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("op", _TREE_OPS)
def test_a_pytree_output_is_one_compiled_call(op, prepared, monkeypatch):
    """After the first call (or the preparation), a call whose f returns a pytree runs
    one compiled function that ravels the cotangent and splits the results itself: no
    ravel or split outside it, no general path, no compilation; JAX's own results."""
    f = lambda x: _tree_f(x)  # noqa: E731  (its own function: its own plans)
    x = jnp.asarray(RNG.standard_normal(N))
    tangent = _cotangent() if "vjp" in op else x
    args = (x,) if "jacobian" in op else (x, tangent)
    fn = getattr(di, op)
    prepare = getattr(di, f"prepare_{FAMILY[op]}")
    kw = {"prep": prepare(f, B, *args)} if prepared else {}
    fn(f, B, *args, **kw)
    monkeypatch.setattr(JaxImpl, "concat", _no_layout_work)  # (a cotangent's ravel)
    for layout in outputs.layouts(f).values():  # (each split compiled on its own)
        for impl in list(layout.compiled):
            monkeypatch.setitem(layout.compiled, impl, _no_layout_work)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    for k in range(1, 3):
        x = jnp.asarray(RNG.standard_normal(N))
        t = _cotangent(k) if "vjp" in op else jnp.asarray(RNG.standard_normal(N))
        before = _COMPILES[0]
        got = fn(f, B, *((x,) if "jacobian" in op else (x, t)), **kw)
        assert _COMPILES[0] == before
        _close(got, _tree_native(op, x, t))


def test_a_pytree_output_tangent_unlike_x_hands_over():
    """A tangent of another dtype is the general path's error (the compiled call's trace
    hands over), and a NumPy tangent its conversion, for the kept runner."""
    f = lambda x: _tree_f(x)  # noqa: E731
    x = jnp.asarray(RNG.standard_normal(N))
    prep = di.prepare_jvp(f, B, x, x)
    for kw in ({"prep": prep}, {}):
        di.jvp(f, B, x, x, **kw)
        with pytest.raises(di.DiffifaceValueError, match="dtype of x"):
            di.jvp(f, B, x, x.astype(jnp.float32), **kw)
        v = RNG.standard_normal(N)
        _close(di.jvp(f, B, x, v, **kw), _tree_native("jvp", x, jnp.asarray(v)))
