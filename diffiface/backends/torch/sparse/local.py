"""Local sparsity patterns of torch functions: the nonzeros at one x, in one pass.

f is linearized at x (``torch.func.linearize``: one evaluation, the primal values kept
as constants in the traced JVP), and the global detector reads that linear program:
masks (relu, where, max) and zero factors are x's, so the pattern is a superset of the
derivative's nonzeros at x. An f with an op that has no forward-mode derivative is read
through its pullback (``torch.func.vjp``).
"""

from __future__ import annotations

import warnings

import scipy.sparse as sp
import torch

from .detect import _tidy, jacobian_pattern

__all__ = ["local_hessian_pattern", "local_jacobian_pattern"]


def local_jacobian_pattern(fn, x: torch.Tensor) -> sp.csr_array:
    """A superset of the nonzeros of ``fn``'s Jacobian at ``x`` (rows: fn(x) flattened)."""
    x = x.detach()
    try:
        with warnings.catch_warnings():  # (torch's constant folding inside linearize)
            warnings.filterwarnings("ignore", "Attempted to insert a get_attr", UserWarning)
            _, jvp = torch.func.linearize(fn, x)
    except (NotImplementedError, RuntimeError):  # an op without forward-mode AD: rows
        y, pull = torch.func.vjp(fn, x)
        rows = jacobian_pattern(lambda w: pull(w)[0], y.detach())
        return _tidy(rows.T)
    return jacobian_pattern(jvp, x)


def local_hessian_pattern(fn, x: torch.Tensor) -> sp.csr_array:
    """A symmetric superset of the nonzeros of a scalar ``fn``'s Hessian at ``x``."""
    p = local_jacobian_pattern(torch.func.grad(fn), x)
    return _tidy(p + p.T)
