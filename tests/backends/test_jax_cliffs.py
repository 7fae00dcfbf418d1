"""JAX's cliffs on prepared and unprepared calls (issue 29): a ``Tangents`` call of k is
one compiled call; NumPy in and out goes straight to the compiled function; a
preparation and an unprepared call of the same f share their compiled function.
Each test counts (traces of f, XLA compilations, conversions, Python calls), never
times, and checks every result against JAX's own transform in float64."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di
from diffiface.core import shell
from diffiface.core.operator import OPS, names, of_family
from diffiface.testing._calls import expected, prepare_of, tangent_args

jax = pytest.importorskip("jax")
jnp = jax.numpy

N = 1031  # a size no other test compiles eager operations for
RNG = np.random.default_rng(29)
XN = RNG.standard_normal(N)
VN = [RNG.standard_normal(N) for _ in range(4)]
B = di.AutoJax()
TOL = {"rtol": 1e-10, "atol": 1e-12}

_COMPILES = [0]


def _on_event(name, *args, **kwargs):
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


def compiles() -> int:
    return _COMPILES[0]


class Counted:
    """f(x) = sin(x) x (vector) or the Rosenbrock sum (scalar), counting its traces."""

    def __init__(self, scalar: bool) -> None:
        self.scalar, self.count = scalar, [0]  # (changed in place: f's reads stay the same)

    @property
    def traces(self) -> int:
        return self.count[0]

    def __call__(self, x):
        self.count[0] += 1
        if self.scalar:
            return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
        return jnp.sin(x) * x


def _reference(op, f, x, ts):
    """``op``'s result parts by JAX's own transforms, jit(vmap(...)) over the tangents
    (a list per tangent)."""
    T = jnp.stack(ts)
    if OPS[op].second:  # jvp of the gradient
        g = jax.grad(f)
        out = jax.jit(lambda x, T: jax.vmap(lambda v: jax.jvp(g, (x,), (v,))[1])(T))(x, T)
        return {"value": f(x), "gradient": g(x), "hvp": list(out)}
    if OPS[op].tangent == "v":
        y, out = jax.jit(lambda x, T: jax.vmap(lambda v: jax.jvp(f, (x,), (v,)))(T))(x, T)
        return {"value": y[0], "jvp": list(out)}
    y, pb = jax.vjp(f, x)
    return {"value": y, "vjp": list(jax.jit(jax.vmap(lambda w: pb(w)[0]))(T))}


def _close(got, want):
    """Same structure (the tangent part a list per tangent), leaves within TOL."""
    assert jax.tree.structure(list(got)) == jax.tree.structure(list(want))
    for a, b in zip(jax.tree.leaves(list(got)), jax.tree.leaves(list(want)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


# the operators that take a Tangents of several (declared ``several``), and their families
OPS_SEVERAL = [op for op, d in OPS.items() if d.several is not None]
FAMILIES_SEVERAL = list(dict.fromkeys(OPS[op].family for op in OPS_SEVERAL))


def _parts_of(op, out):
    """(the parts before the tangent part, the tangent part) of a result."""
    return (tuple(out[:-1]), out[-1]) if len(OPS[op].returns) > 1 else ((), out)


def _no_general_path(*args, **kwargs):
    raise AssertionError("the general path ran")


@pytest.mark.parametrize("numpy", [False, True], ids=["jax", "numpy"])
@pytest.mark.parametrize("op", OPS_SEVERAL)
def test_tangents_of_4_is_one_compiled_call_traced_once(op, numpy, monkeypatch):
    """Traced once and compiled once for all four tangents (no eager stack or slice
    around it); the prepared call is the compiled function alone (the general path made
    to fail), for the operator prepared; its siblings compile their own once."""
    f = Counted(scalar=OPS[op].scalar)
    x = XN if numpy else jnp.asarray(XN)
    ts = di.Tangents(*(VN if numpy else [jnp.asarray(v) for v in VN]))
    before = compiles()
    prep = prepare_of(op)(f, B, x, ts)
    assert f.traces == 1  # traced once, all four tangents in the one trace
    assert compiles() - before == 1  # one compiled function; no eager stack or slice
    fn = getattr(di, op)
    fn(f, B, x, ts, prep=prep)  # (a sibling, value_and_jvp on a jvp prep, compiles its own)
    traces, compiled = f.traces, compiles()
    assert traces <= 2 and compiled - before <= 2
    if op == OPS[op].family:
        monkeypatch.setattr(shell, "enter", _no_general_path)
    for _ in range(3):
        firsts, got = _parts_of(op, fn(f, B, x, ts, prep=prep))
    assert f.traces == traces and compiles() == compiled  # the compiled function, as is
    assert isinstance(got, di.Tangents) and len(got) == 4
    kind = np.ndarray if numpy else jax.Array
    assert all(type(a) is kind or isinstance(a, kind) for a in got)
    want = _reference(op, f, jnp.asarray(XN), [jnp.asarray(v) for v in VN])
    want_firsts, want_got = _parts_of(op, expected(op, want))
    _close(got, want_got)
    _close(firsts, want_firsts)
    monkeypatch.undo()
    # unprepared: the same results
    _, got_u = _parts_of(op, fn(f, B, x, ts))
    _close(got_u, want_got)


@pytest.mark.parametrize("op", FAMILIES_SEVERAL)
def test_tangents_runner_hands_over_on_another_count_or_form(op):
    """A Tangents prep of 4 called with 3, or with one tangent, is a mismatch (the
    runner hands over to the general path, which explains); a one-tangent prep called
    with a Tangents too."""
    f = Counted(scalar=OPS[op].scalar)
    x = jnp.asarray(XN)
    vs = [jnp.asarray(v) for v in VN]
    fn = getattr(di, op)
    prep = prepare_of(op)(f, B, x, di.Tangents(*vs))
    with pytest.raises(di.MismatchError, match="Tangents of 3, prepared Tangents of 4"):
        fn(f, B, x, di.Tangents(*vs[:3]), prep=prep)
    with pytest.raises(di.MismatchError, match="tangent"):
        fn(f, B, x, vs[0], prep=prep)
    prep1 = prepare_of(op)(f, B, x, vs[0])
    with pytest.raises(di.MismatchError, match="tangent"):
        fn(f, B, x, di.Tangents(*vs), prep=prep1)


def _counting_device_put(monkeypatch) -> list:
    calls = [0]
    real = jax.device_put

    def device_put(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(jax, "device_put", device_put)
    return calls


@pytest.mark.parametrize("op", [*OPS_SEVERAL, *of_family("gradient")])
def test_numpy_goes_straight_to_the_compiled_function(op, monkeypatch):
    """NumPy x and tangent: no conversion by diffiface (jit's dispatch takes NumPy as
    is), no trace after preparation, NumPy results equal to JAX's."""
    f = Counted(OPS[op].scalar)
    args = (XN, *tangent_args(op, VN[0], VN[0]))
    prep = prepare_of(op)(f, B, *args)
    traces, before = f.traces, compiles()
    puts = _counting_device_put(monkeypatch)
    out = getattr(di, op)(f, B, *args, prep=prep)
    if op == OPS[op].family:  # (a sibling on this prep: see the report)
        assert puts[0] == 0 and f.traces == traces and compiles() == before
    outs = out if isinstance(out, tuple) else (out,)
    assert all(type(a) is np.ndarray for a in outs)
    x = jnp.asarray(XN)
    if OPS[op].tangent is None:
        y, g = jax.value_and_grad(f)(x)
        want = expected(op, {"value": y, "gradient": g})
    else:
        want = expected(op, _reference(op, f, x, [jnp.asarray(VN[0])]))
        firsts, last = _parts_of(op, want)
        want = (*firsts, last[0]) if firsts else last[0]
    _close(outs, want if isinstance(want, tuple) else (want,))


