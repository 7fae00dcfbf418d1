"""Same-point preparations on torch (see ``diffiface.operators.same_point``).

hvp keeps the gradient's graph (``create_graph=True``): each direction is one backward
through it. vjp keeps f's graph: each cotangent is one backward. jvp keeps the graph of
the pullback ``u -> J^T u`` (linear in u): each tangent is one backward of it, ``J v``,
the double-vjp trick; it runs no part of f again, where forward mode (``torch.func.jvp``)
would run f and its tangent for every direction.
"""

from __future__ import annotations

from typing import Any

import torch

from ... import _checks
from .graph import apply_f, check_twice, grads, in_functorch, leaf, outer_pass


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
        y = apply_f(prob, prob.flat(), xg, ctx)
    if y.requires_grad:
        check_twice(prob, y, xg)
    return xg, y


def _backward(outs: tuple, inputs: tuple, cotangents: tuple, like: tuple) -> tuple:
    """The pullback of ``cotangents`` from the ``outs`` on a graph (None: no path) to
    ``inputs``, the graph kept; zeros where nothing connects."""
    live = [i for i, o in enumerate(outs) if o is not None and o.requires_grad]
    if not live:
        return tuple(torch.zeros_like(a) for a in like)
    got = torch.autograd.grad(
        [outs[i] for i in live],
        inputs,
        [cotangents[i] for i in live],
        retain_graph=True,
        allow_unused=True,
    )
    return tuple(torch.zeros_like(a) if g is None else g for g, a in zip(got, like, strict=True))


def _at(value, gradient):
    return lambda: (value, gradient)


def _loop(one):
    return lambda many: [one(v) for v in many]


def hvp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    xg, y = _graph(prob, xs, ctx)
    with torch.enable_grad():
        gs = grads(y, xg, None, True, True)  # create_graph: the gradient's own graph

    def one(vs: tuple) -> tuple:
        return _backward(gs, xg, vs, xg)

    return _at(y.detach(), tuple(g.detach() for g in gs)), one, _loop(one)


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

    def one(vs: tuple) -> Any:
        return _backward(pulled, (u,), vs, (y,))[0]

    return _at(y.detach(), None), one, _loop(one)


def vjp(impl, prob, xs: tuple, ctx: tuple) -> tuple:
    _refuse_outer(prob, xs, ctx)
    y, pb = impl.value_and_pullback(prob, xs, ctx)
    return _at(y, None), pb, _loop(pb)
