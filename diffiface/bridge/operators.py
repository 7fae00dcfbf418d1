"""Operators on another framework's arrays: the whole call crosses a bridge.

``di.gradient(f, di.AutoJax(), x)`` with torch tensors (in ``x``, a tangent, a
``Constant`` or the ``FixedParams`` parameters) runs as one bridged operation:
the arrays cross to JAX, the operator runs there (jit-compiled, with the
FixedParams rules), and the results come back as tensors. torch's
differentiation sees one operation whose derivatives JAX computes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .. import _checks
from .._arrays import framework_of, is_tracer
from .._backend_types import AutoSparse
from .._cache import FunctionCache
from .._contexts import Constant, FixedParams
from .._tangents import Tangents
from .._tree import flatten, tree_map
from ..core import crossing
from ..core.operator import OPS, of_family, pick
from ..operators.first_order import (
    derivative,
    gradient,
    value_and_derivative,
    value_and_gradient,
    value_and_jvp,
    value_and_vjp,
)
from ..operators.jacobian import value_and_jacobian
from .node import Bridged

# f -> the Bridged operators on it, holding f weakly: the entry dies with f. The
# derivatives of a bridged call run after the call returns (torch's backward, JAX's
# transposition), when the caller may have dropped f (a lambda made inside the loss):
# each call's graph holds f (``Bridged.call_keeping``).
_CACHE = FunctionCache(per_function=16, functions=32)


def cross(how: str, op: Callable, f: Callable, backend: Any, args: tuple, kw: dict) -> Any:
    """The public operator ``op`` run across a bridge, ``how`` the shell's crossing
    decided (``core.crossing``) before converting anything."""
    if isinstance(backend, AutoSparse):
        raise _checks.DiffifaceTypeError(
            f"{op.__name__}(f, {backend!r}, x): a sparse Jacobian or Hessian does not cross "
            "frameworks: x, the tangents and the contexts must be arrays of the backend's "
            "framework (NumPy for finite differences, also over an AD gradient), and "
            "second_order(outer, inner) must keep to one framework. Convert x first."
        )
    if how == crossing.ARRAYS:
        return call(op, f, backend, args, kw)
    if how == crossing.DIFFERENCES:  # finite differences over AD, on NumPy copies
        leaves = _check_untraced(op, f, backend, args)
        out = cross_second_order(op.__name__, f, backend, args, kw)
        return _guarded(op, backend, leaves, out)
    return cross_second_order(op.__name__, f, backend, args, kw)


def _check_untraced(op: Callable, f: Callable, backend: Any, args) -> list:
    """Finite differences over ``inner`` on arrays of a framework run on NumPy copies
    (the inner backend takes NumPy) and the results come back like x. An outer pass or
    a trace cannot see through finite differences: a clear error there. Returns the
    array leaves of the call."""
    from .._within import within_gradient

    params = f.params if isinstance(f, FixedParams) else None
    values = [a.value if isinstance(a, Constant) else a for a in args]
    leaves = flatten((params, values))[0]
    if any(within_gradient(a) or is_tracer(a) for a in leaves):
        raise _untraced_error(op, backend)
    return leaves


def _untraced_error(op: Callable, backend: Any) -> Exception:
    return _checks.DiffifaceTypeError(
        f"{op.__name__}(f, {backend!r}, ...): finite differences cannot run on arrays that "
        "an outer differentiation or a trace (jit, vmap) sees. Use an AD outer backend "
        f"instead: second_order({backend.inner!r}, {backend.inner!r})."
    )


def _guarded(op: Callable, backend: Any, leaves: list, out: Any) -> Any:
    """``out``, made to raise the error above when an outer pass differentiates it, where
    the arrays' framework shows no outer pass beforehand (its bridge's ``untraced``)."""
    from . import node as _bridge

    kind = _bridge.outer_of(leaves, f"{op.__name__}(f, {backend!r}, ...)")
    guard = getattr(_bridge.module(kind), "untraced", None) if kind != "numpy" else None
    return out if guard is None else guard(leaves, out, _untraced_error(op, backend))


# the calls made below, named in errors: the inner gradient or derivative, and the
# outer value variant (the family's operator that returns the value too)
_INNER_OPS = of_family("gradient") + of_family("derivative")
_OUTER_OPS = tuple(
    n for fam in ("jvp", "vjp", "jacobian", "derivative") for n in of_family(fam) if n != fam
)


def cross_second_order(op: str, f: Callable, backend: Any, args: tuple, kwargs: dict) -> Any:
    """``op`` for ``second_order(outer, inner)`` across frameworks: ``outer`` differentiates
    ``x -> di.gradient(f, inner, x)``, which crosses the bridge as one operation; its
    derivative is computed by ``inner`` (forward over reverse for a forward ``outer``).
    Errors of those inner calls start with the call the user wrote."""
    try:
        return _cross_second_order(op, f, backend, args, kwargs)
    except _checks.ERRORS as exc:
        internal = [_checks.call_form(n, backend.inner) for n in _INNER_OPS]
        internal += [_checks.call_form(n, backend.outer) for n in _OUTER_OPS]
        _checks.restate(exc, _checks.call_form(op, backend), *internal)
        raise


def _cross_second_order(op: str, f: Callable, backend: Any, args: tuple, kwargs: dict) -> Any:
    from . import node as _bridge

    outer, inner = backend.outer, backend.inner
    if kwargs.get("prep") is not None:
        raise _checks.DiffifaceValueError(
            f"{op}(f, {backend!r}, ...): a second_order of two frameworks takes no prep."
        )
    to_outer = _bridge.module(_bridge.framework_key(outer)).as_array
    x_kind = _bridge.kind_of(args[0], f"{op}(f, {backend!r}, x)")

    def move(tree):
        return _map(lambda a: to_outer(a) if framework_of(a) else a, tree)

    moved = [Constant(move(a.value)) if isinstance(a, Constant) else move(a) for a in args]
    x, rest = moved[0], moved[1:]
    # with has_aux, the inner call's value and aux ride out as the outer call's aux
    has_aux = bool(kwargs.get("has_aux", False))
    kwargs = {k: v for k, v in kwargs.items() if k != "has_aux"}
    aux_kw = {"has_aux": True} if has_aux else {}
    family = OPS[op].family
    if family == "hvp":
        v, rest = rest[0], rest[1:]
        grad = functools.partial(_grad_of, f, inner, rest, has_aux)
        if getattr(outer, "mode", None) == "reverse":  # H symmetric: Hᵀ v = H v
            r = value_and_vjp(grad, outer, x, v, **aux_kw)
        else:
            r = value_and_jvp(grad, outer, x, v, **aux_kw)
        (g, hv), carried = r if has_aux else (r, None)
        parts = {"gradient": g, "hvp": hv}
    elif family == "hessian":
        grad = functools.partial(_grad_of, f, inner, rest, has_aux)
        r = value_and_jacobian(grad, outer, x, **kwargs, **aux_kw)
        (g, h), carried = r if has_aux else (r, None)
        parts = {"gradient": g, "hessian": h}
    else:
        d = functools.partial(_derivative_of, f, inner, rest, has_aux)
        r = value_and_derivative(d, outer, x, **aux_kw)
        (d1, d2), carried = r if has_aux else (r, None)
        parts = {"derivative": d1, "second_derivative": d2}
    if "value" in OPS[op].returns:
        parts["value"] = carried[0] if has_aux else _second_order_value(f, inner, x, rest)
    out = pick(op, parts)
    if has_aux:
        out = (out, carried[1])
    back = _bridge.module(x_kind).as_array
    if x_kind != "numpy":  # a 0-d result computed on NumPy may be a Python float
        return _map(lambda a: back(a) if framework_of(a) or isinstance(a, float) else a, out)
    return _map(lambda a: back(a) if framework_of(a) else a, out)


def _map(fn: Callable, tree: Any) -> Any:
    """``tree_map`` that also maps the tangents of a ``Tangents`` (in a result tuple)."""
    if isinstance(tree, Tangents):
        return Tangents(*(tree_map(fn, t) for t in tree))
    if type(tree) is tuple and any(isinstance(a, Tangents) for a in tree):
        return tuple(_map(fn, a) for a in tree)
    return tree_map(fn, tree)


def _grad_of(f, inner, contexts, has_aux, x):
    """f's gradient by ``inner``; with ``has_aux``, ``(gradient, (f's value, f's aux))``."""
    if not has_aux:
        return gradient(f, inner, x, *contexts)
    (y, g), aux = value_and_gradient(f, inner, x, *contexts, has_aux=True)
    return g, (y, aux)


