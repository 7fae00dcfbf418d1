"""Registered pytree nodes (JAX's registry, equinox, flax.struct, optree's) as x, as
tangents and cotangents, in Constant and as FixedParams parameters: results keep the
node's type and static data, and a preparation compares the static data.

Every derivative is compared with an independent reference: JAX's own transform
on the same node (jax.grad / jax.jvp / jax.vjp, float64), or the closed form. The
ported upstream cases name their test in jax-ml/jax at commit cec06d1
(``tests/api_test.py`` APITest, ``tests/tree_util_test.py`` TreeTest / StaticTest).
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import threading

import numpy as np
import optree
import pytest
from helpers import HAVE, native, rounding, to_numpy, xp

import diffiface as di
from diffiface import _tree

HAVE_EQX = importlib.util.find_spec("equinox") is not None
HAVE_FLAX = importlib.util.find_spec("flax") is not None
needs_jax = pytest.mark.skipif(not HAVE["jax"], reason="jax missing")

W = np.array([0.3, -0.7, 1.1])
B = np.array(0.4)
V = np.array([1.0, 0.5, -2.0])


# ---------------------------------------------------------------- optree nodes
class Pair:
    """Registered with optree in the global namespace, static ``n``."""

    def __init__(self, w, b, n=2):
        self.w, self.b, self.n = w, b, n


optree.register_pytree_node(
    Pair,
    lambda p: ((p.w, p.b), p.n, ("w", "b")),
    lambda n, c: Pair(c[0], c[1], n),
    namespace=optree.registry.__dict__["__GLOBAL_NAMESPACE"],
)


@optree.dataclasses.dataclass(namespace="")
class OPair:
    w: object
    b: object
    n: int = optree.dataclasses.field(default=2, pytree_node=False)


def _f(p, np_=np):
    """n * sum(w sin w) + b * sum(w)**2, and its closed-form gradient and Hessian."""
    return p.n * (p.w * np_.sin(p.w)).sum() + p.b * p.w.sum() ** 2


def _grad(w, b, n):
    return n * (np.sin(w) + w * np.cos(w)) + 2 * b * w.sum(), w.sum() ** 2


def _hvp(w, b, n, vw, vb):
    hw = n * (2 * np.cos(w) - w * np.sin(w)) * vw + 2 * b * vw.sum() + 2 * w.sum() * vb
    return hw, 2 * w.sum() * vw.sum()


@pytest.mark.parametrize("cls", [Pair, OPair], ids=["register_pytree_node", "dataclass"])
def test_optree_nodes_on_every_backend(backend, cls):
    p = cls(native(backend, W), native(backend, B), 3)
    f = lambda p: _f(p, xp(backend))  # noqa: E731
    rtol = 1e-6 if backend.framework == "finite_differences" else rounding(backend, 1e-10)
    g = di.gradient(f, backend, p)
    assert type(g) is cls and g.n == 3
    gw, gb = _grad(W, B, 3)
    np.testing.assert_allclose(to_numpy(g.w), gw, rtol=rtol)
    np.testing.assert_allclose(to_numpy(g.b), gb, rtol=rtol)
    v = cls(native(backend, V), native(backend, np.array(1.0)), 3)
    t = di.jvp(f, backend, p, v)
    np.testing.assert_allclose(float(to_numpy(t)), gw @ V + gb, rtol=rtol)
    ts = di.jvp(f, backend, p, di.Tangents(v, v))
    np.testing.assert_allclose([float(to_numpy(a)) for a in ts], [gw @ V + gb] * 2, rtol=rtol)
    w = di.vjp(lambda p: p.w * p.b, backend, p, native(backend, V))
    assert type(w) is cls and w.n == 3
    np.testing.assert_allclose(to_numpy(w.w), V * B, rtol=rtol)
    np.testing.assert_allclose(to_numpy(w.b), V @ W, rtol=rtol)
    h = di.hvp(f, backend, p, v)
    hw, hb = _hvp(W, B, 3, V, 1.0)
    np.testing.assert_allclose(to_numpy(h.w), hw, rtol=1e-4 if rtol > 1e-9 else rtol)
    np.testing.assert_allclose(to_numpy(h.b), hb, rtol=1e-4 if rtol > 1e-9 else rtol)
    x = native(backend, V)
    for g in (
        di.gradient(lambda x, p: _f(p, xp(backend)) * (x**2).sum(), backend, x, di.Constant(p)),
        di.gradient(di.FixedParams(lambda x, p: _f(p, xp(backend)) * (x**2).sum(), p), backend, x),
    ):
        want = 2 * V * (3 * (W * np.sin(W)).sum() + B * W.sum() ** 2)
        np.testing.assert_allclose(to_numpy(g), want, rtol=rtol)


# ---------------------------------------------------------------- JAX nodes
if HAVE["jax"]:
    import jax
    import jax.numpy as jnp
    from jax import tree_util as jtu

    @jtu.register_dataclass
    @dataclasses.dataclass
    class DataNode:
        w: object
        b: object
        n: int = dataclasses.field(default=2, metadata={"static": True})

    class PlainNode:
        def __init__(self, w, b, n=2):
            self.w, self.b, self.n = w, b, n

    jtu.register_pytree_node(
        PlainNode, lambda p: ((p.w, p.b), p.n), lambda n, c: PlainNode(c[0], c[1], n)
    )

    @jtu.register_pytree_node_class
    class ClassNode(PlainNode):
        def tree_flatten(self):
            return (self.w, self.b), self.n

        @classmethod
        def tree_unflatten(cls, n, c):
            return cls(c[0], c[1], n)

    class KeysNode(PlainNode):
        pass

    jtu.register_pytree_with_keys(
        KeysNode,
        lambda p: (((jtu.GetAttrKey("w"), p.w), (jtu.GetAttrKey("b"), p.b)), p.n),
        lambda n, c: KeysNode(c[0], c[1], n),
    )

    NODES = {
        "register_dataclass": DataNode,
        "register_pytree_node": PlainNode,
        "register_pytree_node_class": ClassNode,
        "register_pytree_with_keys": KeysNode,
    }
    if HAVE_EQX:
        import equinox as eqx

        class EqxNode(eqx.Module):
            w: object
            b: object
            n: int = eqx.field(static=True, default=2)

        NODES["equinox"] = EqxNode
    if HAVE_FLAX:
        import flax.struct

        @flax.struct.dataclass
        class FlaxNode:
            w: object
            b: object
            n: int = flax.struct.field(pytree_node=False, default=2)

        NODES["flax.struct"] = FlaxNode
else:
    NODES = {"register_dataclass": None}


def _same(got, want, rtol=1e-10):
    """The same node type, treedef (static data included) and close leaves."""
    assert type(got) is type(want), (type(got), type(want))
    assert jtu.tree_structure(got) == jtu.tree_structure(want)
    for a, b in zip(jtu.tree_leaves(got), jtu.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-12)


def _jf(p):
    return _f(p, jnp)


@needs_jax
@pytest.mark.parametrize("kind", NODES)
def test_jax_nodes_against_jax(kind):
    cls, jax_b = NODES[kind], di.AutoJax()
    p = cls(jnp.asarray(W), jnp.asarray(B), 3)
    v = cls(jnp.asarray(V), jnp.asarray(1.0), 3)
    y, g = di.value_and_gradient(_jf, jax_b, p)
    _same(g, jax.grad(_jf)(p))
    assert float(y) == pytest.approx(float(_jf(p)), rel=1e-12)
    _same(di.jvp(_jf, jax_b, p, v), jax.jvp(_jf, (p,), (v,))[1])
    _same(di.hvp(_jf, jax_b, p, v), jax.jvp(jax.grad(_jf), (p,), (v,))[1])
    lin = lambda p: p.w * p.b  # noqa: E731
    _same(di.vjp(lin, jax_b, p, jnp.asarray(V)), jax.vjp(lin, p)[1](jnp.asarray(V))[0])
    if kind != "register_dataclass":  # the rest goes through the same flatten
        return
    ts = di.jvp(_jf, jax_b, p, di.Tangents(v, v))
    _same(ts[1], jax.jvp(_jf, (p,), (v,))[1])
    hs = di.hvp(_jf, jax_b, p, di.Tangents(v, p))
    _same(hs[1], jax.jvp(jax.grad(_jf), (p,), (p,))[1])
    _same(di.jacobian(lin, jax_b, p), jax.jacobian(lin)(p))
    prep = di.prepare_gradient(_jf, jax_b, p)
    _same(di.gradient(_jf, jax_b, p, prep=prep), jax.grad(_jf)(p))


@needs_jax
@pytest.mark.parametrize("kind", NODES)
def test_jax_nodes_in_contexts_and_as_params(kind):
    cls, jax_b = NODES[kind], di.AutoJax()
    p = cls(jnp.asarray(W), jnp.asarray(B), 3)
    x = jnp.asarray(V)

    def model(x, p):
        return _jf(p) * jnp.sum(jnp.tanh(x * p.w))

    want = jax.grad(model)(x, p)
    _same(di.gradient(model, jax_b, x, di.Constant(p)), want)
    _same(di.gradient(di.FixedParams(model, p), jax_b, x), want)
    if kind not in ("register_dataclass", "equinox"):
        return

    # an outer jax.grad with respect to the node sees through the inner call (nested AD)
    def outer(p):
        return jnp.sum(di.gradient(di.FixedParams(model, p), jax_b, x) ** 2)

    _same(jax.grad(outer)(p), jax.grad(lambda p: jnp.sum(jax.grad(model)(x, p) ** 2))(p))


@pytest.mark.skipif(not HAVE["jax"], reason="jax missing")
@pytest.mark.parametrize("kind", ["register_dataclass", "register_pytree_node"])
def test_jax_nodes_of_other_arrays(backend, kind):
    """A JAX-registered node holding NumPy arrays or torch tensors works on every backend."""
    cls = NODES[kind]
    p = cls(native(backend, W), native(backend, B), 3)
    f = lambda p: _f(p, xp(backend))  # noqa: E731
    rtol = 1e-6 if backend.framework == "finite_differences" else rounding(backend, 1e-10)
    g = di.gradient(f, backend, p)
    gw, gb = _grad(W, B, 3)
    assert type(g) is cls and g.n == 3 and type(g.w) is type(p.w)
    np.testing.assert_allclose(to_numpy(g.w), gw, rtol=rtol)
    np.testing.assert_allclose(to_numpy(g.b), gb, rtol=rtol)
    v = cls(native(backend, V), native(backend, np.array(1.0)), 3)
    np.testing.assert_allclose(float(to_numpy(di.jvp(f, backend, p, v))), gw @ V + gb, rtol=rtol)
    x = native(backend, V)
    g = di.gradient(di.FixedParams(lambda x, p: f(p) * (x**2).sum(), p), backend, x)
    np.testing.assert_allclose(to_numpy(g), 2 * V * float(_f(cls(W, B, 3))), rtol=rtol)


@needs_jax
@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_torch_autograd_through_node_params():
    """torch.autograd over an inner gradient whose FixedParams parameters are a node."""
    import torch

    w = torch.tensor(W, requires_grad=True)
    p = DataNode(w, torch.tensor(B), 3)
    x = torch.tensor(V)
    g = di.gradient(di.FixedParams(lambda x, p: (x * p.w).sum() ** 2 * p.n, p), di.AutoTorch(), x)
    (gw,) = torch.autograd.grad(g.sum(), w)
    # g = 2 n (x.w) w  =>  d sum(g) / dw = 2 n (x sum(w) + x.w)
    np.testing.assert_allclose(gw.numpy(), 2 * 3 * (V * W.sum() + V @ W), rtol=1e-12)


# ---------------------------------------------------------------- static data
@needs_jax
def test_static_data_is_part_of_a_preparation():
    w, b = jnp.asarray(W), jnp.asarray(B)
    p3, p4 = DataNode(w, b, 3), DataNode(w, b, 4)
    prep = di.prepare_gradient(_jf, di.AutoJax(), p3)
    other = DataNode(w + 1, b, 3)  # other values, the same static data
    _same(di.gradient(_jf, di.AutoJax(), other, prep=prep), jax.grad(_jf)(other))
    with pytest.raises(di.MismatchError, match=r"static data DataNode \(4,\).*prepared.*\(3,\)"):
        di.gradient(_jf, di.AutoJax(), p4, prep=prep)
    # unprepared: the other static value compiles anew (no stale result)
    _same(di.gradient(_jf, di.AutoJax(), p3), jax.grad(_jf)(p3))
    _same(di.gradient(_jf, di.AutoJax(), p4), jax.grad(_jf)(p4))
    # a Constant's static data too
    x = jnp.asarray(V)
    h = lambda x, p: jnp.sum(x * p.w) * p.n  # noqa: E731
    prep = di.prepare_gradient(h, di.AutoJax(), x, di.Constant(p3))
    with pytest.raises(di.MismatchError, match="static data"):
        di.gradient(h, di.AutoJax(), x, di.Constant(p4), prep=prep)
    _same(di.gradient(h, di.AutoJax(), x, di.Constant(p4)), jax.grad(h)(x, p4))
    # a tangent's static data must be x's (as for jax.jvp)
    with pytest.raises(di.DiffifaceValueError, match="structure of x"):
        di.jvp(_jf, di.AutoJax(), p3, p4)


def test_optree_static_data_is_part_of_a_preparation(backend):
    f = lambda p: _f(p, xp(backend))  # noqa: E731
    p = OPair(native(backend, W), native(backend, B), 3)
    prep = di.prepare_gradient(f, backend, p)
    with pytest.raises(di.MismatchError, match="static data OPair"):
        di.gradient(f, backend, OPair(p.w, p.b, 4), prep=prep)


# ---------------------------------------------------------------- equinox
@needs_jax
@pytest.mark.skipif(not HAVE_EQX, reason="equinox missing")
def test_equinox_module_with_functions_and_ints():
    """Static fields (a function, an int) stay out of the leaves; a function that is a
    field's value (eqx.nn.MLP's activation) is a leaf: a clear error, and the
    partition recipe that the error names gives eqx.filter_grad's gradient."""
    key = jax.random.PRNGKey(0)

    class Layer(eqx.Module):
        w: jax.Array
        b: jax.Array
        act: object = eqx.field(static=True, default=jnp.tanh)
        k: int = eqx.field(static=True, default=2)

        def __call__(self, x):
            return self.act(self.w @ x + self.b) * self.k

    layer = Layer(jax.random.normal(key, (2, 3), jnp.float64), jnp.asarray([0.1, -0.2]))
    x = jnp.asarray(V)
    loss = lambda m, x: jnp.sum(m(x) ** 2)  # noqa: E731
    g = di.gradient(loss, di.AutoJax(), layer, di.Constant(x))
    _same(g, jax.grad(loss)(layer, x))
    assert g.act is jnp.tanh and g.k == 2

    mlp = eqx.nn.MLP(3, 1, 2, 1, key=key, dtype=jnp.float64)
    with pytest.raises(di.DiffifaceTypeError, match=r"x\.activation .*eqx\.partition"):
        di.gradient(lambda m: m(x).sum(), di.AutoJax(), mlp)
    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    rebuilt = lambda p, s: eqx.combine(p, s)(x).sum()  # noqa: E731
    g = di.gradient(rebuilt, di.AutoJax(), params, di.Constant(static))
    _same(g, eqx.filter_grad(lambda m: m(x).sum())(mlp))


