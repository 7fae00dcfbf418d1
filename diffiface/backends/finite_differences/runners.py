"""The runners of finite-difference plans at one float array: jvp, gradient and their
value variants in one closure each, f called directly on the moved points (new arrays:
no copies), its output checked in full on the first evaluation and each next one
checked against it. A zero tangent, an empty x or an operator of this backend running
(``RUNNING``) take the general path (``SLOW``), as does any other x."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _checks
from ...core.backend import SLOW
from .levels import RUNNING, enter, leave


def jvp(named, f, finish, value: bool, steps: tuple):
    """``_jvp``'s runner (``named``: what errors name; ``finish``: f's output check;
    ``value``: value_and_jvp; ``steps``: the backend's sides, product of steps of one
    level, and ``rel_step(named, dtype)``)."""
    (lo, hi), product, rel_step = steps
    nest, rel_steps = (named, 1, product), {}

    def jvp(x, v):
        if type(x) is not np.ndarray or x.dtype.kind != "f" or not x.size:
            return SLOW
        if type(v) is not np.ndarray or v.shape != x.shape or v.dtype != x.dtype:
            return SLOW
        scale = float(np.abs(v).max())
        if scale == 0.0 or RUNNING.get() is not None:
            return SLOW
        rel = rel_steps.get(x.dtype)
        if rel is None:
            rel = rel_steps.setdefault(x.dtype, rel_step(named, x.dtype))
        h = rel * max(1.0, float(np.abs(x).max())) / scale
        tokens = enter(nest)
        try:
            xs, y, first = (x,), None, None
            if value or lo == 0 or hi == 0:
                first = f(np.array(x, copy=True))
                y = np.asarray(finish(first, xs, ()))
            f_hi = y
            if hi != 0 and first is None:
                first = f(x + (hi * h) * v)
                f_hi = np.asarray(finish(first, xs, ()))
            elif hi != 0:
                f_hi = same_kind(f(x + (hi * h) * v), first, finish, xs)
            f_lo = y if lo == 0 else same_kind(f(x + (lo * h) * v), first, finish, xs)
        except TypeError as exc:
            _checks.reraise(named.op, named.backend, exc)
        finally:
            leave(tokens)
        t = np.asarray((f_hi - f_lo) / ((hi - lo) * h))
        if t.dtype.kind not in "fc" or t.dtype.itemsize < 4:  # (at least float32)
            t = t.astype(np.result_type(t, np.float32))
        return (y, t) if value else t

    return jvp


def gradient(named, f, finish, value: bool, steps: tuple):
    """``_gradient``'s runner, coordinate by coordinate with the general path's steps
    (``_leaf_columns``): 2n evaluations of f (central; n + 1 one-sided), and f(x) once
    more for ``value`` (value_and_gradient)."""
    (lo, hi), product, rel_step = steps
    nest, rel_steps = (named, 1, product), {}

    def gradient(x):
        if type(x) is not np.ndarray or x.dtype.kind != "f" or not x.size:
            return SLOW
        if RUNNING.get() is not None:
            return SLOW
        rel = rel_steps.get(x.dtype)
        if rel is None:
            rel = rel_steps.setdefault(x.dtype, rel_step(named, x.dtype))
        seg = x.reshape(-1)
        steps = (rel * np.maximum(np.abs(seg.astype(np.float64, copy=False)), 1.0)).astype(x.dtype)
        hs = ((seg + steps) - seg).astype(np.float64, copy=False)  # exactly representable
        at = _evaluations(x, f, finish)
        tokens = enter(nest)
        try:
            y = at(None, 0.0) if value or lo == 0 or hi == 0 else None
            g = None
            for j, h in enumerate(hs.tolist()):
                d = (y if hi == 0 else at(j, hi * h)) - (y if lo == 0 else at(j, lo * h))
                if g is None:
                    g = np.empty(x.size, np.result_type(d, x))
                g[j] = d
        except TypeError as exc:
            _checks.reraise(named.op, named.backend, exc)
        finally:
            leave(tokens)
        g /= (hi - lo) * hs
        g = g.reshape(x.shape).astype(x.dtype, copy=False)
        return (y, g) if value else g

    return gradient


def _evaluations(x: np.ndarray, f, finish):
    """``at(j, step)``: f at a new copy of x with ``step`` added to its element j (C
    order; None: x itself), its output checked in full the first time; each next one
    of that kind (a NumPy array or float scalar: type, dtype, shape) is taken as it is
    (``same_kind``), any other checked in full."""
    xs, one_d, kind = (x,), x.ndim == 1, None

    def at(j: int | None, step: float) -> Any:
        nonlocal kind
        a = np.array(x, copy=True)
        if j is not None:
            if one_d:
                a[j] += step
            else:
                a.flat[j] += step
        y = f(a)
        if kind is not None and type(y) is kind[0] and y.dtype == kind[1] and y.shape == kind[2]:
            return y
        if kind is None and type(y) in _SAME_KIND:
            kind = (type(y), y.dtype, y.shape)
        return np.asarray(finish(y, xs, ()))

    return at


_SAME_KIND = (np.ndarray, np.float64, np.float32)  # outputs whose kind settles their checks


def same_kind(y: Any, first: Any, finish, xs: tuple) -> np.ndarray:
    """f's output ``y``: as it is where it is a NumPy array or float scalar of the kind of
    f's output ``first`` of this call, which was checked (type, dtype, shape), else
    checked in full."""
    if type(y) is type(first) and type(y) in _SAME_KIND:
        if y.dtype == first.dtype and y.shape == first.shape:
            return y
    return np.asarray(finish(y, xs, ()))
