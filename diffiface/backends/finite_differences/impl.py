"""Finite differences on NumPy: any function of NumPy arrays, no framework needed.

``f`` always receives copies, so ``x`` is never mutated. Cost: a jvp takes 2
evaluations (central) or 1 (forward / backward) besides f(x); a gradient,
jacobian or vjp perturbs each coordinate: 2n evaluations central, n otherwise. A
plain jvp or gradient by central differences does not evaluate f(x). f's output is
checked once per kind (type, dtype, shape: ``core.problem``), not per evaluation.

Nesting: each difference divides the rounding noise of what it differences by its
step, so finite differences of finite differences lose digits level by level (a
first-order operator is one level; hvp, hessian and second_derivative are two). A nest
whose relative steps multiply to less than ``FD_MIN_STEP`` (1e-13, the bound on one
step) is an error: its noise, about eps / (product of the steps), would be over 2e-3 of
the result, and at 3 levels of default steps of the order of the result.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np

from ... import _checks
from ..._backend_types import AutoFiniteDifferences
from ..._cache import weak_callable
from ...core.backend import BackendImpl, Traits
from ...core.convert import is_masked
from ...core.operator import OPS
from ...core.registry import register
from . import runners
from .levels import EPS64, NEST, RUNNING, enter

# the float64 default steps: first order (by method), the outer level of second order
_DEFAULT_STEP = {"central": EPS64 ** (1 / 3), "forward": EPS64**0.5, "backward": EPS64**0.5}
_DEFAULT_OUTER = EPS64**0.25
# the operators with a runner at one float array (``FiniteDifferencesImpl.runner``)
_RUNS = ("gradient", "value_and_gradient", "jvp", "value_and_jvp")
# the operators whose central differences do not evaluate f(x) (their value is not asked)
_UNVALUED = ("jvp", "derivative")
# the multiples of h at which f is evaluated, by method
_SIDES = {"central": (-1, 1), "forward": (0, 1), "backward": (-1, 0)}


def _operator(kind: str):
    """Marks an operator: "first" differences once, "second" (hvp, hessian) and
    "second_derivative" twice. One operator that calls another (an hvp that calls
    gradient) counts once, as the outermost."""
    levels = 1 if kind == "first" else 2

    def wrap(method):
        @functools.wraps(method)
        def run(self, prob, *args):
            if RUNNING.get() is not None:
                return method(self, prob, *args)
            token = RUNNING.set((prob, levels, self._nest_steps(kind)))
            try:
                return method(self, prob, *args)
            finally:
                RUNNING.reset(token)

        return run

    return wrap


@register(AutoFiniteDifferences)
class FiniteDifferencesImpl(BackendImpl):
    traits = Traits(
        "finite_differences",
        arrays="numpy",
        native_kind="NumPy arrays",
        output_kind="a NumPy array or number",
        keeps_plans=True,  # f is evaluated anew on every call: nothing to go stale
    )

    def __init__(self, backend: AutoFiniteDifferences) -> None:
        super().__init__(backend)
        self.method = backend.method
        self.step = backend.step

    def is_native(self, leaf: Any) -> bool:
        # a masked array is an ndarray whose mask f would never see: the boundary
        # (_convert) refuses it, naming .filled() and np.asarray
        return (isinstance(leaf, np.ndarray) and not is_masked(leaf)) or (
            isinstance(leaf, np.generic) and not isinstance(leaf, np.bool_)
        )

    def is_output(self, y: Any) -> bool:
        return isinstance(y, np.ndarray | np.generic | numbers.Real) and not isinstance(
            y, bool | np.bool_
        )

    def from_numpy(self, a: np.ndarray) -> Any:
        return a

    def output_size(self, prob, xs: tuple, ctx: tuple) -> int:
        # f may return a Python number (is_output accepts one), which has no .shape
        return int(np.size(prob.flat()(xs, *ctx)))

    def default_float(self, value: float) -> Any:
        return np.asarray(value, dtype=np.float64)

    def _rel_step(self, prob, dtype: np.dtype) -> float:
        if self.step is not None:
            return self._checked_step(prob, dtype)
        eps = np.finfo(dtype).eps
        return float(eps ** (1 / 3) if self.method == "central" else eps**0.5)

    def _checked_step(self, prob, dtype: np.dtype) -> float:
        """The explicit step, which must change x in x's dtype: step * max(1, |x_i|)
        over eps * |x_i| (the constructor already refuses steps under 1e-13)."""
        eps = float(np.finfo(dtype).eps)
        if self.step <= eps:
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(prob.op, prob.backend)}: step={self.step!r} cannot "
                f"change x in {np.dtype(dtype).name} (its eps is {eps:.3g}): x + step * "
                f"max(1, |x|) == x and the differences divide by zero. Pass a step over "
                f"{eps:.3g} for {np.dtype(dtype).name} x (step=None picks one from the dtype), "
                "or x in float64."
            )
        return float(self.step)

    @staticmethod
    def protect(xs: tuple) -> tuple:
        """f always gets copies: it may even change its argument in place. The moved
        points of a difference (``Moved``) are made for f alone: no copy."""
        if type(xs) is Moved:
            return xs
        return tuple(np.array(x, copy=True) for x in xs)

    def _eval(self, fn, xs, ctx):
        """f at xs (fn copies: protect), inside the levels of the running operator."""
        with _Inside():
            return np.asarray(fn(xs, *ctx))

    def _nest_steps(self, kind: str) -> float:
        """The product of this operator's relative steps (float64 defaults for None)."""
        first = self.step if self.step is not None else _DEFAULT_STEP[self.method]
        outer = self.step if self.step is not None else _DEFAULT_OUTER
        if kind == "first":
            return first
        return outer * (first if kind == "second" else outer)

    def _sides(self) -> tuple[int, int]:
        """The multiples of h at which f is evaluated: (-1, 1) central, else one side and 0."""
        return _SIDES[self.method]

    def _difference(self, fn, xs, ctx, y, direction, h):
        """(f(x + h d) - f(x - h d)) / (2h) or the one-sided version, with exact h."""
        lo, hi = self._sides()
        plus = None if hi == 0 else _point(xs, direction, hi * h)
        minus = None if lo == 0 else _point(xs, direction, lo * h)
        return self._quotient(fn, plus, minus, ctx, y, h)

    def _quotient(self, fn, plus, minus, ctx, y, h):
        """The difference quotient of f between the points ``plus`` and ``minus`` (f(x)
        ``y`` on the side at 0)."""
        lo, hi = self._sides()
        with _Inside():
            f_hi = y if hi == 0 else np.asarray(fn(plus, *ctx))
            f_lo = y if lo == 0 else np.asarray(fn(minus, *ctx))
        return np.asarray((f_hi - f_lo) / ((hi - lo) * h))

    def value_and_jvp(self, prob, xs, vs, ctx):
        return self._jvp(prob, prob.flat(), xs, vs, ctx)

    def runner(self, prob, form, combo=None, weak=False):
        """For jvp, gradient and their value variants at one float array: ``_jvp`` and
        ``_gradient`` without the general path, in one closure each (``runners``), with
        f's output check the plan keeps (an unprepared call's runner, ``weak``, holds f
        weakly)."""
        if form != "array" or not prob.single or prob.op not in _RUNS or prob.aux:
            return None
        f = weak_callable(prob.f, weak)
        if f is None:
            return None
        named, value = _named(prob, weak), "value" in prob.op
        finish = prob.without_f().output_check(lambda: f)
        steps = (self._sides(), self._nest_steps("first"), self._rel_step)
        run = runners.jvp if OPS[prob.op].family == "jvp" else runners.gradient
        return run(named, f, finish, value, steps)

    @_operator("first")
    def value_and_jvps(self, prob, xs, vss, ctx):
        """f(x) once (where wanted: ``_valued``) and the jvps along ``vss``: 1 + 2k
        evaluations central, 1 + k one-sided (a sparse Jacobian's passes, one per
        color), 2k for plain central jvps."""
        fn = prob.flat()
        y = self._eval(fn, xs, ctx) if self._valued(prob) else None
        return y, [self._jvp(prob, fn, xs, vs, ctx, y)[1] for vs in vss]

    def _valued(self, prob) -> bool:
        """A jvp evaluates f(x): a plain jvp or derivative by central differences does not
        need it (unless f's aux is wanted: it is f's at x)."""
        return prob.op not in _UNVALUED or self.method != "central" or prob.aux

    @_operator("first")
    def _jvp(self, prob, fn, xs, vs, ctx, y=None):
        """(f(x), J v) of ``fn`` (``prob.flat()``); None for f(x) where it is not
        wanted (``_valued``). ``y``: f(x), known already."""
        if y is None and self._valued(prob):
            y = self._eval(fn, xs, ctx)
        scale = _abs_max(vs)
        if scale == 0.0:
            return y, np.zeros_like(self._eval(fn, xs, ctx) if y is None else y)
        dtype = xs[0].dtype if len(xs) == 1 else np.result_type(*xs)
        h = self._rel_step(prob, dtype) * max(1.0, _abs_max(xs)) / scale
        t = self._difference(fn, xs, ctx, y, vs, h)
        if t.dtype.kind not in "fc" or t.dtype.itemsize < 4:  # (at least float32)
            t = t.astype(np.result_type(t, np.float32))
        return y, t

    def _columns(self, prob, xs, ctx):
        """f(x) and the Jacobian columns of each leaf, one perturbed coordinate at a time."""
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        return y, tuple(
            self._leaf_columns(prob, fn, xs, ctx, y, k, 0, x.size) for k, x in enumerate(xs)
        )

    def _leaf_columns(self, prob, fn, xs, ctx, y, k, start, stop):
        """Columns ``start:stop`` of the Jacobian of leaf k: each column depends on its
        coordinate alone, so columns built in chunks equal those built at once. ``y``
        (f(x)) may be None for central differences, which do not evaluate it."""
        x = xs[k]
        cols = None if y is None else np.empty((*y.shape, stop - start), np.result_type(y, x))
        seg = x.reshape(-1)[start:stop]
        wide = seg.astype(np.float64, copy=False)
        steps = (self._rel_step(prob, x.dtype) * np.maximum(np.abs(wide), 1.0)).astype(x.dtype)
        hs = ((seg + steps) - seg).astype(np.float64, copy=False)  # exactly representable
        lo, hi = self._sides()
        with _Inside():  # the differences f_hi - f_lo, then one division
            for j, h in enumerate(hs.tolist()):
                f_hi = y if hi == 0 else fn(_moved(xs, k, start + j, hi * h), *ctx)
                f_lo = y if lo == 0 else fn(_moved(xs, k, start + j, lo * h), *ctx)
                d = f_hi - f_lo
                if cols is None:
                    cols = np.empty((*np.shape(d), stop - start), np.result_type(d, x))
                cols[..., j] = d
        if cols is None:  # (no coordinates, and no f(x))
            return np.empty((0,), x.dtype)
        cols /= (hi - lo) * hs
        return cols

    def gradient(self, prob, xs, ctx):
        if any(np.iscomplexobj(x) for x in xs):
            return self._complex_gradient(prob, xs, ctx)[1]
        return self._gradient(prob, prob.flat(), xs, ctx, False)[1]

    def value_and_gradient(self, prob, xs, ctx):
        if any(np.iscomplexobj(x) for x in xs):
            return self._complex_gradient(prob, xs, ctx)
        return self._gradient(prob, prob.flat(), xs, ctx, True)

    @_operator("first")
    def _gradient(self, prob, fn, xs, ctx, value: bool):
        """(f(x), gradient) of ``fn`` (``prob.flat()``) for real leaves; f(x) is None
        where central differences do not need it (not ``value``, no aux: f's aux is f's
        at x, and n > 0: f runs, its output checked): 2n evaluations of f."""
        y = None
        if value or self.method != "central" or prob.aux or not any(x.size for x in xs):
            y = self._eval(fn, xs, ctx)
        gs = tuple(
            self._leaf_columns(prob, fn, xs, ctx, y, k, 0, x.size)
            .reshape(x.shape)
            .astype(x.dtype, copy=False)
            for k, x in enumerate(xs)
        )
        return y, gs

    @_operator("first")
    def _complex_gradient(self, prob, xs, ctx):
        """df/dRe + i df/dIm for complex leaves (real f), one coordinate at a time."""
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        gs = []
        for k, x in enumerate(xs):
            units = (1.0, 1j) if np.iscomplexobj(x) else (1.0,)
            base = self._rel_step(prob, np.finfo(x.dtype).dtype)
            g = np.zeros(x.size, dtype=x.dtype)
            for i in range(x.size):
                h = base * max(1.0, abs(x.reshape(-1)[i]))
                for unit in units:
                    d = [_unit(z, i if j == k else None, unit) for j, z in enumerate(xs)]
                    g[i] += unit * self._difference(fn, xs, ctx, y, d, h)
            gs.append(g.reshape(x.shape))
        return y, tuple(gs)

    def value_and_jacobian(self, prob, xs, ctx):
        return self.chunked_jacobian(prob, xs, ctx, max(xs[0].size, 1))

    @_operator("first")
    def chunked_jacobian(self, prob, xs, ctx, k: int):
        """(f(x), J) built ``k`` columns at a time; the dense jacobian is k = n, so a
        chunked one equals it exactly (used by ``chunk_size``, see ``_dense``)."""
        (x,) = xs
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        cols = np.empty((*y.shape, x.size), dtype=np.result_type(y, x))
        for start in range(0, x.size, k):
            stop = min(x.size, start + k)
            cols[..., start:stop] = self._leaf_columns(prob, fn, xs, ctx, y, 0, start, stop)
        return y, cols.reshape(y.shape + x.shape).astype(np.result_type(y, x))

    @_operator("first")
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

    @_operator("first")
    def value_and_batched_jacobian(self, prob, xs, ctx):
        """Every sample perturbed at once: 2 * in calls of f (central), besides f(x)."""
        (x,) = xs
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        _checks.check_batch(prob, x.shape, y.shape)
        b = x.shape[0]
        n_in = x.size // max(b, 1)
        flat = x.reshape(b, n_in)
        base = self._rel_step(prob, x.dtype)
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
    def _outer_step(self, prob, dtype) -> float:
        if self.step is not None:
            return self._checked_step(prob, dtype)
        return float(np.finfo(dtype).eps ** 0.25)

    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        return self._gradient_and_hvp(prob, xs, vs, ctx, True)

    def hvp(self, prob, xs, vs, ctx, combo):
        """H v alone: the gradients at x +- h v, not the one at x (4n runs of f, central)."""
        return self._gradient_and_hvp(prob, xs, vs, ctx, False)[1]

    @_operator("second")
    def _gradient_and_hvp(self, prob, xs, vs, ctx, gradient: bool):
        """(the gradient, or None without ``gradient``; H v): the difference of the
        gradients at x +- h v (gradients without f(x): 2n runs each, central)."""
        g = self.gradient(prob, xs, ctx) if gradient else None
        if g is None and (prob.aux or not any(x.size for x in xs)):
            self._eval(prob.flat(), xs, ctx)  # (f's aux is f's at x; an empty x: checked)
        scale = max((float(np.max(np.abs(v), initial=0)) for v in vs), default=0.0)
        if scale == 0.0:
            return g, tuple(np.zeros_like(x) for x in xs)
        size = max((float(np.max(np.abs(x), initial=0)) for x in xs), default=0.0)
        h = self._outer_step(prob, np.result_type(*xs)) * max(1.0, size) / scale
        plus = self.gradient(prob, tuple(x + h * v for x, v in zip(xs, vs, strict=True)), ctx)
        minus = self.gradient(prob, tuple(x - h * v for x, v in zip(xs, vs, strict=True)), ctx)
        hv = tuple(
            np.asarray((p - m) / (2 * h), dtype=x.dtype)
            for p, m, x in zip(plus, minus, xs, strict=True)
        )
        return g, hv

    def coarser(self, prob, dtype: np.dtype, second: bool) -> FiniteDifferencesImpl:
        """This backend with twice its relative step (the default for ``dtype``; for
        ``second`` order the outer one, for both levels): a result's change between the
        two estimates its error (AutoSparse's ``strict`` check)."""
        if self.step is not None:
            step = self._checked_step(prob, dtype)
        else:
            step = self._outer_step(prob, dtype) if second else self._rel_step(prob, dtype)
        return FiniteDifferencesImpl(AutoFiniteDifferences(self.method, 2 * step))

    def rounding(self, prob, xs: tuple, ctx: tuple, second: bool, scale: np.ndarray):
        """The rounding error of a result per element: eps over the product of the
        relative steps (one level, or two for ``second`` order), times the size of f's
        values and ``scale`` (the sizes of the result's terms)."""
        dtype = np.result_type(*xs)
        first = self._rel_step(prob, dtype)
        steps = first * self._outer_step(prob, dtype) if second else first
        size = float(np.max(np.abs(self._eval(prob.flat(), xs, ctx)), initial=0.0))
        return float(np.finfo(dtype).eps) / steps * (size + scale)

    @_operator("second")
    def sparse_hessian_nonzeros(self, prob, xs, ctx, pattern, gradient: bool):
        """(the gradient, or None without ``gradient``; the Hessian's entries at the
        pattern's nonzeros, in its CSR order) from values of f at one real array x
        (``sparse.hessian_nonzeros``: per nonzero, not two gradients per color); None
        for a complex x."""
        from . import sparse  # (scipy: imported on a sparse call's first use)

        (x,) = xs
        if np.iscomplexobj(x):
            return None
        fn, side = prob.flat(), _SIDES[self.method][0] + _SIDES[self.method][1]
        g = self.gradient(prob, xs, ctx) if gradient else None
        if self.step is not None:
            rel = self._checked_step(prob, x.dtype)
        else:
            rel = sparse.relative_step(x.dtype, side == 0)

        def evaluate(point):
            with _Inside():
                return fn(Moved((point,)), *ctx)

        return g, sparse.hessian_nonzeros(evaluate, x, pattern, rel, side).astype(x.dtype)

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        return self.chunked_hessian(prob, xs, ctx, combo, max(xs[0].size, 1))

    def hessian(self, prob, xs, ctx, combo):
        """H alone: its columns, not f(x) and the gradient (4 n^2 runs of f, central)."""
        return self.chunked_hessian(prob, xs, ctx, combo, max(xs[0].size, 1), False)[2]

    @_operator("second")
    def chunked_hessian(self, prob, xs, ctx, combo, k: int, valued: bool = True):
        """(f(x), g, H) with H's columns built ``k`` at a time, then symmetrized; the
        dense Hessian is k = n, so a chunked one equals it exactly (see ``_dense``).
        Without ``valued``: (None, (None,), H)."""
        (x,) = xs
        y, (g,) = self.value_and_gradient(prob, xs, ctx) if valued else (None, (None,))
        if not valued and (prob.aux or not x.size):
            self._eval(prob.flat(), xs, ctx)  # (f's aux is f's at x; an empty x: checked)
        cols = np.empty((x.size, x.size), dtype=x.dtype)
        for start in range(0, x.size, k):
            stop = min(x.size, start + k)
            cols[:, start:stop] = self._hessian_columns(prob, x, ctx, start, stop)
        h_mat = (cols + cols.T) / 2  # symmetric by construction of the exact Hessian
        return y, (g,), h_mat.reshape(x.shape + x.shape)

    def _hessian_columns(self, prob, x, ctx, start, stop):
        """Columns ``start:stop`` of the unsymmetrized Hessian: central differences of
        gradients along each coordinate, each column on its own."""
        cols = np.empty((x.size, stop - start), dtype=x.dtype)
        base = self._outer_step(prob, x.dtype)
        for i in range(start, stop):
            xi = x.reshape(-1)[i]
            h = float((xi + x.dtype.type(base * max(1.0, abs(float(xi))))) - xi)
            d = _unit(x, i, h)
            gp = self.gradient(prob, (x + d,), ctx)[0]
            gm = self.gradient(prob, (x - d,), ctx)[0]
            cols[:, i - start] = ((gp - gm) / (2 * h)).reshape(-1)
        return cols

    @_operator("second_derivative")
    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        (x,) = xs
        fn = prob.flat()
        y = self._eval(fn, xs, ctx)
        xv = float(x)
        h = float((x + x.dtype.type(self._outer_step(prob, x.dtype) * max(1.0, abs(xv)))) - x)
        fp = self._eval(fn, (x + h,), ctx)
        fm = self._eval(fn, (x - h,), ctx)
        dtype = np.result_type(y, np.float32)
        d = np.asarray((fp - fm) / (2 * h), dtype=dtype)
        d2 = np.asarray((fp - 2 * y + fm) / (h * h), dtype=dtype)
        return y, d, d2


