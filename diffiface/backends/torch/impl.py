"""PyTorch backend: torch.autograd for plain calls, torch.func inside torch.func transforms.

A plain call detaches ``x`` and builds no graph beyond the call. Inside an outer
differentiation (grad mode on and ``x`` or a Constant requiring grad, or torch.func
wrapper tensors), results stay attached for the outer framework.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import (
    is_dead_tensor_wrapper,
    is_functorch_wrapped_tensor,
    peek_interpreter_stack,
    unwrap_if_dead,
)

from ... import _checks
from ..._backend_types import AutoTorch
from ..._cache import CodeFacts, weak_callable
from ..._tree import tree_map
from ...core import direction
from ...core.backend import BackendImpl, Traits
from ...core.registry import register
from . import direct, hessian_way, leaves, memory
from .forward import dual_jvp
from .graph import (
    DONE,
    NoGradInForward,
    batched_grads,
    call_f,
    call_forward,
    check_twice,
    forward_graph,
    grads,
    in_functorch,
    is_dual,
    outer_pass,
    reaches_outside,
    seen_by_outer,
    tensors_of,
)
from .guards import OWNED, guard


@register(AutoTorch)
@guard
class TorchImpl(BackendImpl):
    traits = Traits(
        "torch",
        native_kind="torch tensors",
        output_kind="a torch.Tensor",
        hermitian_vjp=True,
        cheap_forward=False,  # forward-mode AD runs far slower than a backward here
        reverse_combo=None,  # the plain double backward
        keeps_plans=True,  # f's graph is built anew on every call: nothing to go stale
        runs_aux=True,  # the runners of ``direct`` hand f's aux to the sink, settled
        runs_trees=True,  # they take f's pytree output per call (``trees``)
    )

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, torch.Tensor)

    def is_float(self, leaf: Any) -> bool:
        return leaf.is_floating_point()

    def from_numpy(self, a: np.ndarray) -> Any:
        if not a.flags.writeable or min(a.strides, default=0) < 0:
            a = a.copy()  # torch takes neither read-only nor negative-stride arrays
        return torch.from_numpy(a)

    def default_float(self, value: float) -> Any:
        return torch.tensor(value, dtype=torch.get_default_dtype())

    def to_numpy(self, a: Any) -> np.ndarray:
        return a.detach().cpu().numpy()

    @staticmethod
    def protect(xs: tuple) -> tuple:
        """f gets a (differentiable) copy of anything that shares the caller's storage
        and accepts in-place ops: plain tensors, and torch.func's wrappers unless the
        operator already owns what they wrap (``_own_inputs``), and non-leaves. Leaves
        that require grad need none: torch refuses in-place ops on them."""
        owned = OWNED.get()
        out = []
        for x in xs:
            wrapped = is_functorch_wrapped_tensor(x)
            # a non-leaf changed in place would also change what is differentiated
            copy = (wrapped and not owned) or (not wrapped and not _refuses_in_place(x))
            out.append(x.clone() if copy else x)
        return tuple(out)

    def is_complex(self, y):
        return y.is_complex()

    def connected(self, xs, y):
        """In forward mode (the leaves carry tangents, also under torch.func.jvp) y must
        carry one too; on torch's graph (the leaves require grad) y must require grad."""
        if fwAD._current_level >= 0 or peek_interpreter_stack() is not None:  # forward mode
            for x in xs:
                if fwAD.unpack_dual(x).tangent is not None:
                    return fwAD.unpack_dual(y).tangent is not None
        if torch.is_grad_enabled():
            for x in xs:  # (loops, not any(): no frames on every call)
                if x.requires_grad:
                    return y.requires_grad
        return None

    def is_traced(self, a: Any) -> bool:
        return a.requires_grad or is_functorch_wrapped_tensor(a) or is_dual(a)

    def standin(self, tree: Any) -> Any:
        return tree_map(lambda a: a.detach().clone() if isinstance(a, torch.Tensor) else a, tree)

    def peak_bytes(self, fn, args):
        return memory.peak_bytes(fn, args)

    def cast(self, a: Any, like: Any) -> Any:
        return _placed(a.to(dtype=like.dtype, device=like.device), like)

    def ones_like(self, a: Any) -> Any:
        return torch.ones_like(a)

    def concat(self, arrays: list, axis: int = 0) -> Any:
        return torch.cat(arrays, dim=axis) if len(arrays) > 1 else arrays[0]

    def settle(self, tree: Any, result: Any) -> Any:
        """Each tensor keeps the graph it has to an outer pass's leaves (as torch.func
        leaves aux), and loses the one to this call's own leaves."""
        if type(tree) is torch.Tensor:  # (one tensor: no tree to map)
            return _settled(tree)
        return tree_map(_settled, tree)

    def basis(self, like: Any, i: int) -> Any:
        e = torch.zeros(like.numel(), dtype=like.dtype, device=like.device)
        e[i] = 1
        return _placed(e.reshape(like.shape), like)

    def stack(self, arrays: list, axis: int) -> Any:
        return torch.stack(arrays, dim=axis)

    # ---- primitives -----------------------------------------------------------
    def value_and_pullback(self, prob, xs, ctx):
        fn = prob.flat()
        if in_functorch():
            y, pb = torch.func.vjp(lambda xs: fn(xs, *ctx), xs)
            return y, lambda w: pb(w)[0]
        xg, y, attached = forward_graph(prob, fn, xs, ctx, outer_pass(xs, ctx))

        def pb(w):  # the graph is kept for the next w (freed with pb)
            return grads(prob, y, xg, w, attached, True)

        return (y if attached else y.detach()), pb

    def value_and_gradient(self, prob, xs, ctx):
        """One graph and the one reverse pass (``graph.grads``), as the runners of
        ``direct`` do; detached results unless an outer pass sees them."""
        if in_functorch():
            y, pb = self.value_and_pullback(prob, xs, ctx)
            return y, pb(None)
        xg, y, attached = forward_graph(prob, prob.flat(), xs, ctx, outer_pass(xs, ctx))
        return (y if attached else y.detach()), grads(prob, y, xg, None, attached, False)

    def reverse_jvp(self, prob, xs, vs, ctx):
        """The reverse formulation's J v placed like f(x) (a DTensor's sum over the
        Jacobian's columns comes back as a partial sum)."""
        y, t = super().reverse_jvp(prob, xs, vs, ctx)
        dtensor = _dtensor_type()
        if dtensor is not None and isinstance(t, dtensor) and isinstance(y, dtensor):
            t = t.redistribute(y.device_mesh, y.placements)
        return y, t

    def forward_unsupported(self, exc):
        return isinstance(exc, NoGradInForward | NoForwardArrays) or (
            isinstance(exc, RuntimeError | NotImplementedError | AssertionError)
            and any(s in str(exc) for s in _NO_FORWARD)
        )

    def reverse_unsupported(self, exc):
        return isinstance(exc, NotImplementedError) and "implement either the backward" in str(exc)

    def outer_sees(self, leaves):
        grad = torch.is_grad_enabled()
        return any(
            isinstance(a, torch.Tensor)
            and ((grad and a.requires_grad) or is_functorch_wrapped_tensor(a) or is_dual(a))
            for a in leaves
        )

    def can_run_rule(self, xs, ctx):
        return not in_functorch() and not any(is_dual(a) for a in (*xs, *tensors_of(ctx)))

    def prefers_reverse(self, prob, xs, ctx):
        """A DTensor's jacobians run in reverse mode unless the user fixed the mode."""
        if self.mode is None and self.no_forward(xs, ctx) is not None:
            return True
        return super().prefers_reverse(prob, xs, ctx)

    def _forward_arrays(self, xs, ctx) -> None:
        """Raise where these arrays take no forward mode (a DTensor: torch's forward
        mode fails on some of its ops and gives partial placements on others)."""
        why = self.no_forward(xs, ctx)
        if why is not None:
            raise NoForwardArrays(why)

    def no_forward(self, xs, ctx):
        dtensor = _dtensor_type()
        if dtensor is not None and any(isinstance(a, dtensor) for a in (*xs, *tensors_of(ctx))):
            return "torch's DTensor has no forward-mode AD"
        return None

    def runner(self, prob, form, combo=None, weak=False):
        """The runners of ``direct``, for one tensor, NumPy array or Python float, or for
        native leaves; for an unprepared call (``weak``) they call f through a weak
        reference (the plan table holds f weakly)."""
        f = weak_callable(prob.f, weak)
        if f is None:
            return None
        if form == "leaves":
            return leaves.runner(prob, combo, f, weak)
        run = direct.runner(prob, combo, f, weak) if prob.single else None
        return direct.in_form(self, run, form)

    def code_runner(self, prob, form):
        return direct.code_runner(self, prob, form)

    def value_and_jvp(self, prob, xs, vs, ctx):
        """Dual numbers on plain tensors (measured about three times as fast as
        torch.func.jvp); torch.func.jvp where they do not work (``_duals_work``; a
        DTensor, whose errors tell the reverse formulation to run instead), and for
        an f that runs a jvp itself (torch nests no dual levels, and a jvp inside f must
        work: learned on f's first such call, per code)."""
        fn = prob.flat()
        if _duals_work() and not _NESTS.get(prob.f) and self.no_forward(xs, ctx) is None:
            try:
                return call_forward(prob, lambda: dual_jvp(fn, xs, vs, ctx))
            except RuntimeError as exc:
                if "Nested forward mode" not in str(exc):
                    raise
            _NESTS.put(prob.f, True)
        return call_forward(prob, lambda: torch.func.jvp(lambda xs: fn(xs, *ctx), (xs,), (vs,)))

    # several directions: one vmapped (or batched-backward) pass
    def value_and_jvps(self, prob, xs, vss, ctx):
        fn = prob.flat()
        stacked = tuple(torch.stack(leaves) for leaves in zip(*vss, strict=True))

        def one(vs):
            return torch.func.jvp(lambda xs: fn(xs, *ctx), (xs,), (vs,))

        y, ts = call_forward(prob, lambda: torch.func.vmap(one, out_dims=(None, 0))(stacked))
        return y, list(ts.unbind(0))

    def value_and_vjps(self, prob, xs, ws, ctx, check_w):
        if in_functorch():
            return super().value_and_vjps(prob, xs, ws, ctx, check_w)
        xg, y, attached = forward_graph(prob, prob.flat(), xs, ctx, outer_pass(xs, ctx))
        w = torch.stack([check_w(y, w) for w in ws])
        n = len(ws)
        create = attached or seen_by_outer(w)
        if create:
            check_twice(prob, y, xg)
        gs = batched_grads(y, xg, w, create) if y.requires_grad else (None,) * len(xg)
        gs = [
            torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device) if g is None else g
            for g, x in zip(gs, xg, strict=True)
        ]
        return (y if attached else y.detach()), [tuple(g[i] for g in gs) for i in range(n)]

    def compressed(
        self, prob, ctx, kind, seeds, gather, combo=None, plan=0, value=True, weak=False
    ):
        """A sparse plan's row pass (see ``JaxImpl.compressed``): one forward and one
        batched backward along the stacked seeds, gathered without unstacking. None (the
        generic passes) for the other kinds, and for ``weak`` (it holds f); a call under
        an outer pass returns None."""
        if kind != "row" or weak:
            return None
        fn = prob.flat()

        def run(xs):
            if in_functorch() or outer_pass(xs, ctx):
                return None
            xg, y, attached = forward_graph(prob, fn, xs, ctx, False)
            if attached:
                return None
            (g,) = batched_grads(y, xg, seeds, False) if y.requires_grad else (None,)
            if g is None:
                x = xs[0]
                g = torch.zeros((seeds.shape[0], *x.shape), dtype=x.dtype, device=x.device)
            return y.detach(), g.reshape(-1)[gather]

        return run

    def value_and_jacobian(self, prob, xs, ctx):
        return self._jacobian(prob, xs, ctx, True)

    def jacobian(self, prob, xs, ctx):
        return self._jacobian(prob, xs, ctx, False)[1]

    def _jacobian(self, prob, xs, ctx, value):
        """torch.func.jacrev / jacfwd (measured faster than a batched torch.autograd.grad,
        which falls back to a loop for many ops); f(x), when asked for, as the aux of
        the same run of f. Differentiable by an outer pass through x or a closure."""
        fn = prob.flat()
        (x,) = xs
        f1 = lambda x: fn((x,), *ctx)  # noqa: E731
        if x.numel() == 0:  # an empty basis: torch.func cannot batch over it
            y = call_f(prob, lambda: f1(x))
            return y, torch.zeros((*y.shape, *x.shape), dtype=x.dtype, device=x.device)
        g = (lambda x: (y := f1(x), y)) if value else f1
        if self.prefers_reverse(prob, xs, ctx):  # the output size is memoized on prob
            out = call_f(prob, lambda: torch.func.jacrev(g, has_aux=value)(x))
        else:
            self._forward_arrays(xs, ctx)
            out = call_forward(prob, lambda: torch.func.jacfwd(g, has_aux=value)(x))
        return (out[1], out[0]) if value else (None, out)

    def value_and_batched_jacobian(self, prob, xs, ctx):
        fn = prob.flat()
        (x,) = xs
        b, rest = x.shape[0], tuple(x.shape[1:])
        n_in = math.prod(rest)
        f1 = lambda x: fn((x,), *ctx)  # noqa: E731
        if not self.prefers_reverse(prob, xs, ctx):  # n_in jvps, one vmapped pass
            self._forward_arrays(xs, ctx)
            eye = torch.eye(n_in, dtype=x.dtype, device=x.device)[:, None]
            v = eye.expand(n_in, b, n_in).reshape((n_in, *x.shape))
            y, cols = call_forward(
                prob,
                lambda: torch.func.vmap(
                    lambda v: torch.func.jvp(f1, (x,), (v,)), out_dims=(None, 0)
                )(v),
            )
            _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
            jac = cols.reshape(n_in, b, math.prod(y.shape[1:])).movedim(0, 2)
            return y, jac.reshape((*y.shape, *rest))
        if in_functorch():
            y, pb = torch.func.vjp(f1, x)
            _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
            n_out = math.prod(y.shape[1:])
            w = torch.eye(n_out, dtype=y.dtype, device=y.device)[:, None].expand(n_out, b, n_out)
            rows = torch.func.vmap(lambda w: pb(w.reshape(y.shape))[0])(w)
        else:
            xg, y, outer = forward_graph(prob, fn, xs, ctx, outer_pass(xs, ctx))
            _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
            n_out = math.prod(y.shape[1:])
            w = torch.eye(n_out, dtype=y.dtype, device=y.device)[:, None].expand(n_out, b, n_out)
            w = _placed(w.reshape((n_out, *y.shape)), y, batched=True)
            if outer:
                check_twice(prob, y, xg)
            if y.requires_grad:
                (rows,) = batched_grads(y, xg, w, outer)
            else:
                rows = None
            if rows is None:
                rows = torch.zeros((n_out, *x.shape), dtype=x.dtype, device=x.device)
            y = y if outer else y.detach()
        jac = rows.reshape(n_out, b, n_in).movedim(0, 1)
        return y, jac.reshape((*y.shape, *rest))

    # ---- second order ------------------------------------------------------------
    def _plain(self, xs, ctx, combo) -> bool:
        return combo is None and not in_functorch() and not outer_pass(xs, ctx)

    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        fn = prob.flat()
        if self._plain(xs, ctx, combo):  # double backward: the fastest plain torch hvp
            xg, y, keep = forward_graph(prob, fn, xs, ctx, False)  # (none under no_grad)
            with torch.enable_grad():
                gs = grads(prob, y, xg, None, True, True)
                used = [(g, v) for g, v in zip(gs, vs, strict=True) if g.requires_grad]
                if not used:
                    return gs, tuple(torch.zeros_like(x) for x in xs)
                hv = torch.autograd.grad(
                    [g for g, _ in used],
                    xg,
                    [v for _, v in used],
                    allow_unused=True,
                    create_graph=keep or any(seen_by_outer(v) for v in vs),
                )
            hv = tuple(torch.zeros_like(x) if h is None else h for h, x in zip(hv, xs, strict=True))
            return (gs if keep else tuple(g.detach() for g in gs)), hv
        outer, inner = combo or ("forward", "reverse")
        gf = _func_grad(lambda xs: fn(xs, *ctx), inner)
        if outer == "reverse":
            g, pb = call_forward(prob, lambda: torch.func.vjp(gf, xs))
            return g, pb(vs)[0]
        return call_forward(prob, lambda: torch.func.jvp(gf, (xs,), (vs,)))

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        if not self._plain(xs, ctx, combo):
            return super().gradient_and_hvps(prob, xs, vss, ctx, combo)
        fn = prob.flat()
        n = len(vss)
        xg, y, keep = forward_graph(prob, fn, xs, ctx, False)  # (none under no_grad)
        with torch.enable_grad():
            gs = grads(prob, y, xg, None, True, True)
            used = [k for k, g in enumerate(gs) if g.requires_grad]
            hv = [None] * len(xs)
            if used:
                vs = [torch.stack([vs[k] for vs in vss]) for k in used]
                hv = batched_grads(
                    [gs[k] for k in used], xg, vs, keep or any(seen_by_outer(v) for v in vs)
                )
        hv = [
            torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device) if h is None else h
            for h, x in zip(hv, xs, strict=True)
        ]
        gs = gs if keep else tuple(g.detach() for g in gs)
        return gs, [tuple(h[i] for h in hv) for i in range(n)]

    def hessian(self, prob, xs, ctx, combo):
        """torch.func.hessian or one batched double backward, whichever is faster for
        f: a prepared problem times its first calls (``hessian_way``)."""
        batched = lambda: self.value_gradient_and_hessian(prob, xs, ctx, combo)[2]  # noqa: E731
        if not (self._plain(xs, ctx, combo) and xs[0].numel()):
            return batched()
        if direction.only(prob) is not None:  # (torch.func.hessian: forward over reverse)
            return batched()
        f1 = _one(prob.flat(), ctx)
        by_func = lambda: call_forward(prob, lambda: torch.func.hessian(f1)(xs[0]))  # noqa: E731
        return hessian_way.run(prob.fns, prob.prepared, by_func, batched, xs[0])

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        fn = prob.flat()
        (x,) = xs
        n = x.numel()
        if self._plain(xs, ctx, combo):  # one double backward, batched over the basis
            xg, y, keep = forward_graph(prob, fn, xs, ctx, False)  # (none under no_grad)
            with torch.enable_grad():
                (g,) = grads(prob, y, xg, None, True, True)
                h = None
                if g.requires_grad and n:
                    eye = torch.eye(n, dtype=x.dtype, device=x.device).reshape((n, *x.shape))
                    (h,) = batched_grads(g, xg, _placed(eye, x, batched=True), keep)
            if h is None:
                h = torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device)
            h = h.reshape((*x.shape, *x.shape))
            return (y, (g,), h) if keep else (y.detach(), (g.detach(),), h)
        if n == 0:  # nothing to differentiate: torch.func cannot batch over an empty basis
            y = call_f(prob, lambda: fn((x,), *ctx))
            return y, (torch.zeros_like(x),), torch.zeros((*x.shape, *x.shape), dtype=x.dtype)
        outer, inner = combo or ("forward", "reverse")
        f1 = lambda x: fn((x,), *ctx)  # noqa: E731

        def vg(x):
            if inner == "forward":
                y, g = f1(x), torch.func.jacfwd(f1)(x)
            else:
                g, y = torch.func.grad_and_value(f1)(x)
            return g, (y, g)

        jac = torch.func.jacrev if outer == "reverse" else torch.func.jacfwd
        h, (y, g) = call_forward(prob, lambda: jac(vg, has_aux=True)(x))
        return y, (g,), h

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        fn = prob.flat()
        (x,) = xs
        one = torch.ones_like(x)

        def d(x):
            return torch.func.jvp(lambda x: fn((x,), *ctx), (x,), (one,))

        (y, d1), (_, d2) = call_forward(prob, lambda: torch.func.jvp(d, (x,), (one,)))
        return y, d1, torch.zeros_like(d1) if torch._is_zerotensor(d2) else d2  # (linear f)


