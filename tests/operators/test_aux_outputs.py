"""has_aux=True on every operator and every backend: f returns ``(out, aux)`` and the
operator ``(its usual result, aux)``, aux being f's aux at x itself.

Each operator runs unprepared and prepared, three calls in a row (x1, x1 again, then
x2): a compiled function does not run f again, so a stale aux would show on the
third call. Derivatives are checked against closed forms; aux against its closed
form too, and for its kind (no JAX tracer, no torch graph, no autograd box escapes
diffiface's inner pass). Then the array kinds of x, several tangents, outer
differentiations (jax.grad, jax.jit, torch.autograd with a Constant or FixedParams
that requires grad, autograd.grad, diffiface's own outer call), the number of calls
of f, and the errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, assert_tree_close, namespace, native, to_numpy

import diffiface as di
from diffiface.core.operator import OPS, of_family
from diffiface.testing._calls import expected, parts, point_kind, prepare_of, tangent_args
from diffiface.testing._scenario import OPERATORS

X1 = np.array([0.3, -0.7, 1.1])
X2 = np.array([-0.4, 0.9, 0.25])
XB1 = np.array([[0.3, -0.7, 1.1], [0.2, 0.5, -0.9]])
XB2 = np.array([[-0.4, 0.9, 0.25], [1.3, -0.1, 0.6]])
S1, S2 = np.array(0.6), np.array(-1.2)
V = np.array([0.5, -1.0, 2.0])
V2 = np.array([-1.5, 0.25, 0.75])
W = np.array([1.0, 0.5, -2.0])
W2 = np.array([0.0, -1.0, 3.0])


# ---- the functions (one set for every backend) and their closed forms -------------
def f_scalar(x):
    """sum(sin(x) x), aux: x**2 and the value."""
    y = (namespace(x).sin(x) * x).sum()
    return y, {"sq": x**2, "y": y}


def f_vec(x):
    """sin(x) sum(x), aux: x**2 and the value."""
    y = namespace(x).sin(x) * x.sum()
    return y, {"sq": x**2, "y": y}


def f_batch(x):
    """f_vec on each row of x."""
    y = namespace(x).sin(x) * x.sum(-1)[:, None]
    return y, {"sq": x**2, "y": y}


def y_s(x):
    return np.sum(np.sin(x) * x)


def g_s(x):
    return np.cos(x) * x + np.sin(x)


def h_s(x):
    d = 2 * np.cos(x) - x * np.sin(x)
    return d if np.ndim(x) == 0 else np.diag(d)


def y_v(x):
    return np.sin(x) * x.sum()


def j_v(x):
    return np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None]


def y_b(x):
    return np.stack([y_v(r) for r in x])


def j_b(x):
    return np.stack([j_v(r) for r in x])


# each point kind (an operator's kind, tangent and results come from its declaration):
# the function and two points
FUNCTIONS = {"scalar_y": f_scalar, "vector": f_vec, "scalar_x": f_scalar, "batch": f_batch}
POINTS = {"scalar_y": (X1, X2), "vector": (X1, X2), "scalar_x": (S1, S2), "batch": (XB1, XB2)}


def refs(op, x, t=None):
    """The closed-form result parts at x for ``op``'s kind (t: its tangent, if any)."""
    kind = point_kind(op)
    tangent = {} if t is None else {OPS[op].tangent: t}
    if kind == "vector":
        return parts(y_v(x), j_v(x), **tangent)
    if kind == "batch":
        return parts(y_b(x), j_b(x))
    return parts(y_s(x), g_s(x), h_s(x), **tangent)


def reference(op, x, t=None):
    return expected(op, refs(op, x, t))


def _mark(*mods):
    missing = [m for m in mods if not HAVE[m]]
    return [pytest.mark.skip(f"{missing[0]} missing")] if missing else []