def test_numpy_tangent_unlike_x_hands_over():
    """A strided NumPy tangent is copied once for jit; a float32 one for a float64 x
    reaches the general path, which explains."""
    f = Counted(scalar=False)
    prep = di.prepare_jvp(f, B, XN, VN[0])
    want = np.asarray(jax.jvp(f, (jnp.asarray(XN),), (jnp.asarray(VN[1]),))[1])
    strided = np.repeat(VN[1], 2)[::2]
    assert not strided.flags.forc
    np.testing.assert_allclose(di.jvp(f, B, XN, strided, prep=prep), want, **TOL)
    with pytest.raises(di.DiffifaceValueError, match="v must have the dtype of x"):
        di.jvp(f, B, XN, VN[1].astype(np.float32), prep=prep)


def test_numpy_float64_without_x64_is_explained_not_truncated():
    f = Counted(scalar=False)
    prep = di.prepare_jvp(f, B, XN, VN[0])
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(di.DiffifaceValueError, match="x64 disabled"):
            di.jvp(f, B, XN, VN[0], prep=prep)
    finally:
        jax.config.update("jax_enable_x64", True)


SHARED = [
    ("gradient", di.prepare_gradient, True, False),
    ("jvp", di.prepare_jvp, False, True),
    ("vjp", di.prepare_vjp, False, True),
    ("hvp", di.prepare_hvp, True, True),
    ("hessian", di.prepare_hessian, True, False),
    ("jacobian", di.prepare_jacobian, False, False),
]


