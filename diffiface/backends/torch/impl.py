"""PyTorch backend: torch.autograd for plain calls, torch.func inside torch.func transforms.

A plain call detaches ``x`` and builds no graph beyond the call. When the call
runs inside an outer differentiation (grad mode on and ``x`` or a Constant
requiring grad, or torch.func wrapper tensors), results stay attached so the
outer framework can differentiate through them.
"""

from __future__ import annotations

import contextvars
import functools
import math
import time
from typing import Any

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import is_functorch_wrapped_tensor, peek_interpreter_stack
from torch.overrides import TorchFunctionMode

from ... import _checks, _config
from ..._backend_types import AutoTorch
from ..._cache import FunctionCache
from ..._tree import flatten
from ...core.backend import BackendImpl
from ...core.registry import register
from ...operators.batched import check_batch
from .forward import FORWARD_LOCK


def _outside_inference(method):
    """Run an operator with autograd available: under ``torch.inference_mode()`` torch
    records no graph at all, and every gradient would silently be zero."""

    @functools.wraps(method)
    def run(self, *args):
        if torch.is_inference_mode_enabled():
            with torch.inference_mode(False):
                return method(self, *args)
        return method(self, *args)

    return run


_OPERATORS = (
    "value_and_pullback",
    "jacobian",
    "hessian",
    "value_and_gradient",
    "value_and_jvp",
    "value_and_jvps",
    "value_and_vjps",
    "value_and_jacobian",
    "value_and_batched_jacobian",
    "gradient_and_hvp",
    "gradient_and_hvps",
    "value_gradient_and_hessian",
    "value_derivative_and_second_derivative",
)


# operators that hand x to torch.func, which passes the caller's storage on to f
_FUNC_OPERATORS = (
    "jacobian",
    "hessian",
    "value_and_jvp",
    "value_and_jvps",
    "value_and_jacobian",
    "value_and_batched_jacobian",
    "value_derivative_and_second_derivative",
)
_OWNED: contextvars.ContextVar[bool] = contextvars.ContextVar("diffiface_owned", default=False)


def _own_inputs(method):
    """Give the operator copies of x (cheap, outside any transform) so that an in-place
    op in f cannot reach the caller's tensor through torch.func's wrappers."""

    tangents = method.__name__ in ("value_and_jvp", "value_and_jvps")

    @functools.wraps(method)
    def run(self, prob, xs, *rest):
        if tangents:  # an in-place op on a dual tensor changes its tangent too
            vs = rest[0]
            vs = tuple(v.clone() for v in vs) if type(vs) is tuple else [_clones(v) for v in vs]
            rest = (vs, *rest[1:])
        token = _OWNED.set(True)
        try:
            return method(self, prob, _clones(xs), *rest)
        finally:
            _OWNED.reset(token)

    return run


def _clones(xs: tuple) -> tuple:
    return tuple(x.clone() for x in xs)


def _guard_inference(cls):
    for name in _FUNC_OPERATORS:
        setattr(cls, name, _own_inputs(getattr(cls, name)))
    for name in _OPERATORS:
        setattr(cls, name, _outside_inference(getattr(cls, name)))
    return cls