FIRST_BACKENDS = [
    pytest.param(di.AutoJax(), id="jax", marks=_mark("jax")),
    pytest.param(di.AutoTorch(), id="torch", marks=_mark("torch")),
    pytest.param(di.AutoAutograd(), id="autograd", marks=_mark("autograd")),
    pytest.param(di.AutoFiniteDifferences(), id="FD"),
]
SECOND_BACKENDS = [
    *FIRST_BACKENDS,
    pytest.param(
        di.second_order(di.AutoJax(mode="forward"), di.AutoJax(mode="reverse")),
        id="jax-fwd-over-rev",
        marks=_mark("jax"),
    ),
    pytest.param(
        di.second_order(di.AutoTorch(mode="forward"), di.AutoTorch(mode="reverse")),
        id="torch-fwd-over-rev",
        marks=_mark("torch"),
    ),
    pytest.param(
        di.second_order(di.AutoAutograd(mode="reverse"), di.AutoAutograd(mode="reverse")),
        id="autograd-rev-over-rev",
        marks=_mark("autograd"),
    ),
    pytest.param(
        di.second_order(di.AutoFiniteDifferences(), di.AutoJax()),
        id="FD-over-jax",
        marks=_mark("jax"),
    ),
    pytest.param(
        di.second_order(di.AutoFiniteDifferences(), di.AutoTorch()),
        id="FD-over-torch",
        marks=_mark("torch"),
    ),
    pytest.param(
        di.second_order(di.AutoJax(), di.AutoTorch()),
        id="jax-over-torch",
        marks=_mark("jax", "torch"),
    ),
]
# prepared and unprepared everywhere, but for the explicit JAX combination, whose
# prepared calls compile what AutoJax()'s do (forward over reverse), to save time; a
# second_order of two frameworks takes no prep
CASES = [
    pytest.param(op, *b.values, prepared, id=f"{op}-{b.id}-{name}", marks=b.marks)
    for op in OPERATORS
    for b in (SECOND_BACKENDS if OPS[op].second else FIRST_BACKENDS)
    for prepared, name in ((False, "unprepared"), (True, "prepared"))
    if not (prepared and b.id in ("jax-fwd-over-rev", "jax-over-torch"))
]


def framework_backend(backend):
    """The backend whose arrays f sees (the inner one of a second_order)."""
    return backend.inner if isinstance(backend, di.SecondOrder) else backend


def point_backend(backend):
    """The backend whose arrays x is given as: NumPy for finite differences over AD."""
    if isinstance(backend, di.SecondOrder) and backend.differences_over_ad:
        return backend.outer
    return framework_backend(backend)


def tol(backend, second=False):
    """AD 1e-10; finite differences 1e-6 (first order, and over an AD gradient); finite
    differences of finite differences 1e-4."""
    if isinstance(backend, di.AutoFiniteDifferences):
        return 1e-4 if second else 1e-6
    if isinstance(backend, di.SecondOrder) and "finite_differences" in (
        backend.outer.framework,
        backend.inner.framework,
    ):
        return 1e-6
    return 1e-10


def assert_plain(a, framework):
    """``a`` is a plain array of ``framework``: no tracer, no graph, no box."""
    if framework == "jax":
        import jax

        assert isinstance(a, jax.Array), type(a)
        assert not isinstance(a, jax.core.Tracer), type(a)
    elif framework == "torch":
        import torch

        assert isinstance(a, torch.Tensor), type(a)
        assert not a.requires_grad
        assert not _functorch_wrapped(a), a
    else:
        assert isinstance(a, np.ndarray | np.generic), type(a)


def _functorch_wrapped(a):
    """A torch.func wrapper (GradTrackingTensor, ...) escaped from a transform."""
    from torch._C._functorch import is_functorch_wrapped_tensor

    return is_functorch_wrapped_tensor(a)


def check_aux(aux, framework, x, y, rtol=1e-12):
    """aux is f's aux at x: {"sq": x**2, "y": f(x)}, plain arrays of the framework."""
    assert isinstance(aux, dict) and sorted(aux) == ["sq", "y"], aux
    for leaf in aux.values():
        assert_plain(leaf, framework)
    np.testing.assert_allclose(to_numpy(aux["sq"]), x**2, rtol=rtol, atol=rtol / 100)
    np.testing.assert_allclose(to_numpy(aux["y"]), y, rtol=rtol, atol=rtol / 100)