# ---------------------------------------------------------------- paths and errors
@needs_jax
def test_paths_name_the_fields():
    p = {"a": DataNode(jnp.asarray(W), jnp.asarray(B)), "b": [PlainNode(1.0, 2.0)]}
    leaves, treedef = _tree.flatten(p)
    assert _tree.paths(treedef) == [
        "x['a'].w",
        "x['a'].b",
        "x['b'][0][<flat index 0>]",
        "x['b'][0][<flat index 1>]",
    ]
    assert all(acc(p) is v for acc, v in zip(treedef.accessors(), leaves, strict=True))
    bad = DataNode(jnp.asarray(W), jnp.asarray([1, 2]))
    with pytest.raises(di.DiffifaceTypeError, match=r"x\.b must be a floating-point array"):
        di.gradient(_jf, di.AutoJax(), bad)


@needs_jax
def test_a_new_node_type_registers_once_across_threads():
    @jtu.register_dataclass
    @dataclasses.dataclass
    class Fresh:
        a: object

    barrier, out, errors = threading.Barrier(6), [], []

    def work():
        barrier.wait()
        try:
            out.append(_tree.flatten({"k": Fresh(np.ones(2))}))
        except Exception as e:  # pragma: no cover - the failure is the assertion
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(len(leaves) == 1 and treedef == out[0][1] for leaves, treedef in out)
    assert optree.register_pytree_node.get(Fresh, namespace=_tree.NAMESPACE) is not None


