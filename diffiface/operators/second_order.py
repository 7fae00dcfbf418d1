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

from .. import _checks
from .._backend_types import AutoSparse, SecondOrder
from .._cache import FunctionCache
from .._tangents import Tangents
from ..core import convert, direction, outputs, registry, shell
from ..core.backend import size
from ..core.problem import Problem
from ..core.shell import Call, Operator
from . import dense
from .fd_over import FiniteDifferencesOver


def _resolve(f, backend, contexts: tuple):
    """(impl, combo) of a second-order call; combo is None for a plain backend."""
    if isinstance(backend, AutoSparse):  # the dense combination, made sparse
        impl, combo = _resolve(f, backend.backend, contexts)
        return registry.implementation(backend).over(impl), combo
    if not isinstance(backend, SecondOrder):
        return registry.implementation(backend), None
    outer, inner = backend.outer, backend.inner
    if backend.differences_over_ad:
        return FiniteDifferencesOver(backend, registry.implementation(outer), f, contexts), None
    combo = (getattr(outer, "mode", None) or "forward", getattr(inner, "mode", None) or "reverse")
    return registry.implementation(inner), combo


def _either(c: Call, run: Callable) -> Any:
    """``run(combo)``; where f lacks a direction, ``run`` reverse over reverse (f has no
    forward mode: a custom_vjp) or forward over forward (no reverse mode: a
    lax.while_loop); a direction the user fixed in ``second_order`` is a clear error."""
    backend = c.prob.backend
    fixed = ()
    if isinstance(backend, SecondOrder):
        fixed = (getattr(backend.outer, "mode", None), getattr(backend.inner, "mode", None))
    impl = c.impl
    return direction.run(
        impl,
        c.prob,
        lambda: run(c.combo),
        forward=lambda: run(_FORWARD_OVER_FORWARD),
        reverse=lambda: run(impl.traits.reverse_combo),
        fixed=fixed,
    )


_FORWARD_OVER_FORWARD = ("forward", "forward")


def _hvps(c: Call, v: Any, gradient: bool):
    """(g, H v) for one direction, or for a Tangents of several."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    vss = convert.tangents(prob.op, impl, prob, xs, v)
    if isinstance(v, Tangents):
        g, hvs = _either(c, lambda combo: impl.gradient_and_hvps(prob, xs, vss, ctx, combo))
        g = None if g is None else c.like_x(g)  # (JAX leaves it out for hvp)
        return g, Tangents(*(c.like_x(hv) for hv in hvs))
    if not gradient:
        return None, c.like_x(_either(c, lambda combo: impl.hvp(prob, xs, vss[0], ctx, combo)))
    g, hv = _either(c, lambda combo: impl.gradient_and_hvp(prob, xs, vss[0], ctx, combo))
    return c.like_x(g), c.like_x(hv)


GRADIENT_AND_HVP = Operator(
    "gradient_and_hvp",
    lambda c, v, _: _hvps(c, v, True),
    resolve=_resolve,
)
HVP = Operator("hvp", lambda c, v, _: _hvps(c, v, False)[1], resolve=_resolve)


def _value_gradient_and_hvps(c: Call, v: Any):
    """(f(x), g, H v): the gradient-and-hvp pass of f returning its value as aux too,
    so the value comes out of the same pass (see ``core.outputs``)."""
    prob = c.prob
    sub = prob.fns.get("valued")  # a prepared problem keeps it
    key = (prob.aux, prob.backend)
    op = prob.op

    def valued(fget):
        return outputs.ValueAsAux(fget, prob.aux, prob.backend, op)

    fn = _VALUED.get(prob.f, key, valued)
    if sub is None or sub.f is not fn:
        sub = Problem(prob.op, prob.backend, prob.impl, fn, prob.treedef, prob.single, True, True)
        sub.prepared = prob.prepared
        prob.fns["valued"] = sub
    with outputs.Sink() as sink:
        g, hv = _hvps(Call(c.impl, sub, c.xs, c.kinds, c.ctx, c.combo), v, True)
    y = sink.aux
    if prob.aux:
        y, aux = y
        outputs.put(aux)
    y = c.impl.settle(y, hv)
    if isinstance(y, np.generic):  # f's own NumPy scalar: a 0-d array, as every value
        y = np.asarray(y)
    return c.back(y), g, hv


_VALUED = FunctionCache(per_function=4)

VALUE_GRADIENT_AND_HVP = Operator(
    "value_gradient_and_hvp",
    lambda c, v, _: _value_gradient_and_hvps(c, v),
    resolve=_resolve,
)


def _hessians(c: Call, chunk_size):
    """(f(x), g, H) at one array x."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    op, backend = prob.op, prob.backend
    if impl.traits.sparse:  # AutoSparse
        return impl.sparse_hessian(c, lambda run: _either(c, run), op != "hessian", chunk_size)
    if not prob.single:
        raise _checks.not_single_array(op, backend, len(xs))
    if chunk_size is not None and size(xs[0]):
        y, g, h = _either(c, lambda k: dense.hessian(impl, prob, xs, ctx, k, chunk_size))
    else:
        dense.check_limit(op, backend, size(xs[0]), size(xs[0]), xs[0], "Hessian")
        if op == "hessian":
            return None, None, c.back(_either(c, lambda k: impl.hessian(prob, xs, ctx, k)))
        y, g, h = _either(c, lambda k: impl.value_gradient_and_hessian(prob, xs, ctx, k))
    return c.back(y), c.like_x(g), c.back(h)


