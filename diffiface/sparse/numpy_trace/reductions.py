"""Reductions and scans on traced arrays: sums, extrema, products, cumulative ones, and
the ufunc methods (``np.add.reduce``, ``np.multiply.accumulate``, ``np.subtract.outer``).

A linear reduction (sum, mean, max, min) gives each output the union of its group's
sets; a nonlinear one (std, var) adds every pair of that union. A product is folded
pairwise, as that many multiplications (no second derivative in one factor alone).
"""

from __future__ import annotations

import math

import numpy as np

from . import sets as S
from .tracer import Trace, Traced, needs_values


def _axes(ndim: int, axis) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axis = axis if isinstance(axis, tuple | list) else (axis,)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axis))


def groups(shape: tuple, axis, keepdims: bool) -> tuple:
    """(the reduced shape, the output position of each input element)."""
    axes = _axes(len(shape), axis)
    kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
    out = np.broadcast_to(np.arange(math.prod(kept)).reshape(kept), shape).ravel()
    return (kept if keepdims else tuple(s for i, s in enumerate(shape) if i not in axes)), out


def reduce(
    t: Traced, axis=None, keepdims=False, dtype=None, nonlinear=False, floats=False
) -> Traced:
    """A reduction whose output depends on its whole group (linear unless
    ``nonlinear``)."""
    shape, where = groups(t.shape, axis, keepdims)
    size = math.prod(shape)
    rows = np.arange(t.size)
    g = S.gather_union(t.g, where, rows, size)
    h = None
    if t.trace.second:
        h = S.union(
            S.gather_union(t.h, where, rows, size),
            S.self_pairs(g, t.trace.n) if nonlinear else None,
        )
    return t.like(shape, _dtype(t, dtype, floats or nonlinear), g, h)


def segment_sum(t: Traced, out_rows: np.ndarray, in_rows: np.ndarray, shape) -> Traced:
    """A linear map: output k sums the elements ``in_rows`` paired with k."""
    size = math.prod(shape)
    g = S.gather_union(t.g, out_rows, in_rows, size)
    h = S.gather_union(t.h, out_rows, in_rows, size) if t.trace.second else None
    return t.like(shape, t.dtype, g, h)


def _dtype(t: Traced, dtype, floats: bool):
    """A reduction's dtype: ``dtype``, else x's inexact one; an integer input gives a
    float (mean, std) or a wide integer (sum, prod)."""
    if dtype is not None:
        return np.dtype(dtype)
    if np.issubdtype(t.dtype, np.inexact):
        return t.dtype
    return np.dtype(np.float64) if floats else np.result_type(t.dtype, np.int_)


def no_derivative(t: Traced, axis=None, keepdims=False, dtype=np.intp) -> Traced:
    """An integer or bool result (argmax, any, count_nonzero): shaped, no sets."""
    shape, _ = groups(t.shape, axis, keepdims)
    return t.like(shape, dtype, None, None)


def product(t: Traced, axis=None, keepdims=False, dtype=None) -> Traced:
    """``prod``: the factors multiplied pairwise, log2(k) rounds of ``np.multiply``."""
    axes = _axes(t.ndim, axis)
    shape, _ = groups(t.shape, axes, keepdims)
    rest = [i for i in range(t.ndim) if i not in axes]
    k = math.prod(t.shape[i] for i in axes)
    a = np.transpose(t, rest + list(axes)).reshape(*(t.shape[i] for i in rest), k)
    if k == 0:
        return t.like(shape, _dtype(t, dtype, False), None, None)
    while a.shape[-1] > 1:
        half = a.shape[-1] // 2
        paired = a[..., : 2 * half : 2] * a[..., 1 : 2 * half : 2]
        a = np.concatenate([paired, a[..., 2 * half :]], axis=-1) if a.shape[-1] % 2 else paired
    out = a[..., 0].reshape(shape)
    return out if dtype is None else out.astype(dtype)


def scan(t: Traced, axis=None, dtype=None, nonlinear=False) -> Traced:
    """A cumulative operation along ``axis``: element i depends on elements 0..i."""
    if axis is None:
        t, axis = np.reshape(t, -1), 0
    axis = int(axis) % t.ndim
    idx = np.moveaxis(np.arange(t.size).reshape(t.shape), axis, -1)
    length = t.shape[axis]
    later, earlier = np.tril_indices(length)
    out_rows = idx[..., later].ravel()
    in_rows = idx[..., earlier].ravel()
    g = S.gather_union(t.g, out_rows, in_rows, t.size)
    h = None
    if t.trace.second:
        h = S.union(
            S.gather_union(t.h, out_rows, in_rows, t.size),
            S.self_pairs(g, t.trace.n) if nonlinear else None,
        )
    return t.like(t.shape, _dtype(t, dtype, False), g, h)


_LINEAR_REDUCE = {"add", "maximum", "minimum", "fmax", "fmin", "subtract"}
_NO_DERIVATIVE = {
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "equal",
    "not_equal",
    "greater",
    "less",
}


def ufunc_method(trace: Trace, ufunc, method: str, inputs: tuple, kwargs: dict):
    """``ufunc.reduce``, ``.accumulate`` and ``.outer``."""
    name = ufunc.__name__
    if method == "outer":
        a, b = inputs
        a = np.reshape(a, np.shape(a) + (1,) * np.ndim(b))
        return ufunc(a, b, **kwargs)
    if method not in ("reduce", "accumulate") or kwargs.get("out") is not None:
        raise needs_values(
            f"calls np.{name}.{method} (unsupported by the detector)",
            f"write it with np.{name} and indexing",
        )
    (t,) = inputs
    axis, dtype = kwargs.get("axis", 0), kwargs.get("dtype")
    if method == "accumulate":
        if name not in _LINEAR_REDUCE and name != "multiply":
            trace.warn(f"np.{name}.accumulate", "taken as nonlinear in every element")
        return scan(t, axis, dtype, nonlinear=name not in _LINEAR_REDUCE)
    keep = kwargs.get("keepdims", False)
    if name == "multiply":
        return product(t, axis, keep, dtype)
    if name in _NO_DERIVATIVE:
        return no_derivative(t, axis, keep, np.bool_)
    if name not in _LINEAR_REDUCE:
        trace.warn(f"np.{name}.reduce", "taken as nonlinear in every element")
    return reduce(t, axis, keep, dtype, nonlinear=name not in _LINEAR_REDUCE)
