"""MLX backend: mx.jvp / mx.vjp / mx.value_and_grad, mx.vmap for several directions.

MLX has one array type: a value inside its transforms is an ``mx.array`` like any
other (no tracer type), and f's aux leaves a plain ``mx.vjp`` as values. Only
``mx.vmap`` and ``mx.compile`` give placeholders, so neither runs f while an aux sink
is open.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from ... import _checks
from ..._backend_types import AutoMLX
from ..._cache import CodeFacts
from ...core.backend import OUT_SIZE, BackendImpl, Traits, known_output, learn_output
from ...core.registry import register
from . import errors, runners, second
from .errors import float64_refused

DTYPES = runners.DTYPES  # NumPy dtype -> MLX dtype (mx.array(a) alone makes float64 float32)


@register(AutoMLX)
class MLXImpl(BackendImpl):
    traits = Traits(
        "mlx",
        native_kind="mlx arrays",
        output_kind="an mlx array",
        hermitian_vjp=True,  # mx.vjp of a complex output is torch's (the Hermitian product)
        keeps_plans=True,  # unprepared runners trace f anew per call: nothing goes stale
        runs_aux=True,  # the runners of one array hand f's aux to the sink (_with_aux)
        runs_trees=True,  # they take f's pytree output per call (``trees``)
    )

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, mx.array)

    def is_float(self, leaf: Any) -> bool:
        return mx.issubdtype(leaf.dtype, mx.floating)

    def is_complex(self, y: Any) -> bool:
        dtype = getattr(y, "dtype", None)
        if isinstance(dtype, mx.Dtype):
            return mx.issubdtype(dtype, mx.complexfloating)
        return getattr(dtype, "kind", "") == "c"

    def check_numpy_dtype(self, dtype: np.dtype) -> str | None:
        if dtype == np.complex128:
            return (
                "MLX has no complex128 and would truncate it to complex64. Convert it "
                "first: a.astype(np.complex64)."
            )
        if dtype == np.float64:
            return float64_refused()
        return None

    def from_numpy(self, a: np.ndarray) -> Any:
        return mx.array(a, dtype=DTYPES.get(a.dtype))

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def default_float(self, value: float) -> Any:
        return mx.array(value, dtype=mx.float32)

    def cast(self, a: Any, like: Any) -> Any:
        return a.astype(like.dtype)

    def ones_like(self, a: Any) -> Any:
        return mx.ones_like(a)

    def basis(self, like: Any, i: int) -> Any:
        e = mx.zeros((like.size,), dtype=like.dtype)
        e[i] = 1
        return e.reshape(like.shape)

    def stack(self, arrays: list, axis: int) -> Any:
        return mx.stack(arrays, axis=axis)

    def concat(self, arrays: list, axis: int = 0) -> Any:
        return mx.concatenate(arrays, axis=axis) if len(arrays) > 1 else arrays[0]

    def reshape(self, a: Any, shape: tuple) -> Any:
        return a if tuple(a.shape) == tuple(shape) else a.reshape(shape)

    def leaf_signature(self, a: Any) -> Any:
        if isinstance(a, mx.array):
            return (tuple(a.shape), a.dtype)
        return super().leaf_signature(a)

    def forward_unsupported(self, exc):
        return errors.lacks(exc) == errors.FORWARD

    def reverse_unsupported(self, exc):
        return errors.lacks(exc) == errors.REVERSE

    @staticmethod
    def protect(xs: tuple) -> tuple:
        """f gets new array objects: ``x[i] = ...`` in f rebinds f's x, not the caller's
        (MLX's own transforms copy; f's plain call here would not)."""
        return tuple(mx.array(x) if isinstance(x, mx.array) else x for x in xs)

    def runner(self, prob, form, combo=None, weak=False):
        if loops(prob.f):  # (mx.vmap fails on f: the general path's loops)
            return None
        return runners.runner(prob, form, combo, weak)

    def code_runner(self, prob, form):
        if loops(prob.f):
            return None
        return runners.code_runner(prob, form)

    # ---- primitives ----------------------------------------------------------
    def value_and_jvp(self, prob, xs, vs, ctx):
        fn = flat(prob, ctx)
        if not xs:  # an empty pytree: no direction to move in (MLX wants a primal)
            y = call_f(prob, lambda: fn()[0])
            return y, mx.zeros_like(y)
        ys, ts = call_f(prob, lambda: mx.jvp(fn, list(xs), list(vs)))
        return ys[0], ts[0]

    def value_and_pullback(self, prob, xs, ctx):
        """MLX's vjp takes the cotangent with the primals: each ``pb(w)`` runs it."""
        fn = flat(prob, ctx)
        y = call_f(prob, lambda: fn(*xs)[0])
        if not xs:  # an empty pytree: nothing to differentiate
            return y, lambda w: ()

        def pb(w: Any) -> tuple:
            with second.aux_dropped():  # (f's aux came with y)
                _, gs = call_f(prob, lambda: mx.vjp(fn, list(xs), [w]))
            return tuple(gs)

        return y, pb

    # ---- derived operators, one MLX call each ---------------------------------
    def value_and_vjp(self, prob, xs, w, ctx, check_w):
        if not xs:
            return super().value_and_vjp(prob, xs, w, ctx, check_w)
        fn = flat(prob, ctx)
        y = call_f(prob, lambda: fn(*xs)[0])
        with second.aux_dropped():
            _, gs = call_f(prob, lambda: mx.vjp(fn, list(xs), [check_w(y, w)]))
        return y, tuple(gs)

    def value_and_gradient(self, prob, xs, ctx):
        """diffiface's convention for complex x (df/dRe + i df/dIm) is MLX's own."""
        fn = flat(prob, ctx)
        if not xs:  # an empty pytree: nothing to differentiate
            return call_f(prob, lambda: fn()[0]), ()
        argnums = tuple(range(len(xs)))
        y, gs = call_f(prob, lambda: mx.value_and_grad(lambda *a: fn(*a)[0], argnums)(*xs))
        return y, (gs,) if len(xs) == 1 else tuple(gs)

    def value_and_jvps(self, prob, xs, vss, ctx):
        """f(x) and the jvps from one vmapped pass (f(x) from a plain run first where a
        sink waits for f's aux, which mx.vmap's placeholders cannot give)."""
        if not xs:
            return super().value_and_jvps(prob, xs, vss, ctx)
        fn = flat(prob, ctx)
        if not second.aux_waits():
            y, ts = call_f(prob, lambda: second.value_and_jvps(fn, xs, vss))
            return y[0], [t[0] for t in ts]
        y = call_f(prob, lambda: fn(*xs)[0])
        with second.aux_dropped():
            ts = call_f(prob, lambda: second.jvps(fn, xs, vss))
        return y, [t[0] for t in ts]

    def value_and_vjps(self, prob, xs, ws, ctx, check_w):
        if not xs:
            return super().value_and_vjps(prob, xs, ws, ctx, check_w)
        fn = flat(prob, ctx)
        y = call_f(prob, lambda: fn(*xs)[0])
        wss = [[check_w(y, w)] for w in ws]
        with second.aux_dropped():
            gs = call_f(prob, lambda: second.vjps(fn, xs, wss))
        return y, [tuple(g) for g in gs]

    def value_and_jacobian(self, prob, xs, ctx):
        """One vmapped pass over the basis: rows of vjps or columns of jvps."""
        fn, x = flat(prob, ctx), xs[0]
        return self._valued(
            prob, xs, ctx, lambda y: second.jacobian(fn, x, y, self._reverse(prob, xs, ctx, y))
        )

    def reverse_jacobian(self, prob, xs, ctx):
        """f(x) and each leaf's Jacobian by rows in one vmapped pass: the reverse
        formulation of a jvp or a derivative where f lacks forward mode."""
        if not xs:
            return super().reverse_jacobian(prob, xs, ctx)
        fn = flat(prob, ctx)
        return self._valued(prob, xs, ctx, lambda y: second.reverse_jacobians(fn, xs, y))

    def reverse_second_derivative(self, prob, xs, ctx):
        """(f(x), f'(x), f''(x)) at a scalar x, reverse over reverse in vmapped passes
        (f has no forward mode: a scatter's JVP), f run once."""
        fn = flat(prob, ctx)
        y, (d1, d2) = self._valued(
            prob, xs, ctx, lambda y: _pair(second.reverse_second_derivatives(fn, xs[0], y))
        )
        return y, d1, d2

    def value_and_batched_jacobian(self, prob, xs, ctx):
        """One vmapped pass over the per-sample basis repeated in every sample: rows of
        vjps or columns of jvps."""
        (x,) = xs
        if not x.size:
            return super().value_and_batched_jacobian(prob, xs, ctx)
        fn = flat(prob, ctx)

        def each(y: Any) -> tuple:
            _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
            return second.batched_jacobian(fn, x, y, self._reverse(prob, xs, ctx, y))

        return self._valued(prob, xs, ctx, each)

    def _valued(self, prob, xs, ctx, each):
        """(f(x), result) from ``each(y)`` (-> (f(x) from its own pass, result)), f run
        once: f(x)'s shape and dtype known from an earlier call (``known_output``), else
        learnt by a plain run of f first (as where a sink waits for f's aux, which
        mx.vmap's placeholders cannot give)."""
        known = None if second.aux_waits() else known_output(self, prob, xs, ctx)
        if known is not None:
            return call_f(prob, lambda: each(second.Like(*known)))
        y = call_f(prob, lambda: flat(prob, ctx)(*xs)[0])
        learn_output(self, prob, xs, ctx, y)
        with second.aux_dropped():
            return y, call_f(prob, lambda: each(y))[1]

    def _reverse(self, prob, xs, ctx, y) -> bool:
        """A Jacobian's direction, given f(x) (or its ``Like``): no run of f for its size."""
        prob.fns.setdefault(OUT_SIZE, y.size)
        return self.prefers_reverse(prob, xs, ctx)

    # ---- second order: mx.jvp (or mx.vjp) of mx.grad ----------------------------
    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        g, (hv,) = self.gradient_and_hvps(prob, xs, [vs], ctx, combo)
        return g, hv

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        combo = combo or PLAIN
        if not xs:  # an empty pytree: no gradient
            call_f(prob, lambda: prob.flat()((), *ctx))
            return (), [() for _ in vss]
        if combo[1] == "forward" and len(xs) > 1:
            raise _checks.not_single_array(prob.op, prob.backend, len(xs))
        fn = flat(prob, ctx)
        return call_f(prob, lambda: second.gradient_and_hvps(fn, xs, vss, combo))

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        fn = flat(prob, ctx)
        y, g, h = call_f(prob, lambda: second.hessian(fn, xs[0], combo or PLAIN))
        return y, (g,), h

    def hessian(self, prob, xs, ctx, combo):
        """The gradient's Jacobian alone, the runner's pass (a first unprepared call
        and the later ones give the same bits)."""
        fn = flat(prob, ctx)
        return call_f(prob, lambda: second.hessian(fn, xs[0], combo or PLAIN, value=False))[2]

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        fn = flat(prob, ctx)
        return call_f(prob, lambda: second.second_derivatives(fn, xs[0]))


