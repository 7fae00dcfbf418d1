"""Bridges between frameworks: a function of one framework inside another's AD.

A :class:`Node` is a function of flat float arrays written for one *inner*
framework (jax, torch, or NumPy for autograd and finite differences). Its
derivatives are nodes again, computed by the inner framework: ``jvp()``
(arguments, tangents -> output tangents), ``vjp()`` (arguments, output
cotangents -> argument cotangents), ``batch(dims)`` (the inner framework's
vmap) and, for JAX's transposition, ``transpose()``. An *outer* framework
sees a node as one operation (a JAX primitive, a ``torch.autograd.Function``,
an autograd primitive) whose derivative rules call the derived nodes through
the same bridge: every order of forward and reverse mode crosses it.

Arrays cross by DLPack (or NumPy views) without copies on the same device.
"""

from __future__ import annotations

import functools
import importlib
import numbers
import threading
from collections.abc import Callable
from typing import Any

from .. import _checks
from .._arrays import framework_of, named, registered
from .._tree import TooDeep, flatten, unflatten
from ..core import registry

_LOCK = threading.RLock()


def module(framework: str) -> Any:
    """The bridge module of ``framework`` (imported on first use)."""
    name = _numpy_kit() if framework == "numpy" else framework
    where = f"diffiface.backends.{name}"
    try:
        return importlib.import_module(f"{where}.bridge")
    except ImportError as exc:
        if exc.name is not None and exc.name.startswith(where):
            fw = named(framework)
            own = f"{fw.backend_name}()" if fw is not None and fw.backend_name else "its backend"
            raise _checks.DiffifaceTypeError(
                f"the {framework!r} framework has no bridge ({where}.bridge): its arrays "
                "cannot cross to another framework, nor another's to it, and "
                f"di.differentiate_with cannot wrap its functions. Pass {framework} arrays "
                f"to {own}, or convert them to NumPy (np.asarray(x)) for any backend."
            ) from exc
        if exc.name is None or not exc.name.startswith(name):
            raise
        raise _checks.FrameworkMissingError(
            f"a bridged call needs {name}, which is not installed. Install it with: "
            f'pip install "diffiface[{name}]"'
        ) from exc


class Node:
    """A function of flat inner arrays returning a tuple of inner arrays.

    ``lin``: the index of the first argument the function is linear in
    (``len(args)`` when none is); JAX transposes with respect to those.
    """

    __slots__ = ("__weakref__", "_derived", "base", "fn", "key", "kind", "kit", "lin", "out")

    def __init__(self, kit, fn: Callable, lin: int | None, kind: str, base=None, key=None) -> None:
        self.kit, self.fn, self.lin, self.kind, self.base = kit, fn, lin, kind, base
        self.key = key  # batch: the batched dims; T: the linear arguments' avals
        self.out = None  # a base node: where its function records its output structure
        self._derived: dict = {}

    def __repr__(self) -> str:
        return f"<diffiface bridge node {self.kind} of {self.kit.name}>"

    def _get(self, key: Any, build: Callable[[], Node]) -> Node:
        node = self._derived.get(key)
        if node is None:
            with _LOCK:
                node = self._derived.get(key)
                if node is None:
                    node = self._derived[key] = build()
        return node

    def jvp(self, n: int) -> Node:
        """``(*args, *tangents) -> output tangents``, linear in the tangents."""
        return self._get("jvp", lambda: Node(self.kit, self.kit.jvp(self.fn, n), n, "jvp", self))

    def vjp(self, n: int) -> Node:
        """``(*args, *cotangents) -> argument cotangents``, linear in the cotangents."""
        return self._get("vjp", lambda: Node(self.kit, self.kit.vjp(self.fn, n), n, "vjp", self))

    def vjp_forward(self) -> tuple[Callable, Callable] | None:
        """``((*args) -> (outputs, residuals), (residuals, cotangents) -> argument
        cotangents)`` for a reverse pass that will not be differentiated again: the
        residuals are pulled back instead of the vjp node recomputing the forward pass.
        None where the kit has no such pair."""
        make = getattr(self.kit, "vjp_forward", None)
        if make is None:
            return None
        return self._get("vjp_forward", lambda: make(self.fn))

    def transpose(self, n: int, lin_shapes: tuple) -> Node:
        """``(*nonlinear args, *output cotangents) -> cotangents of the linear args``."""
        if self.kind == "jvp":  # (x, v) -> J v transposes to the vjp of the base
            return self.base.vjp(self.lin)
        if self.kind == "vjp":  # (x, w) -> Jᵀ w transposes to the jvp of the base
            return self.base.jvp(self.lin)

        def build() -> Node:
            fn = self.kit.transpose(self.fn, n, lin_shapes)
            return Node(self.kit, fn, n, "T", self, lin_shapes)

        return self._get(("T", lin_shapes), build)

    def batch(self, dims: tuple) -> Node:
        """The inner framework's vmap of this node over ``dims`` (None: not batched);
        every output is batched along axis 0."""
        lin = self.lin if self.lin is not None else len(dims)

        def build() -> Node:
            return Node(self.kit, self.kit.vmap(self.fn, dims), lin, "batch", self, dims)

        return self._get(("batch", dims), build)