# ---------------------------------------------------------------- ported from JAX
@needs_jax
def test_grad_does_not_unflatten_tree_with_none():
    """api_test.py APITest.test_grad_does_not_unflatten_tree_with_none (issue 7546)."""

    class CustomNode(list):
        pass

    def unflatten(unused_aux_data, children):
        assert children[0] is not None
        return CustomNode(children)

    jtu.register_pytree_node(CustomNode, lambda x: (x, None), unflatten)
    g = di.gradient(lambda x: x[0], di.AutoJax(), CustomNode([jnp.asarray(0.0)]))
    assert type(g) is CustomNode
    _same(g, jax.grad(lambda x: x[0])(CustomNode([jnp.asarray(0.0)])))
    g = di.gradient(lambda x: x[0] * 2, di.AutoFiniteDifferences(), CustomNode([0.0]))
    assert type(g) is CustomNode and g[0] == pytest.approx(2.0)


@needs_jax
def test_dunder_jax_array_grad():
    """api_test.py APITest.test_dunder_jax_array (its grad part): a register_dataclass
    node with explicit data_fields / meta_fields that converts itself to an array."""

    class AlexArray:
        def __init__(self, jax_val):
            self.jax_val = jax_val

        def __jax_array__(self):
            return self.jax_val

        dtype = property(lambda self: self.jax_val.dtype)
        shape = property(lambda self: self.jax_val.shape)

    jtu.register_dataclass(AlexArray, data_fields=["jax_val"], meta_fields=[])
    x = AlexArray(jnp.array([1.0, 2.0, 3.0]))
    f = lambda x: jnp.sin(x).sum()  # noqa: E731
    y = di.gradient(f, di.AutoJax(), x)
    assert isinstance(y, AlexArray)
    np.testing.assert_allclose(y.jax_val, jnp.cos(jnp.array([1.0, 2.0, 3.0])), rtol=1e-12)
    _same(y, jax.grad(f)(x))


