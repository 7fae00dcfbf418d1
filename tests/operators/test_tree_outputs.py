"""Pytree outputs: jvp, vjp, jacobian, batched_jacobian, derivative and their value
variants give results shaped like f(x)'s pytree (dicts, namedtuples, tuples), vjp
takes a cotangent pytree like f(x), and the jacobian of a pytree-in, pytree-out f
nests as ``jax.jacobian`` does (f(x)'s structure outside, x's inside).

Every operator runs on every backend, unprepared and prepared, three calls in a row
(x1, x1 again, x2): a compiled function does not run f again, so the recorded layout
of the output must serve the later calls, and follow a new shape of x. References are
closed forms (and ``jax.jacobian`` for the nesting). Then mixed float dtypes, several
tangents, has_aux with a pytree output, NumPy kinds of x, outer differentiations and
the errors.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
from helpers import HAVE, assert_tree_close, namespace, native, to_numpy

import diffiface as di
from diffiface.core.operator import OPS
from diffiface.testing._calls import TREE_FAMILIES, expected, point_kind, prepare_of, tangent_args

X1 = np.array([0.3, -0.7, 1.1])
X2 = np.array([-0.4, 0.9, 0.25])
XB1 = np.array([[0.3, -0.7, 1.1], [0.2, 0.5, -0.9]])
XB2 = np.array([[-0.4, 0.9, 0.25], [1.3, -0.1, 0.6]])
S1, S2 = np.array(0.6), np.array(-1.2)
V = np.array([0.5, -1.0, 2.0])
V2 = np.array([-1.5, 0.25, 0.75])

P = namedtuple("P", ["u", "w"])


def _mark(*mods):
    missing = [m for m in mods if not HAVE[m]]
    return [pytest.mark.skip(f"{missing[0]} missing")] if missing else []


BACKENDS = [
    pytest.param(di.AutoJax(), id="jax", marks=_mark("jax")),
    pytest.param(di.AutoTorch(), id="torch", marks=_mark("torch")),
    pytest.param(di.AutoAutograd(), id="autograd", marks=_mark("autograd")),
    pytest.param(di.AutoFiniteDifferences(), id="FD"),
]
MODED = [
    pytest.param(cls(mode=m), id=f"{mod}-{m}", marks=_mark(mod))
    for cls, mod in ((di.AutoJax, "jax"), (di.AutoTorch, "torch"), (di.AutoAutograd, "autograd"))
    for m in ("forward", "reverse")
]


def tol(backend):
    """AD 1e-10, finite differences 1e-6 (float64)."""
    return 1e-6 if backend.framework == "finite_differences" else 1e-10


def close(got, want, backend, **kw):
    t = kw.pop("t", tol(backend))
    assert_tree_close(as_numpy(got), want, rtol=t, atol=t)


def as_numpy(tree):
    """Leaves as NumPy, the containers (dict, tuple, namedtuple, list) kept."""
    if isinstance(tree, dict):
        return {k: as_numpy(v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(as_numpy(v) for v in tree))
    if isinstance(tree, list | tuple):
        return type(tree)(as_numpy(v) for v in tree)
    return to_numpy(tree)


def tree_map(fn, *trees):
    t = trees[0]
    if isinstance(t, dict):
        return {k: tree_map(fn, *(u[k] for u in trees)) for k in t}
    if isinstance(t, tuple) and hasattr(t, "_fields"):
        return type(t)(*(tree_map(fn, *parts) for parts in zip(*trees, strict=True)))
    if isinstance(t, list | tuple):
        return type(t)(tree_map(fn, *parts) for parts in zip(*trees, strict=True))
    return fn(*trees)


def leaves(tree):
    if isinstance(tree, dict):
        return [a for k in tree for a in leaves(tree[k])]
    if isinstance(tree, list | tuple):
        return [a for v in tree for a in leaves(v)]
    return [tree]


# ---- f with a pytree output, and its closed forms ----------------------------------
def f_tree(x):
    """A dict holding a vector, a scalar and a namedtuple of a vector and a matrix."""
    return {
        "a": namespace(x).sin(x) * x.sum(),
        "b": (x**2).sum(),
        "c": P(x[:2] * x[1:], x[:, None] * x[None, :]),
    }


def y_tree(x):
    return {"a": np.sin(x) * x.sum(), "b": (x**2).sum(), "c": P(x[:2] * x[1:], np.outer(x, x))}


def j_tree(x):
    """Each leaf: out_leaf.shape + x.shape."""
    n = x.size
    ju = np.zeros((2, n))
    for i in range(2):
        ju[i, i], ju[i, i + 1] = x[i + 1], x[i]
    eye = np.eye(n)
    jw = eye[:, None, :] * x[None, :, None] + x[:, None, None] * eye[None, :, :]
    ja = np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None]
    return {"a": ja, "b": 2 * x, "c": P(ju, jw)}


def jvp_tree(x, v):
    return tree_map(lambda j: np.tensordot(j, v, axes=1), j_tree(x))


def vjp_tree(x, w):
    parts = tree_map(lambda j, c: np.tensordot(c, j, axes=np.ndim(c)), j_tree(x), w)
    return sum(leaves(parts))


W1 = {"a": np.array([1.0, 0.5, -2.0]), "b": np.array(1.5), "c": P(np.array([0.3, -0.4]), np.eye(3))}
W2 = tree_map(lambda a: -2 * a + 0.1, W1)


def f_btree(x):
    """f per row: a dict of a vector and a scalar per sample."""
    return {"a": namespace(x).sin(x) * x.sum(-1)[:, None], "b": (x**2).sum(-1)}


def y_btree(x):
    return {"a": np.sin(x) * x.sum(-1)[:, None], "b": (x**2).sum(-1)}


def j_btree(x):
    rows = [j_tree(r) for r in x]
    return {"a": np.stack([r["a"] for r in rows]), "b": np.stack([r["b"] for r in rows])}


def f_dtree(x):
    """Of a scalar x: a tuple of a scalar and a vector."""
    ns = namespace(x)
    return (ns.sin(x) * x, ns.stack([x, x**2, x**3]))


def y_dtree(x):
    return (np.sin(x) * x, np.array([x, x**2, x**3]))


def d_dtree(x):
    return (np.cos(x) * x + np.sin(x), np.array([1.0, 2 * x, 3 * x**2]))


# the operators that take a pytree-output f: every operator of a family with a
# tree_output member
TREE_OPS = sorted(op for op in OPS if OPS[op].family in TREE_FAMILIES)
# each point kind (an operator's kind, tangent and results come from its declaration):
# the function and two points
FUNCTIONS = {"vector": f_tree, "scalar_x": f_dtree, "batch": f_btree}
POINTS = {"vector": (X1, X2), "scalar_x": (S1, S2), "batch": (XB1, XB2)}


def reference(op, x, t=None):
    """``op``'s closed-form result at x (t: its tangent or cotangent pytree)."""
    kind = point_kind(op)
    if kind == "vector":
        refs = {"value": y_tree(x), "jacobian": j_tree(x)}
        tangent = OPS[op].tangent
        if tangent == "v":
            refs["jvp"] = jvp_tree(x, t)
        if tangent == "w":
            refs["vjp"] = vjp_tree(x, t)
    elif kind == "batch":
        refs = {"value": y_btree(x), "batched_jacobian": j_btree(x)}
    else:
        refs = {"value": y_dtree(x), "derivative": d_dtree(x)}
    return expected(op, refs)


