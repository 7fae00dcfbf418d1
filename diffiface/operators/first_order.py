"""First-order operators: derivative, gradient, jvp, vjp and their value variants.

Each is an :class:`~diffiface.core.shell.Operator` declaration (how it runs on an
entered call) and a public function that hands its arguments to the shell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _checks
from .._tangents import Tangents
from .._tree import flatten
from ..core import convert, direction, outputs, shell
from ..core.shell import Call, Operator


def _value_and_gradient(c: Call, t, chunk_size):
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    y, gs = direction.run(
        impl,
        prob,
        lambda: impl.value_and_gradient(prob, xs, ctx),
        forward=lambda: impl.forward_gradient(prob, xs, ctx),
    )
    return c.back(y), c.like_x(gs)


def _gradient(c: Call, t, chunk_size):
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    gs = direction.run(
        impl,
        prob,
        lambda: impl.gradient(prob, xs, ctx),
        forward=lambda: impl.forward_gradient(prob, xs, ctx)[1],
    )
    return c.like_x(gs)


VALUE_AND_GRADIENT = Operator(
    "value_and_gradient",
    _value_and_gradient,
)
GRADIENT = Operator("gradient", _gradient)


def _jvps(c: Call, v: Any):
    """(f(x), J v) for one tangent, or for a Tangents of several."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    vss = convert.tangents(prob.op, impl, prob, xs, v)
    if isinstance(v, Tangents):
        y, ts = direction.run(
            impl,
            prob,
            lambda: impl.value_and_jvps(prob, xs, vss, ctx),
            reverse=lambda: _reverse_jvps(impl, prob, xs, vss, ctx),
        )
        return _back(c, y), Tangents(*(c.back(t) for t in ts))
    y, t = direction.run(
        impl,
        prob,
        lambda: impl.value_and_jvp(prob, xs, vss[0], ctx),
        reverse=lambda: impl.reverse_jvp(prob, xs, vss[0], ctx),
    )
    return _back(c, y), c.back(t)


def _back(c: Call, y: Any) -> Any:
    """f(x) in x's kind; None where the operator does not return it (JAX's compiled
    jvp and vjp leave it out)."""
    return None if y is None else c.back(y)


def _reverse_jvps(impl, prob, xs: tuple, vss: list, ctx: tuple):
    out = [impl.reverse_jvp(prob, xs, vs, ctx) for vs in vss]
    return out[0][0], [t for _, t in out]


VALUE_AND_JVP = Operator("value_and_jvp", lambda c, v, _: _jvps(c, v))
JVP = Operator("jvp", lambda c, v, _: _jvps(c, v)[1])


def _vjps(c: Call, w: Any):
    """(f(x), wᵀ J) for one cotangent, or for a Tangents of several."""
    impl, prob = c.impl, c.prob
    ws, trees = [], []
    for one in w if isinstance(w, Tangents) else (w,):
        if isinstance(one, float) or hasattr(one, "shape"):
            ws.append(convert.native_tangent(prob.op, impl, "w", one))
            continue
        # a pytree cotangent (for an f returning one): raveled like f(x), checked below
        leaves, tree = flatten(one)
        if not leaves:
            got = type(one).__name__
            raise _checks.mismatch(prob.op, prob.backend, "w", "structure", "an array", got)
        leaves = [convert.native_tangent(prob.op, impl, "w", a) for a in leaves]
        if not all(hasattr(a, "shape") for a in leaves):  # Python floats in a container
            leaves = [a if hasattr(a, "shape") else impl.default_float(a) for a in leaves]
        layout = outputs.Layout(tree, leaves, 0)
        ws.append(layout.ravel(impl, leaves))
        trees.append(layout)
    check = _CheckW(prob.op, impl)
    try:
        if isinstance(w, Tangents):
            y, gss = direction.run(
                impl,
                prob,
                lambda: impl.value_and_vjps(prob, c.xs, ws, c.ctx, check),
                forward=lambda: _forward_vjps(impl, prob, c.xs, ws, c.ctx, check),
            )
            out = _back(c, y), Tangents(*(c.like_x(g) for g in gss))
        else:
            y, gs = direction.run(
                impl,
                prob,
                lambda: impl.value_and_vjp(prob, c.xs, ws[0], c.ctx, check),
                forward=lambda: _forward_vjps(impl, prob, c.xs, ws[:1], c.ctx, check, True),
            )
            out = _back(c, y), c.like_x(gs)
    except _checks.DiffifaceValueError:
        _check_cotangents(c, trees, len(ws))  # a pytree's structure explains it better
        raise
    _check_cotangents(c, trees, len(ws))
    return out