class NoForwardArrays(RuntimeError):
    """The arrays of this call take no forward-mode AD (see ``no_forward``)."""


def _settled(a: Any) -> Any:
    """A leaf of f's aux as the caller sees it (see ``TorchImpl.settle``)."""
    a = _alive(a)
    kept = not isinstance(a, torch.Tensor) or not a.requires_grad or _outside(a)
    return a if kept else a.detach()


def _outside(a: torch.Tensor) -> bool:
    """``a`` is (or its graph reaches) a leaf of an outer pass, not one of diffiface's own
    leaves of a finished call; nothing is outside under no_grad."""
    if a.grad_fn is None:
        return torch.is_grad_enabled() and not hasattr(a, DONE)
    return reaches_outside(a, ())


def _alive(a: Any) -> Any:
    """A tensor that escaped a finished torch.func transform (f's aux, computed on its
    wrapped inputs) as the tensor it wraps, which an outer graph can differentiate."""
    if isinstance(a, torch.Tensor):
        while is_functorch_wrapped_tensor(a) and is_dead_tensor_wrapper(a):
            a = unwrap_if_dead(a)
    return a


def _placed(a, like, batched=False):
    """``a`` (a plain tensor) placed like ``like``: a DTensor's basis vectors and
    cotangents must be DTensors of its mesh and placements (every rank builds the same
    full tensor, so distributing it only keeps each rank's shard). ``batched``: ``a``
    has one more leading axis (the directions), and like's sharded axes move by one."""
    dtensor = _dtensor_type()
    if dtensor is None or not isinstance(like, dtensor) or isinstance(a, dtensor):
        return a
    from torch.distributed.tensor import Shard, distribute_tensor

    placements = like.placements
    if batched:
        placements = [Shard(p.dim + 1) if p.is_shard() else p for p in placements]
    return distribute_tensor(a, like.device_mesh, placements)


