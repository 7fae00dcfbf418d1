"""The MLX side of the bridges (see ``diffiface.bridge.node``).

Inner: a node's jvp, vjp, transpose and vmap are ``mx.jvp``, ``mx.vjp`` and
``mx.vmap`` of its MLX function; what a node returns to the outer framework is
NumPy views of MLX's buffers (every outer side takes NumPy arrays).

Outer: a node is one ``mx.custom_function`` whose vjp, jvp and vmap call the
node's derived nodes through the same function, so ``mx.grad``, ``mx.jvp``,
``mx.vjp``, ``mx.vmap`` and any nesting of them cross the bridge. MLX has no
tracer type to tell an outer pass from none: every call goes through the
function (about 25 µs).

Copies: an MLX array leaves as a NumPy view of its buffer (the buffer protocol;
JAX's jit, ``torch.from_numpy`` and NumPy take it as it is), so MLX to another
framework copies nothing on the CPU. The way in copies: mlx 0.32 cannot wrap
memory it did not allocate on the CPU (``mx.from_dlpack(a, copy=False)`` raises
"Cannot import a CPU array without a copy"), and ``mx.from_dlpack`` of a float64
array gives float32, so arrays enter by ``mx.array(a, dtype=...)``, one copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np

from ... import _checks
from ..._tree import flatten, unflatten
from ...bridge import node as _bridge
from . import errors
from .errors import float64_refused
from .impl import DTYPES


def view(a: mx.array) -> np.ndarray:
    """An MLX array as a NumPy view of its buffer; a broadcast or strided one (the ones
    of a sum's cotangent) made dense, as other frameworks write into what they take
    (torch.func refuses a tensor whose elements share memory)."""
    n = np.asarray(a)
    return n if n.flags.c_contiguous or n.flags.f_contiguous else np.ascontiguousarray(n)


def _numpy(a: Any) -> np.ndarray:
    """Any framework's CPU array as a NumPy array (a view where possible)."""
    if type(a) is mx.array:
        return view(a)
    return _bridge.module("numpy").to_numpy(a)


def as_array(a: Any) -> mx.array:
    """Any framework's array (or a Python number) as an MLX array: one copy (see above)."""
    if type(a) is mx.array:
        return a
    n = _numpy(a)
    if n.dtype == np.float64 and float64_refused():
        why = float64_refused()
        raise _checks.DiffifaceValueError(f"a bridged call into MLX got float64: {why}")
    return mx.array(n, dtype=DTYPES.get(n.dtype))


def _to_numpy(a: Any) -> np.ndarray:
    return a if type(a) is np.ndarray else np.asarray(a)


class _Fn:
    """An MLX function of a node (``raw``: MLX arrays in, a list of MLX arrays out),
    called by an outer framework: NumPy views out."""

    __slots__ = ("__weakref__", "raw")

    def __init__(self, raw: Callable) -> None:
        self.raw = raw

    def __call__(self, *arrays: Any) -> tuple:
        return tuple(view(o) for o in self.raw(*arrays))


def _listed(fn: Callable) -> Callable:
    return lambda *a: list(fn(*a))


class Kit:
    """MLX as the inner framework."""

    name = "mlx"
    to_inner = staticmethod(as_array)
    to_numpy = staticmethod(_to_numpy)

    @staticmethod
    def compile(fn) -> _Fn:  # not mx.compile: it freezes the arrays f closes over
        return _Fn(_listed(fn))

    @staticmethod
    def jvp(fn: _Fn, n: int) -> _Fn:
        raw = fn.raw

        def run(*a):
            try:
                return mx.jvp(raw, list(a[:n]), list(a[n:]))[1]
            except (RuntimeError, ValueError) as exc:  # e.g. scatter, cumprod: no JVP
                if errors.lacks(exc) != errors.FORWARD:
                    raise
                return _jvp_by_two_vjps(raw, list(a[:n]), list(a[n:]))

        return _Fn(run)

    @staticmethod
    def vjp(fn: _Fn, n: int) -> _Fn:
        raw = fn.raw
        return _Fn(lambda *a: mx.vjp(raw, list(a[:n]), list(a[n:]))[1])

    @staticmethod
    def transpose(fn: _Fn, n: int, lin_avals: tuple) -> _Fn:
        raw = fn.raw

        def run(*a):  # the vjp in the linear arguments, the others closed over
            zeros = [mx.zeros(s, dtype=_mlx_dtype(d)) for s, d in lin_avals]
            return mx.vjp(lambda *lin: raw(*a[:n], *lin), zeros, list(a[n:]))[1]

        return _Fn(run)

    @staticmethod
    def vmap(fn: _Fn, dims: tuple) -> _Fn:
        return _Fn(mx.vmap(fn.raw, in_axes=dims))

    @staticmethod
    def out_avals(fn: _Fn, avals: tuple) -> list:
        """MLX is lazy: the outputs' shapes and dtypes come without computing them."""
        outs = fn.raw(*(mx.zeros(s, dtype=_mlx_dtype(d)) for s, d in avals))
        return [(tuple(o.shape), _numpy_dtype(o.dtype)) for o in outs]


def _jvp_by_two_vjps(raw: Callable, xs: list, ts: list) -> list:
    """J t where MLX has no JVP of an operation: u -> Jᵀ u is linear, and its pullback
    of t is J t (two reverse passes)."""
    zeros = [mx.zeros_like(y) for y in raw(*xs)]  # (MLX is lazy: shapes only)
    return mx.vjp(lambda *u: mx.vjp(raw, xs, list(u))[1], zeros, ts)[1]


def _mlx_dtype(dtype) -> mx.Dtype:
    """MLX's dtype of the NumPy one (by name: int32, bool, ... are MLX's names too)."""
    d = np.dtype(dtype)
    return DTYPES.get(d) or getattr(mx, "bool_" if d == np.bool_ else d.name)


def _numpy_dtype(dtype: mx.Dtype) -> np.dtype:
    return np.dtype(str(dtype).removeprefix("mlx.core."))


def kit(backend: Any) -> Kit:
    return Kit()


# ---- MLX as the outer framework: one custom function -------------------------------------------


def call(node: _bridge.Node, arrays: list) -> list:
    """``node`` applied to MLX arrays (NumPy leaves become MLX arrays): MLX arrays out."""
    return _function(node)([a if type(a) is mx.array else as_array(a) for a in arrays])


def _function(node: _bridge.Node) -> mx.custom_function:
    """``node`` as one MLX operation, its derivatives and batching bridged calls again.
    Made per call (about 5 µs): it holds ``node`` (a Held one keeps what its f needs)
    for as long as MLX's graph does; MLX passes only arrays through a custom function
    (another argument's vmap axes come out wrong)."""

    @mx.custom_function
    def run(arrays):
        try:
            values = [view(a) for a in arrays]
        except ValueError:  # placeholders: mx.vmap runs f before its rule (below)
            return _placeholders(node, arrays)
        kit = node.kit
        return [as_array(o) for o in node.fn(*(kit.to_inner(v) for v in values))]

    @run.vjp
    def vjp(arrays, cotangents, outputs):
        return call(node.vjp(len(arrays)), [*arrays, *_filled(cotangents, outputs)])

    @run.jvp
    def jvp(arrays, tangents):
        return call(node.jvp(len(arrays)), [*arrays, *_filled(tangents, arrays)])

    @run.vmap
    def vmap(arrays, dims):
        pairs = zip(arrays, dims, strict=True)
        moved = [a if d is None else mx.moveaxis(a, d, 0) for a, d in pairs]
        outs = call(node.batch(tuple(None if d is None else 0 for d in dims)), moved)
        return outs, [0] * len(outs)

    return run


def untraced(leaves: list, out: Any, error: Exception) -> Any:
    """``out`` (computed from ``leaves`` on NumPy copies: finite differences), made to
    raise ``error`` when an outer MLX pass differentiates it: MLX shows no outer pass
    beforehand, and its derivative would otherwise come out 0."""
    ins = [a for a in leaves if type(a) is mx.array]
    outs, tree = flatten(out)
    at = [i for i, o in enumerate(outs) if type(o) is mx.array]
    if not ins or not at:
        return out

    @mx.custom_function
    def guard(arrays):
        return [mx.array(outs[i]) for i in at]

    @guard.vjp
    def vjp(arrays, cotangents, outputs):
        raise error

    @guard.jvp
    def jvp(arrays, tangents):
        raise error

    for i, o in zip(at, guard(ins), strict=True):
        outs[i] = o
    return unflatten(tree, outs)


def _filled(ts: list, like: list) -> list:
    """MLX's tangents or cotangents with None (an argument no tangent reaches, such as
    the constant cotangent of a sum) as zeros."""
    return [mx.zeros_like(a) if t is None else t for t, a in zip(ts, like, strict=True)]


def _placeholders(node: _bridge.Node, arrays: list) -> list:
    """The outputs' shapes without values, where MLX runs the function on placeholders:
    ``mx.vmap`` does so before it calls the batching rule, which computes the values;
    ``mx.compile`` would keep them, so they are NaN there, never a silent zero."""
    avals = tuple((tuple(a.shape), _numpy_dtype(a.dtype)) for a in arrays)
    outs = _bridge.out_avals(node, avals)
    return [mx.full(s, np.nan, dtype=_mlx_dtype(d)) for s, d in outs]