# A plain AutoMLX's second order: reverse over reverse. MLX has no JVP of scatter (the
# pullback of indexing), so forward over reverse fails on any f that indexes x.
PLAIN = ("reverse", "reverse")


def flat(prob, ctx: tuple):
    """f as MLX's transforms take it: leaves in, a list of one array out."""
    fn = prob.flat()
    return lambda *xs: [fn(xs, *ctx)]


def _pair(out: tuple) -> tuple:
    """(f(x), f'(x), f''(x)) as (f(x), (f'(x), f''(x)))."""
    return out[0], out[1:]


# f's code -> True: an operation in f has no batching rule in MLX (``errors.no_vmap``), so
# the products run one by one (``second.vmap``)
_LOOPED = CodeFacts()


def call_f(prob, thunk):
    """``thunk()`` (MLX's transforms of f), its errors as diffiface's where clear; where
    mx.vmap cannot batch an operation of f, again with one product at a time (and so
    from the start for f's code from then on)."""
    loops = second.LOOPS.get()
    if not loops and _LOOPED.get(prob.f):
        return _looped(prob, thunk)
    try:
        return thunk()
    except (TypeError, ValueError, RuntimeError) as exc:
        if not loops and errors.no_vmap(exc):
            _LOOPED.put(prob.f, True)
            return _looped(prob, thunk)
        clear = errors.clear(prob.op, prob.backend, exc)
        if clear is not None:
            raise clear from exc
        raise


def loops(f) -> bool:
    """MLX cannot batch an operation of f's code: its products run one by one (the
    general path's; a runner would try mx.vmap first)."""
    return bool(_LOOPED.get(f))


def _looped(prob, thunk):
    token = second.LOOPS.set(True)
    try:
        return call_f(prob, thunk)
    finally:
        second.LOOPS.reset(token)