# ---- every operator x every backend, unprepared and prepared -----------------------
@pytest.mark.parametrize(("op", "backend", "prepared"), CASES)
def test_every_operator_returns_fresh_aux(op, backend, prepared):
    f, (p1, p2) = FUNCTIONS[point_kind(op)], POINTS[point_kind(op)]
    fw = framework_backend(backend)
    pb = point_backend(backend)
    x1, x2 = native(pb, p1), native(pb, p2)
    (t,) = tangent_args(op, V, W) or (None,)
    tt = () if t is None else (native(pb, t),)
    kw = {}
    if prepared:
        kw["prep"] = prepare_of(op)(f, backend, x1, *tt, has_aux=True)
    second = OPS[op].second
    for x, p in ((x1, p1), (x1, p1), (x2, p2)):
        res, aux = getattr(di, op)(f, backend, x, *tt, has_aux=True, **kw)
        want = reference(op, p, t)
        assert_tree_close(
            tuple(map(to_numpy, res)) if isinstance(want, tuple) else to_numpy(res),
            want,
            rtol=tol(backend, second),
            atol=tol(backend, second),
        )
        check_aux(aux, fw.framework, p, refs(op, p)["value"])


# ---- the array kinds of x ----------------------------------------------------------
def _kinds():
    m = np.array([[0.3, -0.7, 1.1], [0.2, 0.5, -0.9]])
    wide = np.arange(12.0).reshape(2, 6) / 7 - 0.5
    return {
        "numpy": X1.copy(),
        "fortran": np.asfortranarray(m),
        "strided": wide[:, ::2],
        "0d": np.array(0.4),
    }


KINDS = _kinds()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_numpy_kinds_of_x(backend, kind):
    """NumPy points (also F-ordered, strided, 0-d) into every backend: results NumPy and
    shaped like x, aux right; prepared too."""
    x = KINDS[kind]
    assert not (kind in ("fortran", "strided") and x.flags.c_contiguous)
    prep = di.prepare_gradient(f_scalar, backend, x, has_aux=True)
    for kw in ({}, {"prep": prep}):
        (y, g), aux = di.value_and_gradient(f_scalar, backend, x, has_aux=True, **kw)
        assert isinstance(g, np.ndarray) and g.shape == x.shape, (type(g), np.shape(g))
        t = tol(backend)
        np.testing.assert_allclose(g, g_s(x), rtol=t, atol=t)
        np.testing.assert_allclose(to_numpy(y), y_s(x), rtol=1e-12)
        check_aux(aux, backend.framework, x, y_s(x))
    v = np.ones_like(x)
    (y, t_out), aux = di.value_and_jvp(f_scalar, backend, x, v, has_aux=True)
    np.testing.assert_allclose(to_numpy(t_out), (g_s(x) * v).sum(), rtol=tol(backend))
    check_aux(aux, backend.framework, x, y_s(x))


@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_derivative_at_python_float_and_0d(backend):
    """A Python float is the framework's default float (float32 for torch)."""
    f32 = backend.framework == "torch"
    for x in (0.6, native(backend, S1)):
        t = 2e-5 if f32 and isinstance(x, float) else tol(backend)
        for _ in range(2):
            (y, d), aux = di.value_and_derivative(f_scalar, backend, x, has_aux=True)
            np.testing.assert_allclose(float(to_numpy(d)), g_s(0.6), rtol=t)
            np.testing.assert_allclose(float(to_numpy(y)), y_s(0.6), rtol=min(t, 1e-6))
            check_aux(aux, backend.framework, np.array(0.6), y_s(0.6), rtol=min(t, 1e-6))
    t = 2e-5 if f32 else tol(backend, True)
    d2, aux = di.second_derivative(f_scalar, backend, 0.6, has_aux=True)
    np.testing.assert_allclose(float(to_numpy(d2)), h_s(0.6), rtol=t)
    check_aux(aux, backend.framework, np.array(0.6), y_s(0.6), rtol=min(t, 1e-6))