VALUE_GRADIENT_AND_HESSIAN = Operator(
    "value_gradient_and_hessian",
    lambda c, t, k: _hessians(c, k),
    resolve=_resolve,
)
HESSIAN = Operator(
    "hessian",
    lambda c, t, k: _hessians(c, k)[2],
    resolve=_resolve,
)


def _second_derivatives(c: Call):
    """(f(x), f'(x), f''(x)) at a scalar x."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    if not prob.single or tuple(xs[0].shape) != ():
        shape = tuple(xs[0].shape) if prob.single else None
        raise _checks.not_scalar_input(prob.op, prob.backend, shape, len(xs))
    y, d, d2 = direction.run(
        impl,
        prob,
        lambda: impl.value_derivative_and_second_derivative(prob, xs, ctx),
        reverse=lambda: impl.reverse_second_derivative(prob, xs, ctx),
    )
    return c.back(y), c.back(d), c.back(d2)


# second_derivative runs as its value variant: one compiled function, one plan for both
VALUE_DERIVATIVE_AND_SECOND_DERIVATIVE = Operator(
    "value_derivative_and_second_derivative",
    lambda c, t, _: _second_derivatives(c),
    resolve=_resolve,
)


@shell.public(GRADIENT_AND_HVP)
def gradient_and_hvp(
    f: Callable,
    backend: Any,
    x: Any,
    v: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
):
    """The gradient and the Hessian-vector product ``H(x) v`` of a scalar ``f``, in one pass.

    Args:
        f: function ``f(x, *contexts)`` returning a 0-d array.
        backend: a backend, or ``second_order(outer, inner)``.
        x: an array, a Python float, or a pytree of floating-point arrays.
        v: the direction, like ``x`` (or a ``di.Tangents`` of several).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

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
    return shell.call(GRADIENT_AND_HVP, f, backend, x, v, contexts, prep, None, has_aux)


