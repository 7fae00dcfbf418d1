"""Pytree helpers shared by every backend (optree).

optree is the one flattener, in the namespace ``"diffiface"`` (None is an empty
subtree, as in JAX). Its own nodes (dicts, lists, tuples, namedtuples, ...) and
the types registered with optree, globally or under ``namespace="diffiface"``,
flatten as they are. A type registered as a pytree node with JAX only
(``jax.tree_util.register_pytree_node``, ``register_dataclass``,
``register_static``, equinox Modules, flax struct dataclasses) is a leaf to
optree: the first time such a leaf is met, its type is registered in the
``"diffiface"`` namespace with one level of JAX's own flatten (its children, and
the one-level JAX treedef, which holds the static data, as metadata) and the
tree is flattened again. The treedef then compares the static data (a
preparation made with one static value rejects another) and unflattens through
JAX, so results keep the node's type.

The check costs one set comparison per flatten (the types of the leaves against
the types already known to be plain leaves), and none before ``jax`` is imported.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np
import optree

from ._arrays import registered
from ._errors import DiffifaceValueError

NAMESPACE = "diffiface"
MAX_DEPTH = getattr(optree, "MAX_RECURSION_DEPTH", 1000)  # optree flattens no deeper

# leaf types known to be no framework's pytree nodes (filled once such a framework is
# imported)
_PLAIN: set = {float, int, bool, complex, str, bytes, np.ndarray, np.float64, np.float32}
_LOCK = threading.Lock()


class TooDeep(DiffifaceValueError):
    """A pytree nested deeper than optree flattens (the operator shell names the call)."""

    def __init__(self, what: str = "a pytree") -> None:
        super().__init__(
            f"{what} is nested more than {MAX_DEPTH} levels deep (containers inside "
            "containers), deeper than diffiface flattens pytrees (optree's limit). Pass a "
            "flatter pytree: a list or dict of the arrays, or one stacked array."
        )


def flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves and treedef; None is an empty subtree (as in JAX): it stays None in results."""
    try:
        leaves, treedef = optree.tree_flatten(tree, none_is_leaf=False, namespace=NAMESPACE)
    except RecursionError:
        raise TooDeep() from None
    if not _PLAIN.issuperset(map(type, leaves)) and _bridge(leaves):
        return flatten(tree)  # a nested node type is met the next round
    return leaves, treedef


def too_deep(tree: Any) -> bool:
    """``tree`` nests lists, tuples or dicts more than MAX_DEPTH levels deep (no recursion)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list | tuple):
            stack.extend((v, depth + 1) for v in node)
    return False


def unflatten(treedef: Any, leaves: Any) -> Any:
    return optree.tree_unflatten(treedef, leaves)


def paths(treedef: Any) -> list[str]:
    """Readable path of each leaf of a treedef, in flatten order: ``x['a'][0]``, ``x.w``."""
    return [a.codify("x") for a in treedef.accessors()]


def tree_map(fn: Any, tree: Any) -> Any:
    """``fn`` applied to every leaf (None stays an empty subtree)."""
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(v) for v in leaves])


def static_data(treedef: Any) -> list[tuple[str, Any]]:
    """(type name, static data) of each custom node of a treedef, in flatten order: what
    two treedefs with the same leaves can differ in."""
    out: list = []

    def node(cls, meta, children):
        if cls not in _BUILTIN_NODES:
            out.append((cls.__name__, _static_of(cls, meta)))
        return None

    treedef.walk(range(treedef.num_leaves), node, None)
    return out


_BUILTIN_NODES = {
    type(None),
    tuple,
    list,
    dict,
    collections.OrderedDict,
    collections.defaultdict,
    collections.deque,
}


def _static_of(cls: type, meta: Any) -> Any:
    static = _STATIC.get(cls)  # (a framework's node: its static data from its metadata)
    return meta if static is None else static(meta)


# ------------------------------------------------ nodes of a framework's own registry
_STATIC: dict = {}  # node type registered here -> its static data from optree's metadata


def _bridge(leaves: list) -> bool:
    """Register in diffiface's namespace the types among ``leaves`` that a framework's
    own pytree registry flattens as nodes (JAX's); True when one was (the tree is then
    flattened again)."""
    frameworks = [fw for fw in registered() if fw.knows_tree_nodes()]
    if not frameworks:  # no such node exists before its framework is imported
        return False
    new = False
    for cls, leaf in {type(v): v for v in leaves if type(v) not in _PLAIN}.items():
        node = next((n for fw in frameworks if (n := fw.tree_node(leaf)) is not None), None)
        if node is None:
            _PLAIN.add(cls)
            continue
        with _LOCK:
            if optree.register_pytree_node.get(cls, namespace=NAMESPACE) is None:
                optree.register_pytree_node(
                    cls,
                    node.flatten,
                    node.unflatten,
                    path_entry_type=node.path_entry,
                    namespace=NAMESPACE,
                )
                _STATIC[cls] = node.static_data
        new = True
    return new


def late_node(leaf: Any) -> str | None:
    """The framework whose own registry flattens ``leaf``'s type as a node (registered
    there after diffiface met the type as a leaf); None for a leaf."""
    for fw in registered():
        if fw.knows_tree_nodes() and fw.tree_node(leaf) is not None:
            return fw.name
    return None