@register(AutoTorch)
@_guard_inference
class TorchImpl(BackendImpl):
    framework = "torch"
    native_kind = "torch tensors"
    output_kind = "a torch.Tensor"
    hermitian_vjp = True
    reverse_combo = None  # the plain double backward

    def is_native(self, leaf: Any) -> bool:
        return isinstance(leaf, torch.Tensor)

    def is_float(self, leaf: Any) -> bool:
        return leaf.is_floating_point()

    def from_numpy(self, a: np.ndarray) -> Any:
        if not a.flags.writeable or any(st < 0 for st in a.strides):
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
        owned = _OWNED.get()
        out = []
        for x in xs:
            wrapped = is_functorch_wrapped_tensor(x)
            # a non-leaf changed in place would also change what is differentiated
            copy = (wrapped and not owned) or (not wrapped and not (x.requires_grad and x.is_leaf))
            out.append(x.clone() if copy else x)
        return tuple(out)

    def is_complex(self, y):
        return y.is_complex()

    def connected(self, xs, y):
        """In forward mode (the leaves carry tangents, also under torch.func.jvp) y must
        carry one too; on torch's graph (the leaves require grad) y must require grad."""
        forward = fwAD._current_level >= 0 or peek_interpreter_stack() is not None
        if forward and any(fwAD.unpack_dual(x).tangent is not None for x in xs):
            return fwAD.unpack_dual(y).tangent is not None
        if not torch.is_grad_enabled() or not any(x.requires_grad for x in xs):
            return None
        return y.requires_grad

    def is_traced(self, a: Any) -> bool:
        return a.requires_grad or is_functorch_wrapped_tensor(a) or _dual(a)

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
        if _functorch():
            y, pb = torch.func.vjp(lambda xs: fn(xs, *ctx), xs)
            return y, lambda w: pb(w)[0]
        outer = _outer(xs, ctx)
        xg, y = _forward(prob, fn, xs, ctx, outer)
        outer = outer or _reaches_outside(y, xg)

        def pb(w):  # the graph is kept for the next w (freed with pb)
            return _grads(y, xg, w, outer, True)

        return (y if outer else y.detach()), pb

    def value_and_gradient(self, prob, xs, ctx):
        if _functorch():
            y, pb = self.value_and_pullback(prob, xs, ctx)
            return y, pb(None)
        if _outer(xs, ctx):  # attached results, as value_and_pullback builds them
            xg, y = _forward(prob, prob.flat(), xs, ctx, True)
            return y, _grads(y, xg, None, True, True)
        return _plain_value_and_grad(prob, prob.flat(), xs, ctx)

    def forward_unsupported(self, exc):
        return isinstance(exc, RuntimeError | NotImplementedError) and any(
            s in str(exc) for s in _NO_FORWARD
        )

    def outer_sees(self, leaves):
        grad = torch.is_grad_enabled()
        return any(
            isinstance(a, torch.Tensor)
            and ((grad and a.requires_grad) or is_functorch_wrapped_tensor(a) or _dual(a))
            for a in leaves
        )

    def can_run_rule(self, xs, ctx):
        return not _functorch() and not any(_dual(a) for a in (*xs, *_tensors(ctx)))

    def direct(self, prob, numpy=False, combo=None):
        """For a prepared plain call: see ``_torch_direct``."""
        if numpy or not prob.single:
            return None
        from .direct import runner

        return runner(prob, combo)

    def direct_leaves(self, prob):
        from .direct import leaves_runner

        return leaves_runner(prob)

    def value_and_jvp(self, prob, xs, vs, ctx):
        # torch.func.jvp rather than a raw forward_ad level: torch cannot nest
        # forward_ad levels, and a jvp inside f (perturbation confusion) must work.
        fn = prob.flat()
        y, t = _fwd(prob, lambda: torch.func.jvp(lambda xs: fn(xs, *ctx), (xs,), (vs,)))
        return y, t

    # several directions: one vmapped (or batched-backward) pass
    def value_and_jvps(self, prob, xs, vss, ctx):
        fn = prob.flat()
        stacked = tuple(torch.stack(leaves) for leaves in zip(*vss, strict=True))

        def one(vs):
            return torch.func.jvp(lambda xs: fn(xs, *ctx), (xs,), (vs,))

        y, ts = _fwd(prob, lambda: torch.func.vmap(one, out_dims=(None, 0))(stacked))
        return y, list(ts.unbind(0))

    def value_and_vjps(self, prob, xs, ws, ctx, check_w):
        if _functorch():
            return super().value_and_vjps(prob, xs, ws, ctx, check_w)
        fn = prob.flat()
        outer = _outer(xs, ctx)
        xg, y = _forward(prob, fn, xs, ctx, outer)
        outer = outer or _reaches_outside(y, xg)
        w = torch.stack([check_w(y, w) for w in ws])
        n = len(ws)
        if y.requires_grad:
            gs = torch.autograd.grad(
                y, xg, w, is_grads_batched=True, allow_unused=True, create_graph=outer or _seen(w)
            )
        else:
            gs = (None,) * len(xg)
        gs = [
            torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device) if g is None else g
            for g, x in zip(gs, xg, strict=True)
        ]
        return (y if outer else y.detach()), [tuple(g[i] for g in gs) for i in range(n)]

    def value_and_jacobian(self, prob, xs, ctx):
        return self._jacobian(prob, xs, ctx, True)

    def jacobian(self, prob, xs, ctx):
        return self._jacobian(prob, xs, ctx, False)[1]

    def _jacobian(self, prob, xs, ctx, value):
        """torch.func.jacrev / jacfwd (measured faster than a batched torch.autograd.grad,
        which falls back to a loop for many ops); f(x) from a plain call when asked for,
        cheaper than has_aux. Differentiable by an outer pass through x or a closure."""
        fn = prob.flat()
        (x,) = xs
        f1 = lambda x: fn((x,), *ctx)  # noqa: E731
        if x.numel() == 0:  # an empty basis: torch.func cannot batch over it
            y = _call(prob, lambda: f1(x))
            return y, torch.zeros((*y.shape, *x.shape), dtype=x.dtype, device=x.device)
        if self.prefers_reverse(prob, xs, ctx):  # the output size is memoized on prob
            j = _call(prob, lambda: torch.func.jacrev(f1)(x))
        else:
            j = _fwd(prob, lambda: torch.func.jacfwd(f1)(x))
        return (_call(prob, lambda: f1(x)) if value else None), j

    def value_and_batched_jacobian(self, prob, xs, ctx):
        fn = prob.flat()
        (x,) = xs
        b, rest = x.shape[0], tuple(x.shape[1:])
        n_in = math.prod(rest)
        f1 = lambda x: fn((x,), *ctx)  # noqa: E731
        reverse = self.mode == "reverse"
        if self.mode is None:
            reverse = self.output_size(prob, xs, ctx) <= x.numel()
        if not reverse:  # n_in jvps, one vmapped pass
            eye = torch.eye(n_in, dtype=x.dtype, device=x.device)[:, None]
            v = eye.expand(n_in, b, n_in).reshape((n_in, *x.shape))
            y, cols = _fwd(
                prob,
                lambda: torch.func.vmap(
                    lambda v: torch.func.jvp(f1, (x,), (v,)), out_dims=(None, 0)
                )(v),
            )
            check_batch(prob, tuple(x.shape), tuple(y.shape))
            jac = cols.reshape(n_in, b, math.prod(y.shape[1:])).movedim(0, 2)
            return y, jac.reshape((*y.shape, *rest))
        if _functorch():
            y, pb = torch.func.vjp(f1, x)
            check_batch(prob, tuple(x.shape), tuple(y.shape))
            n_out = math.prod(y.shape[1:])
            w = torch.eye(n_out, dtype=y.dtype, device=y.device)[:, None].expand(n_out, b, n_out)
            rows = torch.func.vmap(lambda w: pb(w.reshape(y.shape))[0])(w)
        else:
            outer = _outer(xs, ctx)
            xg, y = _forward(prob, fn, xs, ctx, outer)
            outer = outer or _reaches_outside(y, xg)
            check_batch(prob, tuple(x.shape), tuple(y.shape))
            n_out = math.prod(y.shape[1:])
            w = torch.eye(n_out, dtype=y.dtype, device=y.device)[:, None].expand(n_out, b, n_out)
            w = w.reshape((n_out, *y.shape))
            if y.requires_grad:
                (rows,) = torch.autograd.grad(
                    y, xg, w, is_grads_batched=True, allow_unused=True, create_graph=outer
                )
            else:
                rows = None
            if rows is None:
                rows = torch.zeros((n_out, *x.shape), dtype=x.dtype, device=x.device)
            y = y if outer else y.detach()
        jac = rows.reshape(n_out, b, n_in).movedim(0, 1)
        return y, jac.reshape((*y.shape, *rest))

    # ---- second order ------------------------------------------------------------
    def _plain(self, xs, ctx, combo) -> bool:
        return combo is None and not _functorch() and not _outer(xs, ctx)

    def gradient_and_hvp(self, prob, xs, vs, ctx, combo):
        fn = prob.flat()
        if self._plain(xs, ctx, combo):  # double backward: the fastest plain torch hvp
            xg = tuple(leaf(x) for x in xs)
            with torch.enable_grad():
                y = _apply(prob, fn, xg, ctx)
                keep = _reaches_outside(y, xg)  # f closes over tensors of an outer pass
                gs = _grads(y, xg, None, True, True)
                used = [(g, v) for g, v in zip(gs, vs, strict=True) if g.requires_grad]
                if not used:
                    return gs, tuple(torch.zeros_like(x) for x in xs)
                hv = torch.autograd.grad(
                    [g for g, _ in used],
                    xg,
                    [v for _, v in used],
                    allow_unused=True,
                    create_graph=keep or any(_seen(v) for v in vs),
                )
            hv = tuple(torch.zeros_like(x) if h is None else h for h, x in zip(hv, xs, strict=True))
            return (gs if keep else tuple(g.detach() for g in gs)), hv
        outer, inner = combo or ("forward", "reverse")
        gf = _func_grad(lambda xs: fn(xs, *ctx), inner)
        if outer == "reverse":
            g, pb = _fwd(prob, lambda: torch.func.vjp(gf, xs))
            return g, pb(vs)[0]
        return _fwd(prob, lambda: torch.func.jvp(gf, (xs,), (vs,)))

    def gradient_and_hvps(self, prob, xs, vss, ctx, combo):
        if not self._plain(xs, ctx, combo):
            return super().gradient_and_hvps(prob, xs, vss, ctx, combo)
        fn = prob.flat()
        n = len(vss)
        xg = tuple(leaf(x) for x in xs)
        with torch.enable_grad():
            y = _apply(prob, fn, xg, ctx)
            keep = _reaches_outside(y, xg)
            gs = _grads(y, xg, None, True, True)
            used = [k for k, g in enumerate(gs) if g.requires_grad]
            hv = [None] * len(xs)
            if used:
                vs = [torch.stack([vs[k] for vs in vss]) for k in used]
                hv = torch.autograd.grad(
                    [gs[k] for k in used],
                    xg,
                    vs,
                    is_grads_batched=True,
                    allow_unused=True,
                    create_graph=keep or any(_seen(v) for v in vs),
                )
        hv = [
            torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device) if h is None else h
            for h, x in zip(hv, xs, strict=True)
        ]
        gs = gs if keep else tuple(g.detach() for g in gs)
        return gs, [tuple(h[i] for h in hv) for i in range(n)]

    def hessian(self, prob, xs, ctx, combo):
        if self._plain(xs, ctx, combo) and xs[0].numel() and self._by_func(prob, xs, ctx):
            f1 = _one(prob.flat(), ctx)
            return _fwd(prob, lambda: torch.func.hessian(f1)(xs[0]))
        return self.value_gradient_and_hessian(prob, xs, ctx, combo)[2]

    def _by_func(self, prob, xs, ctx) -> bool:
        """True when torch.func.hessian beats one batched double backward for this
        problem. Which does depends on f (a batched backward falls back to a loop for
        some ops): a prepared problem times both once; unprepared calls take the
        batched double backward."""
        way = prob.fns.get(_HESSIAN_WAY)
        if way is None:
            if not prob.prepared:
                return False
            f1, x = _one(prob.flat(), ctx), xs[0]
            try:
                by_func = _faster(
                    lambda: _fwd(prob, lambda: torch.func.hessian(f1)(x)),
                    lambda: self.value_gradient_and_hessian(prob, xs, ctx, None),
                )
            except Exception:  # f that torch.func cannot vmap: the batched backward
                by_func = False
            way = prob.fns[_HESSIAN_WAY] = "func" if by_func else "batched"
        return way == "func"

    def value_gradient_and_hessian(self, prob, xs, ctx, combo):
        fn = prob.flat()
        (x,) = xs
        n = x.numel()
        if self._plain(xs, ctx, combo):  # one double backward, batched over the basis
            xg = leaf(x)
            with torch.enable_grad():
                y = _apply(prob, fn, (xg,), ctx)
                keep = _reaches_outside(y, (xg,))
                (g,) = _grads(y, (xg,), None, True, True)
                h = None
                if g.requires_grad and n:
                    eye = torch.eye(n, dtype=x.dtype, device=x.device).reshape((n, *x.shape))
                    (h,) = torch.autograd.grad(
                        g, xg, eye, is_grads_batched=True, allow_unused=True, create_graph=keep
                    )
            if h is None:
                h = torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device)
            h = h.reshape((*x.shape, *x.shape))
            return (y, (g,), h) if keep else (y.detach(), (g.detach(),), h)
        if n == 0:  # nothing to differentiate: torch.func cannot batch over an empty basis
            y = _call(prob, lambda: fn((x,), *ctx))
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
        h, (y, g) = _fwd(prob, lambda: jac(vg, has_aux=True)(x))
        return y, (g,), h

    def value_derivative_and_second_derivative(self, prob, xs, ctx):
        fn = prob.flat()
        (x,) = xs
        one = torch.ones_like(x)

        def d(x):
            return torch.func.jvp(lambda x: fn((x,), *ctx), (x,), (one,))

        (y, d1), (_, d2) = _fwd(prob, lambda: torch.func.jvp(d, (x,), (one,)))
        return y, d1, d2


