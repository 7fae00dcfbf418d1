"""A jitted function whose calls of f put aux (``has_aux=True``): the aux comes out of
jit as a second output and goes to the open sink (see ``core.outputs``)."""

from __future__ import annotations

import jax
import numpy as np

from ...core import outputs


class WithAux:
    """A jitted ``run`` whose calls of f put aux: the aux comes out as a second output
    and goes to the open sink (see ``core.outputs``). Leaves jit cannot return (a
    string, a Python number) come back as the trace computed them, as
    ``jax.grad(has_aux=True)`` returns them: jit returns None in their place, and they
    are kept per signature of the arguments (looked up only when some trace had one)."""

    __slots__ = ("jitted", "static")

    def __init__(self, run) -> None:
        self.static: dict = {}  # signature of the arguments -> {leaf index: value}
        static = self.static

        def traced(*args):
            out, box = outputs.capture(run)(*args)
            leaves, treedef = jax.tree_util.tree_flatten(box, is_leaf=_is_none)
            kept = {i: a for i, a in enumerate(leaves) if not _returnable(a)}
            sig = outputs.signature(args, (), False, _aval) if kept or static else None
            if kept or sig in static:  # (a re-trace without them must not reuse old ones)
                static[sig] = kept
                leaves = [None if i in kept else a for i, a in enumerate(leaves)]
                box = jax.tree_util.tree_unflatten(treedef, leaves)
            return out, box

        self.jitted = jax.jit(traced)

    def __call__(self, *args):
        out, box = self.jitted(*args)
        if self.static:
            kept = self.static.get(outputs.signature(args, (), False, _aval))
            if kept:
                leaves, treedef = jax.tree_util.tree_flatten(box, is_leaf=_is_none)
                leaves = [kept.get(i, a) for i, a in enumerate(leaves)]
                box = jax.tree_util.tree_unflatten(treedef, leaves)
        outputs.restore(box)
        return out

    def _cache_size(self) -> int:
        return self.jitted._cache_size()

    def clear_cache(self) -> None:
        self.jitted.clear_cache()


def _is_none(a) -> bool:
    return a is None


def _aval(a) -> str:
    return str(jax.typeof(a))


def _returnable(a) -> bool:
    """jit can return ``a`` as an array (a Python number would come back as one)."""
    return isinstance(a, jax.Array | np.ndarray | np.generic)