def _abs_max(leaves: tuple) -> float:
    """The largest |a| over the leaves' elements (0.0 for none)."""
    if len(leaves) == 1:
        return float(np.abs(leaves[0]).max(initial=0))
    return max((float(np.abs(a).max(initial=0)) for a in leaves), default=0.0)


class Moved(tuple):
    """Leaves of a point a difference moved to (``x + h d``): new NumPy arrays, f's own."""


class _Inside:
    """``with _Inside():`` f's evaluations (one or many) inside the levels of the running
    operator, which an operator that f calls counts as nested; a TypeError of f (torch
    functions on NumPy arrays) names AutoTorch()."""

    __slots__ = ("entered",)

    def __enter__(self) -> None:
        running = RUNNING.get()
        self.entered = None
        if running is None:  # not under an operator of this backend
            return
        self.entered = (running[0], *enter(running))

    def __exit__(self, kind, exc, tb) -> None:
        if self.entered is None:
            return
        prob, inside, fresh = self.entered
        RUNNING.reset(fresh)
        NEST.reset(inside)
        if isinstance(exc, TypeError):
            _checks.reraise(prob.op, prob.backend, exc)


def _point(xs: tuple, direction: tuple, step: float) -> Moved:
    """The leaves of ``x + step d``: f's own new arrays."""
    if len(xs) == 1:
        return Moved((np.asarray(xs[0] + step * direction[0]),))
    return Moved([np.asarray(x + step * d) for x, d in zip(xs, direction, strict=True)])


def _moved(xs: tuple, k: int, i: int, step: float) -> Moved:
    """Copies of the leaves with ``step`` added to element i (C order) of leaf k: one
    copy and one addition, where ``x + step * unit`` takes three passes over x."""
    if len(xs) == 1:
        out = Moved((np.array(xs[0], copy=True),))
    else:
        out = Moved([np.array(x, copy=True) for x in xs])
    if step:
        a = out[k]
        if a.ndim == 1:
            a[i] += step
        else:
            a.flat[i] += step
    return out


def _named(prob, weak: bool):
    """What a runner's errors name: ``prob``, or its operator and backend only where the
    runner holds f weakly (``Problem.named``)."""
    return prob.named() if weak else prob


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