@pytest.mark.parametrize("numpy", [False, True], ids=["jax", "numpy"])
@pytest.mark.parametrize(("op", "prepare", "scalar", "tangent"), SHARED, ids=[s[0] for s in SHARED])
def test_prep_and_unprepared_calls_share_the_compiled_function(op, prepare, scalar, tangent, numpy):
    """prepare, one prepared and two unprepared calls: one compilation in all (and the
    other way round: an unprepared call, then a preparation, compile once)."""
    n = 7
    x = XN[:n] if numpy else jnp.asarray(XN[:n])
    args = (x, VN[0][:n] if numpy else jnp.asarray(VN[0][:n])) if tangent else (x,)
    fn = getattr(di, op)
    f = Counted(scalar)
    before = compiles()
    prep = prepare(f, B, *args)
    first = compiles() - before
    traces = f.traces
    results = [fn(f, B, *args, prep=prep), fn(f, B, *args), fn(f, B, *args)]
    assert compiles() - before == first == 1 and f.traces == traces
    for r in results[1:]:
        for a, b in zip(jax.tree.leaves(r), jax.tree.leaves(results[0]), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    g = Counted(scalar)
    before = compiles()
    fn(g, B, *args)
    traces = g.traces
    prepare(g, B, *args)
    fn(g, B, *args)
    assert compiles() - before == 1 and g.traces == traces


def test_sibling_operator_shares_with_its_unprepared_calls():
    """value_and_gradient on a gradient prep compiles its own function once; its
    unprepared calls then use it."""
    f = Counted(scalar=True)
    x = jnp.asarray(XN[:6])
    prep = di.prepare_gradient(f, B, x)
    before = compiles()
    y, g = di.value_and_gradient(f, B, x, prep=prep)
    assert compiles() - before == 1
    di.value_and_gradient(f, B, x)
    di.value_and_gradient(f, B, x)
    assert compiles() - before == 1
    want = jax.value_and_grad(f)(x)
    np.testing.assert_allclose(y, want[0], **TOL)
    np.testing.assert_allclose(g, want[1], **TOL)


SCALE = 2.0


def _reads_scale(x):
    return SCALE * jnp.sum(x**2)


def test_shared_function_never_stale_for_unprepared_calls():
    """A value f reads rebound after the preparation: the unprepared call compiles anew
    (the new value), the prepared one keeps what it baked in."""
    global SCALE
    x = jnp.asarray(XN[:5])
    prep = di.prepare_gradient(_reads_scale, B, x)
    np.testing.assert_allclose(di.gradient(_reads_scale, B, x), 4.0 * XN[:5], **TOL)
    old = SCALE
    SCALE = 3.0
    try:
        np.testing.assert_allclose(di.gradient(_reads_scale, B, x), 6.0 * XN[:5], **TOL)
        np.testing.assert_allclose(di.gradient(_reads_scale, B, x, prep=prep), 4.0 * XN[:5], **TOL)
    finally:
        SCALE = old


def test_python_calls_of_warm_prepared_calls():
    """The prepared gradient stays within 6 Python calls in diffiface (issue 29); a
    prepared jvp, hvp and Tangents jvp (JAX and NumPy) within 8."""
    f, s = Counted(scalar=False), Counted(scalar=True)
    x, v = jnp.asarray(XN), jnp.asarray(VN[0])
    ts = di.Tangents(*(jnp.asarray(a) for a in VN))
    pg = di.prepare_gradient(s, B, x)
    assert python_calls(lambda: di.gradient(s, B, x, prep=pg)) <= 6
    pj, pn = di.prepare_jvp(f, B, x, v), di.prepare_jvp(f, B, XN, VN[0])
    ph, pt = di.prepare_hvp(s, B, x, v), di.prepare_jvp(f, B, x, ts)
    assert python_calls(lambda: di.jvp(f, B, x, v, prep=pj)) <= 8
    assert python_calls(lambda: di.jvp(f, B, XN, VN[0], prep=pn)) <= 8
    assert python_calls(lambda: di.hvp(s, B, x, v, prep=ph)) <= 8
    assert python_calls(lambda: di.jvp(f, B, x, ts, prep=pt)) <= 8


# ---- closures made anew per call: every operator, pytree outputs ------------------


def _make_closure(tree: bool, scalar: bool):
    """A new closure per call of the same code, its cell an array (JAX's common habit:
    ``di.jvp(lambda p: model(p, batch), ...)`` inside a loop)."""

    def make(w):
        if scalar:
            return lambda x: jnp.sum(w * jnp.sin(x) * x)
        if tree:
            return lambda x: {"a": w * jnp.sin(x), "b": (jnp.sum(x**2) * w)[None]}
        return lambda x: w * jnp.sin(x) * x

    return make


def _native_result(op, f, x, t):
    """The operator's result by JAX's own transforms (jvp, vjp, jvp of grad)."""
    if OPS[op].second:
        g, out = jax.jvp(jax.grad(f), (x,), (t,))
        parts = {"value": f(x), "gradient": g, "hvp": out}
    elif OPS[op].tangent == "v":
        y, out = jax.jvp(f, (x,), (t,))
        parts = {"value": y, "jvp": out}
    else:
        y, pb = jax.vjp(f, x)
        parts = {"value": y, "vjp": pb(t)[0]}
    return expected(op, parts)


# every operator with a tangent (declared ``several``: jvp, vjp, hvp and their variants);
# those whose f may return a pytree again with one
CLOSURE_CASES = [(op, False) for op in OPS_SEVERAL]
CLOSURE_CASES += [(op, True) for op in OPS_SEVERAL if OPS[op].tree_output]


@pytest.mark.parametrize(("op", "tree"), CLOSURE_CASES)
def test_closures_per_call_compile_once_per_code(op, tree):
    """A closure made per call compiles its code once for jvp, vjp, hvp and their
    variants (before: once per object, with RecompileWarning after 5), a pytree
    output split like f(x) for each object; never a stale cell value."""
    make = _make_closure(tree, scalar=OPS[op].scalar)
    x = jnp.asarray(XN[:9])
    fn = getattr(di, op)
    for k in range(8):
        if k == 2:
            before = compiles()
        f = make(jnp.asarray(1.0 + k))
        t = jax.jvp(f, (x,), (jnp.asarray(VN[0][:9]),))[0] if OPS[op].tangent == "w" else x
        t = jax.tree.map(jnp.cos, t)
        got = fn(f, B, x, t)
        want = _native_result(op, f, x, t)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
    assert compiles() - before <= 2  # the code's one compilation (and its split)


def test_closure_per_call_pytree_output_new_shape_and_tangents():
    """The Layout kept per code holds for each object at every shape it met, and for a
    Tangents call; jacobian of a pytree output too."""
    make = _make_closure(tree=True, scalar=False)
    for n in (5, 5, 6, 5, 6, 6):
        x = jnp.asarray(XN[:n])
        vs = [jnp.asarray(v[:n]) for v in VN[:2]]
        f = make(jnp.asarray(float(n)))
        got = di.jvp(f, B, x, di.Tangents(*vs))
        for g, v in zip(got, vs, strict=True):
            want = jax.jvp(f, (x,), (v,))[1]
            for key in ("a", "b"):
                np.testing.assert_allclose(g[key], want[key], rtol=1e-12)
        jac, want = di.jacobian(f, B, x), jax.jacfwd(f)(x)
        for key in ("a", "b"):
            np.testing.assert_allclose(jac[key], want[key], rtol=1e-12)


# ---- a Python float x keeps its plan -----------------------------------------------


def _g(x):
    return jnp.sin(x) * x**2


def _float_parts(x):
    """The result parts of _g at a float x by JAX's own transforms."""
    d = jax.grad(_g)
    return {
        "value": _g(x),
        "derivative": d(x),
        "gradient": d(x),
        "second_derivative": jax.grad(d)(x),
    }


# the operators of a scalar x (declared ``scalar_x``), and the gradient at one
FLOAT_OPS = [*sorted(names(scalar_x=True)), "gradient"]


@pytest.mark.parametrize("op", FLOAT_OPS)
def test_python_float_x_keeps_a_plan(op, monkeypatch):
    """After the first call at a Python float, later calls at any float run the kept
    plan (the general path made to fail): no new compilation, floats back as the
    general path gives them."""
    fn = getattr(di, op)
    f = lambda x: _g(x)  # noqa: E731  (its own object: its own plan)
    fn(f, B, 0.3)
    before = compiles()
    monkeypatch.setattr(shell, "enter", _no_general_path)
    points = (0.7, -1.25, 2.0)
    gots = [fn(f, B, x) for x in points]
    assert compiles() == before
    for x, got in zip(points, gots, strict=True):
        want = expected(op, _float_parts(x))
        got, want = (got, want) if type(got) is tuple else ((got,), (want,))
        for a, b in zip(got, want, strict=True):
            assert type(a) is float
            np.testing.assert_allclose(a, float(b), rtol=1e-12)


@pytest.mark.parametrize("op", sorted(names(tangent="v") & set(FAMILIES_SEVERAL)))
def test_python_float_x_and_tangent_keep_a_plan(op, monkeypatch):
    fn = getattr(di, op)
    f = lambda x: _g(x)  # noqa: E731
    fn(f, B, 0.3, 1.0)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    got = fn(f, B, 0.7, 3.0)
    d = jax.grad(jax.grad(_g)) if OPS[op].second else jax.grad(_g)
    assert type(got) is float
    np.testing.assert_allclose(got, 3.0 * float(d(0.7)), rtol=1e-12)


def test_python_float_plan_follows_the_dtype_policy():
    """The kept plan of a Python float holds for the default float dtype it was built
    for: with x64 switched off, the call runs (and keeps) a float32 plan."""
    f = lambda x: _g(x)  # noqa: E731
    np.testing.assert_allclose(di.derivative(f, B, 0.7), float(jax.grad(_g)(0.7)), rtol=1e-12)
    jax.config.update("jax_enable_x64", False)
    try:
        for _ in range(2):
            got = di.derivative(f, B, 0.7)
            np.testing.assert_allclose(got, float(jax.grad(_g)(0.7)), rtol=1e-6)
            assert type(got) is float and float(np.float32(got)) == got  # computed in float32
    finally:
        jax.config.update("jax_enable_x64", True)
    np.testing.assert_allclose(di.derivative(f, B, 0.7), float(jax.grad(_g)(0.7)), rtol=1e-12)


# ---- batched_jacobian runs its compiled function -----------------------------------


def _per_sample(x):
    return jnp.sin(x) * x[..., :1]


@pytest.mark.parametrize("numpy", [False, True], ids=["jax", "numpy"])
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_batched_jacobian_runs_the_compiled_function(numpy, prepared, monkeypatch):
    """JAX or NumPy x: after the first call of each operator (or the preparation), no
    general path, no conversion by diffiface, no compilation; results of x's kind equal
    to vmap(jacfwd)."""
    f = lambda x: _per_sample(x)  # noqa: E731
    xn = RNG.standard_normal((7, 3))
    x = xn if numpy else jnp.asarray(xn)
    kw = {"prep": di.prepare_batched_jacobian(f, B, x)} if prepared else {}
    di.batched_jacobian(f, B, x, **kw)
    di.value_and_batched_jacobian(f, B, x, **kw)  # (its own compiled function: with y)
    before = compiles()
    monkeypatch.setattr(shell, "enter", _no_general_path)
    puts = _counting_device_put(monkeypatch)
    got = di.batched_jacobian(f, B, x, **kw)
    y, got2 = di.value_and_batched_jacobian(f, B, x, **kw)
    assert puts[0] == 0 and compiles() == before
    kind = np.ndarray if numpy else jax.Array
    assert isinstance(got, kind) and isinstance(got2, kind) and isinstance(y, kind)
    want = jax.vmap(jax.jacfwd(_per_sample))(jnp.asarray(xn))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got2), np.asarray(want), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(y), np.asarray(_per_sample(jnp.asarray(xn))))