class Held(Node):
    """``node`` with an object its function needs alive (a crossing operator's f, which
    the operator cache holds only weakly): the outer framework keeps it with its graph
    for as long as the graph may call the node. Its derived nodes are held alike; the
    shared ones stay free of it."""

    __slots__ = ("keep", "shared")

    def __init__(self, node: Node, keep: Any) -> None:
        super().__init__(node.kit, node.fn, node.lin, node.kind, node.base, node.key)
        self.out, self._derived = node.out, node._derived
        self.shared, self.keep = node, keep

    def jvp(self, n: int) -> Node:
        return Held(self.shared.jvp(n), self.keep)

    def vjp(self, n: int) -> Node:
        return Held(self.shared.vjp(n), self.keep)

    def vjp_forward(self) -> tuple[Callable, Callable] | None:
        return self.shared.vjp_forward()

    def transpose(self, n: int, lin_shapes: tuple) -> Node:
        return Held(self.shared.transpose(n, lin_shapes), self.keep)

    def batch(self, dims: tuple) -> Node:
        return Held(self.shared.batch(dims), self.keep)


def _held(node: Node, keep: Any) -> Node:
    return node if keep is None else Held(node, keep)


def _numpy_kit() -> str:
    """The framework whose bridge side is NumPy's: the one whose arrays are NumPy's."""
    return next((fw.name for fw in registered() if fw.arrays_are_numpy), "numpy")


def _on_numpy(framework: str) -> bool:
    fw = named(framework)
    return fw is not None and fw.arrays_are_numpy


def _open_containers(args: tuple, leaves: list) -> tuple | None:
    """``args`` with containers a framework's trace boxed (a dict or tuple autograd
    boxed) opened; None when there are none."""
    for fw in registered():
        opened = fw.open_containers(args, leaves)
        if opened is not None:
            return opened
    return None


def framework_key(backend: Any) -> str:
    """The bridge module key of a backend: the framework whose arrays it takes."""
    return registry.arrays(backend)


def kind_of(tree: Any, what: str) -> str:
    """The bridge module key for the arrays of ``tree`` ("numpy" for NumPy or floats)."""
    return outer_of(flatten(tree)[0], what)


def outer_of(leaves: list, what: str) -> str:
    """The one framework of the array leaves (``numpy`` when only NumPy arrays)."""
    found = {fw for leaf in leaves if (fw := framework_of(leaf)) not in (None, "numpy")}
    if len(found) > 1:
        raise _checks.DiffifaceTypeError(
            f"{what}: the arrays come from {' and '.join(sorted(found))}. A bridged call takes "
            "the arrays of one framework; convert the others first."
        )
    return found.pop() if found else "numpy"