def _derivative_of(f, inner, contexts, has_aux, x):
    if not has_aux:
        return derivative(f, inner, x, *contexts)
    (y, d), aux = value_and_derivative(f, inner, x, *contexts, has_aux=True)
    return d, (y, aux)


def _second_order_value(f, inner, x, contexts):
    from .node import differentiate_with

    return differentiate_with(f, inner)(x, *(c.value for c in contexts))


def call(op: Callable, f: Callable, backend: Any, args: tuple, kwargs: dict) -> Any:
    name = op.__name__
    if kwargs.get("prep") is not None:
        raise _checks.DiffifaceValueError(
            f"{name}(f, {backend!r}, ...) got arrays of another framework and a prep. A "
            "preparation holds one framework's arrays: call without prep=, or convert the arrays."
        )
    kwargs = {k: v for k, v in kwargs.items() if k != "prep"}
    fixed = f if isinstance(f, FixedParams) else None
    g = fixed.f if fixed is not None else f
    shape, values = [], []
    for a in args:
        if isinstance(a, Constant):
            shape.append("C")
            values.append(a.value)
        elif isinstance(a, Tangents):
            raise _checks.DiffifaceValueError(
                f"{name}(f, {backend!r}, ...): di.Tangents cannot cross between frameworks yet; "
                "pass one tangent per call."
            )
        else:
            shape.append("A")
            values.append(a)
    strategy = fixed.strategy if fixed is not None else None  # None: f is no FixedParams
    key = (name, backend, tuple(shape), strategy, tuple(sorted(kwargs.items())))

    def build(fget):  # holds g weakly (see _CACHE), and nothing of this call's arrays
        def inner(params, values):
            fn = fget()  # alive: held by the graph that calls this
            h = fn if strategy is None else FixedParams(fn, params, strategy=strategy)
            rebuilt = [Constant(v) if s == "C" else v for s, v in zip(shape, values, strict=True)]
            return op(h, backend, *rebuilt, **kwargs)

        return Bridged(inner, backend, name=f"{name} of {getattr(g, '__name__', 'f')}")

    bridged = _CACHE.get(g, key, build)
    return bridged.call_keeping(g, fixed.params if fixed is not None else None, tuple(values))