@shell.public(VALUE_GRADIENT_AND_HVP)
def value_gradient_and_hvp(
    f: Callable,
    backend: Any,
    x: Any,
    v: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
):
    """The value, the gradient and the Hessian-vector product ``H(x) v`` of a scalar
    ``f``, in one pass (named like :func:`value_gradient_and_hessian`;
    :func:`gradient_and_hvp` is the same without the value).

    Args:
        f: function ``f(x, *contexts)`` returning a 0-d array.
        backend: a backend, or ``second_order(outer, inner)``.
        x: an array, a Python float, or a pytree of floating-point arrays.
        v: the direction, like ``x`` (or a ``di.Tangents`` of several).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from ``prepare_hvp`` (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``((y, grad, H v), aux)``.

    Returns:
        ``(f(x), grad, H v)``, the last two with the structure of ``x``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g, hv = di.value_gradient_and_hvp(lambda x: (x**3).sum(),
        ...     di.AutoFiniteDifferences(), np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> round(float(y), 6), g.round(4), hv.round(4)
        (9.0, array([ 3., 12.]), array([6., 0.]))
    """
    return shell.call(VALUE_GRADIENT_AND_HVP, f, backend, x, v, contexts, prep, None, has_aux)


@shell.public(HVP)
def hvp(
    f: Callable,
    backend: Any,
    x: Any,
    v: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
) -> Any:
    """The Hessian-vector product ``H(x) v`` of a scalar ``f``, with the structure of ``x``.

    Same arguments as :func:`gradient_and_hvp`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.hvp(lambda x: (x[0] * x[1]) ** 2, di.AutoFiniteDifferences(),
        ...        np.array([1.0, 2.0]), np.array([0.0, 1.0])).round(4)
        array([8., 2.])
    """
    return shell.call(HVP, f, backend, x, v, contexts, prep, None, has_aux)


@shell.public(VALUE_GRADIENT_AND_HESSIAN)
def value_gradient_and_hessian(
    f: Callable,
    backend: Any,
    x: Any,
    *contexts: Any,
    prep: Any = None,
    chunk_size: Any = None,
    has_aux: bool = False,
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
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g, H = di.value_gradient_and_hessian(lambda x: x[0] ** 2 * x[1],
        ...     di.AutoFiniteDifferences(), np.array([1.0, 3.0]))
        >>> H.round(4)
        array([[6., 2.],
               [2., 0.]])
    """
    return shell.call(
        VALUE_GRADIENT_AND_HESSIAN, f, backend, x, None, contexts, prep, chunk_size, has_aux
    )


@shell.public(HESSIAN)
def hessian(
    f: Callable,
    backend: Any,
    x: Any,
    *contexts: Any,
    prep: Any = None,
    chunk_size: Any = None,
    has_aux: bool = False,
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
    return shell.call(HESSIAN, f, backend, x, None, contexts, prep, chunk_size, has_aux)


@shell.public(VALUE_DERIVATIVE_AND_SECOND_DERIVATIVE)
def value_derivative_and_second_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, has_aux: bool = False
):
    """The value, first and second derivative of ``f`` at a scalar ``x`` (f of any shape).

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend (a SecondOrder uses its inner backend's framework).
        x: a Python float or a 0-d floating-point array.
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Examples:
        >>> import diffiface as di
        >>> y, d, d2 = di.value_derivative_and_second_derivative(
        ...     lambda x: x**3, di.AutoFiniteDifferences(), 2.0)
        >>> round(d2, 3)
        12.0
    """
    return shell.call(
        VALUE_DERIVATIVE_AND_SECOND_DERIVATIVE, f, backend, x, None, contexts, prep, None, has_aux
    )


def second_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, has_aux: bool = False
) -> Any:
    """The second derivative ``f''(x)`` at a scalar ``x``, shaped like ``f(x)``.

    Same arguments as :func:`value_derivative_and_second_derivative`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> round(di.second_derivative(np.sin, di.AutoFiniteDifferences(), 0.5), 4)
        -0.4794
    """
    try:
        out = value_derivative_and_second_derivative(
            f, backend, x, *contexts, prep=prep, has_aux=has_aux
        )
    except _checks.ERRORS as exc:
        internal = _checks.call_form("value_derivative_and_second_derivative", backend)
        called = _checks.call_form("second_derivative", backend)
        if prep is not None:
            internal, called = _checks.with_prep(internal), _checks.with_prep(called)
        _checks.restate(exc, called, internal)
        raise
    return (out[0][2], out[1]) if has_aux else out[2]
