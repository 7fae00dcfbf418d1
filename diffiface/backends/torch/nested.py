"""torch forward-over-reverse nested-AD rules for inner calls on a FixedParams.

The inner result ``(h, ∇ₓ h)`` of ``h(x, q)`` (``q``: the float tensors of the
parameters and contexts, plus the inner cotangent or tangent) is one
``torch.autograd.Function``. Its backward turns the outer cotangent ``w`` into
``(H_xx w, H_qx w)`` by one ``torch.func.jvp`` of the full gradient along
``(w, 0)``; under ``create_graph=True`` that backward is itself differentiable.
Inside torch.func transforms or forward-mode AD, where an autograd.Function
with this backward cannot run, the framework's own nesting is used instead.
"""

from __future__ import annotations

import torch

from ... import _checks
from ...nested import choose
from ...nested.rules import Kit, register_gradient_rules
from .forward import jvp
from .graph import leaf, reaches_outside


class _Spec:
    """What the Function differentiates: h, and how many leading leaves are x;
    ``sample``: the timed call of "auto" it runs for, if any."""

    __slots__ = ("h", "nx", "sample")

    def __init__(self, h, nx: int) -> None:
        self.h, self.nx = h, nx
        self.sample = choose.timed_sample()


class _GradForm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, spec, *leaves):
        ctx.spec = spec
        ctx.save_for_backward(*leaves)
        nx = spec.nx
        with torch.enable_grad():
            xs = tuple(leaf(a) for a in leaves[:nx])
            val = spec.h(xs, tuple(a.detach() for a in leaves[nx:]))
            if reaches_outside(val, xs):
                raise _checks.closed_over("torch")
            if val.requires_grad:
                gx = torch.autograd.grad(val, xs, allow_unused=True)
            else:
                gx = (None,) * nx
        gx = tuple(torch.zeros_like(x) if g is None else g for g, x in zip(gx, xs, strict=True))
        return (val.detach(), *gx)

    @staticmethod
    def backward(ctx, dval, *ws):
        spec = ctx.spec
        leaves = ctx.saved_tensors
        xs, q = leaves[: spec.nx], leaves[spec.nx :]
        full = torch.func.grad(spec.h, argnums=(0, 1))
        try:  # one jvp of the full gradient along (w, 0): q is closed over, no tangent
            (gx, gq), (hx, hq) = jvp(lambda xs: full(xs, q), (tuple(xs),), (tuple(ws),))
        except Exception:
            if spec.sample is None:
                raise
            spec.sample.failed = True  # "auto" tried it on a real call: fall back, and tell
            return (None, *_reverse_over_reverse(spec.h, xs, q, dval, ws))
        cx = [h + dval * g for h, g in zip(hx, gx, strict=True)]
        cq = [h + dval * g for h, g in zip(hq, gq, strict=True)]
        return (None, *cx, *cq)


def _reverse_over_reverse(h, xs: tuple, q: tuple, dval, ws: tuple) -> tuple:
    """The pullback of ``(dval, ws)`` through ``(h, ∇ₓ h)`` by the framework's own
    nesting (differentiable again under create_graph)."""
    create = torch.is_grad_enabled()
    with torch.enable_grad():
        xs = tuple(a if create and a.requires_grad else a.detach().requires_grad_() for a in xs)
        q = tuple(a if create and a.requires_grad else a.detach().requires_grad_() for a in q)
        val = h(xs, q)
        gx = torch.autograd.grad(val, xs, create_graph=True, allow_unused=True)
        total = dval * val
        for g, w in zip(gx, ws, strict=True):
            if g is not None:
                total = total + (g * w).sum()
        out = torch.autograd.grad(total, (*xs, *q), create_graph=create, allow_unused=True)
    pairs = zip(out, (*xs, *q), strict=True)
    return tuple(torch.zeros_like(a) if g is None else g for g, a in pairs)


def _mark(outs: tuple, sample) -> tuple:
    """The inner results, timed in the outer pass: from the first gradient that reaches
    them to the end of the backward call that runs it."""
    engine = torch.autograd.Variable._execution_engine

    def reached(grad):
        if sample.first is None:
            sample.begin()
            engine.queue_callback(sample.end)

    for a in outs:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            a.register_hook(reached)
    return outs


choose.MARKS["torch"] = choose.Marks(outputs=_mark)


def _grad_form(h, xs: tuple, q: tuple):
    out = _GradForm.apply(_Spec(h, len(xs)), *xs, *q)
    return out[0], tuple(out[1:])


def _is_float(a) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point()


register_gradient_rules(
    "torch",
    Kit(
        grad_form=_grad_form,
        is_float=_is_float,
        directional=lambda fn, xs, vs: jvp(fn, (xs,), (vs,))[1],
        full_like=torch.full_like,
    ),
)
