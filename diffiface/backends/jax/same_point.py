"""Same-point preparations on JAX (see ``diffiface.operators.same_point``).

One jit-compiled function makes the linear map at x: ``jax.vjp`` of the gradient (hvp:
H is symmetric), ``jax.linearize`` of f (jvp), ``jax.vjp`` of f (vjp). Its result is a
``jax.tree_util.Partial`` whose residuals are leaves, so a second compiled function
applies it to a tangent (a vmapped third to a ``Tangents`` of k), all compiled once per
f and signature: preparing again at a new x of the same shapes compiles nothing.

Where XLA estimates f's pass (with its gradient, for hvp) under ``DISPATCH_BOUND``
flops, a call is dispatch bound: the fused compiled operator at the kept x is faster
than the kept map, whose residuals are arguments too. It is used there, and f(x) (and
the gradient) are computed only when an operator returns them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..._cache import FunctionCache
from .contexts import join_contexts, split_contexts
from .running import call

CACHE = FunctionCache()


def keep(a: Any) -> Any:
    return a  # immutable


def same(kept: Any, a: Any) -> bool:
    """The same array, or one with equal values on the same devices, compared there (one
    bool comes back, not the arrays); a tracer is never the prepared point."""
    if a is kept:
        return True
    if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer) or a.shape != kept.shape:
        return False
    return a.sharding == kept.sharding and bool(_equal(a, kept))


_equal = jax.jit(lambda a, b: jnp.array_equal(a, b, equal_nan=True))


def _gradient_pullback(fn):
    """The gradient's pullback, H v for the symmetric H: measured faster than the
    gradient's forward linearization (``jax.linearize``) on both benchmark problems
    (MLP 10k parameters: 2049 against 2315 us a direction; Rosenbrock n = 1000: 27.5
    against 28.8 us)."""

    def grad_and_value(x):
        y, g = jax.value_and_grad(fn)(x)
        return g, y

    def make(x):
        g, pb, y = jax.vjp(grad_and_value, x, has_aux=True)
        return y, g, jax.tree_util.Partial(_first, pb)

    return make


def _f_linearized(fn):
    def make(x):
        y, lin = jax.linearize(fn, x)
        return y, None, lin

    return make


def _f_pullback(fn):
    def make(x):
        y, pb = jax.vjp(fn, x)
        return y, None, jax.tree_util.Partial(_first, pb)

    return make


def _first(pb, w):
    return pb(w)[0]


_MAKE = {"hvp": _gradient_pullback, "jvp": _f_linearized, "vjp": _f_pullback}


def _apply(lin, v):
    return lin(v)


def _apply_many(lin, vs):
    return jax.vmap(lin)(vs)


def _fused_hvp(fn):
    return lambda x, v: jax.jvp(jax.grad(fn), (x,), (v,))[1]


def _fused_jvp(fn):
    return lambda x, v: jax.jvp(fn, (x,), (v,))[1]


def _fused_vjp(fn):
    return lambda x, w: jax.vjp(fn, x)[1](w)[0]


def _value_and_grad(fn):
    return jax.value_and_grad(fn)


def _value(fn):
    return lambda x: (fn(x), None)


_FUSED = {"hvp": _fused_hvp, "jvp": _fused_jvp, "vjp": _fused_vjp}
_POINT = {"hvp": _value_and_grad, "jvp": _value, "vjp": _value}


# below this many flops for f(x) (and its gradient, for hvp) by XLA's estimate, a call
# is dispatch bound: the kept map's residuals, one more argument each, cost more than
# the part of the fused operator they save (hvp, Rosenbrock n = 1000, 1.6e4 flops: 27.5
# against 23.6 us a direction; an MLP with 10k parameters, 1.5e7 flops: 2049 against
# 2602 us)
DISPATCH_BOUND = 1e5


def _build(prob, family: str, static):
    """{"point", "make", "apply", "many", "fused", "fused_many"}, each jit-compiled, for
    f held weakly; "bound": whether a call is dispatch bound (decided on first use)."""

    def build(fget):
        g = prob.flat(fget)
        single = prob.single

        def fn_of(dyn):
            c = join_contexts(static, dyn)
            return (lambda x: g((x,), *c)) if single else (lambda xs: g(xs, *c))

        def make(x, *dyn):
            return _MAKE[family](fn_of(dyn))(x)

        def fused(x, v, *dyn):
            return _FUSED[family](fn_of(dyn))(x, v)

        def fused_many(x, vs, *dyn):
            return jax.vmap(_FUSED[family](fn_of(dyn)), in_axes=(None, 0))(x, vs)

        def point(x, *dyn):
            return _POINT[family](fn_of(dyn))(x)

        return {
            "point": jax.jit(point),
            "make": jax.jit(make),
            "apply": jax.jit(_apply),
            "many": jax.jit(_apply_many),
            "fused": jax.jit(fused),
            "fused_many": jax.jit(fused_many),
        }

    key = (family, prob.backend, prob.treedef, prob.single, static)
    return CACHE.get(prob.f, key, build)


def _bound(prob, family: str, fns: dict, x, dyn: tuple) -> bool:
    """A call is dispatch bound at this signature (by XLA's flop estimate of what
    ``point`` computes); decided once, when the fused operator is compiled too."""
    bound = fns.get("bound")
    if bound is None:
        compiled = call(prob, lambda *a: fns["point"].lower(*a).compile(), x, *dyn)
        cost = compiled.cost_analysis()
        flops = cost.get("flops") if isinstance(cost, dict) else None
        bound = flops is not None and 0 <= flops < DISPATCH_BOUND
        y = jax.eval_shape(fns["point"], x, *dyn)[0]
        fns["out"] = (tuple(y.shape), y.dtype)  # f(x)'s, for a cotangent's fast check
        if bound:  # compiled now, with the decision: a later x traces nothing
            t = jnp.zeros(y.shape, y.dtype) if family == "vjp" else x
            jax.block_until_ready(fns["fused"](x, t, *dyn))
        fns["bound"] = bound
    return bound


def _stack(vss: list, family: str, single: bool):
    if family == "vjp":
        return jnp.stack(vss)
    if single:
        return jnp.stack([v[0] for v in vss])
    return tuple(jnp.stack(leaf) for leaf in zip(*vss, strict=True))


def _linear(prob, family: str, xs: tuple, ctx: tuple) -> tuple:
    """(at, one, many): ``at()`` gives (f(x), the gradient or None), one(v) and
    many([v, ...]) apply the kept map (dispatch bound: the fused compiled operator at
    the kept x, f(x) and the gradient computed on first request)."""
    dyn, static = split_contexts(prob, ctx)
    fns = _build(prob, family, static)
    single = prob.single
    x = xs[0] if single else xs
    if _bound(prob, family, fns, x, dyn):
        fused, fused_many = fns["fused"], fns["fused_many"]
        apply = lambda lin, v: fused(x, v, *dyn)  # noqa: E731
        apply_many = lambda lin, vs: fused_many(x, vs, *dyn)  # noqa: E731
        lin, memo = None, []

        def at():
            if not memo:
                y, g = call(prob, fns["point"], x, *dyn)
                memo.append((y, (g,) if single and g is not None else g))
            return memo[0]

        if single:  # f(x)'s type, shape and dtype without computing it
            at.out = (type(x), *fns["out"])
    else:
        apply, apply_many = fns["apply"], fns["many"]
        y, g, lin = call(prob, fns["make"], x, *dyn)
        kept = (y, (g,) if single and g is not None else g)
        at = lambda: kept  # noqa: E731
    leaves = single and family != "jvp"  # results shaped like x: a tuple of its leaves

    def one(v):
        out = apply(lin, v[0] if single and family != "vjp" else v)
        return (out,) if leaves else out

    def many(vss: list):
        out = apply_many(lin, _stack(vss, family, single))
        if leaves:
            return [(a,) for a in out]
        if family == "jvp" or single:
            return list(out)
        return [tuple(leaf[i] for leaf in out) for i in range(len(vss))]

    return at, one, many


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    return _linear(prob, "hvp", xs, ctx)


def jvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    return _linear(prob, "jvp", xs, ctx)


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    return _linear(prob, "vjp", xs, ctx)
