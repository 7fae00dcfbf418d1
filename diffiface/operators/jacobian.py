"""Jacobians: jacobian, value_and_jacobian (dense limits and chunking in ``dense``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._tree import flatten, tree_map, unflatten
from ..core import convert, direction, raveled, shell
from ..core.backend import size
from ..core.problem import Problem
from ..core.shell import Call, Operator
from . import dense


def _jacobians(c: Call, chunk_size, value: bool):
    """(f(x), J): the backend's jacobian (under the dense limit), built in chunks, or
    zeros when x is empty (no basis to run over)."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    if impl.traits.sparse:  # AutoSparse
        return impl.sparse_jacobian(c, chunk_size)
    if not prob.single:
        return _of_pytree(c, chunk_size, value)
    (x,) = xs
    n = size(x)
    if not n:
        y = prob.flat()(xs, *ctx)
        return c.back(y), c.back(convert.zeros(impl, (*y.shape, *x.shape), x))
    if chunk_size is not None:  # in the direction f supports, once known
        chunks = lambda: dense.jacobian(impl, prob, xs, ctx, chunk_size)  # noqa: E731
        y, jac = direction.run(
            impl, prob, chunks, forward=chunks, reverse=chunks, fixed=(impl.mode,)
        )
        return c.back(y), c.back(jac)
    m = impl.memo_output_size(prob, xs, ctx)
    dense.check_limit(prob.op, prob.backend, m, n, x, "Jacobian")
    if value:
        run = lambda: impl.value_and_jacobian(prob, xs, ctx)  # noqa: E731
    else:
        run = lambda: (None, impl.jacobian(prob, xs, ctx))  # noqa: E731
    y, jac = direction.run(
        impl,
        prob,
        run,
        forward=lambda: impl.forward_jacobian_of_one(prob, xs, ctx),
        reverse=lambda: impl.reverse_jacobian_of_one(prob, xs, ctx),
        fixed=(impl.mode,),
    )
    return c.back(y), c.back(jac)


def _of_pytree(c: Call, chunk_size, value: bool):
    """(f(x), J) at a pytree x: the Jacobian of f over x's leaves end to end, its columns
    cut back into x's structure (inside f(x)'s structure, as ``jax.jacobian`` nests)."""
    prob = c.prob
    if not c.xs:  # an empty pytree x: no columns, x's structure for each leaf of f(x)
        y = c.back(prob.flat()(c.xs, *c.ctx))
        return y, tree_map(lambda _: unflatten(prob.treedef, []), y)
    sub = prob.fns.get("raveled")  # a prepared problem keeps its raveled problem
    fn, v = raveled.raveled(prob.op, prob.backend, c.impl, prob.f, prob.treedef, c.xs)
    if sub is None or sub.f is not fn:
        sub = Problem(prob.op, prob.backend, prob.impl, fn, _LEAF, True, False, prob.aux)
        sub.prepared = prob.prepared
        prob.fns["raveled"] = sub
    y, jac = _jacobians(Call(c.impl, sub, (v,), c.kinds, c.ctx, c.combo), chunk_size, value)
    return y, tree_map(fn.split, jac)


_LEAF = flatten(0.0)[1]


VALUE_AND_JACOBIAN = Operator(
    "value_and_jacobian",
    lambda c, t, chunk_size: _jacobians(c, chunk_size, True),
)
JACOBIAN = Operator(
    "jacobian",
    lambda c, t, chunk_size: _jacobians(c, chunk_size, False)[1],
)


@shell.public(VALUE_AND_JACOBIAN)
def value_and_jacobian(
    f: Callable,
    backend: Any,
    x: Any,
    *contexts: Any,
    prep: Any = None,
    chunk_size: Any = None,
    has_aux: bool = False,
) -> tuple[Any, Any]:
    """The value ``f(x)`` and the Jacobian, of shape ``f(x).shape + x.shape``.

    The direction follows the backend's ``mode``; with ``mode=None`` it is
    the cheaper one by sizes: forward when f has more outputs than inputs, else
    reverse (autograd, whose forward passes trace f again, takes reverse up to
    three outputs per input).

    Args:
        f: function ``f(x, *contexts)`` returning an array.
        backend: a backend instance.
        x: one floating-point array (or a Python float).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        chunk_size: build the Jacobian ``chunk_size`` products (rows or columns)
            at a time, bounding the working memory; without it a Jacobian over
            ``di.config.max_dense_bytes`` (1 GiB) is an error.
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> y, J = di.value_and_jacobian(lambda x: x[::-1] * 2, di.AutoFiniteDifferences(),
        ...                              np.array([1.0, 2.0]))
        >>> J.round(6)
        array([[0., 2.],
               [2., 0.]])
    """
    return shell.call(VALUE_AND_JACOBIAN, f, backend, x, None, contexts, prep, chunk_size, has_aux)


@shell.public(JACOBIAN)
def jacobian(
    f: Callable,
    backend: Any,
    x: Any,
    *contexts: Any,
    prep: Any = None,
    chunk_size: Any = None,
    has_aux: bool = False,
) -> Any:
    """The Jacobian of ``f`` at ``x``, of shape ``f(x).shape + x.shape``.

    Same arguments as :func:`value_and_jacobian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.jacobian(lambda x: x**2, di.AutoFiniteDifferences(), np.array([1.0, 2.0])).round(6)
        array([[2., 0.],
               [0., 4.]])
    """
    return shell.call(JACOBIAN, f, backend, x, None, contexts, prep, chunk_size, has_aux)
