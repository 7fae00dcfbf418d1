"""Same-point preparations on autograd (see ``diffiface.operators.same_point``).

hvp keeps the gradient's pullback (``make_vjp`` of the gradient: H is symmetric, so its
pullback of v is H v); vjp keeps f's pullback; jvp keeps the pullback of f's pullback
``u -> J^T u`` (linear in u), whose pullback of v is ``J v`` (the double-vjp trick: no
part of f runs again).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from autograd.tracer import getval

from .impl import call_f, grad_fn, like_x, link_out
from .traces import make_vjp


def _at(value, gradient):
    return lambda: (value, gradient)


def _loop(one):
    return lambda many: [one(v) for v in many]


def _f1(prob, xs: tuple, ctx: tuple, seen: list | None = None):
    """(f of x alone, its argument): the array itself for one array, else the tuple."""
    fn = prob.flat()

    def f1(x):
        y = link_out(fn((x,) if prob.single else x, *ctx), x if prob.single else x[0])
        if seen is not None:
            seen.append(y)
        return y

    return f1, (xs[0] if prob.single else xs)


def _leaves(prob, out: Any, xs: tuple) -> tuple:
    out = (out,) if prob.single else out
    return tuple(like_x(a, x) for a, x in zip(out, xs, strict=True))


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    seen: list = []
    f1, x = _f1(prob, xs, ctx, seen)
    pb, g = call_f(prob, lambda: make_vjp(grad_fn(f1, "reverse"), x))
    y = np.asarray(getval(seen[-1]))

    def one(vs: tuple) -> tuple:
        return _leaves(prob, call_f(prob, lambda: pb(vs[0] if prob.single else vs)), xs)

    return _at(y, _leaves(prob, g, xs)), one, _loop(one)


def jvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    f1, x = _f1(prob, xs, ctx)
    pb, y = call_f(prob, lambda: make_vjp(f1, x))
    y = np.asarray(y)
    twice, _ = call_f(prob, lambda: make_vjp(pb, np.zeros_like(y)))

    def one(vs: tuple) -> Any:
        return like_x(call_f(prob, lambda: twice(vs[0] if prob.single else vs)), y)

    return _at(y, None), one, _loop(one)


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    y, pb = impl.value_and_pullback(prob, xs, ctx)
    return _at(y, None), pb, _loop(pb)
