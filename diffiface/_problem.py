"""What a backend differentiates: ``f`` as a function of a flat tuple of leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _checks
from ._tree import unflatten


class Problem:
    """One operator call: ``f``, the tree structure of ``x``, and the checks on f(x).

    ``flat(fget)`` builds ``g(xs, *contexts) = f(unflatten(xs), *contexts)`` which
    checks that the output is an array (and a scalar when required).
    """

    __slots__ = ("backend", "f", "impl", "op", "scalar", "single", "treedef")

    def __init__(self, op, backend, impl, f, treedef, single, scalar):
        self.op = op
        self.backend = backend
        self.impl = impl
        self.f = f
        self.treedef = treedef
        self.single = single
        self.scalar = scalar

    def key(self, *extra: Any) -> tuple:
        return (self.op, self.treedef, self.scalar, *extra)

    def flat(self, fget: Callable[[], Callable] | None = None) -> Callable:
        f, treedef, single = self.f, self.treedef, self.single
        check = self.check_output
        if fget is None:
            if single:

                def g(xs, *ctx):
                    return check(f(xs[0], *ctx))
            else:

                def g(xs, *ctx):
                    return check(f(unflatten(treedef, xs), *ctx))
        else:

            def g(xs, *ctx):
                x = xs[0] if single else unflatten(treedef, xs)
                return check(fget()(x, *ctx))

        return g

    def check_output(self, y: Any) -> Any:
        impl = self.impl
        if not impl.is_output(y):
            raise _checks.not_array(self.op, self.backend, y, impl.output_kind)
        if self.scalar and tuple(getattr(y, "shape", ())) != ():
            raise _checks.not_scalar(self.op, self.backend, tuple(y.shape))
        return y
