"""Finite differences on NumPy: any function of NumPy arrays, no framework needed.

``f`` always receives copies, so ``x`` is never mutated. Cost: a jvp takes 2
evaluations (central) or 1 (forward / backward) besides f(x); a gradient,
jacobian or vjp perturbs each coordinate: 2n evaluations central, n otherwise.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .._backend_types import AutoFiniteDifferences
from .._fallbacks import BackendImpl
from .._registry import register


@register(AutoFiniteDifferences)
class FiniteDifferencesImpl(BackendImpl):
    framework = "finite_differences"
    native_kind = "NumPy arrays"
    output_kind = "a NumPy array or number"

    def __init__(self, backend: AutoFiniteDifferences) -> None:
        super().__init__(backend)
        self.method = backend.method
        self.step = backend.step

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, np.ndarray) or (
            isinstance(leaf, np.generic) and not isinstance(leaf, np.bool_)
        )

    def is_output(self, y: Any) -> bool:
        return self.is_native(y) or (isinstance(y, numbers.Real) and not isinstance(y, bool))

    def from_numpy(self, a: np.ndarray) -> Any:
        return a

    def default_float(self, value: float) -> Any:
        return np.asarray(value, dtype=np.float64)

    def _rel_step(self, dtype: np.dtype) -> float:
        if self.step is not None:
            return self.step
        eps = np.finfo(dtype).eps
        return float(eps ** (1 / 3) if self.method == "central" else eps**0.5)

    @staticmethod
    def protect(xs: tuple) -> tuple:
        """f always gets copies: it may even change its argument in place."""
        return tuple(np.array(x, copy=True) for x in xs)

    def _eval(self, fn, xs, ctx):
        return np.asarray(fn(xs, *ctx))  # fn copies (protect)

    def _difference(self, fn, xs, ctx, y, direction, h):
        """(f(x + h d) - f(x - h d)) / (2h) or the one-sided version, with exact h."""
        lo, hi = (-1, 1) if self.method == "central" else (0, 1)
        if self.method == "backward":
            lo, hi = -1, 0
        plus = tuple(x + hi * h * d for x, d in zip(xs, direction, strict=True))
        minus = tuple(x + lo * h * d for x, d in zip(xs, direction, strict=True))
        f_hi = y if hi == 0 else self._eval(fn, plus, ctx)
        f_lo = y if lo == 0 else self._eval(fn, minus, ctx)
        return np.asarray((f_hi - f_lo) / ((hi - lo) * h))

    def value_and_jvp(self, prob, xs, vs, ctx):
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        scale = max((float(np.max(np.abs(v), initial=0)) for v in vs), default=0.0)
        if scale == 0.0:
            return y, np.zeros_like(y)
        dtype = np.result_type(*xs)
        size = max((float(np.max(np.abs(x), initial=0)) for x in xs), default=0.0)
        h = self._rel_step(dtype) * max(1.0, size) / scale
        t = self._difference(fn, xs, ctx, y, vs, h)
        return y, np.asarray(t, dtype=np.result_type(y, np.float32))

    def _columns(self, prob, xs, ctx):
        """f(x) and the Jacobian columns of each leaf, one perturbed coordinate at a time."""
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        out = []
        for k, x in enumerate(xs):
            cols = np.empty((*y.shape, x.size), dtype=np.result_type(y, x))
            base = self._rel_step(x.dtype)
            for i in range(x.size):
                xi = x.reshape(-1)[i]
                step = base * max(1.0, abs(float(xi)))
                h = float((xi + x.dtype.type(step)) - xi)  # exactly representable
                d = [_unit(z, i if j == k else None, 1) for j, z in enumerate(xs)]
                cols[..., i] = self._difference(fn, xs, ctx, y, d, h)
            out.append(cols)
        return y, tuple(out)

    def value_and_gradient(self, prob, xs, ctx):
        if any(np.iscomplexobj(x) for x in xs):
            return self._complex_gradient(prob, xs, ctx)
        y, cols = self._columns(prob, xs, ctx)
        return y, tuple(c.reshape(x.shape).astype(x.dtype) for c, x in zip(cols, xs, strict=True))

    def _complex_gradient(self, prob, xs, ctx):
        """df/dRe + i df/dIm for complex leaves (real f), one coordinate at a time."""
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        gs = []
        for k, x in enumerate(xs):
            units = (1.0, 1j) if np.iscomplexobj(x) else (1.0,)
            base = self._rel_step(np.finfo(x.dtype).dtype)
            g = np.zeros(x.size, dtype=x.dtype)
            for i in range(x.size):
                h = base * max(1.0, abs(x.reshape(-1)[i]))
                for unit in units:
                    d = [_unit(z, i if j == k else None, unit) for j, z in enumerate(xs)]
                    g[i] += unit * self._difference(fn, xs, ctx, y, d, h)
            gs.append(g.reshape(x.shape))
        return y, tuple(gs)

    def value_and_jacobian(self, prob, xs, ctx):
        y, (cols,) = self._columns(prob, xs, ctx)
        return y, cols.reshape(y.shape + xs[0].shape).astype(np.result_type(y, xs[0]))

    def value_and_pullback(self, prob, xs, ctx):
        y, cols = self._columns(prob, xs, ctx)
        axes = tuple(range(y.ndim))

        def pb(w):  # the real part for a real x (a complex f(x) has a complex J)
            return tuple(
                _as(np.tensordot(w, c, axes=(axes, axes)).reshape(x.shape), x.dtype)
                for c, x in zip(cols, xs, strict=True)
            )

        return y, pb

    def prefers_reverse(self, prob, xs, ctx) -> bool:
        return False

    def value_and_batched_jacobian(self, prob, xs, ctx):
        """Every sample perturbed at once: 2 * in calls of f (central), besides f(x)."""
        from .._batched import check_batch

        (x,) = xs
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        check_batch(prob, x.shape, y.shape)
        b = x.shape[0]
        n_in = x.size // max(b, 1)
        flat = x.reshape(b, n_in)
        base = self._rel_step(x.dtype)
        cols = np.empty((b, y.size // max(b, 1), n_in), dtype=np.result_type(y, x))
        for i in range(n_in):
            step = base * np.maximum(1.0, np.abs(flat[:, i]))
            h = (flat[:, i] + step.astype(x.dtype)) - flat[:, i]  # exact per-sample steps
            d = np.zeros_like(flat)
            d[:, i] = h
            t = self._difference(fn, xs, ctx, y, (d.reshape(x.shape),), 1.0)
            cols[:, :, i] = t.reshape(b, -1) / h[:, None]
        return y, cols.reshape((*y.shape, *x.shape[1:]))

    # ---- second order: finite differences of finite-difference gradients -------
    def _outer_step(self, dtype) -> float:
        return self.step if self.step is not None else float(np.finfo(dtype).eps ** 0.25)

    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        _, g = self.value_and_gradient(prob, xs, ctx)
        scale = max((float(np.max(np.abs(v), initial=0)) for v in vs), default=0.0)
        if scale == 0.0:
            return g, tuple(np.zeros_like(x) for x in xs)
        size = max((float(np.max(np.abs(x), initial=0)) for x in xs), default=0.0)
        h = self._outer_step(np.result_type(*xs)) * max(1.0, size) / scale
        plus = self.value_and_gradient(
            prob, tuple(x + h * v for x, v in zip(xs, vs, strict=True)), ctx
        )[1]
        minus = self.value_and_gradient(
            prob, tuple(x - h * v for x, v in zip(xs, vs, strict=True)), ctx
        )[1]
        hv = tuple(
            np.asarray((p - m) / (2 * h), dtype=x.dtype)
            for p, m, x in zip(plus, minus, xs, strict=True)
        )
        return g, hv

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        (x,) = xs
        y, (g,) = self.value_and_gradient(prob, xs, ctx)
        cols = np.empty((x.size, x.size), dtype=x.dtype)
        base = self._outer_step(x.dtype)
        for i in range(x.size):
            xi = x.reshape(-1)[i]
            h = float((xi + x.dtype.type(base * max(1.0, abs(float(xi))))) - xi)
            d = _unit(x, i, h)
            gp = self.value_and_gradient(prob, (x + d,), ctx)[1][0]
            gm = self.value_and_gradient(prob, (x - d,), ctx)[1][0]
            cols[:, i] = ((gp - gm) / (2 * h)).reshape(-1)
        h_mat = (cols + cols.T) / 2  # symmetric by construction of the exact Hessian
        return y, (g,), h_mat.reshape(x.shape + x.shape)

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        (x,) = xs
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        xv = float(x)
        h = float((x + x.dtype.type(self._outer_step(x.dtype) * max(1.0, abs(xv)))) - x)
        fp = self._eval(fn, (x + h,), ctx)
        fm = self._eval(fn, (x - h,), ctx)
        dtype = np.result_type(y, np.float32)
        d = np.asarray((fp - fm) / (2 * h), dtype=dtype)
        d2 = np.asarray((fp - 2 * y + fm) / (h * h), dtype=dtype)
        return y, d, d2


def _unit(like: np.ndarray, i: int | None, value: Any) -> np.ndarray:
    """An array of ``like``'s shape and dtype with ``value`` at flat (C-order) index ``i``
    and zeros elsewhere (all zeros for None), whatever ``like``'s memory order."""
    d = np.zeros(like.size, dtype=like.dtype)
    if i is not None:
        d[i] = value
    return d.reshape(like.shape)


def _as(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a`` in ``dtype``, its real part for a real dtype."""
    if np.iscomplexobj(a) and not np.issubdtype(dtype, np.complexfloating):
        a = a.real
    return a.astype(dtype)
