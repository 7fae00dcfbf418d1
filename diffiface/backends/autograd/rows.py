"""Reverse Jacobians on autograd: one trace of f, then one pullback per output element.

A pytree output reaches the backend joined into one vector (``AutogradImpl.concat``,
called by ``core.outputs``). A pullback from that vector walks the graph of every part
(an output row of one leaf sends zeros through the others' graphs), so ``joined``
records the parts of a join made during the trace, and each part's rows are pulled
back from the part's own node: the passes autograd's users write (one ``jacobian`` per
output leaf), with f traced once instead of once per leaf.
"""

from __future__ import annotations

import contextvars
from typing import Any

import numpy as np
from autograd.core import backward_pass, vspace
from autograd.tracer import Box, getval

from .traces import make_vjp

# (the joined box, its parts) of each join made while a reverse Jacobian traces f
_JOINS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "diffiface_autograd_joins", default=None
)


def joined(out: Any, parts: list) -> Any:
    """``out`` (the parts joined end to end), recorded for the running reverse Jacobian."""
    joins = _JOINS.get()
    if joins is not None and isinstance(out, Box):
        joins.append((out, parts))
    return out


def jacobian_rows(fun, x) -> tuple:
    """(f(x), the rows of its Jacobian stacked, shape (size of f(x), size of x)) for
    ``fun`` of one array; each row one pullback, through its part's graph alone."""
    end: list = []

    def traced(xb):
        end.append(fun(xb))
        return end[-1]

    joins: list = []
    token = _JOINS.set(joins)
    try:
        pb, y = make_vjp(traced, x)
    finally:
        _JOINS.reset(token)
    parts = next((p for out, p in joins if out is end[-1]), None)
    if parts is None or not isinstance(end[-1], Box):
        return y, [pb(e) for e in _basis(getval(y))]
    trace = end[-1]._trace
    rows = []
    for part in parts:
        value = np.asarray(getval(part))
        if isinstance(part, Box) and part._trace == trace:
            rows += [backward_pass(e, part._node) for e in _basis(value)]
        else:  # a part that does not depend on x
            rows += [vspace(x).zeros() for _ in range(np.size(value))]
    return y, rows


def _basis(like: Any):
    """The standard basis of ``like``'s shape and dtype, one array at a time."""
    like = np.asarray(like)
    for i in range(like.size):
        e = np.zeros(like.size, dtype=like.dtype)
        e[i] = 1
        yield e.reshape(like.shape)
