"""Local sparsity patterns of torch functions: the nonzeros at one x, in one pass.

The JVP of f at x is traced once on real values (f runs once): its primal part is
constant, so the detector evaluates its masks (relu, where, max) and zero factors at x,
and reads the tangent's dependence through them. The pattern is a superset of the
derivative's nonzeros at x. An f with an op that has no forward-mode derivative is read
through its pullback (``torch.func.vjp``) instead.
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from .detect import read, tidy, trace_real

__all__ = ["local_hessian_pattern", "local_jacobian_pattern"]


def local_jacobian_pattern(fn, x: torch.Tensor) -> sp.csr_array:
    """A superset of the nonzeros of ``fn``'s Jacobian at ``x`` (rows: fn(x) flattened)."""
    x = x.detach()

    def tangent(t):
        return torch.func.jvp(fn, (x,), (t,))[1]

    try:
        return read(trace_real(tangent, torch.zeros_like(x)), x)
    except (NotImplementedError, RuntimeError):  # an op without forward-mode AD: rows
        y, pull = torch.func.vjp(fn, x)
        y = y.detach()
        return tidy(read(trace_real(lambda w: pull(w)[0], torch.zeros_like(y)), y).T)


def local_hessian_pattern(fn, x: torch.Tensor) -> sp.csr_array:
    """A symmetric superset of the nonzeros of a scalar ``fn``'s Hessian at ``x``."""
    p = local_jacobian_pattern(torch.func.grad(fn), x)
    return tidy(p + p.T)