if HAVE["jax"]:
    # tree_util_test.py's custom nodes (module level there), float leaves here
    class AnObject:
        def __init__(self, x, y, z):
            self.x, self.y, self.z = x, y, z

    jtu.register_pytree_node(
        AnObject, lambda o: ((o.x, o.y), o.z), lambda z, xy: AnObject(xy[0], xy[1], z)
    )

    class AnObject2(AnObject):
        pass

    jtu.register_pytree_with_keys(
        AnObject2,
        lambda o: ((("x", o.x), ("y", o.y)), o.z),
        lambda z, xy: AnObject2(xy[0], xy[1], z),
    )

    @jtu.register_pytree_node_class
    class Special:
        def __init__(self, x, y):
            self.x, self.y = x, y

        def tree_flatten(self):
            return ((self.x, self.y), None)

        @classmethod
        def tree_unflatten(cls, aux_data, children):
            return cls(*children)

    @jtu.register_pytree_with_keys_class
    class SpecialWithKeys(Special):
        def tree_flatten_with_keys(self):
            return (((jtu.GetAttrKey("x"), self.x), (jtu.GetAttrKey("y"), self.y)), None)

    @jtu.register_pytree_node_class
    class FlatCache:
        def __init__(self, structured, *, leaves=None, treedef=None):
            if treedef is None:
                leaves, treedef = jtu.tree_flatten(structured)
            self._structured, self.treedef, self.leaves = structured, treedef, leaves

        @property
        def structured(self):
            if self._structured is None:
                self._structured = jtu.tree_unflatten(self.treedef, self.leaves)
            return self._structured

        def tree_flatten(self):
            return self.leaves, self.treedef

        @classmethod
        def tree_unflatten(cls, meta, data):
            if not jtu.all_leaves(data):
                data, meta = jtu.tree_flatten(jtu.tree_unflatten(meta, data))
            return FlatCache(None, leaves=data, treedef=meta)

    @jtu.register_static
    class StaticInt(int):
        pass

    @jtu.register_static
    class StaticTuple(tuple):
        pass

    @jtu.register_static
    class StaticDict(dict):
        pass

    @jtu.register_static
    @dataclasses.dataclass
    class BlackBox:
        """Stores a value but pretends to be equal to every other black box."""

        value: int

        def __hash__(self):
            return 0

        def __eq__(self, other):
            return isinstance(other, BlackBox)

    ATuple = collections.namedtuple("ATuple", ("foo", "bar"))

    def _trees():
        """tree_util_test.py TREES, the entries with custom nodes, with float leaves."""
        a, b, c = jnp.asarray(3.0), jnp.asarray([4.0, 5.0]), jnp.asarray(-2.0)
        return {
            "ATuple": [c, ATuple(foo=(a, ATuple(foo=b, bar=None)), bar={"baz": c})],
            "AnObject": [AnObject(a, None, [4, "foo"])],
            "AnObject2": [AnObject2(a, b, [4, "foo"])],
            "Special": Special(b, a),
            "SpecialWithKeys": SpecialWithKeys(a, b),
            "FlatCache": FlatCache({"a": [a, b], "b": c}),
            "StaticInt": (a, StaticInt(1)),
            "StaticTuple": (StaticTuple((2, None)), b),
            "StaticDict": [StaticDict(foo=4, bar=5), c],
        }

    TREE_IDS = list(_trees())