# ---- several tangents --------------------------------------------------------------
# the families that take a Tangents of several (declared ``several``), each with its
# variant that returns one more part first (value_and_jvp, gradient_and_hvp, ...)
TANGENT_FAMILIES = sorted({d.family for d in OPS.values() if d.several is not None})
SECOND_TANGENTS = {"v": V2, "w": W2}


def _with_one_more(family):
    return next(op for op in of_family(family) if len(OPS[op].returns) == 2)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("op", TANGENT_FAMILIES)
@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_tangents_with_aux(backend, op, prepared):
    f = FUNCTIONS[point_kind(op)]
    ts = (*tangent_args(op, V, W), SECOND_TANGENTS[OPS[op].tangent])
    tangents = di.Tangents(*(native(backend, t) for t in ts))
    x1, x2 = native(backend, X1), native(backend, X2)
    kw = {}
    if prepared:
        kw["prep"] = prepare_of(op)(f, backend, x1, tangents, has_aux=True)
    t = tol(backend, OPS[op].second)
    for x, p in ((x1, X1), (x1, X1), (x2, X2)):
        res, aux = getattr(di, op)(f, backend, x, tangents, has_aux=True, **kw)
        assert isinstance(res, di.Tangents) and len(res) == 2
        for r, direction in zip(res, ts, strict=True):
            np.testing.assert_allclose(to_numpy(r), reference(op, p, direction), rtol=t, atol=t)
        check_aux(aux, backend.framework, p, refs(op, p)["value"])
    variant = _with_one_more(op)
    (first, res), aux = getattr(di, variant)(f, backend, x2, tangents, has_aux=True)
    want = reference(variant, X2, ts[0])[0]  # the value, or the gradient
    np.testing.assert_allclose(to_numpy(first), want, rtol=tol(backend), atol=tol(backend))
    for r, direction in zip(res, ts, strict=True):
        np.testing.assert_allclose(to_numpy(r), reference(op, X2, direction), rtol=t, atol=t)
    check_aux(aux, backend.framework, X2, refs(op, X2)["value"])


# ---- a new shape of x on the second call ------------------------------------------
@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_aux_follows_the_shape_of_x(backend):
    for n in (3, 5, 3):
        p = np.linspace(-1.0, 1.2, n)
        (y, g), aux = di.value_and_gradient(f_scalar, backend, native(backend, p), has_aux=True)
        np.testing.assert_allclose(to_numpy(y), y_s(p), rtol=1e-12)
        np.testing.assert_allclose(to_numpy(g), g_s(p), rtol=tol(backend), atol=tol(backend))
        check_aux(aux, backend.framework, p, y_s(p))
        j, aux = di.jacobian(f_vec, backend, native(backend, p), has_aux=True)
        np.testing.assert_allclose(to_numpy(j), j_v(p), rtol=tol(backend), atol=tol(backend))
        check_aux(aux, backend.framework, p, y_v(p))


# ---- the same f with and without has_aux ------------------------------------------
@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_same_f_with_and_without_has_aux(backend):
    """Without has_aux, f's pair is a pytree output (derivative and jvp take one); with
    has_aux, its first item is the output. The layout recorded by one call must not
    split the results of the other (same f, same shapes)."""
    s, x = native(backend, S1), native(backend, X1)
    t = tol(backend)
    for _ in range(2):
        d, d_aux = di.derivative(f_scalar, backend, s)  # the pair, differentiated
        np.testing.assert_allclose(to_numpy(d), g_s(S1), rtol=t)
        np.testing.assert_allclose(to_numpy(d_aux["sq"]), 2 * S1, rtol=t)
        (y, d), aux = di.value_and_derivative(f_scalar, backend, s, has_aux=True)
        np.testing.assert_allclose(to_numpy(y), y_s(S1), rtol=1e-12)
        np.testing.assert_allclose(to_numpy(d), g_s(S1), rtol=t)
        check_aux(aux, backend.framework, S1, y_s(S1))
        jv, jv_aux = di.jvp(f_vec, backend, x, native(backend, V))
        np.testing.assert_allclose(to_numpy(jv), j_v(X1) @ V, rtol=t, atol=t)
        np.testing.assert_allclose(to_numpy(jv_aux["sq"]), 2 * X1 * V, rtol=t, atol=t)
        jv, aux = di.jvp(f_vec, backend, x, native(backend, V), has_aux=True)
        np.testing.assert_allclose(to_numpy(jv), j_v(X1) @ V, rtol=t, atol=t)
        check_aux(aux, backend.framework, X1, y_v(X1))


