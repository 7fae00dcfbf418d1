"""A pytree x as one vector: the Jacobian of a function of several leaves.

``jacobian`` of f at a pytree x differentiates ``f_v(v) = f(unravel(v))``, where v
holds x's leaves end to end; the Jacobian's columns are then cut back into x's
leaves. The result nests as ``jax.jacobian``'s does: the structure of f(x) outside,
the structure of x inside, each leaf shaped ``out_leaf.shape + x_leaf.shape``.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _checks
from .._cache import FunctionCache
from .._tree import unflatten
from . import outputs

_RAVELED = FunctionCache(per_function=16)  # (f, x's structure) -> its Raveled function


class Raveled:
    """``f_v(v, *ctx) = f(x, *ctx)`` with x's leaves cut from the vector v. It holds f
    only weakly (the compiled functions of f_v are cached on f_v, kept alive by f)."""

    __slots__ = ("__weakref__", "dtypes", "fget", "shapes", "sizes", "treedef")

    def __init__(self, fget, treedef, shapes: list, dtypes: list) -> None:
        self.fget, self.treedef, self.shapes, self.dtypes = fget, treedef, shapes, dtypes
        self.sizes = [math.prod(s) for s in shapes]

    def __call__(self, v: Any, *ctx: Any) -> Any:
        return self.fget()(self.unravel(v), *ctx)

    def unravel(self, v: Any) -> Any:
        leaves, start = [], 0
        for shape, dtype, n in zip(self.shapes, self.dtypes, self.sizes, strict=True):
            leaves.append(outputs.cast(v[start : start + n].reshape(shape), dtype))
            start += n
        return unflatten(self.treedef, leaves)

    def split(self, a: Any) -> Any:
        """The columns of ``a`` (v's axis last) as x's structure: ``lead + leaf.shape``."""
        lead, pieces, start = tuple(a.shape[:-1]), [], 0
        for shape, dtype, n in zip(self.shapes, self.dtypes, self.sizes, strict=True):
            piece = a[..., start : start + n].reshape((*lead, *shape))
            pieces.append(outputs.cast(piece, dtype))
            start += n
        return unflatten(self.treedef, pieces)


def raveled(op: str, backend: Any, impl: Any, f: Any, treedef: Any, xs: tuple):
    """(the Raveled function of f for x's structure, v)."""
    if any(impl.is_complex(x) for x in xs):
        raise _checks.complex_jacobian(op, backend)
    shapes = [tuple(x.shape) for x in xs]
    dtypes = [x.dtype for x in xs]
    key = (treedef, tuple(shapes), tuple(str(d) for d in dtypes))
    fn = _RAVELED.get(f, key, lambda fget: Raveled(fget, treedef, shapes, dtypes))
    v = impl.concat([impl.reshape(x, (-1,)) for x in xs])
    return fn, v
