"""The runners of gradient, jvp, vjp and hvp (alone or with the parts before them) at
one float MLX array (or a NumPy array, converted), prepared or not: MLX's own call per
call, as MLX's users write it (``mx.value_and_grad``, ``mx.jvp``, ``mx.vjp``, and
``mx.vjp`` of ``mx.grad`` for an hvp: a plain AutoMLX's reverse over reverse). MLX
traces f anew on every call: nothing kept goes stale, so unprepared calls keep plans
too.

Not ``mx.compile``: it would make a warm gradient, jvp, vjp or hvp 3-4.5x faster at
n = 10, 1.4-2.8x at n = 1e3 and up to 1.5x at 1e6 (the matrix's "prepared (vs
mx.compile)" rows), but a compiled function keeps what f read when traced: an array f
closes over written in place or rebound, an ``mlx.nn`` model's updated parameters
(stale answers) and ``mx.random``'s state (the same noise every call), and f's Python
no longer runs (benchmarks/mlx_gradient.py counts each). ``mx.compile(..., inputs=)``
sees new values only where f reads them through the container it is given, and
refuses an array of it that f reads directly. Nothing tells diffiface every array f
reads, so it never compiles f for the user.

Anything unusual (aux, a second-order backend, another operator or form, a tangent
unlike x or a cotangent unlike f(x), an output that is no float array, a direction MLX
lacks for f) is the general path's: the runner is None, or it returns SLOW. An error f
raises goes on as it came, raised once (``errors``)."""

from __future__ import annotations

import functools
from typing import Any

import mlx.core as mx
import numpy as np

from ..._cache import weak_callable
from ..._tangents import Tangents, of_stack
from ...core import direction, outputs
from ...core.backend import SLOW, known_output, learn_output
from ...core.operator import OPS
from . import errors, leaves, trees
from .errors import Unusual
from .second import Like, aux_waits, batched_jacobian, hessian, jacobian, second_derivatives, vmap

_FLOATS = (mx.float32, mx.float16, mx.bfloat16, mx.float64)
_FAMILIES = ("gradient", "jvp", "vjp", "hvp", "jacobian", "derivative", "second_derivative")
_FAMILIES += ("hessian", "batched_jacobian")


def runner(prob, form: str, combo: Any, weak: bool):
    """``run(x[, t])`` for an operator of ``_FAMILIES`` at one MLX array (``form``
    "array") or NumPy array ("numpy"); ``weak``: it holds f weakly, for an unprepared
    call's plan."""
    if form == "leaves":
        return leaves.runner(prob, combo, weak)
    make = _maker(prob, form, combo)
    f = None if make is None else weak_callable(prob.f, weak)
    return None if f is None else make(f)


def code_runner(prob, form: str):
    """``run(f, x[, t])`` for every function object of f's code (a closure made anew
    per call): MLX traces f anew on every call, so the runner is f's own, built per
    call (nothing is kept of another object)."""
    make = _maker(prob, form, None, own=False)
    return None if make is None else lambda f, x, *t: make(f)(x, *t)


# The direction each family's runner runs f in (a Jacobian's: per call)
_DIRECTION = dict.fromkeys(("gradient", "vjp", "hvp", "hessian"), direction.REVERSE)
_DIRECTION |= dict.fromkeys(("jvp", "derivative", "second_derivative"), direction.FORWARD)


def _maker(prob, form: str, combo: Any, own: bool = True):
    """``make(f) -> run`` for the calls the runners take, else None. ``own``: the runner
    is f's own (a code runner is shared by every function object of f's code: what it
    learns of f(x) is kept per call, not on ``prob``)."""
    decl = OPS[prob.op]
    if decl.family not in _FAMILIES or combo is not None or not prob.single:
        return None
    if form not in ("array", "numpy", "python"):
        return None
    known = direction.only(prob)  # f runs in one direction only: the general path's
    if known is not None and _DIRECTION.get(decl.family) != known:
        return None
    make, returns = _MAKERS.get(decl.family), decl.returns
    where = (prob.op, prob.backend)  # (for f's errors: errors.note)
    if outputs.returns_tree(prob.f):  # (its last call returned a pytree: one MLX array x)
        make = _TREE_MAKERS.get(decl.family)
        if make is None or prob.aux or form != "array":
            return None
        if decl.family == "jacobian":
            make = functools.partial(trees.jacobian_of, mode=prob.backend.mode)
        return lambda f: make(f, returns, where)
    if prob.aux:  # (one MLX array x, one MLX pass: aux never leaves an mx.vmap)
        if form != "array" or decl.family not in _FAMILIES[:4]:
            return None
        return lambda f: _with_aux(make, f, returns, prob.op, prob.backend)
    if decl.family in ("jacobian", "batched_jacobian"):
        shared = prob.fns if own else None  # (f(x)'s shape: kept there by core.backend)
        kind = {"mode": prob.backend.mode, "batched": decl.family != "jacobian"}

        def make(f, returns, where):
            bare = prob.without_f()
            bare.fns = {} if shared is None else shared
            return _jacobian(f, returns, where, prob=bare, **kind)

    elif decl.family == "hessian" and prob.backend.mode == "forward":
        return None  # (forward over reverse: the general path's)
    if form == "array":
        return lambda f: make(f, returns, where)
    if form == "python":
        return lambda f: _python_in_out(make(f, returns, where))
    return lambda f: _numpy_in_out(make(f, returns, where))