def _one(fn, ctx):
    return lambda x: fn((x,), *ctx)


def _faster(first, second) -> bool:
    """True when ``first`` runs faster than ``second`` (best of two timed runs each,
    after one untimed run)."""
    times = []
    for fn in (first, second):
        fn()
        best = math.inf
        for _ in range(2):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        times.append(best)
    return times[0] < times[1]


def _func_grad(fn, inner: str):
    return torch.func.jacfwd(fn) if inner == "forward" else torch.func.grad(fn)


def _plain_value_and_grad(prob, fn, xs: tuple, ctx: tuple):
    """One graph and torch.autograd.grad; detached results unless f closes over
    tensors that an outer pass differentiates."""
    xg = tuple(leaf(x) for x in xs)
    if torch.is_grad_enabled():
        y = _apply(prob, fn, xg, ctx)
    else:
        with torch.enable_grad():
            y = _apply(prob, fn, xg, ctx)
    if _reaches_outside(y, xg) or _dual(y):  # f closes over tensors of an outer pass
        return y, _grads(y, xg, None, True, False)
    return y.detach(), _grads(y, xg, None, False, False)


def _seen(t) -> bool:
    """A tangent or cotangent ``t`` that an outer differentiation sees."""
    return isinstance(t, torch.Tensor) and (
        (t.requires_grad and torch.is_grad_enabled()) or is_functorch_wrapped_tensor(t) or _dual(t)
    )


