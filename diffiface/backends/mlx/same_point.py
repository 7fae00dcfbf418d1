"""Same-point preparations on MLX (see ``diffiface.operators.same_point``).

MLX keeps no linear map to reuse: ``mx.vjp`` and ``mx.jvp`` take the cotangent or
tangent with the primals and run f again, and MLX has no ``linearize``. So each
direction is one MLX call, as in an ordinary prepared call: an hvp is one ``mx.vjp``
of ``mx.grad`` (H is symmetric), a jvp one ``mx.jvp``, a vjp one ``mx.vjp``; a
``Tangents`` of k is one ``mx.vmap`` over them. What the preparation keeps is f(x) and
the gradient (for the value forms), and the point, so that code written for the
other backends' same-point preparations runs on MLX unchanged.

An MLX array can be changed in place (``x[i] = ...``), so the point is compared by
value with a copy taken at preparation (an O(n) check, next to a pass of f).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from .impl import call_f, flat
from .second import aux_dropped, grad_of, jvps, vjps


def keep(a: Any) -> tuple:
    """The array and a copy of its values (an in-place write rebinds the array's data,
    not the copy's)."""
    return a, mx.array(a)


def same(kept: tuple, a: Any) -> bool:
    _, copy = kept
    return (
        isinstance(a, mx.array)
        and a.shape == copy.shape
        and a.dtype == copy.dtype
        and bool(mx.array_equal(a, copy, equal_nan=True))
    )


def _at(value, gradient):
    return lambda: (value, gradient)


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    y, g = impl.value_and_gradient(prob, xs, ctx)
    fn = flat(prob, ctx)
    gf = grad_of(fn, len(xs))

    def one(vs: tuple) -> tuple:
        with aux_dropped():
            return tuple(call_f(prob, lambda: mx.vjp(gf, list(xs), list(vs))[1]))

    def many(vss: list) -> list:
        with aux_dropped():
            return [tuple(h) for h in call_f(prob, lambda: vjps(gf, xs, vss))]

    return _at(y, g), one, many


def jvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    fn = flat(prob, ctx)
    y = call_f(prob, lambda: fn(*xs)[0])

    def one(vs: tuple) -> Any:
        with aux_dropped():
            return call_f(prob, lambda: mx.jvp(fn, list(xs), list(vs))[1][0])

    def many(vss: list) -> list:
        with aux_dropped():
            return [t[0] for t in call_f(prob, lambda: jvps(fn, xs, vss))]

    return _at(y, None), one, many


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    y, pb = impl.value_and_pullback(prob, xs, ctx)
    fn = flat(prob, ctx)

    def many(ws: list) -> list:
        with aux_dropped():
            return [tuple(g) for g in call_f(prob, lambda: vjps(fn, xs, [[w] for w in ws]))]

    return _at(y, None), pb, many
