"""The runners of torch plans for native leaves: x a pytree of tensors (or one tensor
with Constant contexts), the contexts' leaves, and a tangent's leaves (see
``Signature.run``). Each does what the runner of one tensor does (``direct``), with
every leaf of x a leaf of the graph: gradient and vjp by one backward, jvp on dual
numbers, hvp by the double backward. The results like x come back in x's structure.

A runner takes the plain case only (as ``direct``'s): plain tensors, one tangent like
x's leaves (the vjp's: like f's output); anything else, a ``Tangents``, an error inside
f, or an output the general path must check returns SLOW.
"""

from __future__ import annotations

from operator import itemgetter

import torch
import torch.autograd.forward_ad as fwAD

from ..._cache import code_of
from ...core import direction
from ...core.backend import SLOW
from ...core.operator import OPS
from . import trees
from .direct import all_plain, hand_over, handed_over, like
from .forward import FORWARD_LOCK
from .graph import CHECKED, Once, finished, grads


def runner(prob, combo, f, weak: bool):
    """The runner of ``prob.op`` for native leaves, calling ``f`` (``weak``: it holds
    neither f nor prob, see ``direct.maker``), or None where there is none."""
    decl = OPS[prob.op]
    family, value = decl.family, len(decl.returns) > 1  # (a part before the derivative)
    if prob.aux or CHECKED.get(prob.f) is None:  # f's first call: the general path's
        return None
    known = direction.only(prob)  # f runs in one direction only: the general path
    if known is not None and (known == direction.FORWARD) != (family == "jvp"):
        return None
    named = prob.named() if weak else prob
    rebuild = itemgetter(0) if prob.single else prob.treedef.unflatten  # x from its leaves
    if family == "gradient":
        return _gradient(named, f, rebuild, value)
    if family == "vjp":
        return _vjp(named, f, rebuild, value)
    code = code_of(prob.f, strict=True)
    if family == "jvp":
        nests = None if code is None else (code, "jvp")  # (see direct._jvp)
        return None if handed_over(nests) else _jvp(f, rebuild, value, nests)
    if family == "hvp" and len(decl.returns) < 3 and combo is None:
        return None if handed_over(code) else _hvp(named, f, rebuild, value, code)
    return None


def _leaves(xs: tuple) -> list:
    """Copies of x's leaves (plain tensors: nothing to detach) that require grad."""
    xg = []
    for x in xs:  # (a loop: no frame per leaf)
        xg.append(x.clone().requires_grad_())
    return xg


def _gradient(prob, f, rebuild, value):
    def run(xs, _, contexts):
        if not all_plain(xs):
            return SLOW
        xg = _leaves(xs)
        try:
            y = f(rebuild(xg), *contexts)
        except RuntimeError:
            return SLOW
        if type(y) is not torch.Tensor or y.ndim or y.grad_fn is None:
            return SLOW
        attached = finished(y, xg, False)  # a closure or a Constant differentiated outside
        g = rebuild(grads(prob, y, xg, None, attached, False))
        return (y if attached else y.detach(), g) if value else g

    return run


def _vjp(prob, f, rebuild, value):
    """One backward along w (one tensor, like f's output: the leaves form takes no
    pytree output, see ``Prep._takes``)."""

    def run(xs, _, contexts, ws):
        if len(ws) != 1 or type(ws[0]) is not torch.Tensor or not all_plain(xs):
            return SLOW  # (a Tangents: k tuples of leaves, the general path's batched pass)
        (w,) = ws
        xg = _leaves(xs)
        try:
            y = f(rebuild(xg), *contexts)
        except RuntimeError:
            return SLOW
        if type(y) is not torch.Tensor or y.grad_fn is None or not like(w, y):
            return SLOW
        attached = finished(y, xg, False)
        g = rebuild(grads(prob, y, xg, w, attached, False))
        return (y if attached else y.detach(), g) if value else g

    return run


def _tangents_like(ts: tuple, xs: tuple) -> bool:
    """ts (one tangent's leaves, not a Tangents' tuples) are plain tensors like xs."""
    if len(ts) != len(xs):
        return False
    for t, x in zip(ts, xs, strict=True):
        if not like(t, x):
            return False
    return True


def _jvp(f, rebuild, value, nests):
    """Forward mode on dual numbers, as ``direct._jvp``, one dual per leaf of x."""
    nested: list = []

    def run(xs, _, contexts, ts):
        if nested or not all_plain(xs) or not _tangents_like(ts, xs):
            return SLOW
        if not torch._C._is_fwd_grad_enabled():
            return SLOW
        try:
            with FORWARD_LOCK, fwAD.dual_level():  # copies: f may write to both
                duals = [fwAD.make_dual(x.clone(), t.clone()) for x, t in zip(xs, ts, strict=True)]
                y = f(rebuild(duals), *contexts)
                if type(y) is torch.Tensor:
                    y, t = fwAD.unpack_dual(y)
                else:  # a pytree output (see trees.duals)
                    y, t = trees.duals(y) or (None, None)
        except RuntimeError:
            hand_over(nests, nested)
            return SLOW
        if t is None:  # y does not depend on x (the general path warns), or not a tensor
            return SLOW
        return (y, t) if value else t

    return run


def _hvp(prob, f, rebuild, value, code):
    """The double backward (as ``direct._hvp``): the gradient's graph, then one reverse
    pass along v from the parts of the gradient that depend on x."""
    handed: list = []  # f's result is one the general path handles (see direct._scalar_at)
    once = Once(f)  # what this runner found on f's graph (``graph.check_twice``)

    def run(xs, _, contexts, vs):
        if handed or not all_plain(xs) or not _tangents_like(vs, xs):
            return SLOW
        xg = _leaves(xs)
        try:
            y = f(rebuild(xg), *contexts)
        except RuntimeError:
            hand_over(code, handed)
            return SLOW
        if type(y) is not torch.Tensor or y.grad_fn is None or y.ndim:
            hand_over(code, handed)
            return SLOW
        attached = finished(y, xg, False)
        gs = grads(prob, y, xg, None, True, True, once)
        live = _live(gs, vs)
        if live is None:  # linear f: the general path, from now on
            hand_over(code, handed)
            return SLOW
        hv = rebuild(grads(prob, live[0], xg, live[1], attached, False))
        if not value:
            return hv
        return rebuild(gs if attached else [g.detach() for g in gs]), hv

    return run


def _live(gs: tuple, vs: tuple) -> tuple | None:
    """(the parts of the gradient that depend on x, their directions), or None where
    none does (linear f)."""
    ys, ws = [], []
    for g, v in zip(gs, vs, strict=True):  # (a loop: no frame per leaf)
        if g.requires_grad:
            ys.append(g)
            ws.append(v)
    return (ys, ws) if ys else None