class Bridged:
    """``f`` (written for the framework of ``backend``) callable with the arrays of any
    framework; see :func:`differentiate_with`."""

    def __init__(self, f: Callable, backend: Any, name: str | None = None) -> None:
        from .._backend_types import AbstractBackend, SecondOrder

        if not isinstance(backend, AbstractBackend) or isinstance(backend, SecondOrder):
            raise _checks.DiffifaceTypeError(
                f"differentiate_with(f, backend): backend must be a first-order backend such "
                f"as di.AutoJax(), got {backend!r}."
            )
        if not callable(f):
            raise _checks.DiffifaceTypeError(
                f"differentiate_with(f, backend): f must be callable, got {type(f).__name__}."
            )
        self.f, self.backend = f, backend
        self.name = name or getattr(f, "__name__", type(f).__name__)
        self._nodes: dict = {}
        self._plain: dict = {}
        self._arrays: dict = {}  # argument types (each an array leaf) -> as _plain's

    def __repr__(self) -> str:
        return f"differentiate_with({self.name}, {self.backend!r})"

    @functools.cached_property
    def inner(self) -> str:
        """The bridge key of the backend's arrays: asked at the first call, which loads
        the backend (wrapping f loads nothing)."""
        return framework_key(self.backend)

    def call_keeping(self, keep: Any, *args: Any) -> Any:
        """The call, its graph holding ``keep`` (what f reaches only weakly) alive."""
        return self._run(args, keep)

    def __call__(self, *args: Any) -> Any:
        return self._run(args, None)

    def _run(self, args: tuple, keep: Any) -> Any:
        hit = self._arrays.get(tuple(map(type, args)))
        if hit is not None:  # array arguments, seen before: no pytree to flatten
            outer, node, out_tree = hit
            flat = outer.call(_held(node, keep), list(args))
            return flat[0] if out_tree is None else unflatten(out_tree, flat)
        try:
            leaves, tree = flatten(args)
        except TooDeep:
            raise _checks.DiffifaceValueError(f"{self!r}(...): {TooDeep('an argument')}") from None
        try:  # arrays only, seen before: (outer module, node, output structure)
            hit = self._plain.get((tree, *map(type, leaves)))
        except TypeError:
            hit = None
        if hit is not None:
            outer, node, out_tree = hit
            return unflatten(out_tree, outer.call(_held(node, keep), leaves))
        return self._call(args, leaves, tree, keep)

    def _call(self, args: tuple, leaves: list, tree: Any, keep: Any) -> Any:
        opened = _open_containers(args, leaves)
        if opened is not None:
            args = opened
            leaves, tree = flatten(args)
        arrays, static = [], []
        for leaf in leaves:
            (static if framework_of(leaf) is None else arrays).append(leaf)
        outer = outer_of(leaves, f"{self!r}(...)")
        if outer == self.inner or (outer == "numpy" and _on_numpy(self.inner)):
            return self.f(*args)  # the same framework: no crossing
        where = tuple(i for i, leaf in enumerate(leaves) if framework_of(leaf) is not None)
        node = self._node(tree, tuple(static), where)
        outer_module = module(outer)
        flat = outer_module.call(_held(node, keep), arrays)  # records the output structure
        out_tree = node_tree(node)
        if not static:
            with _LOCK:
                self._plain[(tree, *map(type, leaves))] = (outer_module, node, out_tree)
                while len(self._plain) > MAX_NODES:  # oldest first, as the nodes
                    del self._plain[next(iter(self._plain))]
                if len(leaves) == len(args) and all(
                    a is b for a, b in zip(leaves, args, strict=True)
                ):
                    one = flatten(0.0)[1]  # f returns one array: no structure to rebuild
                    self._arrays[tuple(map(type, args))] = (
                        outer_module,
                        node,
                        None if out_tree == one else out_tree,
                    )
        return unflatten(out_tree, flat)

    def _node(self, tree: Any, static: tuple, where: tuple) -> Node:
        try:
            key = (tree, static, where)
            node = self._nodes.get(key)
        except TypeError:  # unhashable static leaves: a node per call
            key, node = None, None
        if node is None:
            kit = module(self.inner).kit(self.backend)
            flat = _flat_fn(self.f, tree, static, where, kit.to_inner)
            node = Node(kit, kit.compile(flat), None, "f")
            node.out = flat.out
            if key is not None:
                with _LOCK:
                    node = self._nodes.setdefault(key, node)
                    while len(self._nodes) > MAX_NODES:  # oldest first
                        del self._nodes[next(iter(self._nodes))]
        return node


