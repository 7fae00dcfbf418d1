"""Local sparsity patterns of JAX functions: the nonzeros at one x, in one pass.

f's pullback at x (``jax.vjp``: one evaluation, the primal values kept as constants) is
a linear program in the cotangent; the global detector reads it, and its transpose is
the pattern. The branches, loop counts, ``select_n`` choices (relu, max, clip) and zero
factors are those of x, so the pattern is a superset of the derivative's nonzeros at x,
often smaller than the global one. A ``custom_vjp``'s own backward rule is read. An f
without reverse mode (a ``while_loop``) is read through its linearization instead.
"""

from __future__ import annotations

import jax
import scipy.sparse as sp

from .detect import canonical, jacobian_pattern

__all__ = ["local_hessian_pattern", "local_jacobian_pattern"]


def local_jacobian_pattern(fn, x) -> sp.csr_array:
    """A superset of the nonzeros of ``fn``'s Jacobian at ``x`` (rows: fn(x) flattened)."""
    try:
        y, pull = jax.vjp(fn, x)
        rows = jacobian_pattern(lambda w: pull(w)[0], y)
    except (TypeError, ValueError, NotImplementedError):  # no reverse mode: columns
        _, lin = jax.linearize(fn, x)
        return jacobian_pattern(lin, x)
    return canonical(sp.csr_array(rows.T))


def local_hessian_pattern(fn, x) -> sp.csr_array:
    """A symmetric superset of the nonzeros of a scalar ``fn``'s Hessian at ``x``."""
    p = local_jacobian_pattern(lambda z: jax.grad(fn)(z).ravel(), x)
    return canonical(sp.csr_array(p + p.T))
