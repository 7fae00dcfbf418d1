"""Prepared torch calls without the general path: one graph and torch.autograd.grad
(torch.func.jvp for forward mode), as a hand-written native call would do.

A runner handles the plain case only: tensors outside any transform, forward-AD
level or inference mode, grad mode on, f closing over nothing an outer pass
differentiates, tangents like the prepared ones. Anything else (including an
error inside f) returns SLOW, and the general path runs and explains.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import is_functorch_wrapped_tensor

from ..._tree import unflatten
from ...core import direction
from ...core.backend import OUT_SIZE, SLOW
from .forward import FORWARD_LOCK
from .graph import done, grads, leaf, once_differentiable, reaches_outside


def runner(prob, combo, f):
    """The direct runner of ``prob.op`` calling ``f`` (prob's f, or a weak reference to
    it), or None where there is none."""
    op = prob.op
    value = op.startswith("value") or op == "gradient_and_hvp"
    known = direction.only(prob.f)  # f runs in one direction only: the general path
    if known == direction.FORWARD and op not in ("jvp", "value_and_jvp"):
        return None
    if known == direction.REVERSE and op in ("jvp", "value_and_jvp"):
        return None
    if op in ("gradient", "value_and_gradient", "vjp", "value_and_vjp"):
        return _reverse(f, value, cotangent="vjp" in op)
    if op in ("jvp", "value_and_jvp"):
        return _jvp(f, value)
    if op in ("hvp", "gradient_and_hvp") and combo is None:
        return _hvp(f, value)
    if op in ("jacobian", "value_and_jacobian"):
        return _jacobian(prob, value, f)
    return None


def _plain(x) -> bool:
    return type(x) is torch.Tensor and not (
        x.requires_grad
        or fwAD._current_level >= 0
        or not torch.is_grad_enabled()
        or torch.is_inference_mode_enabled()
        or x.is_inference()
        or is_functorch_wrapped_tensor(x)
    )


def _all_plain(xs) -> bool:
    if fwAD._current_level >= 0 or not torch.is_grad_enabled():
        return False
    if torch.is_inference_mode_enabled():
        return False
    return not any(
        type(x) is not torch.Tensor
        or x.requires_grad
        or x.is_inference()
        or is_functorch_wrapped_tensor(x)
        for x in xs
    )


def _like(t, x) -> bool:
    """t is a plain tensor with x's shape, dtype and device."""
    return (
        type(t) is torch.Tensor
        and not t.requires_grad
        and t.shape == x.shape
        and t.dtype == x.dtype
        and t.device == x.device
    )


def forward_graph(f, x):
    """(leaf, f(leaf), attached) when f(leaf) is a tensor on a graph through leaf, else
    None; ``attached`` when the graph also reaches tensors an outer pass differentiates
    (a closure over a model's parameters): the results must then stay on the graph."""
    xg = leaf(x)
    try:
        y = f(xg)
    except RuntimeError:
        return None
    done((xg,))
    if type(y) is not torch.Tensor or y.grad_fn is None:
        return None
    attached = reaches_outside(y, (xg,))
    if attached and once_differentiable(y, (xg,)):  # the general path explains
        return None
    return xg, y, attached


def _reverse(f, value, cotangent):
    """gradient (``cotangent`` False: f(x) must be a scalar) or vjp along w."""

    def run(x, w=None):
        if not _plain(x) or (cotangent and (type(w) is not torch.Tensor or w.requires_grad)):
            return SLOW
        if (got := forward_graph(f, x)) is None:
            return SLOW
        xg, y, attached = got
        if cotangent:
            if w.shape != y.shape or w.dtype != y.dtype or w.device != y.device:
                return SLOW
        elif y.ndim:
            return SLOW
        (g,) = grads(y, (xg,), w, attached, False)
        return (y if attached else y.detach(), g) if value else g

    return run


def _jvp(f, value):
    def run(x, v):
        if not _plain(x) or not _like(v, x):
            return SLOW
        try:
            with FORWARD_LOCK:  # torch's forward-AD level is process-wide
                y, t = torch.func.jvp(f, (x.clone(),), (v.clone(),))  # f may write to them
        except RuntimeError:
            return SLOW
        if type(y) is not torch.Tensor:
            return SLOW
        return (y, t) if value else t

    return run


def _hvp(f, value):
    def run(x, v):
        if not _plain(x) or not _like(v, x) or (got := forward_graph(f, x)) is None:
            return SLOW
        xg, y, attached = got
        if y.ndim:
            return SLOW
        (g,) = torch.autograd.grad(y, xg, create_graph=True, allow_unused=True)
        if g is None or not g.requires_grad:  # unused or linear x: the general path
            return SLOW
        (hv,) = grads(g, (xg,), v, attached, False)
        return (g if attached else g.detach(), hv) if value else hv

    return run


def leaves_runner(prob, f):
    """For a gradient of native leaves (x and Constant contexts), calling ``f``."""
    op = prob.op
    if op not in ("gradient", "value_and_gradient") or direction.only(prob.f) is not None:
        return None
    treedef, single, value = prob.treedef, prob.single, op == "value_and_gradient"

    def run(xs, _, contexts):
        if not _all_plain(xs):
            return SLOW
        xg = [leaf(x) for x in xs]
        try:
            y = f(xg[0] if single else unflatten(treedef, xg), *contexts)
        except RuntimeError:
            return SLOW
        done(xg)
        if type(y) is not torch.Tensor or y.ndim or y.grad_fn is None:
            return SLOW
        attached = reaches_outside(y, xg)  # a closure or a Constant differentiated outside
        if attached and once_differentiable(y, xg):  # the general path explains
            return SLOW
        gs = grads(y, xg, None, attached, False)
        g = gs[0] if single else unflatten(treedef, list(gs))
        return (y if attached else y.detach(), g) if value else g

    return run


def _jacobian(prob, value, f):
    """torch.func.jacrev or jacfwd in the direction the warm-up chose, on a copy of x
    (torch.func would let f write into the caller's tensor)."""
    size = prob.fns.get(OUT_SIZE)
    mode = prob.backend.mode or direction.only(prob.f)
    if mode is None and size is None:
        return None

    def run(x):
        if not _plain(x) or not x.numel():
            return SLOW
        reverse = mode == "reverse" or (mode is None and size <= x.numel())
        try:
            if reverse:
                j = torch.func.jacrev(f)(x.clone())
            else:
                with FORWARD_LOCK:
                    j = torch.func.jacfwd(f)(x.clone())
            y = f(x.clone()) if value else None
        except Exception:  # the general path runs f again and explains
            return SLOW
        if type(j) is not torch.Tensor or (value and type(y) is not torch.Tensor):
            return SLOW
        return (y, j) if value else j

    return run
