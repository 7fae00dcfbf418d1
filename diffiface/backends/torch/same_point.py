"""Same-point preparations on torch (see ``diffiface.operators.same_point``).

hvp keeps the gradient's graph (``create_graph=True``): each direction is one backward
through it (a ``Tangents`` of k: one batched backward, ``is_grads_batched``). vjp keeps
f's graph: each cotangent is one backward. jvp keeps the graph of the pullback ``u ->
J^T u`` (linear in u): each tangent is one backward of it, ``J v``, the double-vjp
trick; it runs no part of f again, where forward mode (``torch.func.jvp``) would run f
and its tangent for every direction.
"""

from __future__ import annotations

from typing import Any

import torch

from ... import _checks
from .graph import (
    batched_grads,
    call_f,
    check_twice,
    finished,
    grads,
    in_functorch,
    leaf,
    outer_pass,
)


def keep(a: Any) -> tuple:
    """The tensor, its version counter (an in-place change bumps it), and a copy."""
    return a, a._version, a.detach().clone()


def same(kept: tuple, a: Any) -> bool:
    obj, version, copy = kept
    if a is obj and a._version == version:
        return True
    return (
        isinstance(a, torch.Tensor)
        and a.shape == copy.shape
        and a.device == copy.device
        and bool(torch.equal(a.detach(), copy))
    )


def _refuse_outer(prob, xs: tuple, ctx: tuple) -> None:
    if in_functorch() or outer_pass(xs, ctx):
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(prob.op, prob.backend)}: x or a Constant is seen by an outer "
            "differentiation, which a same-point preparation does not carry. Use the "
            "ordinary prepare_ function inside a differentiated function."
        )


def _graph(prob, xs: tuple, ctx: tuple) -> tuple:
    """(x's leaves requiring grad, f(x) on its graph)."""
    _refuse_outer(prob, xs, ctx)
    with torch.enable_grad():
        xg = tuple(leaf(x) for x in xs)
        fn = prob.flat()
        y = call_f(prob, lambda: fn(xg, *ctx))
        finished(y, xg, False)
    if y.requires_grad:
        check_twice(prob, y, xg)
    return xg, y


def _pullbacks(outs: tuple, inputs: tuple, like: tuple) -> tuple:
    """(one, many): the pullback of cotangents (one per out; None: no path) from the
    ``outs`` on a kept graph to ``inputs``, zeros where nothing connects; ``many`` pulls
    several back in one batched backward (``is_grads_batched``)."""
    live = [i for i, o in enumerate(outs) if o is not None and o.requires_grad]
    chosen = [outs[i] for i in live]

    def filled(got, k=None) -> tuple:
        return tuple(
            torch.zeros_like(a) if g is None else (g if k is None else g[k])
            for g, a in zip(got, like, strict=True)
        )

    def one(cotangents: tuple) -> tuple:
        if not live:
            return filled((None,) * len(like))
        cts = [cotangents[i] for i in live]
        return filled(
            torch.autograd.grad(chosen, inputs, cts, retain_graph=True, allow_unused=True)
        )

    def many(rows: list) -> list:
        if not live:
            return [one(r) for r in rows]
        stacked = [torch.stack([r[i] for r in rows]) for i in live]
        got = batched_grads(chosen, inputs, stacked, False)
        return [filled(got, k) for k in range(len(rows))]

    return one, many


def _at(value, gradient):
    return lambda: (value, gradient)


def _loop(one):
    return lambda many: [one(v) for v in many]


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    xg, y = _graph(prob, xs, ctx)
    with torch.enable_grad():
        gs = grads(prob, y, xg, None, True, True)  # create_graph: the gradient's graph
    one, many = _pullbacks(gs, xg, xg)
    return _at(y.detach(), tuple(g.detach() for g in gs)), one, many


def jvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    xg, y = _graph(prob, xs, ctx)
    if y.is_complex():
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(prob.op, prob.backend)}: f returns a complex tensor, which "
            "the same-point jvp (a pullback differentiated again) does not take. Use "
            "prepare_jvp."
        )
    if not y.requires_grad:  # f does not depend on x
        zero = lambda vs: torch.zeros_like(y)  # noqa: E731
        return _at(y.detach(), None), zero, _loop(zero)
    with torch.enable_grad():
        u = torch.zeros_like(y, requires_grad=True)
        pulled = torch.autograd.grad(y, xg, u, create_graph=True, allow_unused=True)
    one, many = _pullbacks(pulled, (u,), (y,))
    return _at(y.detach(), None), lambda vs: one(vs)[0], lambda vss: [t[0] for t in many(vss)]


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    xg, y = _graph(prob, xs, ctx)
    one, many = _pullbacks((y,), xg, xg)
    return _at(y.detach(), None), lambda w: one((w,)), lambda ws: many([(w,) for w in ws])