else:
    TREE_IDS = []


@needs_jax
@pytest.mark.parametrize("name", TREE_IDS)
def test_tree_util_trees(name):
    """tree_util_test.py TreeTest's TREES (testRoundtrip, testAllLeavesWithTrees,
    testFlattenWithPath ...) as points: the gradient, a jvp and a vjp of a function of
    every float leaf match JAX's, in the tree's own structure."""
    tree = _trees()[name]

    def f(t):
        return sum(jnp.sum(jnp.sin(v) * v) for v in jtu.tree_leaves(t))

    _same(di.gradient(f, di.AutoJax(), tree), jax.grad(f)(tree))
    v = jtu.tree_map(lambda a: jnp.ones_like(a) * 0.5, tree)
    np.testing.assert_allclose(
        di.jvp(f, di.AutoJax(), tree, v), jax.jvp(f, (tree,), (v,))[1], rtol=1e-12
    )
    lin = lambda t: jnp.stack([jnp.sum(a) for a in jtu.tree_leaves(t)])  # noqa: E731
    w = jnp.arange(1.0, 1.0 + len(jtu.tree_leaves(tree)))
    _same(di.vjp(lin, di.AutoJax(), tree, w), jax.vjp(lin, tree)[1](w)[0])


def _static_value(y):
    return y.value if isinstance(y, BlackBox) else int(y) if isinstance(y, int) else y["foo"]


