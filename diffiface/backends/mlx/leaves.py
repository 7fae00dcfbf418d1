"""The runners of MLX plans for native leaves: x a pytree of MLX arrays (or one array
with Constant contexts), the contexts' leaves and values, and a tangent's leaves (see
``Signature.run``). Each is MLX's own call over the list of x's leaves, as the runner
of one array is (``runners``): ``mx.value_and_grad``, ``mx.vjp``, ``mx.jvp``, and
``mx.vjp`` of ``mx.grad`` for an hvp. The results like x come back in x's structure.

A runner takes the plain case only: float MLX leaves, one tangent like x's leaves (the
vjp's: like f's output, one array: the leaves form takes no pytree output), no aux and
no second-order backend; anything else (a ``Tangents``, an output the general path
must check, a direction MLX lacks for f) returns SLOW. An error f raises goes on as it
came (``errors``).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import mlx.core as mx

from ..._cache import weak_callable
from ...core import direction
from ...core.backend import SLOW
from ...core.operator import OPS
from . import errors
from .errors import Unusual

_FLOATS = (mx.float32, mx.float16, mx.bfloat16, mx.float64)


def runner(prob, combo: Any, weak: bool):
    """The runner of ``prob.op`` for native leaves (``weak``: it holds f weakly, for an
    unprepared call's plan), or None where there is none."""
    decl = OPS[prob.op]
    family, returns = decl.family, decl.returns
    if prob.aux or combo is not None or family not in _MAKERS:
        return None
    known = direction.only(prob)  # f runs in one direction only: the general path's
    if known is not None and (known == direction.FORWARD) != (family == "jvp"):
        return None
    f = weak_callable(prob.f, weak)
    if f is None:
        return None
    rebuild = itemgetter(0) if prob.single else prob.treedef.unflatten
    return _MAKERS[family](f, rebuild, returns, (prob.op, prob.backend))


def _plain(xs: tuple) -> bool:
    for x in xs:  # (a loop: no frame per leaf)
        if type(x) is not mx.array or x.dtype not in _FLOATS:
            return False
    return bool(xs)  # (an empty pytree, which MLX's transforms refuse: the general path's)


def _like(ts: tuple, xs: tuple) -> bool:
    if len(ts) != len(xs):
        return False
    for t, x in zip(ts, xs, strict=True):
        if type(t) is not mx.array or t.shape != x.shape or t.dtype != x.dtype:
            return False
    return True


def _of_leaves(f, rebuild, scalar: bool, where: tuple):
    """``fn(leaves, contexts) -> y``: f of x rebuilt from its leaves, its output checked
    (a float MLX array; a scalar where ``scalar``); an error f raises noted as f's."""

    def fn(leaves: list, contexts: tuple) -> Any:
        x = rebuild(leaves)
        try:
            y = f(x, *contexts)
        except Exception as exc:
            errors.note(exc, where)
            raise
        if type(y) is not mx.array or y.dtype not in _FLOATS or (scalar and y.ndim):
            raise Unusual
        return y

    return fn


def _gradient(f, rebuild, returns: tuple, where: tuple):
    vg = mx.value_and_grad(_of_leaves(f, rebuild, True, where))
    value = len(returns) == 2

    def run(xs: tuple, _: tuple, contexts: tuple) -> Any:
        if not _plain(xs):
            return SLOW
        try:
            y, gs = vg(list(xs), contexts)
        except Exception as exc:
            return errors.hand_over(exc)
        g = rebuild(gs)
        return (y, g) if value else g

    return run


def _vjp(f, rebuild, returns: tuple, where: tuple):
    fn = _of_leaves(f, rebuild, False, where)
    value = len(returns) == 2

    def run(xs: tuple, _: tuple, contexts: tuple, ws: tuple) -> Any:
        if len(ws) != 1 or type(ws[0]) is not mx.array or not _plain(xs):
            return SLOW  # (a Tangents: k tuples of leaves, the general path's batched pass)
        (w,) = ws

        def paired(*leaves: Any) -> Any:
            y = fn(list(leaves), contexts)
            if y.shape != w.shape or y.dtype != w.dtype:
                raise Unusual
            return y

        try:
            (y,), gs = mx.vjp(paired, list(xs), [w])
        except Exception as exc:
            return errors.hand_over(exc)
        g = rebuild(gs)
        return (y, g) if value else g

    return run


def _jvp(f, rebuild, returns: tuple, where: tuple):
    fn = _of_leaves(f, rebuild, False, where)
    value = len(returns) == 2

    def run(xs: tuple, _: tuple, contexts: tuple, ts: tuple) -> Any:
        if not _plain(xs) or not _like(ts, xs):
            return SLOW  # (a Tangents: k tuples of leaves)
        try:
            (y,), (t,) = mx.jvp(lambda *leaves: fn(list(leaves), contexts), list(xs), list(ts))
        except Exception as exc:
            return errors.hand_over(exc)
        return (y, t) if value else t

    return run


def _hvp(f, rebuild, returns: tuple, where: tuple):
    """Reverse over reverse (a plain AutoMLX's): the pullback of the gradient along v,
    its outputs the gradient (and f's value, taken out of the same pass)."""
    vg = mx.value_and_grad(_of_leaves(f, rebuild, True, where))

    def run(xs: tuple, _: tuple, contexts: tuple, vs: tuple) -> Any:
        if not _plain(xs) or not _like(vs, xs):
            return SLOW
        seen: list = []

        def gradient(*leaves: Any) -> list:
            y, gs = vg(list(leaves), contexts)
            seen.append(y)
            return gs

        try:
            gs, hvs = mx.vjp(gradient, list(xs), list(vs))
        except Exception as exc:
            return errors.hand_over(exc)
        hv = rebuild(hvs)
        if len(returns) == 1:
            return hv
        g = rebuild(gs)
        return (seen[-1], g, hv) if len(returns) == 3 else (g, hv)

    return run


_MAKERS = {"gradient": _gradient, "vjp": _vjp, "jvp": _jvp, "hvp": _hvp}
