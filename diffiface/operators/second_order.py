"""Second-order operators: hvp, hessian, second_derivative and their value variants.

A plain backend uses its fastest combination (documented in the guide):
JAX and autograd forward-over-reverse, torch reverse-over-reverse (double
backward), finite differences over finite differences. ``second_order(outer,
inner)`` fixes the combination.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks, _config, _finite
from .._backend_types import AutoFiniteDifferences, SecondOrder
from .._tangents import Tangents
from ..bridge.operators import Crossing, Foreign, cross, crosses
from ..core import convert as _convert
from ..core.backend import SLOW, _size
from ..core.problem import Problem
from ..core.registry import implementation
from . import dense as _dense
from .first_order import (
    _direct,
    _enter_impl,
    _fast,
    _like_x,
    _out_kind,
    _prepared,
    _remember,
    tangents_in,
    value_and_derivative,
    value_and_gradient,
)


def _enter2(op, f, backend, x, contexts, scalar, prep=None, t=None):
    """(impl, combo, prob, xs, kinds, ctx); combo is None for a plain backend."""
    if _config.check_finite():
        _finite.check(op, backend, f, x, contexts, t)
    if prep is not None:
        prep = _prepared(prep)
        entered = prep.enter(op, f, backend, x, contexts, t)
        if isinstance(prep.impl, _FiniteDifferencesOver):  # holds f and contexts: renew
            return _enter2(op, f, backend, x, contexts, scalar)
        return entered[0], prep.combo, *entered[1:]
    _checks.check_backend(op, f, backend, second=True)
    combo = None
    if isinstance(backend, SecondOrder):
        outer, inner = backend.outer, backend.inner
        if crosses(backend):
            raise Crossing  # the outer framework differentiates across a bridge
        if isinstance(outer, AutoFiniteDifferences) and not isinstance(
            inner, AutoFiniteDifferences
        ):
            impl = _FiniteDifferencesOver(backend, implementation(outer), f, contexts)
            return impl, None, *_enter_impl(op, f, backend, impl, x, contexts, scalar)[1:]
        impl = implementation(inner)
        combo = (
            getattr(outer, "mode", None) or "forward",
            getattr(inner, "mode", None) or "reverse",
        )
    else:
        impl = implementation(backend)
    impl, *entered = _enter_impl(op, f, backend, impl, x, contexts, scalar)  # maybe routed
    return impl, combo, *entered


def _hvp(op: str, f, backend, x, v, contexts, prep):
    if prep is not None and (out := _direct(op, prep, f, backend, x, contexts, v)) is not SLOW:
        return out if op == "gradient_and_hvp" else (None, out)
    impl, combo, prob, xs, kinds, ctx = _enter2(op, f, backend, x, contexts, True, prep, v)
    vss = tangents_in(op, impl, prob, xs, v)
    if isinstance(v, Tangents):
        g, hvs = _either(
            impl, prob, backend, combo, lambda c: impl.gradient_and_hvps(prob, xs, vss, ctx, c)
        )
        many = Tangents(*(_like_x(impl, prob, hv, kinds) for hv in hvs))
        return _like_x(impl, prob, g, kinds), many
    if op == "hvp":
        hv = _either(impl, prob, backend, combo, lambda c: impl.hvp(prob, xs, vss[0], ctx, c))
        return None, _like_x(impl, prob, hv, kinds)
    g, hv = _either(
        impl, prob, backend, combo, lambda c: impl.gradient_and_hvp(prob, xs, vss[0], ctx, c)
    )
    return _like_x(impl, prob, g, kinds), _like_x(impl, prob, hv, kinds)


def _either(impl, prob: Problem, backend: Any, combo, run: Callable) -> Any:
    """``run(combo)``, or ``run`` reverse over reverse where f has no forward mode (a
    custom_vjp); a forward mode the user fixed in ``second_order`` is a clear error."""
    chosen = isinstance(backend, SecondOrder) and "forward" in (
        getattr(backend.outer, "mode", None),
        getattr(backend.inner, "mode", None),
    )
    return impl.forward_or_reverse(
        prob, lambda: run(combo), lambda: run(impl.reverse_combo), chosen
    )


def gradient_and_hvp(f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, prep: Any = None):
    """The gradient and the Hessian-vector product ``H(x) v`` of a scalar ``f``, in one pass.

    Args:
        f: function ``f(x, *contexts)`` returning a 0-d array.
        backend: a backend, or ``second_order(outer, inner)``.
        x: an array, a Python float, or a pytree of floating-point arrays.
        v: the direction, like ``x`` (or a ``di.Tangents`` of several).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).

    Returns:
        ``(grad, H v)``, both with the structure of ``x``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> g, hv = di.gradient_and_hvp(lambda x: (x**3).sum(), di.AutoFiniteDifferences(),
        ...                             np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> hv.round(4)
        array([6., 0.])
    """
    try:
        return _hvp("gradient_and_hvp", f, backend, x, v, contexts, prep)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, gradient_and_hvp, f, backend, (x, v, *contexts), {"prep": prep})


def hvp(f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, prep: Any = None) -> Any:
    """The Hessian-vector product ``H(x) v`` of a scalar ``f``, with the structure of ``x``.

    Same arguments as :func:`gradient_and_hvp`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.hvp(lambda x: (x[0] * x[1]) ** 2, di.AutoFiniteDifferences(),
        ...        np.array([1.0, 2.0]), np.array([0.0, 1.0])).round(4)
        array([8., 2.])
    """
    try:
        return _hvp("hvp", f, backend, x, v, contexts, prep)[1]
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(exc, hvp, f, backend, (x, v, *contexts), {"prep": prep})


def value_gradient_and_hessian(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, chunk_size: Any = None
):
    """The value, gradient and Hessian of a scalar ``f`` at one array ``x``.

    The Hessian has shape ``x.shape + x.shape``; it is built from Hessian-vector
    products over the basis, batched with vmap where the framework has it.

    Args:
        f: function ``f(x, *contexts)`` returning a 0-d array.
        backend: a backend, or ``second_order(outer, inner)``.
        x: one floating-point array (or a Python float).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        chunk_size: build the Hessian from ``chunk_size`` Hessian-vector products
            at a time, bounding the working memory; without it a Hessian over
            ``di.config.max_dense_bytes`` (1 GiB) is an error.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g, H = di.value_gradient_and_hessian(lambda x: x[0] ** 2 * x[1],
        ...     di.AutoFiniteDifferences(), np.array([1.0, 3.0]))
        >>> H.round(4)
        array([[6., 2.],
               [2., 0.]])
    """
    try:
        op = "value_gradient_and_hessian"
        if chunk_size is None:
            if (out := _fast(op, prep, f, backend, x, contexts)) is not SLOW:
                return out
        else:
            _dense.check_chunk_size(op, backend, chunk_size)
        impl, combo, prob, xs, kinds, ctx = _enter2(op, f, backend, x, contexts, True, prep)
        if not prob.single:
            raise _checks.not_single_array(op, backend, len(xs))
        if chunk_size is not None and _size(xs[0]):
            y, g, h = _dense.hessian(impl, prob, xs, ctx, combo, chunk_size)
        else:
            _dense.check_limit(op, backend, _size(xs[0]), _size(xs[0]), xs[0], "Hessian")
            y, g, h = _either(
                impl,
                prob,
                backend,
                combo,
                lambda c: impl.value_gradient_and_hessian(prob, xs, ctx, c),
            )
        if chunk_size is None:  # a chunked call compiled other functions
            _remember(op, f, backend, x, impl, prob, kinds, ctx, prep)
        k = _out_kind(kinds)
        return _convert.back(impl, y, k), _like_x(impl, prob, g, kinds), _convert.back(impl, h, k)
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(
            exc,
            value_gradient_and_hessian,
            f,
            backend,
            (x, *contexts),
            {"prep": prep, "chunk_size": chunk_size},
        )


def hessian(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, chunk_size: Any = None
) -> Any:
    """The Hessian of a scalar ``f`` at one array ``x``, of shape ``x.shape + x.shape``.

    Same arguments as :func:`value_gradient_and_hessian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.hessian(lambda x: (x**3).sum(), di.AutoFiniteDifferences(),
        ...            np.array([1.0, 2.0])).round(4)
        array([[ 6.,  0.],
               [ 0., 12.]])
    """
    try:
        if chunk_size is None:
            if (out := _fast("hessian", prep, f, backend, x, contexts)) is not SLOW:
                return out
        else:
            _dense.check_chunk_size("hessian", backend, chunk_size)
        impl, combo, prob, xs, kinds, ctx = _enter2("hessian", f, backend, x, contexts, True, prep)
        if not prob.single:
            raise _checks.not_single_array("hessian", backend, len(xs))
        if chunk_size is not None and _size(xs[0]):
            h = _dense.hessian(impl, prob, xs, ctx, combo, chunk_size)[2]
        else:
            _dense.check_limit("hessian", backend, _size(xs[0]), _size(xs[0]), xs[0], "Hessian")
            h = _either(impl, prob, backend, combo, lambda c: impl.hessian(prob, xs, ctx, c))
        if chunk_size is None:  # a chunked call compiled other functions
            _remember("hessian", f, backend, x, impl, prob, kinds, ctx, prep)
        return _convert.back(impl, h, _out_kind(kinds))
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(
            exc, hessian, f, backend, (x, *contexts), {"prep": prep, "chunk_size": chunk_size}
        )


def value_derivative_and_second_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None
):
    """The value, first and second derivative of ``f`` at a scalar ``x`` (f of any shape).

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend (a SecondOrder uses its inner backend's framework).
        x: a Python float or a 0-d floating-point array.
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).

    Examples:
        >>> import diffiface as di
        >>> y, d, d2 = di.value_derivative_and_second_derivative(
        ...     lambda x: x**3, di.AutoFiniteDifferences(), 2.0)
        >>> round(d2, 3)
        12.0
    """
    try:
        op = "value_derivative_and_second_derivative"
        if (
            prep is not None
            and (
                out := _direct(
                    "value_derivative_and_second_derivative", prep, f, backend, x, contexts
                )
            )
            is not SLOW
        ):
            return out
        impl, _, prob, xs, kinds, ctx = _enter2(op, f, backend, x, contexts, False, prep)
        if not prob.single or tuple(xs[0].shape) != ():
            shape = tuple(xs[0].shape) if prob.single else (len(xs),)
            raise _checks.not_scalar_input(op, backend, shape)
        y, d, d2 = impl.forward_or_reverse(
            prob,
            lambda: impl.value_derivative_and_second_derivative(prob, xs, ctx),
            lambda: impl.reverse_second_derivative(prob, xs, ctx),
        )
        k = _out_kind(kinds)
        return tuple(_convert.back(impl, a, k) for a in (y, d, d2))
    except Foreign as exc:  # arrays of another framework: the call crosses a bridge
        return cross(
            exc, value_derivative_and_second_derivative, f, backend, (x, *contexts), {"prep": prep}
        )


def second_derivative(f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None) -> Any:
    """The second derivative ``f''(x)`` at a scalar ``x``, shaped like ``f(x)``.

    Same arguments as :func:`value_derivative_and_second_derivative`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> round(di.second_derivative(np.sin, di.AutoFiniteDifferences(), 0.5), 4)
        -0.4794
    """
    return value_derivative_and_second_derivative(f, backend, x, *contexts, prep=prep)[2]


class _FiniteDifferencesOver:
    """Finite differences (outer) over another backend's derivative (inner), on NumPy arrays.

    It stands in for a backend implementation: array helpers come from the
    finite-differences backend, derivatives of ``f`` from the public operators
    on the inner backend.
    """

    def __init__(self, backend: SecondOrder, fd: Any, f: Callable, contexts: tuple):
        self.backend, self.fd, self.inner = backend, fd, backend.inner
        self.f, self.contexts = f, contexts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fd, name)

    def _inner(self, prob, op: Callable, index: int) -> Problem:
        """A NumPy problem x -> op(f, inner, x)[index] for the finite differences."""
        f, inner, contexts = self.f, self.inner, self.contexts

        def g(x, *_):
            return np.asarray(op(f, inner, x, *contexts)[index])

        return Problem(prob.op, self.backend, self.fd, g, prob.treedef, True, False)

    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        if not prob.single:
            raise _checks.not_single_array(prob.op, self.backend, len(xs))
        g, hv = self.fd.value_and_jvp(self._inner(prob, value_and_gradient, 1), xs, vs, ())
        return (g,), (hv,)

    def hvp(self, prob, xs, vs, ctx, combo):
        return self.gradient_and_hvp(prob, xs, vs, ctx, combo)[1]

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        out = [self.gradient_and_hvp(prob, xs, vs, ctx, combo) for vs in vss]
        return out[0][0], [h for _, h in out]

    def hessian(self, prob, xs, ctx, combo):
        return self.value_gradient_and_hessian(prob, xs, ctx, combo)[2]

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        y = self._inner(prob, value_and_gradient, 0).flat()(xs)
        g, h = self.fd.value_and_jacobian(self._inner(prob, value_and_gradient, 1), xs, ())
        return y, (g,), h

    def chunked_hessian(self, prob, xs, ctx, combo, k: int):
        """The Hessian built k columns at a time, as the dense one is (for chunk_size)."""
        y = self._inner(prob, value_and_gradient, 0).flat()(xs)
        g, h = self.fd.chunked_jacobian(self._inner(prob, value_and_gradient, 1), xs, (), k)
        return y, (g,), h

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        y = self._inner(prob, value_and_derivative, 0).flat()(xs)
        dprob = self._inner(prob, value_and_derivative, 1)
        d, d2 = self.fd.value_and_jvp(dprob, xs, (np.ones_like(xs[0]),), ())
        return y, d, d2