@pytest.mark.parametrize("backend", SECOND_BACKENDS)
def test_value_gradient_and_hvp_without_aux(backend):
    """The value comes out of the gradient-and-hvp pass on every combination."""
    pb = point_backend(backend)

    def f(x):
        return f_scalar(x)[0]

    y, g, hv = di.value_gradient_and_hvp(f, backend, native(pb, X1), native(pb, V))
    t = tol(backend, True)
    np.testing.assert_allclose(float(to_numpy(y)), y_s(X1), rtol=1e-12)
    np.testing.assert_allclose(to_numpy(g), g_s(X1), rtol=t, atol=t)
    np.testing.assert_allclose(to_numpy(hv), h_s(X1) @ V, rtol=t, atol=t)


# ---- how often f runs (torch: once per call) ---------------------------------------
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize(
    "op", ["gradient", "value_and_gradient", "jvp", "vjp", "hvp", "value_and_jvp"]
)
def test_torch_calls_f_once(op, prepared):
    torch = pytest.importorskip("torch")
    calls = []

    def f(x):
        calls.append(1)
        return f_scalar(x)

    backend = di.AutoTorch()
    x = torch.tensor(X1)
    t = () if op in ("gradient", "value_and_gradient") else (torch.tensor(V),)
    if op == "vjp":
        t = (torch.tensor(1.5, dtype=torch.float64),)
    family = {"value_and_gradient": "gradient", "value_and_jvp": "jvp"}.get(op, op)
    kw = (
        {"prep": getattr(di, f"prepare_{family}")(f, backend, x, *t, has_aux=True)}
        if prepared
        else {}
    )
    for _ in range(2):
        del calls[:]
        _, aux = getattr(di, op)(f, backend, x, *t, has_aux=True, **kw)
        assert len(calls) == 1, f"{op} ran f {len(calls)} times"
        check_aux(aux, "torch", X1, y_s(X1))


# ---- outer differentiation: JAX -------------------------------------------------------
def _outer_reference(x):
    """d/dx [sum(g(x)**2) + sum(aux["sq"])] with g the gradient of f_scalar (H diagonal)."""
    return 2 * g_s(x) * np.diag(h_s(x)) + 2 * x


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_inside_jax_grad_aux_is_the_outer_trace(prepared):
    jax = pytest.importorskip("jax")
    b = di.AutoJax()
    prep = (
        di.prepare_gradient(f_scalar, b, jax.numpy.asarray(X1), has_aux=True) if prepared else None
    )

    def outer(x):
        g, aux = di.gradient(f_scalar, b, x, has_aux=True, prep=prep)
        return (g**2).sum() + aux["sq"].sum(), aux  # aux differentiated by the outer grad

    @jax.jit
    def outer_ref(x):
        def inner(x):
            g, aux = jax.grad(f_scalar, has_aux=True)(x)
            return (g**2).sum() + aux["sq"].sum(), aux

        return jax.grad(inner, has_aux=True)(x)

    for p in (X1, X2):
        got, aux = jax.grad(outer, has_aux=True)(jax.numpy.asarray(p))
        want, aux_ref = outer_ref(jax.numpy.asarray(p))
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(got, _outer_reference(p), rtol=1e-10)
        check_aux(aux, "jax", p, y_s(p))
        assert_tree_close(aux, aux_ref)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("op", ["gradient", "hvp", "jacobian"])
