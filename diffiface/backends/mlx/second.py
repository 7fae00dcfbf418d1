"""MLX's own compositions: Jacobians and Hessians as one ``mx.vmap`` over a basis, and
second order as ``mx.jvp`` (or ``mx.vjp``) of ``mx.grad``.

``mx.vmap`` gives placeholders while it runs f: where an aux sink still waits for f's
aux (it would leave as one), the directions run one by one instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import mlx.core as mx

from ...core import outputs

# Set while the products run one by one (``vmap``): an operation in f has no batching
# rule in MLX ("[Primitive::vmap] Not implemented for AsStrided.")
LOOPS: ContextVar[bool] = ContextVar("diffiface_mlx_loops", default=False)


def vmap(g: Callable) -> Callable:
    """``mx.vmap(g)`` (over axis 0 of every argument, results stacked on axis 0), or,
    while ``LOOPS`` is set, ``g`` on each slice in turn, results stacked the same way: one
    product (and one run of f) per slice, as a loop a user writes."""
    if not LOOPS.get():
        return mx.vmap(g)

    def each(*args: Any) -> Any:
        return _stacked([g(*(a[i] for a in args)) for i in range(args[0].shape[0])])

    return each


def _stacked(outs: list) -> Any:
    """The results of one call per slice, stacked leaf by leaf (as mx.vmap gives them)."""
    first = outs[0]
    if isinstance(first, list | tuple):
        return type(first)(_stacked([o[k] for o in outs]) for k in range(len(first)))
    return mx.stack(outs)


def aux_waits() -> bool:
    """An open sink still waits for f's aux: mx.vmap must not run f (its aux would be
    a placeholder)."""
    stack = outputs.LOCAL.stack
    return bool(stack) and not stack[-1].box


def aux_dropped() -> outputs.Sink:
    """A sink, already full, for the calls of f after the one that gave y and its aux:
    their aux is dropped, and mx.vmap may run f."""
    sink = outputs.Sink()
    sink.box = (None,)
    return sink


def grad_of(fn: Callable, n: int, inner: str = "reverse") -> Callable:
    """``(*xs) -> [gradient leaves]`` of the scalar ``fn`` (``(*xs) -> [y]``): one
    ``mx.grad``, or one ``mx.jvp`` per basis vector (``inner`` "forward", one array)."""
    if inner == "forward":

        def forward(x: Any) -> list:
            cols = [mx.jvp(fn, [x], [e])[1][0] for e in basis(x)]
            return [mx.stack(cols).reshape(x.shape) if cols else mx.zeros_like(x)]

        return forward
    g = mx.grad(lambda *a: fn(*a)[0], tuple(range(n)))
    return (lambda *xs: [g(*xs)]) if n == 1 else (lambda *xs: list(g(*xs)))


def jvps(fn: Callable, xs: tuple, vss: list) -> list[list]:
    """``[J v for v in vss]`` (each a list of fn's outputs), batched by ``mx.vmap``."""
    return value_and_jvps(fn, xs, vss)[1]


def value_and_jvps(fn: Callable, xs: tuple, vss: list) -> tuple:
    """(fn's outputs at xs, ``[J v for v in vss]``), batched by ``mx.vmap``, whose run of
    f gives the outputs too (one by one where an aux sink waits)."""
    if not vss:
        return fn(*xs), []
    if len(vss) < 2 or aux_waits():
        outs = [mx.jvp(fn, list(xs), list(vs)) for vs in vss]
        return outs[0][0], [t for _, t in outs]
    stacked = [mx.stack([vs[k] for vs in vss]) for k in range(len(xs))]
    ys, ts = vmap(lambda *v: tuple(map(tuple, mx.jvp(fn, list(xs), list(v)))))(*stacked)
    return [y[0] for y in ys], [[t[i] for t in ts] for i in range(len(vss))]


def vjps(fn: Callable, xs: tuple, wss: list) -> list[list]:
    """``[wᵀ J for ws in wss]`` (``ws``: one cotangent per output of fn), batched by
    ``mx.vmap``."""
    if len(wss) < 2 or aux_waits():
        return [mx.vjp(fn, list(xs), list(ws))[1] for ws in wss]
    stacked = [mx.stack([ws[k] for ws in wss]) for k in range(len(wss[0]))]
    gs = vmap(lambda *w: tuple(mx.vjp(fn, list(xs), list(w))[1]))(*stacked)
    return [[g[i] for g in gs] for i in range(len(wss))]


def basis(like: Any) -> list:
    """The unit vectors shaped like ``like``."""
    n = like.size
    eye = mx.eye(n, dtype=like.dtype)
    return [eye[i].reshape(like.shape) for i in range(n)]


def jacobian(fn: Callable, x: Any, y: Any, reverse: bool) -> tuple:
    """(f(x), J) of ``fn`` (one array in, one out) at x, J of shape ``y.shape + x.shape``:
    rows of vjps or columns of jvps in one ``mx.vmap``, whose own run of f gives f(x).
    ``y``: f(x), or anything with its shape, size and dtype (``Like``: known from an
    earlier call, so f runs once)."""
    shape = (*y.shape, *x.shape)
    if not y.size or not x.size:
        return _value(fn, x, y), mx.zeros(shape, dtype=x.dtype)
    if reverse:
        eye = mx.eye(y.size, dtype=y.dtype).reshape(y.size, *y.shape)
        ys, (rows,) = vmap(lambda w: mx.vjp(fn, [x], [w]))(eye)
        return ys[0][0], rows.reshape(shape)
    eye = mx.eye(x.size, dtype=x.dtype).reshape(x.size, *x.shape)
    ys, (cols,) = vmap(lambda v: mx.jvp(fn, [x], [v]))(eye)
    return ys[0][0], cols.reshape(x.size, y.size).T.reshape(shape)


class Like:
    """What the Jacobians read of f(x): its shape, size and dtype, without f(x)."""

    __slots__ = ("dtype", "shape", "size")

    def __init__(self, shape: tuple, dtype: Any):
        self.shape, self.dtype = shape, dtype
        self.size = math.prod(shape)


def _value(fn: Callable, xs: Any, y: Any) -> Any:
    """f(x) (``xs``: x, or a tuple of leaves): ``y`` itself, or one run of fn where ``y``
    is a ``Like``."""
    if type(y) is not Like:
        return y
    return fn(*xs)[0] if type(xs) is tuple else fn(xs)[0]


def _over_basis(each: Callable, fn: Callable, x: Any, like: Any) -> Any:
    """``each`` (jvps or vjps) of fn at x along every unit vector shaped like ``like``,
    stacked: one ``mx.vmap`` over the identity (no per-vector arrays), or one by one
    where an aux sink is open."""
    if aux_waits():
        return mx.stack([r[0] for r in each(fn, (x,), [[e] for e in basis(like)])])
    eye = mx.eye(like.size, dtype=like.dtype).reshape(like.size, *like.shape)
    if each is vjps:
        return vmap(lambda w: mx.vjp(fn, [x], [w])[1][0])(eye)
    return vmap(lambda v: mx.jvp(fn, [x], [v])[1][0])(eye)


def reverse_jacobians(fn: Callable, xs: tuple, y: Any) -> tuple:
    """(f(x), the Jacobian of ``fn`` (leaves in, one output) in each leaf, shaped
    ``y.shape + x.shape``): rows of vjps, one ``mx.vmap`` over the unit vectors shaped
    like y, whose run of f gives f(x) (one by one where an aux sink is open). ``y``: as
    for :func:`jacobian`."""
    if not y.size:
        return _value(fn, xs, y), tuple(mx.zeros((*y.shape, *x.shape), dtype=x.dtype) for x in xs)
    if aux_waits():
        rows = [mx.vjp(fn, list(xs), [w])[1] for w in basis(y)]
        rows = [mx.stack([r[k] for r in rows]) for k in range(len(xs))]
        value = _value(fn, xs, y)
    else:
        eye = mx.eye(y.size, dtype=y.dtype).reshape(y.size, *y.shape)
        ys, rows = vmap(lambda w: mx.vjp(fn, list(xs), [w]))(eye)
        value = ys[0][0]
    return value, tuple(r.reshape((*y.shape, *x.shape)) for r, x in zip(rows, xs, strict=True))


def reverse_second_derivatives(fn: Callable, x: Any, y: Any) -> tuple:
    """(f(x), f'(x), f''(x)) at a scalar x, reverse over reverse (f has no forward
    mode): f' by rows of vjps in one ``mx.vmap``, and f'' as the rows of its own vjps in
    one more around it, so f runs once. ``y``: as for :func:`jacobian`."""
    if not y.size:
        zero = mx.zeros(y.shape, dtype=x.dtype)
        return _value(fn, (x,), y), zero, zero
    eye = mx.eye(y.size, dtype=y.dtype).reshape(y.size, *y.shape)

    def first(x: Any) -> list:
        ys, (rows,) = vmap(lambda w: mx.vjp(fn, [x], [w]))(eye)
        return [rows.reshape(y.shape), ys[0][0]]

    zero = mx.zeros(y.shape, dtype=y.dtype)
    (d1s, ys), (d2,) = vmap(lambda w: mx.vjp(first, [x], [w, zero]))(eye)
    return ys[0], d1s[0], d2.reshape(y.shape)


def batched_jacobian(fn: Callable, x: Any, y: Any, reverse: bool) -> tuple:
    """(f(x), per-sample Jacobians) of ``fn`` (samples along axis 0 of x and y), of shape
    ``y.shape + x.shape[1:]``: one ``mx.vmap`` over the basis of one sample repeated
    in every sample (vjps along y's, or jvps along x's), whose run of f gives f(x).
    ``y``: as for :func:`jacobian`."""
    b = x.shape[0]
    if not y.size:
        return _value(fn, x, y), mx.zeros((*y.shape, *x.shape[1:]), dtype=x.dtype)
    like = y if reverse else x
    k = like.size // b
    eye = mx.eye(k, dtype=like.dtype)[:, None, :]
    basis = mx.broadcast_to(eye, (k, b, k)).reshape(k, *like.shape)
    if reverse:  # (n_out, *x.shape): sample axis first
        ys, (rows,) = vmap(lambda w: mx.vjp(fn, [x], [w]))(basis)
        return ys[0][0], mx.swapaxes(rows, 0, 1).reshape((*y.shape, *x.shape[1:]))
    ys, (cols,) = vmap(lambda v: mx.jvp(fn, [x], [v]))(basis)
    cols = cols.reshape(k, b, -1)
    return ys[0][0], mx.transpose(cols, (1, 2, 0)).reshape((*y.shape, *x.shape[1:]))


def gradient_and_hvps(fn: Callable, xs: tuple, vss: list, combo: tuple) -> tuple:
    """(gradient leaves, [H v leaves]) of the scalar fn: forward over reverse
    (``mx.jvp`` of ``mx.grad``) or reverse over reverse (the pullback of the gradient
    along v: H is symmetric), each one vmapped pass."""
    outer, inner = combo
    gf = grad_of(fn, len(xs), inner)
    if len(vss) == 1:  # the gradient comes out of the same pass
        each = mx.vjp if outer == "reverse" else mx.jvp
        g, hv = each(gf, list(xs), list(vss[0]))
        return tuple(g), [tuple(hv)]
    g = gf(*xs)
    hvs = vjps(gf, xs, vss) if outer == "reverse" else jvps(gf, xs, vss)
    return tuple(g), [tuple(h) for h in hvs]


def hessian(fn: Callable, x: Any, combo: tuple, value: bool = True) -> tuple:
    """(value, gradient, H) at one array x: the Jacobian of (value, gradient) along
    every unit vector, by rows (reverse outer) or columns (forward outer), in one
    vmapped pass that also gives the value and gradient (f runs once, as
    ``mx.vmap(mx.vjp(mx.grad(f)))`` does; once more first where an aux sink waits).
    ``value`` False: (None, None, H), the gradient's Jacobian alone, which spares the
    pass along the value (MLX runs it with its zero cotangent: 1.15x the time at
    n = 1e3, 1.4x at n = 10)."""
    outer, inner = combo
    gf = grad_of(fn, 1, inner)
    shape = (*x.shape, *x.shape)
    if not x.size:
        return fn(x)[0], gf(x)[0], mx.zeros(shape, dtype=x.dtype)
    if aux_waits():  # f's aux from one plain run, then the vmapped pass
        y = fn(x)[0]
        with aux_dropped():
            return (y, *hessian(fn, x, combo, value)[1:])
    eye = mx.eye(x.size, dtype=x.dtype).reshape(x.size, *x.shape)
    if not value:
        each = mx.vjp if outer == "reverse" else mx.jvp
        h = vmap(lambda v: each(gf, [x], [v])[1][0])(eye)
        return None, None, h.reshape(shape)
    both = lambda x: [fn(x)[0], gf(x)[0]] if inner == "forward" else _value_and_grad(fn)(x)  # noqa: E731
    if outer == "reverse":
        zero = mx.zeros((), dtype=x.dtype)
        (ys, gs), (h,) = vmap(lambda w: mx.vjp(both, [x], [zero, w]))(eye)
    else:
        (ys, gs), (_, h) = vmap(lambda v: mx.jvp(both, [x], [v]))(eye)
    return ys[0], gs[0], h.reshape(shape)


def _value_and_grad(fn: Callable) -> Callable:
    """``x -> [f(x), gradient]`` of the scalar fn, from one ``mx.value_and_grad``."""
    vg = mx.value_and_grad(lambda x: fn(x)[0])
    return lambda x: list(vg(x))


def second_derivatives(fn: Callable, x: Any) -> tuple:
    """(f(x), f'(x), f''(x)) at a scalar x: one ``mx.jvp`` of (f, its jvp along 1), so
    f runs once."""
    one = mx.ones_like(x)

    def both(x: Any) -> list:
        (y,), (d,) = mx.jvp(fn, [x], [one])
        return [y, d]

    (y, d1), (_, d2) = mx.jvp(both, [x], [one])
    return y, d1, d2
