"""The forward-over-reverse nested-AD rules, written once for every framework.

Each inner result is a gradient ``∇ₓ h(x, q)`` of a scalar potential ``h``:
``h = f`` for gradient, ``h = <f, w>`` for vjp (w joins ``q``), ``h = <∇ₓ f, v>``
(a directional derivative) for hvp (v joins ``q``). A framework supplies a
:class:`Kit`; its ``grad_form`` computes ``(h, ∇ₓ h)`` as one operation whose
derivative for an outer cotangent ``w`` is one JVP of the full gradient
``∇_(x,q) h`` along ``(w, 0)``. ``register_gradient_rules`` registers the rules
built from it; a framework may register more (JAX: jacobians by rows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._tree import flatten, unflatten
from ..core.operator import OPS
from ..core.registry import register_rule


def _same(tree: Any, *_: Any) -> Any:
    return tree


@dataclasses.dataclass(frozen=True)
class Kit:
    """What a framework supplies to the gradient-form rules.

    Attributes:
        grad_form: ``(h, xs, q) -> (h(xs, q), ∇_xs h)`` differentiated forward over
            reverse; ``xs`` and ``q`` are flat tuples of arrays.
        is_float: whether a context leaf is differentiated by the rule.
        directional: ``(fn, xs, vs) -> `` the JVP of the scalar ``fn`` along ``vs``.
        full_like: ``(y, value) ->`` an array like ``y`` filled with ``value``.
        open: the contexts as the framework sees them (autograd opens boxes).
        like: ``(gs, xs) ->`` results with the dtypes of ``xs``.
    """

    grad_form: Callable
    is_float: Callable
    directional: Callable
    full_like: Callable
    open: Callable = _same
    like: Callable = _same


def split_floats(prob: Any, ctx: tuple, is_float: Callable) -> tuple[tuple, Callable]:
    """``(q, g)``: the float leaves ``q`` of the contexts (what a rule differentiates),
    and ``g(xs, q)``, which calls f with those leaves put back."""
    leaves, tree = flatten(ctx)
    idx = [i for i, a in enumerate(leaves) if is_float(a)]
    fn = prob.flat()

    def g(xs, q):
        new = list(leaves)
        for i, a in zip(idx, q, strict=True):
            new[i] = a
        return fn(xs, *unflatten(tree, new))

    return tuple(leaves[i] for i in idx), g


def vjp_potential(g: Callable, n: int) -> Callable:
    """``h(xs, (*q, w)) = <g(xs, q), w>``: its gradient in ``xs`` is the vjp with ``w``."""

    def h(xs, qw):
        return (g(xs, qw[:n]) * qw[n]).sum()

    return h


def register_gradient_rules(framework: str, kit: Kit) -> None:
    """Register the rules of ``framework`` built from ``kit`` for the backend methods of
    the gradient, vjp and hvp families (``Declared.method``: gradient,
    value_and_gradient, value_and_vjp, hvp and the hvp with its gradient)."""

    def split(prob, ctx):
        return split_floats(prob, kit.open(ctx), kit.is_float)

    def value_and_gradient(impl, prob, xs, ctx):
        q, g = split(prob, ctx)
        val, gx = kit.grad_form(g, tuple(xs), q)
        return val, kit.like(gx, xs)

    def value_and_vjp(impl, prob, xs, w, ctx, check_w):
        q, g = split(prob, ctx)
        xs = tuple(xs)
        y = g(xs, q)
        w = check_w(y, kit.full_like(y, w) if isinstance(w, float) else w)
        return y, kit.like(kit.grad_form(vjp_potential(g, len(q)), xs, (*q, w))[1], xs)

    def with_hvp(impl, prob, xs, vs, ctx, combo):  # (gradient, hvp)
        q, g = split(prob, ctx)
        xs, n = tuple(xs), len(q)

        def h(xs, qv):  # the directional derivative along v: its gradient is H v
            return kit.directional(lambda xs: g(xs, qv[:n]), xs, tuple(qv[n:]))

        grad = kit.like(kit.grad_form(g, xs, q)[1], xs)
        return grad, kit.like(kit.grad_form(h, xs, (*q, *vs))[1], xs)

    # each rule gives these outputs; a method of the family returns some of them
    rules = {
        "gradient": (("value", "gradient"), value_and_gradient),
        "vjp": (("value", "vjp"), value_and_vjp),
        "hvp": (("gradient", "hvp"), with_hvp),
    }
    for name, d in OPS.items():
        if d.method == name and d.family in rules:  # the operator that names the method
            given, rule = rules[d.family]
            register_rule(framework, name)(_outputs(rule, given, d.returns))


def _outputs(rule: Callable, given: tuple, wanted: tuple) -> Callable:
    """``rule``, returning the ``wanted`` ones of its ``given`` outputs (all, or one)."""
    if wanted == given:
        return rule
    (one,) = wanted
    i = given.index(one)
    return lambda *a: rule(*a)[i]