def test_inside_jax_jit_aux_follows_x(op, prepared):
    jax = pytest.importorskip("jax")
    b = di.AutoJax()
    f = FUNCTIONS[point_kind(op)]
    (t,) = tangent_args(op, V, W) or (None,)
    tt = () if t is None else (jax.numpy.asarray(t),)
    prep = None
    if prepared:
        prep = prepare_of(op)(f, b, jax.numpy.asarray(X1), *tt, has_aux=True)
    calls = []

    @jax.jit
    def run(x):
        calls.append(1)
        return getattr(di, op)(f, b, x, *tt, has_aux=True, prep=prep)

    for p in (X1, X2, X1):  # one trace: the compiled function gives each x its own aux
        res, aux = run(jax.numpy.asarray(p))
        np.testing.assert_allclose(res, reference(op, p, t), rtol=1e-10, atol=1e-12)
        check_aux(aux, "jax", p, refs(op, p)["value"])
    assert len(calls) == 1


# ---- outer differentiation: torch ---------------------------------------------------
C = np.array([0.5, -1.5, 2.0])
U = np.array([1.0, 2.0, -0.5])


def f_c(x, c):
    y = (namespace(x).sin(x) * c).sum()
    return y, c * x


TORCH_OUTER = {
    # op: (tangent, prepare_ function, result -> one tensor R; d/dc of sum(R * U) + sum(aux * U)
    # in closed form (f_c: y = sum(sin(x) c), g = cos(x) c, H = diag(-sin(x) c), aux = c x)
    "gradient": (None, "gradient", lambda r: r, lambda x, v: np.cos(x) * U + x * U),
    "value_and_gradient": (
        None,
        "gradient",
        lambda r: r[1] + r[0],
        lambda x, v: np.cos(x) * U + np.sin(x) * U.sum() + x * U,
    ),
    "jvp": (V, "jvp", lambda r: r, lambda x, v: np.cos(x) * v * U.sum() + x * U),
    "vjp": (np.array(1.5), "vjp", lambda r: r, lambda x, v: 1.5 * np.cos(x) * U + x * U),
    "hvp": (V, "hvp", lambda r: r, lambda x, v: -np.sin(x) * v * U + x * U),
    "value_gradient_and_hvp": (
        V,
        "hvp",
        lambda r: r[0] + r[1] + r[2],
        lambda x, v: np.sin(x) * U.sum() + np.cos(x) * U - np.sin(x) * v * U + x * U,
    ),
    "hessian": (None, "hessian", lambda r: r.sum(0), lambda x, v: -np.sin(x) * U + x * U),
}


def _torch_f_ctx(how, c):
    if how == "Constant":
        return f_c, (di.Constant(c),)
    return di.FixedParams(f_c, c), ()


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("how", ["Constant", "FixedParams"])
@pytest.mark.parametrize("op", sorted(TORCH_OUTER))
def test_inside_torch_autograd_aux_is_attached(op, how, prepared):
    """c requires grad: the outer pass differentiates the result and the aux (both
    attached to c's graph, and plain tensors, no torch.func wrapper)."""
    torch = pytest.importorskip("torch")
    b = di.AutoTorch()
    t, family, one, ref = TORCH_OUTER[op]
    tt = () if t is None else (torch.tensor(t),)
    x = torch.tensor(X1)
    kw = {}
    if prepared:
        f, ctx = _torch_f_ctx(how, torch.tensor(C))
        kw["prep"] = getattr(di, f"prepare_{family}")(f, b, x, *tt, *ctx, has_aux=True)
    for _ in range(2):
        c = torch.tensor(C, requires_grad=True)
        f, ctx = _torch_f_ctx(how, c)
        res, aux = getattr(di, op)(f, b, x, *tt, *ctx, has_aux=True, **kw)
        for a in (aux, *(res if isinstance(res, tuple) else (res,))):
            assert not _functorch_wrapped(a), a
        assert aux.requires_grad  # the outer pass tracks the call: aux attached
        np.testing.assert_allclose(aux.detach().numpy(), C * X1, rtol=1e-12)
        u = torch.tensor(U)
        (dc,) = torch.autograd.grad((one(res) * u).sum() + (aux * u).sum(), c)
        np.testing.assert_allclose(dc.numpy(), ref(X1, t), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "op",
    [
        "gradient",
        "value_and_gradient",
        "jvp",
        "vjp",
        "hvp",
        "value_gradient_and_hvp",
        "hessian",
    ],
)
def test_under_torch_no_grad_aux_is_detached(op):
    torch = pytest.importorskip("torch")
    t = TORCH_OUTER[op][0]
    tt = () if t is None else (torch.tensor(t),)
    c = torch.tensor(C, requires_grad=True)
    with torch.no_grad():  # no outer pass, though c requires grad
        res, aux = getattr(di, op)(
            f_c, di.AutoTorch(), torch.tensor(X1), *tt, di.Constant(c), has_aux=True
        )
    assert not aux.requires_grad and not _functorch_wrapped(aux)
    for r in res if isinstance(res, tuple) else (res,):
        assert not r.requires_grad


