"""Constant contexts under jax.jit: array leaves are traced arguments, every other leaf
is static (part of the compiled function's key)."""

from __future__ import annotations

import jax
import numpy as np

from ... import _checks
from ..._tree import flatten, unflatten


def split_contexts(prob, ctx: tuple):
    """Array leaves of the contexts are traced; other leaves are static (hashed)."""
    if not ctx:
        return (), ()
    leaves, tree = flatten(ctx)
    dyn, static = [], []
    for leaf in leaves:
        if isinstance(leaf, jax.Array | np.ndarray | np.generic | float) and not isinstance(
            leaf, bool
        ):
            dyn.append(leaf)
            static.append(_DYNAMIC)
        else:
            try:
                hash(leaf)
            except TypeError as exc:
                raise _checks.DiffifaceTypeError(
                    f"{_checks.call_form(prob.op, prob.backend)}: a Constant holds an unhashable "
                    f"{type(leaf).__name__}, which jax.jit cannot take as a static argument. "
                    "Pass arrays, numbers or hashable values in Constant."
                ) from exc
            static.append(_Static(leaf))
    return tuple(dyn), (tree, tuple(static))


class _Static:
    """A static (non-array) context value in a cache key: equal when of the same type
    and equal value, so Constant(True) and Constant(1) compile apart."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return hash((type(self.value), self.value))

    def __eq__(self, other):
        return (
            isinstance(other, _Static)
            and type(other.value) is type(self.value)
            and self.value == other.value
        )


_DYNAMIC = object()


def join_contexts(static, dyn_leaves) -> tuple:
    if not static:
        return ()
    tree, marks = static
    it = iter(dyn_leaves)
    leaves = [
        next(it) if m is _DYNAMIC else (m.value if isinstance(m, _Static) else m) for m in marks
    ]
    return unflatten(tree, leaves)