# nodes kept per bridged function: one per structure and set of non-array leaves (a
# Python float leaf is static, so each new value is a new node, on JAX a compilation)
MAX_NODES = 64


class _OutTree:
    """Where a flat function records the structure of its output."""

    __slots__ = ("tree",)

    def __init__(self) -> None:
        self.tree = None


def _flat_fn(f: Callable, tree: Any, static: tuple, where: tuple, to_inner) -> Callable:
    """f of the array leaves; a Python number f returns (an operator given a Python
    float returns one) becomes an array of the inner framework."""
    out = _OutTree()
    template = list(static)  # the static leaves in place, the arrays' places empty
    for i in where:
        template.insert(i, None)

    def flat(*arrays):
        leaves = template.copy()
        for i, a in zip(where, arrays, strict=True):
            leaves[i] = a
        res, out.tree = flatten(f(*unflatten(tree, leaves)))
        return tuple(to_inner(r) if isinstance(r, numbers.Number) else r for r in res)

    flat.out = out  # type: ignore[attr-defined]
    return flat


def node_tree(node: Node) -> Any:
    """The output structure of the function a node (or its base) wraps."""
    while node.base is not None:
        node = node.base
    return node.out.tree


def out_avals(node: Node, avals: tuple) -> tuple:
    """The ``(shape, dtype)`` of each output of ``node`` for arguments of ``avals``."""
    if node.kind == "jvp":  # output tangents: like the base's outputs
        return out_avals(node.base, avals[: node.lin])
    if node.kind == "vjp":  # cotangents: like the arguments
        return avals[: node.lin]
    if node.kind == "T":  # cotangents of the linear arguments
        return node.key
    if node.kind == "batch":
        dims = node.key
        size = next(a[0][0] for a, d in zip(avals, dims, strict=True) if d is not None)
        inner = tuple(
            a if d is None else (a[0][1:], a[1]) for a, d in zip(avals, dims, strict=True)
        )
        return tuple(((size, *s), d) for s, d in out_avals(node.base, inner))
    cache = node._derived.setdefault("avals", {})
    got = cache.get(avals)
    if got is None:
        got = cache[avals] = tuple(node.kit.out_avals(node.fn, avals))
    return got


def differentiate_with(f: Callable, backend: Any) -> Bridged:
    """``f``, written for ``backend``'s framework, usable inside any framework's AD.

    The returned function takes the arrays of any framework (jax, torch,
    autograd/NumPy) and returns results of that framework. Called inside that
    framework's differentiation (``jax.grad``, ``jax.jvp``, ``jax.jit``,
    ``jax.vmap``, ``torch.autograd``, ``torch.func``, ``autograd.grad``), it is
    one operation whose derivatives ``backend`` computes; those derivatives are
    bridged calls again, so every order of forward and reverse mode crosses.
    Arrays cross by DLPack without copies on the same device; pytrees keep
    their structure; leaves that are not arrays pass through as constants.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> sq = di.differentiate_with(lambda x: x**2, di.AutoFiniteDifferences())
        >>> sq(np.array([3.0]))
        array([9.])
    """
    return Bridged(f, backend)