def _checked(f, scalar: bool, where: tuple):
    def checked(x: Any) -> Any:
        try:
            y = f(x)
        except Exception as exc:
            errors.note(exc, where)
            raise
        if type(y) is not mx.array or y.dtype not in _FLOATS or (scalar and y.ndim):
            raise Unusual
        return y

    return checked


def _unlike(x: Any, t: Any) -> bool:
    """x is no float MLX array, or t is no array like it (checked inline: one call)."""
    return (
        type(x) is not mx.array
        or x.dtype not in _FLOATS
        or type(t) is not mx.array
        or t.shape != x.shape
        or t.dtype != x.dtype
    )


def _gradient(f, returns: tuple, where: tuple):
    vg = mx.value_and_grad(_checked(f, True, where))
    value = len(returns) == 2

    def run(x: Any) -> Any:
        if type(x) is not mx.array or x.dtype not in _FLOATS:
            return SLOW
        try:
            y, g = vg(x)
        except Exception as exc:
            return errors.hand_over(exc)
        return (y, g) if value else g

    return run


def _jvp(f, returns: tuple, where: tuple):
    one = _checked(f, False, where)
    value = len(returns) == 2

    def each(x: Any, v: Any) -> Any:
        return mx.jvp(one, [x], [v])[1][0]

    def run(x: Any, t: Any) -> Any:
        if type(t) is Tangents:
            jts = _batched(each, x, t, x)
            y = _value(one, x) if value and jts is not SLOW else None
            return jts if not value or jts is SLOW else SLOW if y is SLOW else (y, jts)
        if _unlike(x, t):
            return SLOW
        try:
            (y,), (jt,) = mx.jvp(one, [x], [t])
        except Exception as exc:
            return errors.hand_over(exc)
        return (y, jt) if value else jt

    return run


def _vjp(f, returns: tuple, where: tuple):
    one = _checked(f, False, where)
    value = len(returns) == 2

    def run(x: Any, w: Any) -> Any:
        if type(x) is not mx.array or x.dtype not in _FLOATS:
            return SLOW
        if type(w) is Tangents:
            gs = _batched(lambda x, w: mx.vjp(_paired(one, w), [x], [w])[1][0], x, w, None)
            y = _value(one, x) if value and gs is not SLOW else None
            return gs if not value or gs is SLOW else SLOW if y is SLOW else (y, gs)
        if type(w) is not mx.array:
            return SLOW
        try:
            (y,), (g,) = mx.vjp(_paired(one, w), [x], [w])
        except Exception as exc:
            return errors.hand_over(exc)
        return (y, g) if value else g

    return run


def _paired(one, w: Any):
    """f, its output checked to be like the cotangent ``w``."""

    def paired(x: Any) -> Any:
        y = one(x)
        if w.shape != y.shape or w.dtype != y.dtype:
            raise Unusual
        return y

    return paired