def _static_pairs():
    if not HAVE["jax"]:
        return []
    return [
        # StaticTest.test_trace_just_once_with_same_static
        pytest.param(StaticInt(2), StaticInt(2), 1, id="same"),
        pytest.param(StaticDict(foo=2), StaticDict(foo=2), 1, id="same-dict"),
        # StaticTest.test_trace_twice_with_different_static
        pytest.param(StaticInt(2), StaticInt(4), 2, id="int-differs"),
        pytest.param(StaticDict(foo=2), StaticDict(foo=4), 2, id="dict-differs"),
        # StaticTest.test_trace_just_once_if_static_looks_constant
        pytest.param(BlackBox(2), BlackBox(1), 1, id="looks-constant"),
    ]


@needs_jax
@pytest.mark.parametrize("y1, y2, traces", _static_pairs())
def test_static_nodes_compile_as_jax_jit_does(y1, y2, traces):
    """tree_util_test.py StaticTest: a static node is part of the compiled function's
    key, compared by ==, as for jax.jit: one trace when equal, two when not (and a
    black box equal to every other reuses the first trace, as jax.jit does)."""
    count = []

    def fn(t):
        count.append(1)
        x, static_y = t
        return jnp.sum(x**2) * _static_value(static_y)

    x = jnp.asarray(W)
    ref = jax.jit(jax.grad(fn))
    want = [ref((x, y1))[0], ref((x, y2))[0]]
    assert len(count) == traces
    del count[:]
    for y, w in zip((y1, y2), want, strict=True):
        g = di.gradient(fn, di.AutoJax(), (x, y))
        np.testing.assert_allclose(g[0], w, rtol=1e-12)
        assert type(g[1]) is type(y) and g[1] == y  # (the cached equal one, as jax.jit)
    assert len(count) == traces