# the gradient's family and every operator with a tangent; the base ones with a pytree
# output where f may return one
PER_CODE = [(op, False) for op in (*of_family("gradient"), *OPS_SEVERAL)]
PER_CODE += [(op, True) for op in FAMILIES_SEVERAL if OPS[op].tree_output]


@pytest.mark.parametrize(("op", "tree"), PER_CODE)
def test_closures_per_call_run_their_codes_plan(op, tree, monkeypatch):
    """From the third object of a code on, a closure made per call runs the plan kept
    for its code (the general path made to fail): no compilation, its own cell's
    values, and the plan holds no object of f."""
    make = _make_closure(tree, OPS[op].scalar)
    x, v = jnp.asarray(XN[:8]), jnp.asarray(VN[0][:8])
    fn = getattr(di, op)
    w = jax.tree.map(jnp.cos, make(jnp.asarray(0.5))(x))  # a cotangent like f(x)
    args = (x, *tangent_args(op, v, w))
    for k in range(2):
        fn(make(jnp.asarray(1.0 + k)), B, *args)
    before = compiles()
    monkeypatch.setattr(shell, "enter", _no_general_path)
    ws = [jnp.asarray(3.0 + k) for k in range(3)]
    gots = [fn(make(w), B, *args) for w in ws]
    assert compiles() == before
    monkeypatch.undo()
    for w, got in zip(ws, gots, strict=True):
        f = make(w)
        if OPS[op].tangent is None:
            y, g = jax.value_and_grad(f)(x)
            want = expected(op, {"value": y, "gradient": g})
        else:
            want = _native_result(op, f, x, args[1])
        assert jax.tree.structure(got) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
    f = make(jnp.asarray(9.0))
    fn(f, B, *args)
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None  # the code's plan holds no object of it


