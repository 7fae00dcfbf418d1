"""Same-point preparations on JAX (see ``diffiface.operators.same_point``).

One jit-compiled function makes the linear map at x: ``jax.linearize`` of the gradient
(hvp) or of f (jvp), ``jax.vjp`` of f (vjp). Its result is a ``jax.tree_util.Partial``
whose residuals are leaves, so a second compiled function applies it to a tangent (a
vmapped third to a ``Tangents`` of k), and both are compiled once per f and signature:
preparing again at a new x of the same shapes compiles nothing.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..._cache import FunctionCache
from .contexts import join_contexts, split_contexts
from .running import call

CACHE = FunctionCache()


def keep(a: Any) -> Any:
    return a  # immutable


def same(kept: Any, a: Any) -> bool:
    """The same array, or one with equal values (a tracer is never the prepared point)."""
    if a is kept:
        return True
    if not isinstance(a, jax.Array) or isinstance(a, jax.core.Tracer) or a.shape != kept.shape:
        return False
    return bool(np.array_equal(np.asarray(a), np.asarray(kept), equal_nan=True))


def _value_grad_linearized(fn):
    def grad_and_value(x):
        y, g = jax.value_and_grad(fn)(x)
        return g, y

    def make(x):
        g, lin, y = jax.linearize(grad_and_value, x, has_aux=True)
        return y, g, lin

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


_MAKE = {"hvp": _value_grad_linearized, "jvp": _f_linearized, "vjp": _f_pullback}


def _apply(lin, v):
    return lin(v)


def _apply_many(lin, vs):
    return jax.vmap(lin)(vs)


def _build(prob, family: str, static):
    """(make, apply, apply_many), each jit-compiled, for f held weakly."""

    def build(fget):
        g = prob.flat(fget)
        single = prob.single

        def make(x, *dyn):
            c = join_contexts(static, dyn)
            fn = (lambda x: g((x,), *c)) if single else (lambda xs: g(xs, *c))
            return _MAKE[family](fn)(x)

        return jax.jit(make), jax.jit(_apply), jax.jit(_apply_many)

    key = (family, prob.backend, prob.treedef, prob.single, static)
    return CACHE.get(prob.f, key, build)


def _linear(prob, family: str, xs: tuple, ctx: tuple) -> tuple:
    """(value, gradient, one, many): one(v) and many([v, ...]) apply the kept map."""
    dyn, static = split_contexts(prob, ctx)
    make, apply, apply_many = _build(prob, family, static)
    single = prob.single
    y, g, lin = call(prob, make, xs[0] if single else xs, *dyn)
    leaves = single and family != "jvp"  # results shaped like x: a tuple of its leaves

    def one(v):
        out = apply(lin, v[0] if single and family != "vjp" else v)
        return (out,) if leaves else out

    def many(vss: list):
        if family == "vjp":
            stacked = jnp.stack(vss)
        elif single:
            stacked = jnp.stack([v[0] for v in vss])
        else:
            stacked = tuple(jnp.stack(leaf) for leaf in zip(*vss, strict=True))
        out = apply_many(lin, stacked)
        if leaves:
            return [(a,) for a in out]
        if family == "jvp" or single:
            return list(out)
        return [tuple(leaf[i] for leaf in out) for i in range(len(vss))]

    return y, ((g,) if single and g is not None else g), one, many


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    return _linear(prob, "hvp", xs, ctx)


def jvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    return _linear(prob, "jvp", xs, ctx)


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    return _linear(prob, "vjp", xs, ctx)