def _dual(a) -> bool:
    """``a`` carries a forward-mode tangent. Checked per tensor: torch's current
    forward-AD level is a process-wide global that another thread's jvp may have set."""
    return fwAD._current_level >= 0 and fwAD.unpack_dual(a).tangent is not None


def _twice(y):
    return y, y


def _tensors(ctx: tuple) -> list:
    """The tensor leaves of the contexts."""
    return [c for c in flatten(ctx)[0] if isinstance(c, torch.Tensor)] if ctx else []


def _functorch() -> bool:
    """A torch.func transform is running: it may see this call through x, a context,
    a tangent or a closure, and it forbids the graph-building calls of a plain pass."""
    return peek_interpreter_stack() is not None


def _outer(xs: tuple, ctx: tuple) -> bool:
    """True when an outer differentiation can see this call through x or a Constant
    (the contexts are flattened only when x alone does not tell)."""
    if fwAD._current_level >= 0 and any(_dual(a) for a in (*xs, *_tensors(ctx))):
        return True  # forward-mode AD sees this call: keep every tangent
    if not torch.is_grad_enabled():
        return False
    return any(x.requires_grad for x in xs) or any(c.requires_grad for c in _tensors(ctx))


def _reaches_outside(y, xg: tuple) -> bool:
    """True when y's graph reaches a leaf requiring grad other than xg: f closes over
    tensors of an outer differentiation, so the result must stay attached."""
    node = y.grad_fn
    if node is None or not torch.is_grad_enabled():
        return False
    own = [id(x) for x in xg]
    stack, seen = [node], set()
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None:
                continue
            variable = getattr(nxt, "variable", None)
            if variable is not None:  # an accumulating leaf
                if id(variable) not in own and not hasattr(variable, _DONE):
                    return True
            elif nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