def _forward_vjps(impl, prob, xs: tuple, ws: list, ctx: tuple, check, one=False):
    """(f(x), wᵀ J for each w) from the Jacobian's columns (an f without reverse mode)."""
    y, pb = impl.forward_pullback(prob, xs, ctx)
    gss = [pb(check(y, w)) for w in ws]
    return y, (gss[0] if one else gss)


def _check_cotangents(c: Call, trees: list, n: int) -> None:
    """Each cotangent has f(x)'s structure (a pytree for a pytree output)."""
    layout = c.layout()
    if layout is None and not trees:
        return
    prob = c.prob
    want = "one array" if layout is None else layout.describe()
    for got in trees if len(trees) == n else [None]:
        if got is None or layout is None or not got.same_structure(layout):
            desc = "one array" if got is None else got.describe()
            raise _checks.mismatch(prob.op, prob.backend, "w", "structure", want, desc)


class _CheckW:
    """Checks the cotangent against f(x) once f(x) is known (also under jit tracing).

    One convention for a complex f(x) on every backend (torch's):
    ``vjp(f, x, w) == gradient(lambda x: real(vdot(w, f(x))), x)``, the Hermitian
    product; a backend whose native pullback is bilinear (JAX, autograd, finite
    differences) gets ``conj(w)``."""

    __slots__ = ("impl", "op")

    def __init__(self, op, impl):
        self.op, self.impl = op, impl

    def __call__(self, y, w):
        w = convert.match(self.op, self.impl, "w", w, y)
        if not self.impl.traits.hermitian_vjp and self.impl.is_complex(w):
            return w.conj()
        return w


VALUE_AND_VJP = Operator("value_and_vjp", lambda c, w, _: _vjps(c, w))
VJP = Operator("vjp", lambda c, w, _: _vjps(c, w)[1])


def _derivatives(c: Call):
    """(f(x), f'(x)) at a scalar x: one jvp along 1 (reverse where f has no forward)."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    if not prob.single or tuple(xs[0].shape) != ():
        shape = tuple(xs[0].shape) if prob.single else None
        raise _checks.not_scalar_input(prob.op, prob.backend, shape, len(xs))
    one = (impl.ones_like(xs[0]),)
    y, t = direction.run(
        impl,
        prob,
        lambda: impl.value_and_jvp(prob, xs, one, ctx),
        reverse=lambda: impl.reverse_jacobian_of_one(prob, xs, ctx),
    )
    return c.back(y), c.back(t)


VALUE_AND_DERIVATIVE = Operator("value_and_derivative", lambda c, t, _: _derivatives(c))
DERIVATIVE = Operator("derivative", lambda c, t, _: _derivatives(c)[1])


@shell.public(VALUE_AND_GRADIENT)
def value_and_gradient(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, has_aux: bool = False
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the gradient of a scalar ``f`` with respect to ``x``.

    Args:
        f: function ``f(x, *contexts)`` returning a 0-d array.
        backend: a backend instance, e.g. ``AutoJax()``.
        x: an array, a Python float, or a pytree (dict, list, tuple, namedtuple)
            of floating-point arrays.
        *contexts: ``di.Constant(c)`` arguments passed to ``f`` after ``x``.
        prep: the result of ``prepare_gradient`` for these arguments (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Returns:
        ``(f(x), grad)``, where ``grad`` has the structure, shapes and dtypes of ``x``.

    Raises:
        ValueError: f does not return a scalar.
        TypeError: x holds non-float leaves, or f leaves the framework's array ops.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g = di.value_and_gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(),
        ...                              np.array([1.0, 2.0]))
        >>> float(y), g.round(6)
        (5.0, array([2., 4.]))
    """
    return shell.call(VALUE_AND_GRADIENT, f, backend, x, None, contexts, prep, None, has_aux)


@shell.public(GRADIENT)
def gradient(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, has_aux: bool = False
) -> Any:
    """The gradient of a scalar ``f`` with respect to ``x``, shaped like ``x``.

    Same arguments as :func:`value_and_gradient`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.gradient(lambda x: (x**3).sum(), di.AutoFiniteDifferences(),
        ...             np.array([1.0, 2.0])).round(5)
        array([ 3., 12.])
    """
    return shell.call(GRADIENT, f, backend, x, None, contexts, prep, None, has_aux)


