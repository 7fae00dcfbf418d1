"""The base of every backend implementation: the derived operators.

A backend writes the contract (``core.contract``: its traits, ``value_and_pullback``
and/or ``value_and_jvp`` on a :class:`~diffiface.core.problem.Problem`, ``f`` of a flat
tuple of leaves ``xs``, and a few array helpers). Every other operator is derived here;
a backend overrides an operator only where its native version is faster.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _checks
from .._cache import FunctionCache
from . import convert as _convert
from . import direction
from .contract import Contract
from .fallbacks import DerivedSecondOrder
from .problem import Problem
from .signature import SLOW as SLOW
from .traits import Traits as Traits

OUT_SIZE = "output size"  # the key of the memoized output size in a problem's fns
OUT_LIKE = "output like"  # in a problem's fns: {output_key: f(x)'s (shape, dtype)}
# f -> {output_key: the size of f(x)}, {output_key: f(x)'s (shape, dtype)}: what a call
# learnt, for the next (an unprepared call's problem is new each time)
_SIZES = FunctionCache(per_function=8)
_OUTPUTS = FunctionCache(per_function=8)


class BackendImpl(Contract, DerivedSecondOrder):
    """The derived operators, written once in terms of the contract (``core.contract``):
    every operator below, and second order (``core.fallbacks``), comes from
    ``value_and_pullback`` and/or ``value_and_jvp``. A backend overrides one only where
    its native version is faster; the primitive it does not write is derived too
    (reverse from columns of jvps, forward from rows of pullbacks)."""

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
            if self.traits.hermitian_vjp:
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

    def batched_jacobian(self, prob, xs: tuple, ctx: tuple):
        return self.value_and_batched_jacobian(prob, xs, ctx)[1]

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
        if (known := direction.only(prob)) is not None:
            return known == direction.REVERSE
        if type(self).value_and_pullback is BackendImpl.value_and_pullback:
            return False
        if type(self).value_and_jvp is BackendImpl.value_and_jvp:
            return True
        return self.memo_output_size(prob, xs, ctx) <= sum(size(x) for x in xs)

    def memo_output_size(self, prob, xs: tuple, ctx: tuple) -> int:
        """``output_size``, memoized on the problem (a prepared one keeps it) and on f
        for the shapes and dtypes of x and the contexts (``_SIZES``: an unprepared call,
        a new problem each time, does not run f again for it)."""
        size = prob.fns.get(OUT_SIZE)
        if size is not None:
            return size
        key = output_key(self, prob, xs, ctx)
        size = None if key is None else _SIZES.peek(prob.f, key)
        if size is None and (known := known_output(self, prob, xs, ctx, key)) is not None:
            size = math.prod(known[0])
        if size is None:
            try:  # often f's first call: an f of another framework fails here
                size = self.output_size(prob, xs, ctx)
            except TypeError as exc:
                _checks.reraise(prob.op, prob.backend, exc)
            if key is not None:
                _SIZES.put(prob.f, key, size)
        prob.fns[OUT_SIZE] = size
        return size

    def output_size(self, prob, xs: tuple, ctx: tuple) -> int:
        return size(prob.flat()(xs, *ctx))

    def output_like(self, prob, xs: tuple, ctx: tuple) -> Any:
        """:meth:`output_of`, where an f of another framework (often at its first call)
        gets the error that names the backend for it."""
        try:
            return self.output_of(prob, xs, ctx)
        except TypeError as exc:
            _checks.reraise(prob.op, prob.backend, exc)

    def output_of(self, prob, xs: tuple, ctx: tuple) -> Any:
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


def output_key(impl, prob, xs: tuple, ctx: tuple) -> tuple | None:
    """What decides f(x)'s shape and dtype: the framework, x's structure, aux, and the
    shapes and dtypes of the leaves of x and of the contexts; None where a context is
    unhashable (its value, unseen here, might decide it)."""
    sig = impl.leaf_signature
    cs = tuple(sig(c) for c in ctx)
    if any(isinstance(c, type) for c in cs):
        return None
    return (impl.framework, prob.treedef, prob.aux, tuple(sig(x) for x in xs), cs)


def known_output(impl, prob, xs: tuple, ctx: tuple, key: Any = ()) -> tuple | None:
    """(shape, dtype) of f(x) at arguments like these, where a run of f told it
    (:func:`learn_output`): kept on the problem (``OUT_LIKE``) and on f (``_OUTPUTS``);
    else None. A pass that needs f(x)'s shape before it runs f (a reverse Jacobian's
    basis) then runs f once, not once more for the shape. ``key``: the caller's
    :func:`output_key` of these arguments, where it has it."""
    key = output_key(impl, prob, xs, ctx) if key == () else key
    if key is None:
        return None
    mine = prob.fns.get(OUT_LIKE)
    got = None if mine is None else mine.get(key)
    if got is None and prob.f is not None:
        got = _OUTPUTS.peek(prob.f, key)
        if got is not None:  # (kept on the problem too: its runners read it there)
            prob.fns.setdefault(OUT_LIKE, {})[key] = got
    return got


def learn_output(impl, prob, xs: tuple, ctx: tuple, y: Any) -> None:
    """Keep f(x)'s shape and dtype (``y``: f(x), from a run that ran anyway)."""
    key = output_key(impl, prob, xs, ctx)
    if key is None:
        return
    got = (tuple(y.shape), y.dtype)
    prob.fns.setdefault(OUT_LIKE, {})[key] = got
    if prob.f is not None:
        _OUTPUTS.put(prob.f, key, got)


def size(a: Any) -> int:
    return math.prod(tuple(a.shape))


def _np_dtype(a: Any) -> Any:
    try:
        return np.dtype(a.dtype)
    except TypeError:  # a torch dtype
        return np.float64


def _dot(a: Any, b: Any) -> Any:
    return (a * b).sum()
