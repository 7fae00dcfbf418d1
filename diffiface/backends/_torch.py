"""PyTorch backend: torch.autograd for plain calls, torch.func inside torch.func transforms.

A plain call detaches ``x`` and builds no graph beyond the call. When the call
runs inside an outer differentiation (grad mode on and ``x`` or a Constant
requiring grad, or torch.func wrapper tensors), results stay attached so the
outer framework can differentiate through them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import is_functorch_wrapped_tensor

from .. import _checks
from .._backend_types import AutoTorch
from .._fallbacks import BackendImpl
from .._registry import register
from .._tree import flatten


@register(AutoTorch)
class TorchImpl(BackendImpl):
    framework = "torch"
    native_kind = "torch tensors"
    output_kind = "a torch.Tensor"

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, torch.Tensor)

    def is_float(self, leaf: Any) -> bool:
        return leaf.is_floating_point()

    def from_numpy(self, a: np.ndarray) -> Any:
        if not a.flags.writeable:
            a = a.copy()
        return torch.from_numpy(a)

    def default_float(self, value: float) -> Any:
        return torch.tensor(value, dtype=torch.get_default_dtype())

    def to_numpy(self, a: Any) -> np.ndarray:
        return a.detach().cpu().numpy()

    def cast(self, a: Any, like: Any) -> Any:
        return a.to(dtype=like.dtype, device=like.device)

    def ones_like(self, a: Any) -> Any:
        return torch.ones_like(a)

    def basis(self, like: Any, i: int) -> Any:
        e = torch.zeros(like.numel(), dtype=like.dtype, device=like.device)
        e[i] = 1
        return e.reshape(like.shape)

    def stack(self, arrays: list, axis: int) -> Any:
        return torch.stack(arrays, dim=axis)

    # ---- primitives -----------------------------------------------------------
    def value_and_pullback(self, prob, xs, ctx):
        fn = prob.flat()
        if _functorch(xs, ctx):
            y, pb = torch.func.vjp(lambda xs: fn(xs, *ctx), xs)
            return y, lambda w: pb(w)[0]
        outer = _outer(xs, ctx)
        xg, y = _forward(prob, fn, xs, ctx, outer)

        def pb(w, retain=outer):
            return _grads(y, xg, w, outer, retain)

        return (y if outer else y.detach()), pb

    def value_and_gradient(self, prob, xs, ctx):
        if _functorch(xs, ctx) or _outer(xs, ctx):
            y, pb = self.value_and_pullback(prob, xs, ctx)
            return y, pb(None)
        # the plain call: one graph, torch.autograd.grad, nothing kept
        xg = tuple(x.detach().requires_grad_() for x in xs)
        fn = prob.flat()
        if torch.is_grad_enabled():
            y = _call(prob, lambda: fn(xg, *ctx))
        else:
            with torch.enable_grad():
                y = _call(prob, lambda: fn(xg, *ctx))
        return y.detach(), _grads(y, xg, None, False, False)

    def value_and_jvp(self, prob, xs, vs, ctx):
        fn = prob.flat()
        if _functorch(xs, ctx) or _outer(xs, ctx):
            return _call(prob, lambda: torch.func.jvp(lambda xs: fn(xs, *ctx), (xs,), (vs,)))
        with fwAD.dual_level():
            duals = tuple(fwAD.make_dual(x, v) for x, v in zip(xs, vs, strict=True))
            y = _call(prob, lambda: fn(duals, *ctx))
            y, t = fwAD.unpack_dual(y)
        return y, torch.zeros_like(y) if t is None else t

    def value_and_jacobian(self, prob, xs, ctx):
        fn = prob.flat()
        (x,) = xs
        if _functorch(xs, ctx) or self.mode == "forward":
            reverse = self.mode == "reverse" or (
                self.mode is None and self.output_size(prob, xs, ctx) < x.numel()
            )
            jac = torch.func.jacrev if reverse else torch.func.jacfwd
            j, y = _call(prob, lambda: jac(lambda x: _twice(fn((x,), *ctx)), has_aux=True)(x))
            return y, j
        outer = _outer(xs, ctx)
        xg, y = _forward(prob, fn, xs, ctx, outer)
        if self.mode is None and y.numel() >= x.numel():
            j, y = _call(
                prob, lambda: torch.func.jacfwd(lambda x: _twice(fn((x,), *ctx)), has_aux=True)(x)
            )
            return y, j
        m = y.numel()
        eye = torch.eye(m, dtype=y.dtype, device=y.device).reshape((m, *y.shape))
        if m == 0 or not y.requires_grad:
            j = torch.zeros((m, *x.shape), dtype=x.dtype, device=x.device)
        else:
            (j,) = torch.autograd.grad(
                y, xg, eye, is_grads_batched=True, allow_unused=True, create_graph=outer
            )
            if j is None:
                j = torch.zeros((m, *x.shape), dtype=x.dtype, device=x.device)
        return (y if outer else y.detach()), j.reshape((*y.shape, *x.shape))


def _twice(y):
    return y, y


def _functorch(xs: tuple, ctx: tuple) -> bool:
    if any(is_functorch_wrapped_tensor(x) for x in xs):
        return True
    return bool(ctx) and any(
        isinstance(c, torch.Tensor) and is_functorch_wrapped_tensor(c) for c in flatten(ctx)[0]
    )


def _outer(xs: tuple, ctx: tuple) -> bool:
    """True when an outer torch.autograd differentiation can see this call."""
    if not torch.is_grad_enabled():
        return False
    if any(x.requires_grad for x in xs):
        return True
    return bool(ctx) and any(
        isinstance(c, torch.Tensor) and c.requires_grad for c in flatten(ctx)[0]
    )


def _forward(prob, fn, xs, ctx, outer):
    with torch.enable_grad():
        xg = tuple(x if outer and x.requires_grad else x.detach().requires_grad_() for x in xs)
        y = _call(prob, lambda: fn(xg, *ctx))
    return xg, y


def _grads(y, xg, w, outer, retain):
    if not y.requires_grad:  # f does not depend on x: every derivative is zero
        return tuple(torch.zeros_like(x) for x in xg)
    gs = torch.autograd.grad(y, xg, w, allow_unused=True, create_graph=outer, retain_graph=retain)
    if any(g is None for g in gs):
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(gs, xg, strict=True))
    return gs


def _call(prob, thunk):
    try:
        return thunk()
    except RuntimeError as exc:
        if "numpy()" in str(exc) or "NumPy" in str(exc):
            raise _checks.left_framework(prob.op, prob.backend, exc) from exc
        raise
