"""The base of every backend implementation, with generic fallbacks.

A backend implements ``value_and_pullback`` and/or ``value_and_jvp`` on a
:class:`~diffiface._problem.Problem` (``f`` of a flat tuple of leaves ``xs``)
plus a few array helpers. Every other operator is derived here; a backend
overrides an operator only where its native version is faster.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks
from . import convert as _convert
from . import direction
from .fallbacks import DerivedSecondOrder
from .problem import Problem
from .signature import SLOW as SLOW
from .signature import leaf_signature

OUT_SIZE = "output size"  # the key of the memoized output size in a problem's fns


class BackendImpl(DerivedSecondOrder):
    """Generic operators written once in terms of jvp and vjp."""

    framework = ""
    native_kind = ""  # for messages: "jax arrays"
    output_kind = ""  # for messages: "a jax array"
    # None, or y -> y as the framework's array, for what f may return that the framework
    # traces but does not hold as one array (autograd: an object array of boxes)
    own_output: Any = None

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.mode = getattr(backend, "mode", None)

    # ---- arrays (each backend overrides) ------------------------------------
    def is_native(self, leaf: Any) -> bool:
        raise NotImplementedError

    def is_output(self, y: Any) -> bool:
        return self.is_native(y)

    def is_float(self, leaf: Any) -> bool:
        return np.issubdtype(leaf.dtype, np.floating)

    def from_numpy(self, a: np.ndarray) -> Any:
        """NumPy array (any float dtype) -> native array, zero-copy where possible."""
        raise NotImplementedError

    def default_float(self, value: float) -> Any:
        """Python float -> 0-d native array of the framework's default float dtype."""
        raise NotImplementedError

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def is_traced(self, a: Any) -> bool:
        """True when ``a`` carries an outer differentiation (never converted to NumPy)."""
        return False

    def check_numpy_dtype(self, dtype: np.dtype) -> str | None:
        """A reason why this backend cannot take ``dtype`` without loss, or None."""
        return None

    def cast(self, a: Any, like: Any) -> Any:
        return a.astype(like.dtype)

    def ones_like(self, a: Any) -> Any:
        return np.ones_like(a)

    def basis(self, like: Any, i: int) -> Any:
        e = np.zeros(like.size, dtype=like.dtype)
        e[i] = 1
        return self.from_numpy(e.reshape(like.shape))

    def stack(self, arrays: list, axis: int) -> Any:
        return np.stack(arrays, axis=axis)

    def concat(self, arrays: list, axis: int = 0) -> Any:
        """Arrays joined end to end along ``axis``."""
        return np.concatenate(arrays, axis=axis) if len(arrays) > 1 else arrays[0]

    def leaf_signature(self, a: Any) -> Any:
        """What of a leaf of x or of the contexts decides the structure of f(x) (shape and
        dtype), the same for a value and for the tracer the framework makes of it."""
        return leaf_signature(a)

    def settle(self, tree: Any, result: Any) -> Any:
        """Values f computed inside this backend's own pass (its aux, its value), as the
        caller sees them: they keep what an outer pass tracks and lose the inner pass
        (torch detaches them unless ``result``, the call's result, is attached to an
        outer graph; autograd unboxes the inner levels)."""
        return tree

    def reshape(self, a: Any, shape: tuple) -> Any:
        return a.reshape(shape)

    def open(self, tree: Any) -> Any:
        """``tree`` with containers an outer pass wrapped (autograd boxes) opened."""
        return tree

    def is_complex(self, y: Any) -> bool:
        """y is a complex array (NumPy and JAX dtypes)."""
        return getattr(getattr(y, "dtype", None), "kind", "") == "c"

    def connected(self, xs: tuple, y: Any) -> bool | None:
        """Whether y depends on the differentiated leaves xs (None: cannot tell, as
        for NumPy functions)."""
        return None

    def outer_sees(self, leaves: list) -> bool:
        """True when an outer differentiation of this framework sees one of ``leaves``."""
        return any(self.is_native(a) and self.is_traced(a) for a in leaves)

    def can_run_rule(self, xs: tuple, ctx: tuple) -> bool:
        """False where the outer transform cannot run a custom nested-AD rule."""
        return True

    def no_forward(self, xs: tuple, ctx: tuple) -> str | None:
        """Why these arrays cannot take forward-mode AD (torch's DTensor), or None."""
        return None

    def standin(self, tree: Any) -> Any:
        """``tree`` with concrete arrays of the same shapes and dtypes that no outer
        pass sees, to time the nested-AD strategies on (``FixedParams(strategy="auto")``)."""
        return tree

    def block(self, result: Any) -> Any:
        """``result`` once computed (JAX dispatches asynchronously), for timing."""
        return result

    def peak_bytes(self, fn: Callable, args: tuple) -> int | None:
        """The peak memory ``fn(*args)`` allocates beyond its arguments, or None where
        it cannot be measured (``FixedParams(strategy="min_memory")``): here by
        ``tracemalloc``, which sees NumPy's buffers."""
        import tracemalloc

        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            fn(*args)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            if started:
                tracemalloc.stop()

    runs_aux = False  # its runners hand f's aux to the open sink, as the caller sees it
    flatten_fast = None  # a faster pytree flatten of the framework, if it has one
    hermitian_vjp = False  # the native pullback of a complex output conjugates w (torch)
    reverse_combo = ("reverse", "reverse")  # second order without forward mode
    protect = None  # xs -> the leaves f receives, copied where f could change the caller's
    compile = None  # the framework's compiler (jax.jit): a pytree output's split, once

    keeps_plans = False  # runner(..., weak=True) can give runners for unprepared calls
    bakes_reads = False  # its runners keep what f read when compiled (JAX): watched
    sparse = False  # AutoSparse's implementation: sparse_jacobian and sparse_hessian
    cheap_forward = True  # a jvp costs about a vjp (torch's forward mode costs far more)

    def runner(self, prob, form: str, combo=None, weak: bool = False):
        """The plan's runner, or None (the general path runs every call).

        ``form``: "array" (``x -> result`` for one native array without contexts),
        "numpy" (the same for a NumPy x, results as NumPy) or "leaves" (``(x leaves,
        context leaves, context values) -> result`` for native pytree leaves and
        Constant contexts). ``weak``: for an unprepared call, a runner that holds ``f``
        only weakly (see ``core.unprepared``); a backend that gives such runners sets
        ``keeps_plans``. A runner may return SLOW to hand over to the general path."""
        return None

    def forward_unsupported(self, exc: BaseException) -> bool:
        """``exc`` says that f cannot run under the framework's forward mode (or its
        batching), where the reverse formulation can (a JAX custom_vjp, a torch
        autograd.Function without jvp or vmap support). See ``core.direction``."""
        return False

    def reverse_unsupported(self, exc: BaseException) -> bool:
        """``exc`` says that f cannot run under the framework's reverse mode, where the
        forward formulation can (a JAX lax.while_loop with a traced trip count)."""
        return False

    def reverse_jacobian(self, prob, xs: tuple, ctx: tuple):
        """(f(x), the Jacobian of each leaf) from one pullback per output element: the
        formulation every differentiable f supports."""
        y, pb = self.value_and_pullback(prob, xs, ctx)
        m = size(y)
        rows = [pb(self.basis(y, i)) for i in range(m)]
        jacs = tuple(
            self.reshape(self.stack([r[k] for r in rows], 0), (*y.shape, *x.shape))
            if rows
            else _convert.zeros(self, (*y.shape, *x.shape), x)
            for k, x in enumerate(xs)
        )
        return y, jacs

    def reverse_jacobian_of_one(self, prob, xs: tuple, ctx: tuple):
        """(f(x), J) of a single-array x by the reverse formulation."""
        y, (jac,) = self.reverse_jacobian(prob, xs, ctx)
        return y, jac

    def forward_jacobian_of_one(self, prob, xs: tuple, ctx: tuple):
        """(f(x), J) of a single-array x from one jvp per input element: the forward
        formulation, for an f without reverse mode."""
        (x,) = xs
        y, (cols,) = self._columns(prob, xs, ctx)
        return y, self.reshape(cols, (*y.shape, *x.shape))

    def reverse_jvp(self, prob, xs: tuple, vs: tuple, ctx: tuple):
        """(f(x), J v) from the reverse Jacobian (m pullbacks)."""
        y, jacs = self.reverse_jacobian(prob, xs, ctx)
        m = size(y)
        t = None
        for j, v in zip(jacs, vs, strict=True):
            n = size(v)
            part = (self.reshape(j, (m, n)) * self.reshape(v, (1, n))).sum(1)
            t = part if t is None else t + part
        if t is None:
            return y, _convert.zeros(self, tuple(y.shape), y)
        return y, self.reshape(t, tuple(y.shape))

    def reverse_second_derivative(self, prob, xs: tuple, ctx: tuple):
        """(f(x), f'(x), f''(x)) at a scalar x, reverse over reverse."""
        fn = prob.flat()

        def d(x, *c):
            return self.reverse_jacobian(prob, (x,), c)[1][0]

        y = fn(xs, *ctx)
        dprob = Problem(prob.op, prob.backend, self, d, prob.treedef, True, False)
        d1, (d2,) = self.reverse_jacobian(dprob, xs, ctx)
        return y, d1, d2

    # ---- primitives (each backend implements one or both) -------------------
    def value_and_pullback(self, prob, xs: tuple, ctx: tuple):
        """(f(x), pb) with pb(w) -> tuple of leaves shaped like xs."""
        self._need_one_primitive()
        return self.forward_pullback(prob, xs, ctx)

    def forward_pullback(self, prob, xs: tuple, ctx: tuple):
        """(f(x), pb) from J built by columns (n jvps), contracted with w: reverse from
        forward, for a backend or an f without reverse mode."""
        y, cols = self._columns(prob, xs, ctx)
        m = size(y)

        def pb(w):
            w = self.reshape(w, (m, 1))
            return tuple(
                self.reshape((w * self.reshape(c, (m, size(x)))).sum(0), tuple(x.shape))
                for c, x in zip(cols, xs, strict=True)
            )

        return y, pb

    def value_and_jvp(self, prob, xs: tuple, vs: tuple, ctx: tuple):
        """(f(x), J v) for tangent leaves vs."""
        self._need_one_primitive()
        y, pb = self.value_and_pullback(prob, xs, ctx)
        # Forward from reverse: build J by rows and contract (a backend without jvp).
        n = size(y)
        rows = [pb(self.basis(y, i)) for i in range(n)]
        cols = [sum(_dot(r[k], vs[k]) for k in range(len(xs))) for r in rows]
        if not cols:  # f(x) is empty
            return y, _convert.zeros(self, tuple(y.shape), y)
        return y, self.reshape(self.stack(cols, 0), tuple(y.shape))

    def _need_one_primitive(self) -> None:
        cls = type(self)
        if (
            cls.value_and_jvp is BackendImpl.value_and_jvp
            and cls.value_and_pullback is BackendImpl.value_and_pullback
        ):
            raise NotImplementedError(
                f"{cls.__name__} must implement value_and_jvp or value_and_pullback."
            )

    # ---- derived operators ---------------------------------------------------
    def value_and_vjp(self, prob, xs: tuple, w: Any, ctx: tuple, check_w):
        y, pb = self.value_and_pullback(prob, xs, ctx)
        return y, pb(check_w(y, w))

    def value_and_gradient(self, prob, xs: tuple, ctx: tuple):
        """For a complex leaf z of a real f, ``df/dRe z + i df/dIm z`` (torch's convention,
        the conjugate of JAX's): a bilinear pullback's result is conjugated, and forward
        mode adds the columns along ``i e_k``."""
        if type(self).value_and_pullback is not BackendImpl.value_and_pullback:
            y, pb = self.value_and_pullback(prob, xs, ctx)
            gs = pb(self.ones_like(y))
            if self.hermitian_vjp:
                return y, gs
            return y, tuple(g.conj() if self.is_complex(g) else g for g in gs)
        return self.forward_gradient(prob, xs, ctx)

    def forward_gradient(self, prob, xs: tuple, ctx: tuple):
        """(f(x), the gradient) from one jvp per input element: the forward formulation,
        for a backend or an f without reverse mode."""
        y, cols = self._columns(prob, xs, ctx)
        gs = [self.reshape(c, tuple(x.shape)) for c, x in zip(cols, xs, strict=True)]
        if any(self.is_complex(x) for x in xs):
            _, imag = self._columns(prob, xs, ctx, 1j)
            for k, (c, x) in enumerate(zip(imag, xs, strict=True)):
                if self.is_complex(x):
                    gs[k] = gs[k] + 1j * self.reshape(c, tuple(x.shape))
        return y, tuple(gs)

    # several directions (a backend with vmap overrides these with one pass)
    def value_and_jvps(self, prob, xs: tuple, vss: list, ctx: tuple):
        out = [self.value_and_jvp(prob, xs, vs, ctx) for vs in vss]
        return out[0][0], [t for _, t in out]

    def value_and_vjps(self, prob, xs: tuple, ws: list, ctx: tuple, check_w):
        y, pb = self.value_and_pullback(prob, xs, ctx)
        return y, [pb(check_w(y, w)) for w in ws]

    def gradient_and_hvps(self, prob, xs: tuple, vss: list, ctx: tuple, combo):
        out = [self.gradient_and_hvp(prob, xs, vs, ctx, combo) for vs in vss]
        return out[0][0], [h for _, h in out]

    def hvp(self, prob, xs: tuple, vs: tuple, ctx: tuple, combo):
        return self.gradient_and_hvp(prob, xs, vs, ctx, combo)[1]

    def hessian(self, prob, xs: tuple, ctx: tuple, combo):
        return self.value_gradient_and_hessian(prob, xs, ctx, combo)[2]

    def gradient(self, prob, xs: tuple, ctx: tuple):
        return self.value_and_gradient(prob, xs, ctx)[1]

    def jacobian(self, prob, xs: tuple, ctx: tuple):
        return self.value_and_jacobian(prob, xs, ctx)[1]

    def value_and_jacobian(self, prob, xs: tuple, ctx: tuple):
        (x,) = xs
        if self.prefers_reverse(prob, xs, ctx):
            y, pb = self.value_and_pullback(prob, xs, ctx)
            rows = [pb(self.basis(y, i))[0] for i in range(size(y))]
            if not rows:  # f(x) is empty
                return y, _convert.zeros(self, (*y.shape, *x.shape), x)
            return y, self.reshape(self.stack(rows, 0), tuple(y.shape) + tuple(x.shape))
        y, (cols,) = self._columns(prob, xs, ctx)
        return y, self.reshape(cols, tuple(y.shape) + tuple(x.shape))

    def value_and_batched_jacobian(self, prob, xs: tuple, ctx: tuple):
        """Per-sample Jacobians from jvps (or vjps) whose tangents repeat one basis
        vector in every sample: n_in jvps or n_out vjps, never B times more."""
        (x,) = xs
        b, n_in = x.shape[0], size(x) // max(x.shape[0], 1)
        if self.prefers_reverse(prob, xs, ctx):  # same ratio per sample as for the batch
            y, pb = self.value_and_pullback(prob, xs, ctx)
            _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
            n_out = size(y) // b
            rows = [pb(self.batched_basis(y, o))[0] for o in range(n_out)]
            jac = self.stack(rows, 1) if rows else self.from_numpy(np.zeros((b, 0, *x.shape[1:])))
            return y, self.reshape(jac, (*y.shape, *x.shape[1:]))
        y, cols = None, []
        for i in range(n_in):
            y, t = self.value_and_jvp(prob, xs, (self.batched_basis(x, i),), ctx)
            _checks.check_batch(prob, tuple(x.shape), tuple(t.shape))
            cols.append(self.reshape(t, (b, -1)))
        if y is None:
            y = prob.flat()(xs, *ctx)
        jac = self.stack(cols, -1)
        return y, self.reshape(jac, (*y.shape, *x.shape[1:]))

    def batched_basis(self, like: Any, i: int) -> Any:
        """Basis vector i of one sample, repeated for every sample of the batch."""
        b = like.shape[0]
        e = np.zeros((b, size(like) // max(b, 1)), dtype=_np_dtype(like))
        e[:, i] = 1
        return self.cast(self.from_numpy(e.reshape(tuple(like.shape))), like)

    def prefers_reverse(self, prob, xs: tuple, ctx: tuple) -> bool:
        """The direction of a jacobian: the backend's mode, else the one f supports
        (``core.direction``), else the cheaper one by sizes."""
        if self.mode is not None:
            return self.mode == "reverse"
        if (known := direction.only(prob.f)) is not None:
            return known == direction.REVERSE
        if type(self).value_and_pullback is BackendImpl.value_and_pullback:
            return False
        if type(self).value_and_jvp is BackendImpl.value_and_jvp:
            return True
        return self.memo_output_size(prob, xs, ctx) <= sum(size(x) for x in xs)

    def memo_output_size(self, prob, xs: tuple, ctx: tuple) -> int:
        """``output_size``, memoized on the problem (a prepared one keeps it)."""
        size = prob.fns.get(OUT_SIZE)
        if size is None:
            try:  # often f's first call: an f of another framework fails here
                size = prob.fns[OUT_SIZE] = self.output_size(prob, xs, ctx)
            except TypeError as exc:
                _checks.reraise(prob.op, prob.backend, exc)
        return size

    def output_size(self, prob, xs: tuple, ctx: tuple) -> int:
        return size(prob.flat()(xs, *ctx))

    def output_like(self, prob, xs: tuple, ctx: tuple) -> Any:
        """Something with f(x)'s shape and dtype (f(x) itself, unless the framework can
        tell without running f)."""
        return prob.flat()(xs, *ctx)

    def _columns(self, prob, xs: tuple, ctx: tuple, scale=1):
        """f(x) and, for each leaf, its Jacobian columns (along ``scale`` times each basis
        vector) stacked on the last axis."""
        y = None
        zeros = [x * 0 for x in xs]
        out = []
        for k, x in enumerate(xs):
            cols = []
            for i in range(size(x)):
                e = self.basis(x, i) * scale
                vs = tuple(e if j == k else zeros[j] for j in range(len(xs)))
                y, t = self.value_and_jvp(prob, xs, vs, ctx)
                cols.append(t)
            out.append(self.stack(cols, -1) if cols else None)
        if y is None:
            y = prob.flat()(xs, *ctx)
        empty = (*tuple(y.shape), 0)  # the columns of an empty leaf
        return y, tuple(_convert.zeros(self, empty, y) if c is None else c for c in out)


def size(a: Any) -> int:
    return math.prod(tuple(a.shape))


def _np_dtype(a: Any) -> Any:
    try:
        return np.dtype(a.dtype)
    except TypeError:  # a torch dtype
        return np.float64


def _dot(a: Any, b: Any) -> Any:
    return (a * b).sum()
