"""The runners of torch plans: what a hand-written native call would do, no more.

A runner takes the plain case only: tensors (or NumPy arrays) outside any
transform, forward-AD level or inference mode, grad mode on, tangents like the
prepared ones. Anything else, a result the general path must check (f's output
not a tensor on a graph through x) or an error inside f returns SLOW, and the
general path runs and explains. The reverse pass is the backend's one
(``graph.finished`` and ``graph.grads``), on a graph built once per call; jvp
runs on forward-mode dual numbers (measured about twice as fast as
torch.func.jvp). A runner is built only once f's first call was watched (``graph.Watch``,
by the general path), and then calls f as it is. f's pytree output is taken as each
call gives it (``trees``); the runners of pytree x are in ``leaves``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch._C._functorch import is_functorch_wrapped_tensor

from ..._cache import code_of
from ..._tangents import Tangents, of_stack, one_by_one
from ...core import direction, outputs
from ...core.backend import OUT_SIZE, SLOW
from ...core.operator import OPS
from . import trees
from .forward import FORWARD_LOCK
from .graph import CHECKED, Once, batched_grads, check_twice, finished, grads


def runner(prob, combo, f, weak: bool):
    """The runner of ``prob.op`` calling ``f`` (prob's f, or a weak reference to it:
    ``weak``) on one tensor, or None where there is none."""
    make = maker(prob, combo, weak)
    return None if make is None else make(f)


def maker(prob, combo, weak: bool):
    """``f -> the runner calling f (or None)`` for ``prob.op``: one per object of f's
    code, as f's facts (its first call watched, its direction, a result handed over)
    are its code's; None where there is none. ``weak``: its runners hold neither f nor
    prob (the Jacobian's excepted: it reads prob's memo, and is never per code)."""
    op = prob.op
    if CHECKED.get(prob.f) is None:  # f's first call is the general path's, watched
        return None
    aux = _Aux(prob) if prob.aux else None  # f returns (out, aux)
    decl = OPS[op]  # (its declaration: family, parts returned)
    family, value = decl.family, len(decl.returns) > 1  # (a part before the derivative)
    known = direction.only(prob)  # f runs in one direction only: the general path
    if known is not None and (known == direction.FORWARD) != (family == "jvp"):
        return None
    named, code = _named(prob, weak), code_of(prob.f, strict=True)
    if family in ("gradient", "vjp"):
        return lambda f: _reverse(named, f, value, family == "vjp", aux)
    if family == "jvp":
        nests = None if code is None else (code, "jvp")  # (see _jvp)
        return lambda f: None if handed_over(nests) else _few(f, value, aux, nests)
    if family == "hvp" and len(decl.returns) < 3 and combo is None:
        return lambda f: None if handed_over(code) else _hvp(named, f, value, code, aux)
    if family == "jacobian" and aux is None:  # (it holds prob: never per code)
        return lambda f: _jacobian(prob, value, f)
    if family in ("derivative", "second_derivative"):
        second = family == "second_derivative"
        return lambda f: None if handed_over(code) else _scalar(named, f, value, second, code, aux)
    return None


def in_form(impl, run, form: str):
    """``run`` (taking one tensor) for calls in ``form`` (see ``Signature.form``)."""
    if run is None or form == "array":
        return run
    return python_in_out(run) if form == "python" else numpy_in_out(impl, run)


def code_runner(impl, prob, form: str):
    """``runner(f, x, *t)`` for any object of f's code (a closure made anew per call):
    the runner of that object, built per call (f's cells and defaults are the call's
    own: torch runs f as it is, nothing is kept from another object). It holds neither
    f nor prob; None where there is none."""
    per_code = prob.single and form != "leaves" and OPS[prob.op].family != "jacobian"
    make = maker(prob, None, True) if per_code else None
    if make is None:
        return None

    def code_run(f, x, *t):
        # the call's own f was watched on a first call, and runs in both directions: the
        # code's plan was made for another object of f's code, whose cells may differ
        if CHECKED.get(f) is None or direction.only_of(f, "torch") is not None:
            return SLOW
        run = make(f)
        return SLOW if run is None else in_form(impl, run, form)(x, *t)

    return code_run


class _Aux:
    """For an f that returns ``(out, aux)`` (``has_aux=True``): its output checked and
    split, and the aux handed to the open sink as the caller sees it (``settle``: kept
    on an outer pass's graph, off the call's own), once the runner's result is known
    (a runner that hands over puts none: the general path's call of f does)."""

    __slots__ = ("backend", "op", "settle")

    def __init__(self, prob) -> None:
        self.op, self.backend, self.settle = prob.op, prob.backend, prob.impl.settle

    def split(self, y) -> tuple:
        return outputs.pair(self.op, self.backend, y)

    def give(self, aux, result):
        outputs.put(self.settle(aux, result))
        return result


def _named(prob, weak: bool):
    """What a runner's checks name: ``prob``, or where the runner holds f weakly, its
    operator and backend only (``Problem.named``)."""
    return prob.named() if weak else prob


def _few(f, value, aux, nests):
    """The jvp's runner (``_jvp``) for one tangent, and for a Tangents of k on a small x (dual
    numbers once per tangent: 4 tangents at n = 1e3 in 0.9x torch.func's vmap, against
    3.6x by the general path); a large x's Tangents takes the general path's one vmapped
    pass (1.0x against 1.3x for the loop at n = 1e6)."""
    run = _jvp(f, value, aux, nests)
    each = one_by_one(run, value, SLOW)

    def run_few(x, t):
        if type(t) is not Tangents:
            return run(x, t)  # (one frame less on the hot path: run checks t)
        if aux is not None or x.numel() > _LOOP_MAX:
            return SLOW  # (with aux: f runs once, in the general path's vmapped pass)
        return each(x, t)

    return run_few


_LOOP_MAX = 1 << 16  # elements of x up to which a Tangents call loops


def _plain_copy(x):
    """A copy of x's data (as ``graph.leaf``: f may write to its storage) when a runner
    takes x: a plain tensor outside any transform, forward-AD level or inference mode,
    with grad mode on; else None."""
    if (
        type(x) is not torch.Tensor
        or x.requires_grad
        or fwAD._current_level >= 0
        or not torch.is_grad_enabled()
        or torch.is_inference_mode_enabled()
        or x.is_inference()
        or is_functorch_wrapped_tensor(x)
    ):
        return None
    return x.clone()  # (x carries no graph and no tangent: nothing to detach)


def all_plain(xs) -> bool:
    """Each of xs is a plain tensor, as ``_plain_copy`` takes one."""
    if fwAD._current_level >= 0 or not torch.is_grad_enabled():
        return False
    if torch.is_inference_mode_enabled():
        return False
    for x in xs:  # (a loop, not any(): no frame on the hot path)
        if (
            type(x) is not torch.Tensor
            or x.requires_grad
            or x.is_inference()
            or is_functorch_wrapped_tensor(x)
        ):
            return False
    return True


def like(t, x) -> bool:
    """t is a plain tensor with x's shape, dtype and device."""
    return (
        type(t) is torch.Tensor
        and not t.requires_grad
        and t.shape == x.shape
        and t.dtype == x.dtype
        and t.device == x.device
    )


def _reverse(prob, f, value, cotangent, aux):
    """gradient (``cotangent`` False: f(x) must be a scalar) or vjp along w, or along
    each of a ``Tangents`` (one forward pass, one batched backward) (``aux``: an ``_Aux``
    where f returns (out, aux))."""

    def run(x, w=None):
        xg = _plain_copy(x)
        many = type(w) is Tangents
        if xg is None:
            return SLOW
        if many and w._stack is not None:  # the k cotangents on a stack's leading axis
            return _stacked(prob, f, value, aux, xg, w._stack) if cotangent else SLOW
        if cotangent and (_seen_ws(w) if many else type(w) is torch.Tensor and w.requires_grad):
            return SLOW  # (a pytree w: checked against f's output, see trees.cotangents)
        xg.requires_grad_()
        try:
            y = f(xg)
        except RuntimeError:  # the general path runs f again and explains
            return SLOW
        if aux is not None:
            y, a = aux.split(y)
        if type(y) is not torch.Tensor:  # a pytree output: a vjp along a w like it
            out = _tree_vjp(prob, y, xg, w, value) if cotangent and not many else SLOW
            return out if aux is None or out is SLOW else aux.give(a, out)
        if y.grad_fn is None:
            return SLOW
        if cotangent:
            if not (_all_like(w._values, y) if many else like(w, y)):
                return SLOW
        elif y.ndim:
            return SLOW
        attached = finished(y, (xg,), False)
        if many:
            g = _each(prob, y, xg, w._values, attached)
        else:
            (g,) = grads(prob, y, (xg,), w, attached, False)
        out = (y if attached else y.detach(), g) if value else g
        return out if aux is None else aux.give(a, out)

    return run


def like_stack(s, x) -> bool:
    """s is a plain tensor of directions like x stacked on its leading axis."""
    return (
        type(s) is torch.Tensor
        and not s.requires_grad
        and s.shape[1:] == x.shape
        and s.dtype == x.dtype
        and s.device == x.device
    )


def _stacked(prob, f, value, aux, xg, ws):
    """The vjp along each of the cotangents stacked on ``ws``' leading axis, as a stacked
    Tangents: one forward pass, one batched backward (SLOW: the general path)."""
    if type(ws) is not torch.Tensor or ws.requires_grad or not ws.ndim:
        return SLOW
    xg.requires_grad_()
    try:
        y = f(xg)
    except RuntimeError:  # the general path runs f again and explains
        return SLOW
    if aux is not None:
        y, a = aux.split(y)
    if type(y) is not torch.Tensor or y.grad_fn is None or not like_stack(ws, y):
        return SLOW
    attached = finished(y, (xg,), False)
    if attached:
        check_twice(prob, y, (xg,))
    (g,) = batched_grads(y, (xg,), ws, attached)
    if g is None:  # y does not depend on x
        g = torch.zeros((len(ws), *xg.shape), dtype=xg.dtype, device=xg.device)
    out = (y if attached else y.detach(), of_stack(g)) if value else of_stack(g)
    return out if aux is None else aux.give(a, out)


def _tree_vjp(prob, y, xg, w, value):
    """The vjp of f's pytree output ``y`` along ``w`` (a pytree like it): one backward
    from every leaf, as torch's users write it (SLOW: see ``trees``)."""
    got = trees.cotangents(y, w)
    if got is None:
        return SLOW
    ys, ws, treedef = got
    attached = finished(ys, (xg,), False)
    (g,) = grads(prob, ys, (xg,), ws, attached, False)
    return (trees.detached(ys, treedef, attached), g) if value else g


def _seen_ws(w) -> bool:
    """w is a Tangents with a value that is no plain tensor (one an outer pass sees)."""
    for v in w._values:  # (a loop, not all(): no frame on the hot path)
        if type(v) is not torch.Tensor or v.requires_grad:
            return True
    return False


def _each(prob, y, xg, ws: tuple, attached: bool):
    """The pullbacks of y along each of ``ws``, as a Tangents: one batched backward
    (as ``TorchImpl.value_and_vjps``)."""
    if attached:
        check_twice(prob, y, (xg,))
    (g,) = batched_grads(y, (xg,), torch.stack(ws), attached)
    if g is None:  # y does not depend on x
        g = torch.zeros((len(ws), *xg.shape), dtype=xg.dtype, device=xg.device)
    return Tangents(*g.unbind(0))


def _jvp(f, value, aux, nests):
    """Forward mode on dual numbers, under the one forward-mode lock, one tangent at a
    time. A jvp nested in f fails on them (torch nests no dual levels): the general path
    (torch.func.jvp) takes the calls of f's code from then on (``nests``: its key)."""
    nested: list = []

    def run(x, v):
        xc = _plain_copy(x)
        if xc is None or nested or not like(v, x) or not torch._C._is_fwd_grad_enabled():
            return SLOW
        try:
            with FORWARD_LOCK, fwAD.dual_level():
                y = f(fwAD.make_dual(xc, v.clone()))  # f may write to both
                if aux is not None:
                    y, a = aux.split(y)
                if type(y) is torch.Tensor:
                    y, t = fwAD.unpack_dual(y)
                else:  # a pytree output (see trees.duals)
                    y, t = trees.duals(y) or (None, None)
        except RuntimeError:
            hand_over(nests, nested)
            return SLOW
        if t is None:  # y does not depend on x (the general path warns), or not a tensor
            return SLOW
        out = (y, t) if value else t
        return out if aux is None else aux.give(a, out)  # (a's tangents left with the level)

    return run


# code_of(f) whose results the scalar runners hand over, (code, "jvp") that nests a jvp
_HANDED: set = set()  # (bounded)


def handed_over(code) -> bool:
    """Whether f's code gave a result the general path handles (see ``_scalar_at``)."""
    return code is not None and code in _HANDED


def hand_over(code, handed: list) -> None:
    handed.append(True)
    if code is not None and len(_HANDED) < 4096:
        _HANDED.add(code)


def _scalar_at(f, x, code, handed: list, aux):
    """(x's copy taking gradients, f at it, f's aux) for a runner of a scalar f, or None where
    the general path must run: x not plain; or, after f ran, f raised or its result is
    off the graph or not 0-d. Those are facts of f's code, so they are recorded
    (``hand_over``): no runner is built for it again, and this one hands over before
    running f. f then runs twice once, not on every call."""
    xg = None if handed else _plain_copy(x)
    if xg is None:
        return None
    xg.requires_grad_()
    try:
        y = f(xg)
    except RuntimeError:
        hand_over(code, handed)
        return None
    a = None
    if aux is not None:
        y, a = aux.split(y)
    if type(y) is not torch.Tensor or y.grad_fn is None or y.ndim:
        hand_over(code, handed)
        return None
    return xg, y, a


def _hvp(prob, f, value, code, aux):
    """The double backward: the gradient's graph, then the reverse pass along v, or along
    each of a ``Tangents`` (``_along``), on the one graph."""

    handed: list = []  # f's result is one the general path handles (see _scalar_at)
    once = Once(f)  # what this runner found on f's graph (``graph.check_twice``)

    def run(x, v):
        stack = v._stack if type(v) is Tangents else None  # (k directions stacked)
        many = stack is None and type(v) is Tangents
        if stack is not None:
            ok = like_stack(stack, x)
        else:
            ok = _all_like(v._values, x) if many else like(v, x)
        got = _scalar_at(f, x, code, handed, aux) if ok else None
        if got is None:
            return SLOW
        xg, y, a = got
        attached = finished(y, (xg,), False)
        (g,) = grads(prob, y, (xg,), None, True, True, once)
        if not g.requires_grad:  # unused or linear x: the general path, from now on
            hand_over(code, handed)
            return SLOW
        if stack is not None:
            hv = of_stack(_along_stack(prob, g, xg, stack, attached))
        elif many:
            hv = _along(prob, g, xg, v._values, attached)
        else:
            (hv,) = grads(prob, g, (xg,), v, attached, False)
        out = (g if attached else g.detach(), hv) if value else hv
        return out if aux is None else aux.give(a, out)

    return run


def _all_like(ts: tuple, x) -> bool:
    """Each of ts is a plain tensor like x (``like``)."""
    for t in ts:  # (a loop, not all(): no frame on the hot path)
        if not like(t, x):
            return False
    return True


_BATCH_MAX = 1 << 16  # elements of the k stacked directions up to which hvps batch


def _along(prob, g, xg, vs: tuple, attached: bool):
    """The pullbacks of the gradient ``g`` along each of ``vs``, as a Tangents: one
    batched backward for small directions (``_each``); one backward per direction on
    the kept graph for large ones, as torch's users loop (the batched pass's k-fold
    temporaries are fresh memory on every call: at n = 1e6 and k = 4, 45 times the page
    faults of the loop)."""
    if len(vs) * xg.numel() <= _BATCH_MAX:
        return _each(prob, g, xg, vs, attached)
    last = len(vs) - 1
    return Tangents(*(grads(prob, g, (xg,), v, attached, i < last)[0] for i, v in enumerate(vs)))


def _along_stack(prob, g, xg, stack, attached: bool):
    """``_along`` for k directions stacked on the leading axis: the k pullbacks stacked."""
    if stack.numel() <= _BATCH_MAX:
        (hv,) = batched_grads(g, (xg,), stack, attached)
        return torch.zeros_like(stack) if hv is None else hv
    return torch.stack(list(_along(prob, g, xg, tuple(stack.unbind(0)), attached)))


def _scalar(prob, f, value, second, code, aux):
    """derivative (``second``: and the second derivative) of f at a 0-d tensor x with a
    0-d result, by reverse mode (and reverse over reverse), as torch's users write it;
    any other shape takes the general path (forward mode)."""

    handed: list = []  # f's result is one the general path handles (see _scalar_at)
    once = Once(f)  # what this runner found on f's graph (``graph.check_twice``)

    def run(x):
        got = _scalar_at(f, x, code, handed, aux) if not x.ndim else None
        if got is None:
            return SLOW
        xg, y, a = got
        attached = finished(y, (xg,), False)
        (d,) = grads(prob, y, (xg,), None, attached or second, second, once)
        if not second:
            out = (y if attached else y.detach(), d) if value else d
            return out if aux is None else aux.give(a, out)
        if d.requires_grad:
            (d2,) = grads(prob, d, (xg,), None, attached, False)
        elif attached:  # linear f on an outer graph: the general path (x's graph: per call)
            return SLOW
        else:  # linear f
            d2 = torch.zeros_like(d)
        if not attached:
            y, d = y.detach(), d.detach()
        out = (y, d, d2) if value else d2
        return out if aux is None else aux.give(a, out)

    return run


def _jacobian(prob, value, f):
    """torch.func.jacrev or jacfwd in the direction the warm-up chose, on a copy of x
    (torch.func would let f write into the caller's tensor)."""
    size = prob.fns.get(OUT_SIZE)
    mode = prob.backend.mode or direction.only(prob)
    if mode is None and size is None:
        return None

    def _with_value(x):
        y = f(x)
        return y, y

    def run(x):
        xc = _plain_copy(x)
        if xc is None or not x.numel():
            return SLOW
        reverse = mode == "reverse" or (mode is None and size <= x.numel())
        g = _with_value if value else f  # (f(x) as the aux of the one run of f)
        try:
            if reverse:
                j = torch.func.jacrev(g, has_aux=value)(xc)
            else:
                with FORWARD_LOCK:
                    j = torch.func.jacfwd(g, has_aux=value)(xc)
            j, y = j if value else (j, None)
        except Exception:  # the general path runs f again and explains
            return SLOW
        if type(j) is not torch.Tensor or (value and type(y) is not torch.Tensor):
            if not trees.floats(j) or (value and not trees.floats(y)):
                return SLOW  # (a pytree output of floating tensors: per leaf, as f gave it)
        return (y, j) if value else j

    return run


def numpy_in_out(impl, run):
    """``run`` for a NumPy x (and a NumPy tangent like the prepared one): the arrays
    taken without a copy (every runner copies x before f sees it; a read-only or
    negative-stride array is copied, torch takes neither), the results given back as
    NumPy without one. A result an outer pass sees (f closes over tensors that require
    grad) stays a tensor, as the general path gives it back; a vjp that passes w
    through (f a view of x) gets its own copy, never the caller's w."""
    from_numpy = impl.from_numpy

    def run_numpy(x, *tangent):
        if tangent:  # the operator takes one
            (t,) = tangent
            if type(t) is not np.ndarray:
                return SLOW
            t = from_numpy(t)
            out = run(from_numpy(x), t)
        else:
            t = None
            out = run(from_numpy(x))
        if type(out) is torch.Tensor:
            return _back(out, t)
        if type(out) is not tuple or not _tensors(out):  # SLOW, or f's pytree output
            return SLOW
        return tuple(map(_back, out, (t,) * len(out)))

    return run_numpy


def _tensors(out: tuple) -> bool:
    """A runner's tuple result holds tensors only (not f's pytree output, which a runner
    of one tensor gives as f does: the general path converts it)."""
    for a in out:
        if type(a) is not torch.Tensor:
            return False
    return True


def _back(a, t):
    """A result as NumPy: ``a.numpy()`` shares its storage, which is the call's own
    unless it is the tangent ``t``'s (the caller's array)."""
    if a.requires_grad or is_functorch_wrapped_tensor(a):
        return a
    if t is not None and a.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
        a = a.clone()
    return a.numpy() if a.is_cpu else a.cpu().numpy()


def python_in_out(run):
    """``run`` for a Python float x (and a float tangent, for the operators that take
    one): each made the tensor the general path makes of it (torch's default float
    dtype, read per call), each result given back as the general path gives it (a
    float where it is 0-d, else NumPy; a result an outer pass sees stays a tensor)."""

    def run_python(x, *tangent):
        dtype = torch.get_default_dtype()
        if tangent:
            (t,) = tangent
            if type(t) is not float:
                return SLOW
            out = run(torch.tensor(x, dtype=dtype), torch.tensor(t, dtype=dtype))
        else:
            out = run(torch.tensor(x, dtype=dtype))
        if type(out) is torch.Tensor:
            return _python(out)
        if type(out) is not tuple or not _tensors(out):  # SLOW, or f's pytree output
            return SLOW
        return tuple(map(_python, out))

    return run_python


def _python(a):
    """A result for a Python float x: a float where it is 0-d, else NumPy."""
    if a.requires_grad or is_functorch_wrapped_tensor(a):
        return a
    if not a.ndim:
        return a.item()
    return a.numpy() if a.is_cpu else a.cpu().numpy()