def test_code_plan_hands_over_for_other_cells():
    """A closure of the same code whose cell holds another shape or flag value runs the
    general path (never the plan of other cells): its own result."""

    def make(w, c):
        return lambda x: c * jnp.sum(w * x**2)

    x = jnp.asarray(XN[:6])
    for w, c in [(1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (np.ones(6), 1.0), (2.0, 5.0), (4.0, 1.0)]:
        got = di.gradient(make(jnp.asarray(w), c), B, x)
        np.testing.assert_allclose(got, 2 * c * np.asarray(w) * XN[:6], rtol=1e-12)


@pytest.mark.parametrize("op", ["gradient", "jvp", "vjp", "hvp"])
def test_closures_per_call_of_numpy_run_their_codes_plan(op, monkeypatch):
    """NumPy x (and tangent): the code's plan too, NumPy results."""
    make = _make_closure(tree=False, scalar=op in ("gradient", "hvp"))
    x, v = XN[:8], VN[0][:8]
    args = (x,) if op == "gradient" else (x, v)
    fn = getattr(di, op)
    for k in range(2):
        fn(make(jnp.asarray(1.0 + k)), B, *args)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    got = fn(make(jnp.asarray(5.0)), B, *args)
    monkeypatch.undo()
    f = make(jnp.asarray(5.0))
    xj, vj = jnp.asarray(x), jnp.asarray(v)
    want = jax.grad(f)(xj) if op == "gradient" else _native_result(op, f, xj, vj)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12)