_DONE = "_diffiface_done"  # marks a leaf of a finished call (see ``_apply``)


def _apply(prob, fn, xg: tuple, ctx: tuple):
    """f at the leaves this call differentiates. While f runs, a diffiface call nested
    in f sees them as an outer pass's; once f returned they are this call's own, and a
    graph that reaches them (an attached inner result) reaches nothing outside."""
    y = _call(prob, lambda: fn(xg, *ctx))
    done(xg)
    return y


def done(xg) -> None:
    """Mark diffiface's own leaves ``xg`` as those of a finished call."""
    for x in xg:
        setattr(x, _DONE, True)


def _forward(prob, fn, xs, ctx, outer):
    with torch.enable_grad():
        xg = tuple(_own(x, outer) for x in xs)
        y = _apply(prob, fn, xg, ctx)
    return xg, y


def _own(x, outer: bool):
    """The tensor to differentiate. Inside an outer pass an alias of x (a view, or a
    clone that keeps a forward-mode tangent), so that other uses of x (in a Constant,
    a FixedParams parameter, a closure) are not counted as uses of the argument; a
    detached copy of the reference otherwise."""
    if outer:
        if x.requires_grad:  # a view of a leaf refuses in-place ops; a non-leaf is copied
            return x.view_as(x) if x.is_leaf else x.clone()
        return x.clone().requires_grad_()
    return leaf(x)