def _refuses_in_place(x) -> bool:
    """torch raises on an in-place op on a leaf that requires grad, and on a view of
    one (``graph.own``'s alias of x inside an outer pass)."""
    if not x.requires_grad:
        return False
    if x.is_leaf:
        return True
    base = x._base
    return base is not None and base.is_leaf and base.requires_grad


def _dtensor_type():
    """torch's DTensor class once torch.distributed.tensor was imported (a DTensor can
    exist only then), else None: no import on the common path."""
    module = sys.modules.get("torch.distributed.tensor")
    return None if module is None else module.DTensor


def _one(fn, ctx):
    return lambda x: fn((x,), *ctx)


def _duals_work() -> bool:
    """Dual numbers carry tangents here: outside torch.func transforms and forward-mode
    levels, and with forward-mode AD enabled (an autograd.Function's forward turns it
    off: a tangent would silently be lost)."""
    return (
        fwAD._current_level < 0
        and torch._C._is_fwd_grad_enabled()
        and peek_interpreter_stack() is None
    )


# f's code -> f runs a jvp itself: its jvps take torch.func.jvp, which nests
_NESTS = CodeFacts()


def _func_grad(fn, inner: str):
    return torch.func.jacfwd(fn) if inner == "forward" else torch.func.grad(fn)


# torch's words for an autograd.Function that torch.func or forward mode cannot run
_NO_FORWARD = (
    "setup_context staticmethod",
    "must implement the jvp function",
    "does not have vmap support",
    "does not have a sharding strategy registered",  # DTensor: no forward-mode AD
    "out variant should have at least one out arg",  # DTensor under torch.func.jacfwd
)
