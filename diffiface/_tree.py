"""Pytree helpers shared by every backend (optree)."""

from __future__ import annotations

from typing import Any

import optree

NAMESPACE = "diffiface"


def flatten(tree: Any) -> tuple[list[Any], Any]:
    """Leaves and treedef; None is an empty subtree (as in JAX): it stays None in results."""
    return optree.tree_flatten(tree, none_is_leaf=False, namespace=NAMESPACE)


def unflatten(treedef: Any, leaves: Any) -> Any:
    return optree.tree_unflatten(treedef, leaves)


def paths(treedef: Any) -> list[str]:
    """Readable path of each leaf of a treedef, in flatten order: ``x['a'][0]``."""
    return ["x" + "".join(f"[{k!r}]" for k in p) for p in treedef.paths()]


def tree_map(fn: Any, tree: Any) -> Any:
    """``fn`` applied to every leaf (None stays an empty subtree)."""
    return optree.tree_map(fn, tree, none_is_leaf=False, namespace=NAMESPACE)
