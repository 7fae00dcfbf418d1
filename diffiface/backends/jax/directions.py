"""k directions inside a compiled JAX function: the tuple it takes, stacked for one
vmapped pass, and the results split back (a ``Tangents.stacked`` stays one stack)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def each(prob, vss: list) -> tuple:
    """The k directions as a compiled function takes them: each one array (a tuple of
    leaves for a pytree x)."""
    if prob.single:
        return tuple(vs[0] for vs in vss)
    return tuple(vss)


def stacked(vs: tuple):
    """(traced) The k directions stacked on a new leading axis (a stack: as it is)."""
    if not isinstance(vs, list | tuple):
        return vs
    if isinstance(vs[0], tuple):
        return tuple(jnp.stack(leaves) for leaves in zip(*vs, strict=True))
    return jnp.stack(vs)


def split(stacked, vs):
    """(traced) The results, one per direction of ``vs`` (split inside the compiled
    function: k eager calls outside it); of a stack ``vs``, stacked as they are."""
    if not isinstance(vs, list | tuple):
        return stacked
    return tuple(jax.tree_util.tree_map(lambda a, i=i: a[i], stacked) for i in range(len(vs)))