@shell.public(VALUE_AND_JVP)
def value_and_jvp(
    f: Callable,
    backend: Any,
    x: Any,
    v: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the Jacobian-vector product ``J(x) v``.

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend instance.
        x: an array, a Python float, or a pytree of floating-point arrays.
        v: the tangent: same structure, shapes and dtypes as ``x`` (or a
            ``di.Tangents`` of several, giving a ``Tangents`` of results).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Returns:
        ``(f(x), J v)``, both shaped like ``f(x)``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, t = di.value_and_jvp(lambda x: x**2, di.AutoFiniteDifferences(),
        ...                         np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> t.round(6)
        array([2., 0.])
    """
    return shell.call(VALUE_AND_JVP, f, backend, x, v, contexts, prep, None, has_aux)


@shell.public(JVP)
def jvp(
    f: Callable,
    backend: Any,
    x: Any,
    v: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
) -> Any:
    """The Jacobian-vector product ``J(x) v``, shaped like ``f(x)``.

    Same arguments as :func:`value_and_jvp`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.jvp(lambda x: x * x[0], di.AutoFiniteDifferences(),
        ...        np.array([1.0, 2.0]), np.array([0.0, 1.0])).round(6)
        array([0., 1.])
    """
    return shell.call(JVP, f, backend, x, v, contexts, prep, None, has_aux)


@shell.public(VALUE_AND_VJP)
def value_and_vjp(
    f: Callable,
    backend: Any,
    x: Any,
    w: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the vector-Jacobian product ``wᵀ J(x)``.

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend instance.
        x: an array, a Python float, or a pytree of floating-point arrays.
        w: the cotangent: an array with the shape and dtype of ``f(x)`` (or a
            ``di.Tangents`` of several, giving a ``Tangents`` of results).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Returns:
        ``(f(x), wᵀ J)``, the second with the structure of ``x``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, g = di.value_and_vjp(lambda x: 3 * x, di.AutoFiniteDifferences(),
        ...                         np.array([1.0, 2.0]), np.array([1.0, 1.0]))
        >>> g.round(6)
        array([3., 3.])
    """
    return shell.call(VALUE_AND_VJP, f, backend, x, w, contexts, prep, None, has_aux)


@shell.public(VJP)
def vjp(
    f: Callable,
    backend: Any,
    x: Any,
    w: Any,
    *contexts: Any,
    prep: Any = None,
    has_aux: bool = False,
) -> Any:
    """The vector-Jacobian product ``wᵀ J(x)``, with the structure of ``x``.

    Same arguments as :func:`value_and_vjp`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.vjp(lambda x: x**2, di.AutoFiniteDifferences(),
        ...        np.array([1.0, 2.0]), np.array([1.0, 0.0])).round(6)
        array([2., 0.])
    """
    return shell.call(VJP, f, backend, x, w, contexts, prep, None, has_aux)


@shell.public(VALUE_AND_DERIVATIVE)
def value_and_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, has_aux: bool = False
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the derivative ``f'(x)`` for a scalar ``x``.

    Args:
        f: function ``f(x, *contexts)`` returning an array (of any shape).
        backend: a backend instance.
        x: a Python float or a 0-d floating-point array.
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Returns:
        ``(f(x), f'(x))``, both shaped like ``f(x)``.

    Examples:
        >>> import diffiface as di
        >>> y, d = di.value_and_derivative(lambda x: x**3, di.AutoFiniteDifferences(), 2.0)
        >>> round(y, 6), round(d, 5)
        (8.0, 12.0)
    """
    return shell.call(VALUE_AND_DERIVATIVE, f, backend, x, None, contexts, prep, None, has_aux)


@shell.public(DERIVATIVE)
def derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, prep: Any = None, has_aux: bool = False
) -> Any:
    """The derivative ``f'(x)`` for a scalar ``x``, shaped like ``f(x)``.

    Same arguments as :func:`value_and_derivative`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> round(di.derivative(np.sin, di.AutoFiniteDifferences(), 0.0), 6)
        1.0
    """
    return shell.call(DERIVATIVE, f, backend, x, None, contexts, prep, None, has_aux)
