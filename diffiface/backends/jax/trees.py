"""Types registered as pytree nodes with JAX only (``jax.tree_util.register_pytree_node``,
``register_dataclass``, ``register_static``, equinox Modules, flax struct dataclasses),
flattened by diffiface's optree through one level of JAX's own flatten (imported once
jax is)."""

from __future__ import annotations

from typing import Any

import jax
import optree

from ..._arrays import TreeNode


def node(leaf: Any) -> TreeNode | None:
    """How optree flattens ``leaf``'s type where JAX knows it as a node: its children,
    the one-level JAX treedef (the static data, compared by ==) as metadata, and JAX's
    keys as path entries; None for a leaf."""
    if not is_node(leaf):
        return None
    return TreeNode(_flatten_jax, _unflatten_jax, _JaxKey, _static_data)


def _static_data(jdef: Any) -> Any:
    return jdef.node_data()[1]  # the one-level JAX treedef: (type, aux data)


def is_node(leaf: Any) -> bool:
    """JAX flattens ``leaf``'s type as a node (a static one too: no leaves at all)."""
    tree_util = jax.tree_util
    try:
        return tree_util.tree_structure(leaf) != tree_util.tree_structure(0.0)
    except Exception:  # a type whose JAX flatten fails: a leaf, as to optree
        return False


def _flatten_jax(node: Any) -> tuple:
    """One level of JAX's flatten: children, the one-level treedef (the static data,
    compared by ==, not hashed), and the children's JAX keys (for readable paths)."""
    pairs, jdef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda n: n is not node)
    return [v for _, v in pairs], jdef, [k[0] for k, _ in pairs]


def _unflatten_jax(jdef: Any, children: Any) -> Any:
    return jdef.unflatten(children)


class _JaxKey(optree.PyTreeEntry):
    """A path entry that is a JAX key (GetAttrKey, DictKey, SequenceKey, FlattenedIndexKey):
    written as JAX writes it, ``.w``, ``['a']``, ``[0]``."""

    def __call__(self, obj: Any) -> Any:
        key = self.entry
        kind = type(key).__name__
        if kind == "GetAttrKey":
            return getattr(obj, key.name)
        if kind == "DictKey":
            return obj[key.key]
        if kind == "SequenceKey":
            return obj[key.idx]
        children, _ = jax.tree_util.tree_flatten(obj, is_leaf=lambda n: n is not obj)
        return children[key.key]  # a FlattenedIndexKey: the key-th child

    def codify(self, node: str = "") -> str:
        return node + str(self.entry)