def _native_tree(backend, t):
    return None if t is None else tree_map(lambda a: native(backend, a), t)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", TREE_OPS)
def test_every_operator_gives_the_output_tree(op, backend, prepared):
    f, (p1, p2) = FUNCTIONS[point_kind(op)], POINTS[point_kind(op)]
    x1, x2 = native(backend, p1), native(backend, p2)
    (t,) = tangent_args(op, V, W1) or (None,)
    tt = () if t is None else (_native_tree(backend, t),)
    kw = {}
    if prepared:
        kw["prep"] = prepare_of(op)(f, backend, x1, *tt)
    for x, p in ((x1, p1), (x1, p1), (x2, p2)):
        close(getattr(di, op)(f, backend, x, *tt, **kw), reference(op, p, t), backend)


@pytest.mark.parametrize("backend", MODED)
def test_jacobian_tree_in_both_modes(backend):
    close(
        di.value_and_jacobian(f_tree, backend, native(backend, X1)),
        (y_tree(X1), j_tree(X1)),
        backend,
    )


# ---- pytree in, pytree out ---------------------------------------------------------
XT = {"u": np.array([0.3, -0.7, 1.1]), "w": np.array([[0.5, -0.2], [0.1, 0.4]])}


def f_tt(t):
    """{"p": sin(u) sum(w), "q": sum(w**2) u[0]}."""
    u, w = t["u"], t["w"]
    return {"p": namespace(u).sin(u) * w.sum(), "q": (w**2).sum() * u[0]}