def test_inside_torch_func_grad_aux_is_the_outer_level():
    """diffiface inside torch.func.grad (over c): aux is the outer transform's value and
    comes out of it plain."""
    torch = pytest.importorskip("torch")
    x, u = torch.tensor(X1), torch.tensor(U)

    def outer(c):
        g, aux = di.gradient(f_c, di.AutoTorch(), x, di.Constant(c), has_aux=True)
        return (g * u).sum() + (aux * u).sum(), aux

    dc, aux = torch.func.grad(outer, has_aux=True)(torch.tensor(C))
    np.testing.assert_allclose(dc.numpy(), np.cos(X1) * U + X1 * U, rtol=1e-10)
    assert_plain(aux, "torch")
    np.testing.assert_allclose(aux.numpy(), C * X1, rtol=1e-12)


def test_torch_aux_detached_when_x_requires_no_grad():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X1)
    for op in ("gradient", "hessian", "jacobian"):
        f = f_vec if op == "jacobian" else f_scalar
        _, aux = getattr(di, op)(f, di.AutoTorch(), x, has_aux=True)
        assert not aux["sq"].requires_grad and not aux["y"].requires_grad, op


# ---- outer differentiation: autograd and diffiface itself --------------------------
def test_inside_autograd_grad():
    autograd = pytest.importorskip("autograd")
    b = di.AutoAutograd()
    seen = []

    def outer(x):
        g, aux = di.gradient(f_scalar, b, x, has_aux=True)
        seen.append(aux)
        return (g**2).sum() + aux["sq"].sum()

    for p in (X1, X2):
        got = autograd.grad(outer)(p)
        np.testing.assert_allclose(got, _outer_reference(p), rtol=1e-10)
    # inside the outer pass, aux carries the outer box (it is differentiated above)
    assert type(seen[0]["sq"]).__name__ == "ArrayBox"


@pytest.mark.parametrize("outer_aux", [False, True], ids=["plain", "outer-has_aux"])
@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_diffiface_outer_over_inner_with_aux(backend, outer_aux):
    def outer(x):
        g, aux = di.gradient(f_scalar, backend, x, has_aux=True)
        out = (g**2).sum() + aux["sq"].sum()
        return (out, aux) if outer_aux else out

    t = 1e-4 if backend.framework == "finite_differences" else 1e-10
    for p in (X1, X2):
        got = di.gradient(outer, backend, native(backend, p), has_aux=outer_aux)
        if outer_aux:
            got, aux = got
            check_aux(aux, backend.framework, p, y_s(p))
        np.testing.assert_allclose(to_numpy(got), _outer_reference(p), rtol=t, atol=t)


