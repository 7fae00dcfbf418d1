"""autograd (HIPS) backend: make_vjp for reverse mode, make_jvp for forward mode."""

from __future__ import annotations

from typing import Any

import numpy as np
from autograd.core import make_jvp, make_vjp
from autograd.tracer import Box

from .. import _checks
from .._backend_types import AutoAutograd
from .._fallbacks import BackendImpl
from .._registry import register


@register(AutoAutograd)
class AutogradImpl(BackendImpl):
    framework = "autograd"
    native_kind = "NumPy arrays"
    output_kind = "an array (autograd.numpy)"

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, np.ndarray | Box) or (
            isinstance(leaf, np.generic) and not isinstance(leaf, np.bool_)
        )

    def from_numpy(self, a: np.ndarray) -> Any:
        return a

    def default_float(self, value: float) -> Any:
        return np.asarray(value, dtype=np.float64)

    def ones_like(self, a: Any) -> Any:
        return np.ones(np.shape(a), dtype=a.dtype)

    # A single array is differentiated directly (no tuple container to box).
    def value_and_pullback(self, prob, xs, ctx):
        fn = prob.flat()
        if prob.single:
            pb, y = _call(prob, lambda: make_vjp(lambda x: fn((x,), *ctx), xs[0]))
            return _array(y), lambda w: (_like(pb(w), xs[0]),)
        pb, y = _call(prob, lambda: make_vjp(lambda xs: fn(xs, *ctx), xs))
        return _array(y), lambda w: tuple(_like(g, x) for g, x in zip(pb(w), xs, strict=True))

    def value_and_jvp(self, prob, xs, vs, ctx):
        fn = prob.flat()
        if prob.single:
            y, t = _call(prob, lambda: make_jvp(lambda x: fn((x,), *ctx), xs[0])(vs[0]))
        else:
            y, t = _call(prob, lambda: make_jvp(lambda xs: fn(xs, *ctx), xs)(vs))
        return _array(y), _like(t, y)


def _array(y: Any) -> Any:
    return y if isinstance(y, Box) else np.asarray(y)


def _like(g: Any, ref: Any) -> Any:
    """Keep the reference dtype and shape (autograd promotes and returns scalars)."""
    dtype = ref.dtype
    if isinstance(g, Box):
        return g if g.dtype == dtype else g.astype(dtype)
    g = np.asarray(g)
    if g.dtype != dtype:
        g = g.astype(dtype)
    return g.reshape(np.shape(ref))


def _call(prob, thunk):
    try:
        return thunk()
    except TypeError as exc:
        if "Box" in str(exc):
            raise _checks.left_framework(prob.op, prob.backend, exc) from exc
        raise
