"""autograd forward-over-reverse nested-AD rules for inner calls on a FixedParams.

The inner result ``(h, ∇ₓ h)`` of ``h(x, q)`` (``q``: the float arrays of the
parameters and contexts, plus the inner cotangent or tangent) is one autograd
primitive. Its vjp turns the outer cotangent ``w`` into ``(H_xx w, H_qx w)``
by one ``make_jvp`` of the full gradient along ``(w, 0)``, written with
autograd's own operations so that an outer ``autograd.hessian`` can
differentiate it again. Under an outer forward-mode trace (``make_jvp``) the
framework's own nesting is used instead.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.extend import defvjp, defvjp_argnums, primitive
from autograd.tracer import Box

from ... import _checks
from ...nested import choose
from ...nested.rules import Kit, register_gradient_rules
from .impl import open_boxes
from .traces import make_jvp, make_vjp


class _Spec:
    """h, how many leading leaves are x, and the timed call of "auto" (if any)."""

    __slots__ = ("h", "nx", "sample")

    def __init__(self, h, nx: int) -> None:
        self.h, self.nx = h, nx
        self.sample = choose.timed_sample()


def _value_and_grads(h, leaves: tuple, nx: int):
    """h and its gradient with respect to every leaf (one reverse pass)."""
    pb, val = make_vjp(lambda a: h(tuple(a[:nx]), tuple(a[nx:])), tuple(leaves))
    return val, pb(anp.ones_like(val))


@primitive
def _grad_form(spec, *leaves):
    pb, val = make_vjp(lambda xs: spec.h(tuple(xs), leaves[spec.nx :]), tuple(leaves[: spec.nx]))
    if isinstance(val, Box):  # f holds a value of the outer trace that is not in params
        raise _checks.closed_over("autograd")
    return (val, *pb(np.ones_like(val)))


def _grad_form_vjp(argnums, ans, args, kwargs):
    spec, leaves = args[0], args[1:]
    nx = spec.nx
    shapes = [np.shape(a) for a in leaves]
    sizes = [int(np.prod(s)) for s in shapes]

    def full(x_flat):  # the full gradient as one flat array (forward mode wants one output)
        xs, start = [], 0
        for s, n in zip(shapes[:nx], sizes[:nx], strict=True):
            xs.append(anp.reshape(x_flat[start : start + n], s))
            start += n
        _, grads = _value_and_grads(spec.h, (*xs, *leaves[nx:]), nx)
        return anp.concatenate([anp.ravel(g) for g in grads]) + 0 * anp.sum(x_flat)

    def vjp(g):
        dval, ws = g[0], g[1:]
        x_flat = anp.concatenate([anp.ravel(a) for a in leaves[:nx]])
        w_flat = anp.concatenate([anp.ravel(w) for w in ws])
        try:  # one jvp of the full gradient along (w, 0)
            grad, hw = make_jvp(full, x_flat)(w_flat)
        except Exception:
            if spec.sample is None:
                raise
            spec.sample.failed = True  # "auto" tried it on a real call: fall back, and tell
            return _reverse_over_reverse(spec.h, leaves, nx, dval, ws, argnums)
        cot = hw + dval * grad
        out, start = [], 0
        for s, n in zip(shapes, sizes, strict=True):
            out.append(anp.reshape(cot[start : start + n], s))
            start += n
        return tuple(out[i - 1] for i in argnums)

    return vjp


defvjp_argnums(_grad_form, _grad_form_vjp)


def _reverse_over_reverse(h, leaves: tuple, nx: int, dval, ws: tuple, argnums) -> tuple:
    """The pullback of ``(dval, ws)`` through ``(h, ∇ₓ h)`` by autograd's own nesting."""

    def paired(leaves):
        val, grads = _value_and_grads(h, leaves, nx)
        total = dval * val
        for g, w in zip(grads[:nx], ws, strict=True):
            total = total + anp.sum(g * w)
        return total

    pb, _ = make_vjp(paired, tuple(leaves))
    out = pb(1.0)
    return tuple(out[i - 1] for i in argnums)


@primitive
def _timed(a, mark):
    return a


defvjp(_timed, lambda ans, a, mark: lambda g: (mark(), g)[1], None)


def _mark_inputs(a, sample):
    """x or a parameter, timed in the outer pass: the last one reached ends the call."""
    return _timed(a, sample.end) if isinstance(a, Box) else a


def _mark_outputs(outs: tuple, sample) -> tuple:
    """The inner results, timed in the outer pass: the first one reached begins it."""
    return tuple(_timed(a, sample.begin) if isinstance(a, Box) else a for a in outs)


choose.MARKS["autograd"] = choose.Marks(outputs=_mark_outputs, inputs=_mark_inputs)


def _call(h, xs: tuple, q: tuple):
    out = _grad_form(_Spec(h, len(xs)), *xs, *q)
    return out[0], tuple(out[1:])


def _is_float(a) -> bool:
    if isinstance(a, float):
        return True
    dtype = getattr(a, "dtype", None)
    return dtype is not None and np.issubdtype(dtype, np.floating)


def _like(gs: tuple, xs: tuple) -> tuple:
    pairs = zip(gs, xs, strict=True)
    return tuple(g if g.dtype == x.dtype else g.astype(x.dtype) for g, x in pairs)


def _directional(fn, xs, vs):
    """The JVP of the scalar ``fn`` along ``vs``, kept dependent on ``xs`` for autograd
    (a linear fn would make it a constant, which autograd warns about)."""
    return make_jvp(fn, xs)(vs)[1] + 0 * xs[0].sum()


register_gradient_rules(
    "autograd",
    Kit(
        grad_form=_call,
        is_float=_is_float,
        directional=_directional,
        full_like=lambda y, w: np.full(np.shape(y), w, dtype=y.dtype),
        open=open_boxes,
        like=_like,
    ),
)
