"""batched_jacobian: per-sample Jacobians of a function applied to a batch (axis 0)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import _checks
from ..core import convert, direction, shell
from ..core.shell import Call, Operator
from . import dense


def _batched(c: Call, chunk_size, value: bool):
    """(f(x), per-sample Jacobians); without ``value``, f(x) may be None (the backend's
    own formulation then computes the Jacobians alone)."""
    impl, prob, xs, ctx = c.impl, c.prob, c.xs, c.ctx
    op, backend = prob.op, prob.backend
    if not prob.single:
        raise _checks.not_single_array(op, backend, len(xs))
    if len(xs[0].shape) == 0:
        raise _checks.DiffifaceValueError(
            f"{_checks.call_form(op, backend)}: x must have a batch axis first, got a "
            "0-d array. Use derivative or jacobian for a single point."
        )
    x0 = xs[0]
    if math.prod(tuple(x0.shape)) == 0:  # an empty batch or sample: zeros, f(x) once
        y = prob.flat()(xs, *ctx)
        _checks.check_batch(prob, tuple(x0.shape), tuple(y.shape))
        jac = convert.zeros(impl, (*y.shape, *x0.shape[1:]), x0)
    elif chunk_size is not None:  # in the direction f supports, once known
        chunks = lambda: _chunked(impl, prob, xs, ctx, chunk_size)  # noqa: E731
        y, jac = direction.run(
            impl, prob, chunks, forward=chunks, reverse=chunks, fixed=(impl.mode,)
        )
    else:
        n_in = math.prod(tuple(x0.shape[1:]))
        m = impl.memo_output_size(prob, xs, ctx)
        dense.check_limit(op, backend, m, n_in, x0, "batched Jacobian")
        if value:
            run = lambda: impl.value_and_batched_jacobian(prob, xs, ctx)  # noqa: E731
        else:
            run = lambda: (None, impl.batched_jacobian(prob, xs, ctx))  # noqa: E731
        # the backend's own formulation follows the direction f supports, once known
        y, jac = direction.run(
            impl,
            prob,
            run,
            forward=run,
            reverse=lambda: _reverse(impl, prob, xs, ctx),
            fixed=(impl.mode,),
        )
    return c.back(y), c.back(jac)


VALUE_AND_BATCHED_JACOBIAN = Operator(
    "value_and_batched_jacobian", lambda c, t, k: _batched(c, k, True)
)
# its own operator: a backend may compute the Jacobians alone (JAX: a program without
# f(x) as an output, which XLA compiles to one fusion where the pair takes three)
BATCHED_JACOBIAN = Operator("batched_jacobian", lambda c, t, k: _batched(c, k, False)[1])


@shell.public(VALUE_AND_BATCHED_JACOBIAN)
def value_and_batched_jacobian(
    f: Callable,
    backend: Any,
    x: Any,
    *contexts: Any,
    prep: Any = None,
    chunk_size: Any = None,
    has_aux: bool = False,
):
    """The value ``f(x)`` and the per-sample Jacobians, of shape ``(B, *out, *in)``.

    ``f`` maps a batch ``x`` of shape ``(B, *in)`` to ``(B, *out)``, sample by
    sample. The Jacobians come from ``in`` jvps (forward) or ``out`` vjps
    (reverse) whose tangents hold the same basis vector for every sample, so
    the dense ``(B*out, B*in)`` Jacobian is never built (finite differences:
    ``2 * in`` calls of f, not ``2 * B * in``). The direction follows the
    backend's ``mode`` (None: forward when ``out >= in``).

    This is only meaningful when samples do not interact: layers that couple
    the batch (batch norm in training mode, attention across the batch axis)
    make per-sample Jacobians wrong, and this cannot be detected cheaply.

    Args:
        f: function ``f(x, *contexts)`` returning an array with leading axis B.
        backend: a backend instance.
        x: one floating-point array with a batch axis first (ndim >= 1).
        *contexts: ``di.Constant(c)`` arguments.
        prep: a preparation from the matching ``prepare_*`` function (optional).
        chunk_size: build the Jacobians from ``chunk_size`` jvps (or vjps) at a time,
            bounding the working memory; without it a result over
            ``di.config.max_dense_bytes`` (1 GiB) is an error.
        has_aux: f returns ``(out, aux)``; the result is then ``(result, aux)``,
            aux as f computed it (see the "Aux outputs" guide).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> x = np.array([[1.0, 2.0], [3.0, 4.0]])
        >>> J = di.batched_jacobian(lambda x: x[:, :1] * x, di.AutoFiniteDifferences(), x)
        >>> J.shape, J[1].round(6)
        ((2, 2, 2), array([[6., 0.],
               [4., 3.]]))
    """
    return shell.call(
        VALUE_AND_BATCHED_JACOBIAN, f, backend, x, None, contexts, prep, chunk_size, has_aux
    )


@shell.public(BATCHED_JACOBIAN)
def batched_jacobian(
    f: Callable,
    backend: Any,
    x: Any,
    *contexts: Any,
    prep: Any = None,
    chunk_size: Any = None,
    has_aux: bool = False,
) -> Any:
    """Per-sample Jacobians ``(B, *out, *in)`` of ``f`` over a batch ``x`` (axis 0).

    Same arguments as :func:`value_and_batched_jacobian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        >>> di.batched_jacobian(lambda x: (x**2).sum(axis=1), di.AutoFiniteDifferences(),
        ...                     x).round(5)
        array([[ 2.,  4.],
               [ 6.,  8.],
               [10., 12.]])
    """
    return shell.call(BATCHED_JACOBIAN, f, backend, x, None, contexts, prep, chunk_size, has_aux)


def _reverse(impl, prob, xs: tuple, ctx: tuple):
    """Per-sample Jacobians cut from the full reverse Jacobian (f without forward mode)."""
    y, (jac,) = impl.reverse_jacobian(prob, xs, ctx)
    x = xs[0]
    _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
    b, n_in, m = x.shape[0], math.prod(tuple(x.shape[1:])), math.prod(tuple(y.shape[1:]))
    blocks = impl.reshape(jac, (b, m, b, n_in))
    rows = impl.stack([blocks[i, :, i, :] for i in range(b)], 0)
    return y, impl.reshape(rows, (*y.shape, *x.shape[1:]))


def _chunked(impl, prob, xs: tuple, ctx: tuple, k: int):
    """(f(x), per-sample Jacobians) from ``k`` jvps (or vjps) at a time, each along one
    basis vector repeated in every sample."""
    (x,) = xs
    b = x.shape[0]
    if impl.prefers_reverse(prob, xs, ctx):
        y = prob.flat()(xs, *ctx)
        _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
        n_out, rows = math.prod(tuple(y.shape[1:])), []
        for start in range(0, n_out, k):
            ws = [impl.batched_basis(y, o) for o in range(start, min(n_out, start + k))]
            rows += [gs[0] for gs in impl.value_and_vjps(prob, xs, ws, ctx, _same)[1]]
        jac = impl.stack(rows, 1) if rows else convert.zeros(impl, (b, 0, *x.shape[1:]), x)
        return y, impl.reshape(jac, (*y.shape, *x.shape[1:]))
    n_in, cols = math.prod(tuple(x.shape[1:])), []
    y = None
    for start in range(0, n_in, k):
        vss = [(impl.batched_basis(x, i),) for i in range(start, min(n_in, start + k))]
        y, ts = impl.value_and_jvps(prob, xs, vss, ctx)
        _checks.check_batch(prob, tuple(x.shape), tuple(y.shape))
        cols += [impl.reshape(t, (b, -1)) for t in ts]
    return y, impl.reshape(impl.stack(cols, -1), (*y.shape, *x.shape[1:]))


def _same(y, w):
    return w
