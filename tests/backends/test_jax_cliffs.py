"""JAX's cliffs on prepared and unprepared calls (issue 29): a ``Tangents`` call of k is
one compiled call; NumPy in and out goes straight to the compiled function; a
preparation and an unprepared call of the same f share their compiled function.
Each test counts (traces of f, XLA compilations, conversions, Python calls), never
times, and checks every result against JAX's own transform in float64."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di
from diffiface.core import shell

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
    """(first output or None, [result per tangent]) by jit(vmap(...)) of JAX's transform."""
    V = jnp.stack(ts)
    if "jvp" in op:
        y, out = jax.jit(lambda x, V: jax.vmap(lambda v: jax.jvp(f, (x,), (v,)))(V))(x, V)
        return (y[0] if op == "value_and_jvp" else None), list(out)
    if "vjp" in op:
        y, pb = jax.vjp(f, x)
        out = jax.jit(jax.vmap(lambda w: pb(w)[0]))(V)
        return (y if op == "value_and_vjp" else None), list(out)
    g = jax.grad(f)
    out = jax.jit(lambda x, V: jax.vmap(lambda v: jax.jvp(g, (x,), (v,))[1])(V))(x, V)
    return (g(x) if op == "gradient_and_hvp" else None), list(out)


OPS = ["jvp", "value_and_jvp", "vjp", "value_and_vjp", "hvp", "gradient_and_hvp"]
PREPARE = {"jvp": di.prepare_jvp, "vjp": di.prepare_vjp, "hvp": di.prepare_hvp}


def _no_general_path(*args, **kwargs):
    raise AssertionError("the general path ran")


def _family(op: str) -> str:
    return next(k for k in PREPARE if k in op)


def _split(op, out):
    keeps = op.startswith("value") or op == "gradient_and_hvp"
    return out if keeps else (None, out)


@pytest.mark.parametrize("numpy", [False, True], ids=["jax", "numpy"])
@pytest.mark.parametrize("op", OPS)
def test_tangents_of_4_is_one_compiled_call_traced_once(op, numpy, monkeypatch):
    """Traced once and compiled once for all four tangents (no eager stack or slice
    around it); the prepared call is the compiled function alone (the general path made
    to fail), for the operator prepared; its siblings compile their own once."""
    f = Counted(scalar="hvp" in op)
    x = XN if numpy else jnp.asarray(XN)
    ts = di.Tangents(*(VN if numpy else [jnp.asarray(v) for v in VN]))
    before = compiles()
    prep = PREPARE[_family(op)](f, B, x, ts)
    assert f.traces == 1  # traced once, all four tangents in the one trace
    assert compiles() - before == 1  # one compiled function; no eager stack or slice
    fn = getattr(di, op)
    fn(f, B, x, ts, prep=prep)  # (a sibling, value_and_jvp on a jvp prep, compiles its own)
    traces, compiled = f.traces, compiles()
    assert traces <= 2 and compiled - before <= 2
    if op in PREPARE:
        monkeypatch.setattr(shell, "enter", _no_general_path)
    for _ in range(3):
        first, got = _split(op, fn(f, B, x, ts, prep=prep))
    assert f.traces == traces and compiles() == compiled  # the compiled function, as is
    assert isinstance(got, di.Tangents) and len(got) == 4
    kind = np.ndarray if numpy else jax.Array
    assert all(type(a) is kind or isinstance(a, kind) for a in got)
    want_first, want = _reference(op, f, jnp.asarray(XN), [jnp.asarray(v) for v in VN])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)
    if want_first is None:
        assert first is None
    else:
        np.testing.assert_allclose(np.asarray(first), np.asarray(want_first), **TOL)
    monkeypatch.undo()
    # unprepared: the same results
    _, got_u = _split(op, fn(f, B, x, ts))
    for a, b in zip(got_u, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


@pytest.mark.parametrize("op", ["jvp", "vjp", "hvp"])
def test_tangents_runner_hands_over_on_another_count_or_form(op):
    """A Tangents prep of 4 called with 3, or with one tangent, is a mismatch (the
    runner hands over to the general path, which explains); a one-tangent prep called
    with a Tangents too."""
    f = Counted(scalar=op == "hvp")
    x = jnp.asarray(XN)
    vs = [jnp.asarray(v) for v in VN]
    fn = getattr(di, op)
    prep = PREPARE[op](f, B, x, di.Tangents(*vs))
    with pytest.raises(di.MismatchError, match="Tangents of 3, prepared Tangents of 4"):
        fn(f, B, x, di.Tangents(*vs[:3]), prep=prep)
    with pytest.raises(di.MismatchError, match="tangent"):
        fn(f, B, x, vs[0], prep=prep)
    prep1 = PREPARE[op](f, B, x, vs[0])
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


@pytest.mark.parametrize("op", [*OPS, "gradient", "value_and_gradient"])
def test_numpy_goes_straight_to_the_compiled_function(op, monkeypatch):
    """NumPy x and tangent: no conversion by diffiface (jit's dispatch takes NumPy as
    is), no trace after preparation, NumPy results equal to JAX's."""
    scalar = "hvp" in op or "gradient" in op
    f = Counted(scalar)
    tangent = op in OPS
    family = "gradient" if not tangent else _family(op)
    prepare = di.prepare_gradient if not tangent else PREPARE[family]
    args = (XN, VN[0]) if tangent else (XN,)
    prep = prepare(f, B, *args)
    traces, before = f.traces, compiles()
    puts = _counting_device_put(monkeypatch)
    out = getattr(di, op)(f, B, *args, prep=prep)
    if op in ("jvp", "vjp", "hvp", "gradient"):  # (a sibling on this prep: see the report)
        assert puts[0] == 0 and f.traces == traces and compiles() == before
    outs = out if isinstance(out, tuple) else (out,)
    assert all(type(a) is np.ndarray for a in outs)
    x = jnp.asarray(XN)
    if tangent:
        first, want = _reference(op, f, x, [jnp.asarray(VN[0])])
        got_first, got = _split(op, out)
        np.testing.assert_allclose(got, np.asarray(want[0]), **TOL)
        if first is not None:
            np.testing.assert_allclose(got_first, np.asarray(first), **TOL)
    else:
        want = jax.value_and_grad(f)(x)
        got = out if op == "value_and_gradient" else (want[0], out)
        np.testing.assert_allclose(got[0], np.asarray(want[0]), **TOL)
        np.testing.assert_allclose(got[1], np.asarray(want[1]), **TOL)


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