def j_tt(t):
    u, w = t["u"], t["w"]
    dq_du = np.zeros(3)
    dq_du[0] = (w**2).sum()
    return {
        "p": {"u": np.diag(np.cos(u) * w.sum()), "w": np.sin(u)[:, None, None] * np.ones((2, 2))},
        "q": {"u": dq_du, "w": 2 * w * u[0]},
    }


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_jacobian_pytree_in_and_out_nests_like_jax(backend, prepared):
    x = _native_tree(backend, XT)
    x2 = tree_map(lambda a: a * 1.5 - 0.1, XT)
    kw = {"prep": di.prepare_jacobian(f_tt, backend, x)} if prepared else {}
    for p in (XT, XT, x2):
        close(di.jacobian(f_tt, backend, _native_tree(backend, p), **kw), j_tt(p), backend)
        y, j = di.value_and_jacobian(f_tt, backend, _native_tree(backend, p), **kw)
        close(j, j_tt(p), backend)
        close(
            y, {"p": np.sin(p["u"]) * p["w"].sum(), "q": (p["w"] ** 2).sum() * p["u"][0]}, backend
        )


def test_closed_forms_nest_as_jax_jacobian():
    """The references themselves: jax.jacobian of the same functions nests the same."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    jac_tt, jac_tree = jax.jit(jax.jacobian(f_tt)), jax.jit(jax.jacobian(f_tree))
    assert_tree_close(as_numpy(jac_tt(tree_map(jnp.asarray, XT))), j_tt(XT))
    assert_tree_close(as_numpy(jac_tree(jnp.asarray(X1))), j_tree(X1))


# ---- a new shape of x: the layout follows ------------------------------------------
def f_ab(x):
    return {"a": x, "b": x.sum()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_layout_follows_the_shape_of_x(backend):
    """(3,), (5,), (3,) again, unprepared (JAX reuses its compiled function for (3,))."""
    for n in (3, 5, 3):
        p = np.linspace(-1.0, 1.0, n)
        x, v = native(backend, p), native(backend, np.arange(1.0, n + 1))
        close(di.jacobian(f_ab, backend, x), {"a": np.eye(n), "b": np.ones(n)}, backend)
        close(
            di.jvp(f_ab, backend, x, v), {"a": np.arange(1.0, n + 1), "b": n * (n + 1) / 2}, backend
        )
        w = {"a": v, "b": native(backend, np.array(2.0))}
        close(di.vjp(f_ab, backend, x, w), np.arange(1.0, n + 1) + 2.0, backend)
        close(di.value_and_jvp(f_ab, backend, x, v)[0], {"a": p, "b": p.sum()}, backend)


# ---- mixed float dtypes ------------------------------------------------------------
def _as32(x):
    return x.float() if hasattr(x, "detach") else x.astype(np.float32)


def f_mixed(x):
    return {"h": _as32(x) * 2, "d": namespace(x).sin(x)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_dtypes_keep_each_leafs_dtype(backend):
    x, v = native(backend, X1), native(backend, V)
    y, t = di.value_and_jvp(f_mixed, backend, x, v)
    j = di.jacobian(f_mixed, backend, x)
    for tree in (y, t, j):
        assert str(tree["h"].dtype).endswith("float32"), tree["h"].dtype
        assert str(tree["d"].dtype).endswith("float64"), tree["d"].dtype
    t32 = 2e-2 if backend.framework == "finite_differences" else 2e-6
    np.testing.assert_allclose(to_numpy(t["h"]), 2 * V, rtol=t32)
    np.testing.assert_allclose(to_numpy(t["d"]), np.cos(X1) * V, rtol=tol(backend))
    np.testing.assert_allclose(to_numpy(j["h"]), 2 * np.eye(3), rtol=t32, atol=t32)
    w = {"h": native(backend, np.ones(3, np.float32)), "d": native(backend, np.ones(3))}
    g = di.vjp(f_mixed, backend, x, w)
    assert str(g.dtype).endswith("float64")
    np.testing.assert_allclose(to_numpy(g), 2 + np.cos(X1), rtol=t32)


# ---- several tangents --------------------------------------------------------------
@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_tangents_of_trees(backend, prepared):
    x1, x2 = native(backend, X1), native(backend, X2)
    vs = di.Tangents(native(backend, V), native(backend, V2))
    ws = di.Tangents(_native_tree(backend, W1), _native_tree(backend, W2))
    kj = {"prep": di.prepare_jvp(f_tree, backend, x1, vs)} if prepared else {}
    kv = {"prep": di.prepare_vjp(f_tree, backend, x1, ws)} if prepared else {}
    for x, p in ((x1, X1), (x1, X1), (x2, X2)):
        ts = di.jvp(f_tree, backend, x, vs, **kj)
        assert isinstance(ts, di.Tangents) and len(ts) == 2
        for t, v in zip(ts, (V, V2), strict=True):
            close(t, jvp_tree(p, v), backend)
        y, gs = di.value_and_vjp(f_tree, backend, x, ws, **kv)
        close(y, y_tree(p), backend)
        assert isinstance(gs, di.Tangents) and len(gs) == 2
        for g, w in zip(gs, (W1, W2), strict=True):
            close(g, vjp_tree(p, w), backend)


# ---- has_aux with a pytree output --------------------------------------------------
def f_tree_aux(x):
    out = f_tree(x)
    return out, {"n": x**3, "b": out["b"]}


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["value_and_jvp", "vjp", "jacobian"])
def test_tree_output_with_aux(op, backend, prepared):
    (t,) = tangent_args(op, V, W1) or (None,)
    tt = () if t is None else (_native_tree(backend, t),)
    x1, x2 = native(backend, X1), native(backend, X2)
    kw = {}
    if prepared:
        kw["prep"] = prepare_of(op)(f_tree_aux, backend, x1, *tt, has_aux=True)
    for x, p in ((x1, X1), (x1, X1), (x2, X2)):
        res, aux = getattr(di, op)(f_tree_aux, backend, x, *tt, has_aux=True, **kw)
        close(res, reference(op, p, t), backend)
        close(aux, {"n": p**3, "b": (p**2).sum()}, backend, t=1e-12)


# ---- NumPy kinds of x into every backend -------------------------------------------
def f_mat(x):
    return {"t": x.T * 2, "s": x.sum(0)}


def _kinds():
    m = np.array([[0.3, -0.7, 1.1], [0.2, 0.5, -0.9]])
    wide = np.arange(12.0).reshape(2, 6) / 7 - 0.5
    return {"c": m, "fortran": np.asfortranarray(m), "strided": wide[:, ::2]}


KINDS = _kinds()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_kinds_of_x(backend, kind):
    x = KINDS[kind]
    v = np.arange(6.0).reshape(2, 3) - 2
    t = di.jvp(f_mat, backend, x, v)
    assert all(isinstance(a, np.ndarray) for a in t.values()), {k: type(a) for k, a in t.items()}
    close(t, {"t": 2 * v.T, "s": v.sum(0)}, backend)
    w = {"t": np.arange(6.0).reshape(3, 2), "s": np.array([1.0, -1.0, 2.0])}
    g = di.vjp(f_mat, backend, x, w)
    assert isinstance(g, np.ndarray) and g.shape == (2, 3)
    np.testing.assert_allclose(g, 2 * w["t"].T + w["s"][None, :], rtol=tol(backend))
    j = di.jacobian(f_mat, backend, x)
    eye2, eye3 = np.eye(2), np.eye(3)
    jt = 2 * eye3[:, None, None, :] * eye2[None, :, :, None]  # t[i,j] = 2 x[j,i]
    js = np.ones(2)[None, :, None] * eye3[:, None, :]  # s[j] = sum_k x[k,j]
    close(j, {"t": jt, "s": js}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_derivative_of_python_float(backend):
    t = 2e-5 if backend.framework == "torch" else tol(backend)  # torch: float32 default
    for _ in range(2):
        close(di.derivative(f_dtree, backend, 0.6), d_dtree(0.6), backend, t=t)
        y, d = di.value_and_derivative(f_dtree, backend, 0.6)
        close(y, y_dtree(0.6), backend, t=t)
        close(d, d_dtree(0.6), backend, t=t)


# ---- outer differentiations --------------------------------------------------------
def f_sa(x):
    return {"a": namespace(x).sin(x), "b": (x**2).sum()}


def _sum_of_jvp(jvp_tree_out):
    return jvp_tree_out["a"].sum() + jvp_tree_out["b"]


def _sum_of_jvp_grad(x, v):
    """d/dx [sum(cos(x) v) + 2 x.v]."""
    return -np.sin(x) * v + 2 * v


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
def test_inside_jax_grad_and_jit(prepared):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    b = di.AutoJax()
    v = jnp.asarray(V)
    prep = di.prepare_jvp(f_sa, b, jnp.asarray(X1), v) if prepared else None

    def s(x):
        return _sum_of_jvp(di.jvp(f_sa, b, x, v, prep=prep))

    @jax.jit
    @jax.grad
    def grad_ref(x):
        return _sum_of_jvp(jax.jvp(f_sa, (x,), (v,))[1])

    jac = jax.jit(lambda x: di.jacobian(f_tree, b, x))
    for p in (X1, X2):
        x = jnp.asarray(p)
        np.testing.assert_allclose(jax.grad(s)(x), grad_ref(x), rtol=1e-12)
        np.testing.assert_allclose(jax.grad(s)(x), _sum_of_jvp_grad(p, V), rtol=1e-10)
        close(jac(x), j_tree(p), b)


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("how", ["Constant", "FixedParams"])
def test_inside_torch_autograd(how, prepared):
    """c requires grad: jvp and vjp pytrees stay attached to c's graph."""
    torch = pytest.importorskip("torch")
    b = di.AutoTorch()
    C = np.array([0.5, -1.5, 2.0])
    U = np.array([1.0, 2.0, -0.5])

    def f(x, c):
        return {"a": torch.sin(x) * c, "b": (c * x).sum()}

    def args(c):
        return (f, (di.Constant(c),)) if how == "Constant" else (di.FixedParams(f, c), ())

    x, v, u = torch.tensor(X1), torch.tensor(V), torch.tensor(U)
    w = {"a": u, "b": torch.tensor(2.0, dtype=torch.float64)}
    kj = kv = {}
    if prepared:
        fp, ctx = args(torch.tensor(C))
        kj = {"prep": di.prepare_jvp(fp, b, x, v, *ctx)}
        kv = {"prep": di.prepare_vjp(fp, b, x, w, *ctx)}
    for _ in range(2):
        c = torch.tensor(C, requires_grad=True)
        fc, ctx = args(c)
        t = di.jvp(fc, b, x, v, *ctx, **kj)  # a = cos(x) c v, b = c.v
        (dc,) = torch.autograd.grad((t["a"] * u).sum() + t["b"], c)
        np.testing.assert_allclose(dc.numpy(), np.cos(X1) * V * U + V, rtol=1e-10)
        g = di.vjp(fc, b, x, w, *ctx, **kv)  # cos(x) c u + 2 c
        (dc,) = torch.autograd.grad((g * u).sum(), c)
        np.testing.assert_allclose(dc.numpy(), np.cos(X1) * U * U + 2 * U, rtol=1e-10)