def leaf(x):
    """A leaf that requires grad, on a copy of x's data: torch refuses in-place ops on a
    leaf, but f could still write to its storage through ``.detach()`` or ``.data``,
    which would change the caller's tensor (or NumPy array: it shares the storage)."""
    return x.detach().clone().requires_grad_()


def _grads(y, xg, w, outer, retain):
    """The pullback of ``w`` (None: a scalar y) to ``xg``. The result stays on the graph
    when an outer pass sees the call (``outer``) or the cotangent ``w``; a graph built
    on y's graph keeps y's graph alive (its saved tensors are read again)."""
    if not y.requires_grad:  # f does not depend on x: every derivative is zero
        return tuple(torch.zeros_like(x) for x in xg)
    create = outer or _seen(w)
    gs = torch.autograd.grad(
        y, xg, w, allow_unused=True, create_graph=create, retain_graph=retain or create
    )
    if any(g is None for g in gs):
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(gs, xg, strict=True))
    return gs


# torch's words for an autograd.Function that torch.func or forward mode cannot run
_NO_FORWARD = (
    "setup_context staticmethod",
    "must implement the jvp function",
    "does not have vmap support",
)
_HESSIAN_WAY = "hessian way"  # and of its Hessian formulation


def _fwd(prob, thunk):
    """``_call`` for torch.func forward mode (jvp, jacfwd), one thread at a time: torch
    keeps its forward-AD level in a process-wide global that concurrent jvps corrupt
    ("no level exists")."""
    with FORWARD_LOCK:
        return _call(prob, thunk)


class _NoScalars(TorchFunctionMode):
    """A tensor that carries a derivative converted to a Python number or to NumPy is an
    error (torch itself only warns for float(), and says nothing for .item(), so the
    derivative through it would silently be dropped). JAX and autograd raise on the same
    f. ``.detach()`` is torch's stop_gradient and stays allowed."""

    _NAMES = frozenset(("__float__", "__int__", "__complex__", "item", "tolist", "numpy"))

    def __init__(self, prob):
        super().__init__()
        self.prob = prob

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self._NAMES and args and isinstance(args[0], torch.Tensor):
            t = args[0]
            if t.requires_grad or is_functorch_wrapped_tensor(t) or _dual(t):
                raise _checks.dropped_derivative(self.prob.op, self.prob.backend, f"Tensor.{name}")
        return func(*args, **(kwargs or {}))


# functions whose first call ran under _NoScalars without converting a derivative away
_CHECKED = FunctionCache(per_function=1)


def _call(prob, thunk):
    """Run f; its first call (and every call under strict) checks that f converts no
    tensor carrying a derivative to a number, at no cost to the calls after it."""
    if _config.strict() or _CHECKED.peek(prob.f, True) is None:
        with _NoScalars(prob):
            out = _call_plain(prob, thunk)
        _CHECKED.put(prob.f, True, True)
        return out
    return _call_plain(prob, thunk)


def _call_plain(prob, thunk):
    try:
        return thunk()
    except TypeError as exc:
        clear = _checks.framework_error(prob.op, prob.backend, exc)
        if clear is None:
            raise
        raise clear from exc
    except RuntimeError as exc:
        if "numpy()" in str(exc) or "NumPy" in str(exc):
            raise _checks.left_framework(prob.op, prob.backend, exc) from exc
        if "in-place operation" in str(exc):
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(prob.op, prob.backend)}: f changes its input in place "
                f"({exc}). Your x is unchanged; make f work on a copy (x = x.clone()) or "
                "use out-of-place ops."
            ) from exc
        raise
