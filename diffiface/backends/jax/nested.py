"""JAX forward-over-reverse nested-AD rules for inner calls on a FixedParams.

Each rule wraps the inner result ``y = ∇ₓ h(x, q)`` (``q``: the float leaves
of the parameters and dynamic contexts, plus the inner cotangent or tangent)
in a ``jax.custom_jvp`` whose tangent is written as the pullback of the full
gradient ``∇_(x,q) h``. An outer reverse pass transposes that pullback into one
JVP of ``∇_(x,q) h`` along ``(w, 0)``: ``(H_xx w, H_qx w)`` in one pass. An
outer forward pass (``jax.jvp``, ``jacfwd``, ``hessian``) evaluates it as
written; ``vmap`` and ``jit`` compose as with any ``custom_jvp``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ... import _checks
from ...core.registry import register_rule
from ...nested import choose
from ...nested.rules import Kit, register_gradient_rules, split_floats, vjp_potential
from .impl import under_eager_transform


def _grad_form(h, xs, q):
    """``(h(xs, q), ∇_xs h(xs, q))``, differentiated forward over reverse. Values that
    ``h`` closes over (an outer tracer read by f) become explicit arguments, so that
    they are differentiated too."""
    hc, consts = jax.closure_convert(h, xs, q)
    idx = [
        i
        for i, c in enumerate(consts)
        if isinstance(c, jax.core.Tracer) and jnp.issubdtype(c.dtype, jnp.inexact)
    ]
    if not idx:
        return _custom(hc, xs, q)

    def h2(xs, qc):
        cs = list(consts)
        for i, c in zip(idx, qc[1], strict=True):
            cs[i] = c
        return hc(xs, qc[0], *cs)

    return _custom(h2, xs, (q, tuple(consts[i] for i in idx)))


def _custom(h, xs, q):
    @jax.custom_jvp
    def run(xs, q):
        return jax.value_and_grad(h)(xs, q)

    @run.defjvp
    def run_jvp(primals, tangents):
        dxs, dq = tangents
        (val, (gx, gq)), pb = jax.vjp(jax.value_and_grad(h, argnums=(0, 1)), *primals)
        dgx = pb((jnp.zeros_like(val), (dxs, dq)))[0]
        dval = _vdot(gx, dxs, val) + _vdot(gq, dq, val)
        return (val, gx), (dval, dgx)

    return run(xs, q)


def _vdot(a, b, like):
    """The inner product of two pytrees, in the dtype of ``like``."""
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return sum((jnp.vdot(u, v).astype(like.dtype) for u, v in pairs), jnp.zeros((), like.dtype))


def _is_float(a) -> bool:
    if isinstance(a, float):
        return True
    dtype = getattr(a, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jnp.inexact)


KIT = Kit(
    grad_form=_grad_form,
    is_float=_is_float,
    directional=lambda fn, xs, vs: jax.jvp(fn, (xs,), (vs,))[1],
    full_like=jnp.full_like,
)
register_gradient_rules("jax", KIT)


def _rows(g, xs, q, basis):
    """The vjps of the basis cotangents (stacked on axis 0), each one a _grad_form."""
    h = vjp_potential(g, len(q))
    return jax.vmap(lambda e: _grad_form(h, xs, (*q, e))[1][0])(basis)


@register_rule("jax", "value_and_jacobian")
def value_and_jacobian(impl, prob, xs, ctx):
    q, g = split_floats(prob, ctx, _is_float)
    xs = tuple(xs)
    y = g(xs, q)
    eye = jnp.eye(y.size, dtype=y.dtype).reshape((y.size, *y.shape))
    return y, _rows(g, xs, q, eye).reshape((*y.shape, *xs[0].shape))


@register_rule("jax", "jacobian")
def jacobian(impl, prob, xs, ctx):
    return value_and_jacobian(impl, prob, xs, ctx)[1]


@register_rule("jax", "value_and_batched_jacobian")
def value_and_batched_jacobian(impl, prob, xs, ctx):
    q, g = split_floats(prob, ctx, _is_float)
    xs = tuple(xs)
    (x,) = xs
    y = g(xs, q)
    _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
    b, n_out = y.shape[0], y.size // max(y.shape[0], 1)
    eye = jnp.broadcast_to(jnp.eye(n_out, dtype=y.dtype)[:, None], (n_out, b, n_out))
    rows = _rows(g, xs, q, eye.reshape((n_out, *y.shape)))  # (n_out, B, *in)
    jac = jnp.moveaxis(rows.reshape((n_out, b, -1)), 0, 1)
    return y, jac.reshape((*y.shape, *x.shape[1:]))


@register_rule("jax", "batched_jacobian")
def batched_jacobian(impl, prob, xs, ctx):
    return value_and_batched_jacobian(impl, prob, xs, ctx)[1]


def _converted(f, x, params, rest: tuple):
    """``(fn, consts)``: f as ``fn(x, params, *consts)``, built from one trace of f
    (``jax.closure_convert``: the values of an outer trace that f reads, and the
    contexts, become ``consts``), for "auto" to measure on without running f again."""
    hc, consts = jax.closure_convert(lambda x, p: f(x, p, *rest), x, params)

    def fn(x, p, *consts):
        return hc(x, p, *consts)

    return fn, tuple(consts)


_checks.not_counted(_converted(lambda x, p: x, 0.0, 0.0, ())[0])  # one per measurement
choose.CONVERT["jax"] = _converted


# Under an outer transform outside jit the rule traces f into a jaxpr on every call
# (about 2.4x the native eager nesting at the mid size of benchmarks/nested.py), while
# the framework's own nesting runs f op by op as jax.grad does: "auto" nests natively.
choose.EAGER["jax"] = under_eager_transform