def test_functions_of_one_code_that_are_reused_keep_their_own_runner():
    """Two functions made by one factory, each called many times (not a closure made
    per call): each call of the second runs its own object's runner, as cheap as the
    first's, not the per-code runner that rebinds the cells on every call."""
    jnp = pytest.importorskip("jax.numpy")

    def make(c):
        return lambda x: c * jnp.sum(jnp.sin(x) * x)

    f1, f2 = make(2.0), make(2.0)
    x = jnp.asarray(XN)
    for f in (f1, f1, f2, f2):
        got = di.gradient(f, B, x)
        np.testing.assert_allclose(got, 2.0 * (np.cos(XN) * XN + np.sin(XN)), **TOL)
    assert python_calls(lambda: di.gradient(f2, B, x)) <= python_calls(
        lambda: di.gradient(f1, B, x)
    )


# ---- value_gradient_and_hvp runs its compiled function -----------------------------


@pytest.mark.parametrize("numpy", [False, True], ids=["jax", "numpy"])
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_value_gradient_and_hvp_runs_the_compiled_function(numpy, prepared, monkeypatch):
    """The value comes from the gradient-and-hvp pass (f(x) as its aux): after the first
    call (or the preparation), no general path and no compilation; results of x's kind
    equal to JAX's jvp of grad."""
    f = Counted(scalar=True)
    x, v = (XN, VN[0]) if numpy else (jnp.asarray(XN), jnp.asarray(VN[0]))
    kw = {"prep": di.prepare_hvp(f, B, x, v)} if prepared else {}
    di.value_gradient_and_hvp(f, B, x, v, **kw)
    before = compiles()
    monkeypatch.setattr(shell, "enter", _no_general_path)
    got = di.value_gradient_and_hvp(f, B, x, v, **kw)
    assert compiles() == before
    kind = np.ndarray if numpy else jax.Array
    assert all(isinstance(a, kind) for a in got)
    xj, vj = jnp.asarray(XN), jnp.asarray(VN[0])
    g, hv = jax.jvp(jax.grad(f), (xj,), (vj,))
    _close(got, (f(xj), g, hv))


def test_value_gradient_and_hvp_of_a_float_keeps_a_plan(monkeypatch):
    """A Python float x and tangent: floats back, the kept plan (no general path)."""
    f = lambda x: _g(x)  # noqa: E731
    di.value_gradient_and_hvp(f, B, 0.3, 1.0)
    monkeypatch.setattr(shell, "enter", _no_general_path)
    got = di.value_gradient_and_hvp(f, B, 0.7, 2.0)
    d = jax.grad(_g)
    want = (_g(0.7), d(0.7), 2.0 * jax.grad(d)(0.7))
    assert all(type(a) is float for a in got)
    np.testing.assert_allclose(got, [float(a) for a in want], rtol=1e-12)