def test_inside_torch_autograd_over_x():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X1, requires_grad=True)
    s = _sum_of_jvp(di.jvp(f_sa, di.AutoTorch(), x, torch.tensor(V)))
    (gx,) = torch.autograd.grad(s, x)
    np.testing.assert_allclose(gx.numpy(), _sum_of_jvp_grad(X1, V), rtol=1e-10)


def test_inside_autograd_grad():
    autograd = pytest.importorskip("autograd")

    def s(x):
        return _sum_of_jvp(di.jvp(f_sa, di.AutoAutograd(), x, V))

    for p in (X1, X2):
        np.testing.assert_allclose(autograd.grad(s)(p), _sum_of_jvp_grad(p, V), rtol=1e-10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_diffiface_outer_over_tree_jvp(backend):
    v = native(backend, V)

    def s(x):
        return _sum_of_jvp(di.jvp(f_sa, backend, x, v))

    t = 1e-4 if backend.framework == "finite_differences" else 1e-10
    for p in (X1, X2):
        g = di.gradient(s, backend, native(backend, p))
        np.testing.assert_allclose(to_numpy(g), _sum_of_jvp_grad(p, V), rtol=t, atol=t)


# ---- errors -------------------------------------------------------------------------
BAD_COTANGENTS = {
    "missing_key": lambda w: {"a": w["a"], "b": w["b"]},
    "extra_key": lambda w: {**w, "z": w["b"]},
    "plain_tuple": lambda w: {**w, "c": tuple(w["c"])},
    "leaf_shape": lambda w: {**w, "a": w["a"][:2]},
    "one_array": lambda w: w["a"],
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_cotangent_of_wrong_structure(backend):
    x = native(backend, X1)
    prep = di.prepare_vjp(f_tree, backend, x, _native_tree(backend, W1))
    for bad, make in BAD_COTANGENTS.items():
        w = make(_native_tree(backend, W1))
        for kw in ({}, {"prep": prep}):
            with pytest.raises(di.DiffifaceValueError, match="structure of f") as err:
                di.vjp(f_tree, backend, x, w, **kw)
            assert "expected PyTreeSpec" in str(err.value) and "got" in str(err.value), bad


def f_complex_mix(x):
    return {"r": x * 2, "c": x * (1 + 2j)}


@pytest.mark.parametrize("op", ["jvp", "jacobian", "vjp", "derivative"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_real_and_complex_leaves(backend, op):
    x = native(backend, S1 if op == "derivative" else X1)
    args = {"jvp": (native(backend, V),), "vjp": (_native_tree(backend, {"r": V, "c": V}),)}
    with pytest.raises(di.DiffifaceTypeError, match="mixing real and complex leaves"):
        getattr(di, op)(f_complex_mix, backend, x, *args.get(op, ()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_operators_reject_tree_outputs(backend):
    """gradient and hessian need one scalar: a pytree output is a clear error."""
    x = native(backend, X1)
    for op in ("gradient", "hessian"):
        with pytest.raises(di.DiffifaceTypeError, match="f must return"):
            getattr(di, op)(f_ab, backend, x)


def test_jax_pytree_output_with_a_python_float_constant():
    """A Python float Constant is traced by jax.jit: the recorded layout is found by its
    aval on both sides (it once came back unsplit, silently), also for an f compiled
    before it ever returned a pytree."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, v = jnp.asarray(X1), jnp.asarray(V)

    def f(x, c):
        return {"a": x * c, "b": x.sum()}

    for c in (2.0, 3.0, {"k": 2.0, "s": "static"}):
        k = c["k"] if isinstance(c, dict) else c
        fn = f if not isinstance(c, dict) else (lambda x, c: f(x, c["k"]))
        t = di.jvp(fn, di.AutoJax(), x, v, di.Constant(c))
        np.testing.assert_allclose(np.asarray(t["a"]), k * V, rtol=1e-12)
        np.testing.assert_allclose(float(t["b"]), V.sum(), rtol=1e-12)

    def g(x, c):  # one array for the first call, a pytree for the second signature
        return x * c if x.shape[0] == 3 else {"a": x * c}

    di.jvp(g, di.AutoJax(), x, v, di.Constant(2.0))
    t = di.jvp(g, di.AutoJax(), jnp.ones(5), jnp.ones(5), di.Constant(2.0))
    assert isinstance(t, dict)
    t = di.jvp(g, di.AutoJax(), x, v, di.Constant(2.0))  # compiled before: no record
    np.testing.assert_allclose(np.asarray(t), 2.0 * V, rtol=1e-12)


def test_layouts_survive_what_compiled_functions_survive():
    """The recorded structure of a pytree output outlives clear_caches (a prep keeps its
    compiled function), is kept per operator axis (batched_jacobian ravels per sample),
    and serves an f that cannot be weakly referenced: never a flat result."""
    jax = pytest.importorskip("jax")
    jnp, b = jax.numpy, di.AutoJax()
    f = lambda x: {"a": 2 * x, "b": x.sum()}  # noqa: E731
    prep = di.prepare_jacobian(f, b, jnp.ones(3))
    di.clear_caches()
    jac = di.jacobian(f, b, jnp.ones(3), prep=prep)
    np.testing.assert_allclose(np.asarray(jac["a"]), 2 * np.eye(3))

    g = lambda x: {"a": 2 * x, "b": x[:, :1] * 3}  # noqa: E731
    xx = jnp.ones((2, 2))
    for _ in range(2):  # a jvp between two batched calls must not change their layout
        _, jac = di.value_and_batched_jacobian(g, b, xx)
        assert jac["a"].shape == (2, 2, 2) and jac["b"].shape == (2, 1, 2)
        assert di.jvp(g, b, xx, xx)["b"].shape == (2, 1)

    class Slotted:  # no __weakref__: no cache can hold it
        __slots__ = ()

        def __call__(self, x):
            return {"a": 2 * x, "b": x.sum()}

    for backend in (di.AutoFiniteDifferences(), b):
        t = di.jvp(Slotted(), backend, np.ones(3), np.ones(3))
        np.testing.assert_allclose(np.asarray(t["a"]), 2.0)
        np.testing.assert_allclose(float(t["b"]), 3.0)