@needs_jax
def test_different_num_children_custom_node_with_keys():
    """tree_util_test.py TreeTest.test_different_num_children_custom_node_with_keys
    (issue 25659): nodes of one type with other key sets are other structures."""

    @jtu.register_pytree_with_keys_class
    class Foo:
        def __init__(self, fields):
            self.fields = dict(fields)

        def tree_flatten_with_keys(self):
            return ([(jtu.GetAttrKey(k), v) for k, v in self.fields.items()], tuple(self.fields))

        @classmethod
        def tree_unflatten(cls, keys, children):
            return cls(zip(keys, children, strict=True))

    f = lambda t: sum(jnp.sum(v**2) for v in t.fields.values())  # noqa: E731
    one, two = Foo({"a": jnp.asarray(W)}), Foo({"a": jnp.asarray(W), "b": jnp.asarray(V)})
    g = di.gradient(f, di.AutoJax(), two)
    _same(g, jax.grad(f)(two))
    assert list(g.fields) == ["a", "b"]
    assert _tree.paths(_tree.flatten(two)[1]) == ["x.a", "x.b"]
    prep = di.prepare_gradient(f, di.AutoJax(), one)
    with pytest.raises(di.MismatchError, match=r"got x\.a \(3,\) jax float64, x\.b"):
        di.gradient(f, di.AutoJax(), two, prep=prep)
    with pytest.raises(di.DiffifaceValueError, match="structure of x"):
        di.jvp(f, di.AutoJax(), one, two)


def test_an_optree_dataclass_of_another_namespace_is_a_clear_error():
    @optree.dataclasses.dataclass(namespace="elsewhere")
    class Elsewhere:
        a: object

    with pytest.raises(di.DiffifaceTypeError, match=r"namespace='' .* or 'diffiface'"):
        di.gradient(lambda d: (d.a**2).sum(), di.AutoFiniteDifferences(), Elsewhere(W))