def _hvp(f, returns: tuple, where: tuple):
    """Reverse over reverse: the pullback of the gradient along v (H is symmetric), its
    outputs the gradient (with the value, for value_gradient_and_hvp, from the same
    pass)."""
    vg = mx.value_and_grad(_checked(f, True, where))
    value = len(returns) == 3

    def gradient(x: Any) -> list:
        return [vg(x)[1]]

    def run(x: Any, v: Any) -> Any:
        if type(v) is Tangents:
            hvs = _batched(lambda x, v: mx.vjp(gradient, [x], [v])[1][0], x, v, x)
            if hvs is SLOW or len(returns) == 1:
                return hvs
            try:
                y, g = vg(x)
            except Exception as exc:
                return errors.hand_over(exc)
            return (y, g, hvs) if value else (g, hvs)
        if _unlike(x, v):
            return SLOW
        seen: list = []  # f's value, out of the same pass (the general path's aux)

        def valued(x: Any) -> list:
            y, g = vg(x)
            seen.append(y)
            return [g]

        try:
            (g,), (hv,) = mx.vjp(valued if value else gradient, [x], [v])
        except Exception as exc:
            return errors.hand_over(exc)
        return (seen[-1], g, hv) if value else (g, hv) if len(returns) > 1 else hv

    return run


def _jacobian(f, returns: tuple, where: tuple, mode: str | None, batched: bool, prob):
    """f(x) and its Jacobian (``batched``: per-sample Jacobians along axis 0) as one
    ``mx.vmap`` over the unit vectors, whose run of f gives f(x): rows of vjps (where
    f(x) is no larger than x, or mode "reverse") or columns of jvps. f(x)'s shape is
    known from an earlier call (``known_output`` on the plan's problem ``prob``, without
    f: the general path's call, or the runner's first, ran f once more for it). After a
    direction failed once (f indexes x: MLX has no JVP of scatter), every call is the
    general path's, which knows the direction f supports; so is a batched f(x) without
    x's batch axis (it explains)."""
    one = _checked(f, False, where)
    value = len(returns) == 2
    failed: list = []
    each = batched_jacobian if batched else jacobian
    impl = prob.impl

    def run(x: Any) -> Any:
        if failed or type(x) is not mx.array or x.dtype not in _FLOATS or not x.size:
            return SLOW
        if aux_waits() or (batched and not x.ndim):
            return SLOW
        try:
            known = known_output(impl, prob, (x,), ())
            if known is None:
                y = one(x)
                if batched and (not y.ndim or y.shape[0] != x.shape[0] or not y.size):
                    return SLOW
                learn_output(impl, prob, (x,), (), y)
            else:
                y = Like(*known)
                if batched and (not y.shape or y.shape[0] != x.shape[0] or not y.size):
                    return SLOW
            reverse = mode == "reverse" or (mode is None and y.size <= x.size)
            y, jac = each(lambda x: [one(x)], x, y, reverse)
        except Exception as exc:
            slow = errors.hand_over(exc)  # (a direction MLX lacks: SLOW from now on)
            failed.append(True)
            return slow
        return (y, jac) if value else jac

    return run


def _batched(each, x: Any, t: Tangents, like: Any) -> Any:
    """``each(x, v)`` for the k tangents of ``t`` as one ``mx.vmap`` over their stack,
    given back as ``t`` came (stacked, or k arrays); SLOW for tangents unlike ``like``
    (x; None: f(x), which ``each`` checks), or where a sink waits for f's aux."""
    if type(x) is not mx.array or x.dtype not in _FLOATS or aux_waits():
        return SLOW
    stack = t._stack
    if stack is None:
        vs = t._values
        first = vs[0]
        for v in vs:  # (a loop: no frame per tangent)
            if type(v) is not mx.array or v.shape != first.shape or v.dtype != first.dtype:
                return SLOW
        stack = mx.stack(vs)
    if type(stack) is not mx.array or stack.ndim == 0:
        return SLOW
    if like is not None and (stack.shape[1:] != like.shape or stack.dtype != like.dtype):
        return SLOW
    try:
        out = vmap(lambda v: each(x, v))(stack)
    except Exception as exc:
        return errors.hand_over(exc)
    return of_stack(out) if t._stack is not None else Tangents(*out)


def _value(one, x: Any) -> Any:
    """f's value at x, or SLOW (the general path explains)."""
    try:
        return one(x)
    except Exception as exc:
        return errors.hand_over(exc)


def _with_aux(make, f, returns: tuple, op: str, backend: Any):
    """``run`` for an f that returns ``(out, aux)``: the runner is built per call around
    f's output (each call keeps its own aux), and the aux goes to the open sink with
    the result. MLX has no tracers: the aux computed inside its transforms is plain
    values. A ``Tangents`` (one ``mx.vmap``, whose aux would be a placeholder) or
    anything unusual is the general path's, which runs f again and hands its aux."""

    def run(x: Any, *t: Any) -> Any:
        if t and type(t[0]) is Tangents:
            return SLOW
        box: list = []

        def out(x: Any) -> Any:
            y, a = outputs.pair(op, backend, f(x))
            box.append(a)
            return y

        got = make(out, returns, (op, backend))(x, *t)
        if got is not SLOW and box:
            outputs.put(box[-1])
        return got

    return run


