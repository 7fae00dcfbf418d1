"""f's pytree output in MLX's runners (jvp, vjp, jacobian at one MLX array), taken per
call as it comes.

MLX runs f anew on every call, so nothing fixes the output's structure: f runs as a
function of its output's leaves (MLX's transforms take a list of arrays out), and the
results are put back in the structure of that call's output. A leaf that is no float
MLX array, a cotangent unlike the output, or an array output (the array runners') is
the general path's: the runner returns SLOW, and the general path checks f's output and
explains. An error f raises goes on as it came (``errors``).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ..._tree import flatten, unflatten
from ...core.backend import SLOW
from . import errors
from .errors import Unusual
from .second import aux_waits, jacobian

_FLOATS = (mx.float32, mx.float16, mx.bfloat16, mx.float64)


def _leaves_of(f, box: list, where: tuple):
    """``fn(x) -> [leaves of f(x)]``, the treedef put in ``box``."""

    def fn(x: Any) -> list:
        try:
            y = f(x)
        except Exception as exc:
            errors.note(exc, where)
            raise
        if type(y) is mx.array:
            raise Unusual  # (one array: the array runners')
        leaves, treedef = flatten(y)
        if not leaves:
            raise Unusual
        for a in leaves:  # (a loop: no frame per leaf)
            if type(a) is not mx.array or a.dtype not in _FLOATS:
                raise Unusual
        box.append(treedef)
        return leaves

    return fn


def _plain(x: Any) -> bool:
    return type(x) is mx.array and x.dtype in _FLOATS


def jvp(f, returns: tuple, where: tuple):
    value = len(returns) == 2

    def run(x: Any, t: Any) -> Any:
        if not _plain(x) or type(t) is not mx.array or t.shape != x.shape or t.dtype != x.dtype:
            return SLOW
        box: list = []
        try:
            ys, ts = mx.jvp(_leaves_of(f, box, where), [x], [t])
        except Exception as exc:
            return errors.hand_over(exc)
        jt = unflatten(box[-1], ts)
        return (unflatten(box[-1], ys), jt) if value else jt

    return run


def vjp(f, returns: tuple, where: tuple):
    value = len(returns) == 2

    def run(x: Any, w: Any) -> Any:
        if not _plain(x):
            return SLOW
        ws, w_tree = flatten(w)
        box: list = []
        fn = _leaves_of(f, box, where)

        def paired(x: Any) -> list:
            ys = fn(x)
            if box[-1] != w_tree or any(
                type(v) is not mx.array or v.shape != a.shape or v.dtype != a.dtype
                for a, v in zip(ys, ws, strict=True)
            ):
                raise Unusual
            return ys

        try:
            ys, (g,) = mx.vjp(paired, [x], ws)
        except Exception as exc:
            return errors.hand_over(exc)
        return (unflatten(box[-1], ys), g) if value else g

    return run


def jacobian_of(f, returns: tuple, where: tuple, mode: str | None):
    """f(x), then one Jacobian per leaf, shaped ``leaf.shape + x.shape``, in the
    output's structure, from one ``mx.vmap`` over the unit vectors: rows of the raveled
    leaves where the output is no larger than x (or mode "reverse"), split by rows;
    else columns, each leaf's with x's axis last (no copy of the whole Jacobian)."""
    value = len(returns) == 2
    failed: list = []

    def run(x: Any) -> Any:
        if failed or not _plain(x) or not x.size or aux_waits():
            return SLOW
        box: list = []
        fn = _leaves_of(f, box, where)
        try:
            ys = fn(x)
            size = 0
            for a in ys:  # (a loop: no frame per leaf)
                size += a.size
            if mode == "reverse" or (mode is None and size <= x.size):
                parts = _rows(fn, x, ys)
            else:
                parts = _columns(fn, x)
        except Exception as exc:
            slow = errors.hand_over(exc)  # (a direction MLX lacks: SLOW from now on)
            failed.append(True)
            return slow
        jt = unflatten(box[0], parts)
        return (unflatten(box[0], ys), jt) if value else jt

    return run


def _rows(fn, x: Any, ys: list) -> list:
    """Each leaf's Jacobian, from the rows of the raveled leaves' (one vmapped vjp)."""
    raveled = lambda x: [mx.concatenate([a.reshape(-1) for a in fn(x)])]  # noqa: E731
    jac = jacobian(raveled, x, mx.concatenate([a.reshape(-1) for a in ys]), True)[1]
    parts, start = [], 0
    for a in ys:
        parts.append(jac[start : start + a.size].reshape((*a.shape, *x.shape)))
        start += a.size
    return parts


def _columns(fn, x: Any) -> list:
    """Each leaf's Jacobian from one vmapped jvp along x's unit vectors, x's axis last
    (``out_axes``): as ``mx.vmap(mx.jvp, out_axes=-1)`` gives it, reshaped only where x
    has other than one axis."""
    eye = mx.eye(x.size, dtype=x.dtype).reshape(x.size, *x.shape)
    cols = mx.vmap(lambda v: mx.jvp(fn, [x], [v])[1], out_axes=-1)(eye)
    if x.ndim == 1:
        return list(cols)
    return [c.reshape((*c.shape[:-1], *x.shape)) for c in cols]