def test_jax_grad_over_finite_differences_with_aux():
    """A finite-differences inner call crosses the bridge; its aux comes back too."""
    jax = pytest.importorskip("jax")

    def outer(x):
        g, aux = di.gradient(f_scalar, di.AutoFiniteDifferences(), x, has_aux=True)
        return g.sum() + aux["sq"].sum()

    got = jax.grad(outer)(jax.numpy.asarray(X1))
    np.testing.assert_allclose(got, np.diag(h_s(X1)) + 2 * X1, rtol=1e-5)


# ---- errors -------------------------------------------------------------------------
NOT_PAIRS = {
    "array": lambda x: (x**2).sum(),
    "triple": lambda x: ((x**2).sum(), x, x),
    "list": lambda x: [(x**2).sum(), x],
}


@pytest.mark.parametrize("what", sorted(NOT_PAIRS))
@pytest.mark.parametrize("op", ["gradient", "jvp", "hessian", "jacobian"])
@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_aux_not_a_pair(backend, op, what):
    x = native(backend, X1)
    t = (native(backend, V),) if op == "jvp" else ()
    with pytest.raises(di.DiffifaceTypeError, match="has_aux"):
        getattr(di, op)(NOT_PAIRS[what], backend, x, *t, has_aux=True)


@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_tuple_output_without_has_aux_names_it(backend):
    x = native(backend, X1)
    for op in ("gradient", "hessian", "value_and_gradient"):
        with pytest.raises(di.DiffifaceTypeError, match=r"has_aux=True"):
            getattr(di, op)(f_scalar, backend, x)


@pytest.mark.parametrize("backend", FIRST_BACKENDS)
def test_prep_and_call_must_agree_on_has_aux(backend):
    x = native(backend, X1)
    with_aux = di.prepare_gradient(f_scalar, backend, x, has_aux=True)
    with pytest.raises(di.DiffifaceValueError, match="has_aux"):
        di.gradient(f_scalar, backend, x, prep=with_aux)
    with pytest.raises(di.DiffifaceValueError, match="has_aux"):
        di.value_and_gradient(f_scalar, backend, x, prep=with_aux, has_aux=False)

    def plain(x):
        return (x**2).sum()

    without = di.prepare_gradient(plain, backend, x)
    with pytest.raises(di.DiffifaceValueError, match="has_aux"):
        di.gradient(plain, backend, x, prep=without, has_aux=True)
    np.testing.assert_allclose(to_numpy(di.gradient(plain, backend, x, prep=without)), 2 * X1)


@pytest.mark.parametrize("value", [1, 0, None, "yes", np.True_])
def test_has_aux_must_be_a_bool(value):
    x = X1.copy()
    b = di.AutoFiniteDifferences()
    with pytest.raises(di.DiffifaceTypeError, match="has_aux"):
        di.gradient(f_scalar, b, x, has_aux=value)
    with pytest.raises(di.DiffifaceTypeError, match="has_aux"):
        di.prepare_gradient(f_scalar, b, x, has_aux=value)
    with pytest.raises(di.DiffifaceTypeError, match="has_aux"):
        di.jvp(f_vec, b, x, V, has_aux=value)


def test_torch_aux_keeps_the_outer_graph_of_a_closure():
    """aux computed from a tensor an outer pass tracks stays on that graph (as
    torch.func.grad(has_aux=True) leaves it), while the part from this call's own leaves
    is detached; an outer leaf in aux comes back as itself."""
    torch = pytest.importorskip("torch")
    w = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    x = torch.tensor(X1)

    def f(x):
        return (x**2).sum(), {"w2": w**2, "x": x.sum(), "w": w}

    g, aux = di.gradient(f, di.AutoTorch(), x, has_aux=True)
    want = torch.func.grad(f, has_aux=True)(x)[1]
    assert aux["w2"].requires_grad and want["w2"].requires_grad
    assert not aux["x"].requires_grad and aux["w"] is w
    (dw,) = torch.autograd.grad(aux["w2"], w)
    assert float(dw) == 4.0
    np.testing.assert_allclose(g.numpy(), 2 * X1, rtol=1e-12)