def _derivative(f, returns: tuple, where: tuple):
    """f(x) and f'(x) at a scalar x: one ``mx.jvp`` along 1."""
    one = _checked(f, False, where)
    value = len(returns) == 2

    def run(x: Any) -> Any:
        if type(x) is not mx.array or x.dtype not in _FLOATS or x.ndim:
            return SLOW
        try:
            (y,), (d,) = mx.jvp(one, [x], [mx.ones_like(x)])
        except Exception as exc:
            return errors.hand_over(exc)
        return (y, d) if value else d

    return run


def _second_derivative(f, returns: tuple, where: tuple):
    """f(x), f'(x) and f''(x) at a scalar x: one ``mx.jvp`` of (f, its jvp), as the
    general path's (``second.second_derivatives``). After forward mode failed once (MLX
    has no JVP of scatter), every call is the general path's."""
    one = _checked(f, False, where)
    value = len(returns) == 3
    failed: list = []

    def run(x: Any) -> Any:
        if failed or type(x) is not mx.array or x.dtype not in _FLOATS or x.ndim:
            return SLOW
        try:
            out = second_derivatives(lambda x: [one(x)], x)
        except Exception as exc:
            slow = errors.hand_over(exc)  # (a direction MLX lacks: SLOW from now on)
            failed.append(True)
            return slow
        return out if value else out[2]

    return run


def _hessian(f, returns: tuple, where: tuple):
    """f(x), the gradient and the Hessian at one array x in one vmapped pass (reverse
    over reverse, a plain AutoMLX's), as the general path's (``second.hessian``); for
    hessian, the Hessian alone."""
    one = _checked(f, True, where)
    value = len(returns) == 3

    def run(x: Any) -> Any:
        if type(x) is not mx.array or x.dtype not in _FLOATS or not x.size:
            return SLOW
        try:
            out = hessian(lambda x: [one(x)], x, ("reverse", "reverse"), value)
        except Exception as exc:
            return errors.hand_over(exc)
        return out if value else out[2]

    return run


_MAKERS = {
    "gradient": _gradient,
    "jvp": _jvp,
    "vjp": _vjp,
    "hvp": _hvp,
    "derivative": _derivative,
    "second_derivative": _second_derivative,
    "hessian": _hessian,
}


def _numpy_in_out(run):
    """``run`` for a NumPy x (and a NumPy tangent): each made the MLX array the general
    path makes of it (its dtype kept), each result given back as NumPy."""

    def run_numpy(x: Any, *tangent: Any) -> Any:
        if x.dtype.kind != "f" or any(type(t) is not np.ndarray for t in tangent):
            return SLOW
        out = run(_mx(x), *map(_mx, tangent))
        if out is SLOW or type(out) is not tuple:
            return out if out is SLOW else np.asarray(out)
        mx.eval(out)  # (one evaluation: np.asarray evaluates each result on its own)
        return tuple(map(np.asarray, out))

    return run_numpy


_TREE_MAKERS = {"jvp": trees.jvp, "vjp": trees.vjp, "jacobian": trees.jacobian_of}


def _python_in_out(run):
    """``run`` for a Python float x (and a float tangent): each made the float32 MLX
    array the general path makes of it, each result given back as it gives them (a
    float where 0-d, else NumPy)."""

    def run_python(x: Any, *tangent: Any) -> Any:
        if any(type(t) is not float for t in tangent):
            return SLOW
        out = run(*(mx.array(a, dtype=mx.float32) for a in (x, *tangent)))
        if out is SLOW or type(out) is not tuple:
            return out if out is SLOW else _python(out)
        mx.eval(out)  # (one evaluation: np.asarray evaluates each result on its own)
        return tuple(map(_python, out))

    return run_python


def _python(a: Any) -> Any:
    a = np.asarray(a)
    return a.item() if a.ndim == 0 else a


# NumPy dtype -> MLX dtype (mx.array(a) alone makes float64 float32)
DTYPES = {
    np.dtype(np.float16): mx.float16,
    np.dtype(np.float32): mx.float32,
    np.dtype(np.float64): mx.float64,
    np.dtype(np.complex64): mx.complex64,
}


def _mx(a: np.ndarray) -> Any:
    return mx.array(a, dtype=DTYPES.get(a.dtype))
