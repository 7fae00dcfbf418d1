"""Evaluations of f by finite-difference sparse Hessians and Jacobians, against colors.

A counting f (NumPy) goes through ``AutoSparse(AutoFiniteDifferences())``: with its
defaults where they work, else with JAX's global pattern given. Counted: the
evaluations while preparing, per prepared call, per unprepared call (after a first
one), and per dense finite-difference call at the same n. Each sparse result is
checked against the closed form (float64; rtol 1e-4 of the largest entry, the
finite-difference error).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from sparse_common import colors_of, dense_of, fmt

import diffiface as di
from diffiface.testing import _sparse as scen

PROBLEMS = {
    "Rosenbrock Hessian": (scen.rosenbrock, True, lambda x: scen._rosenbrock_grad_hess(x)[1]),
    "arrow Hessian": (scen.arrow, True, scen._arrow_hess),
    "banded Jacobian": (scen.banded, False, scen._banded_jac),
    "Brusselator Jacobian": (scen.brusselator, False, scen._brusselator_jac),
}
HEADER = [
    "problem",
    "n",
    "detector",
    "colors",
    "f calls preparing",
    "f calls, prepared call",
    "f calls, unprepared call",
    "f calls per prepared call / colors",
    "f calls, dense call",
]


class Counting:
    """f, counting its calls."""

    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, x):
        self.calls += 1
        return self.f(x)

    def during(self, fn):
        before = self.calls
        out = fn()
        return out, self.calls - before


def _backend(f, n, hessian):
    """(AutoSparse on finite differences, its detector's name): the defaults when they
    prepare, else JAX's global pattern given."""
    fd = di.AutoFiniteDifferences()
    x = np.full(n, 0.7)
    prepare = di.prepare_hessian if hessian else di.prepare_jacobian
    try:
        prepare(f, di.AutoSparse(fd), x)
        return di.AutoSparse(fd), "default"
    except Exception:  # no global detector for NumPy code: give JAX's pattern
        p = di.sparsity_pattern(f, di.AutoJax(), jnp.full(n, 0.7), hessian=hessian)
        return di.AutoSparse(fd, sparsity_detector=p), "given (JAX's)"


def case(problem: str, n: int) -> list:
    f, hessian, reference = PROBLEMS[problem]
    if problem.startswith("Brusselator"):
        n = 2 * round((n / 2) ** 0.5) ** 2
    backend, detector = _backend(f, n, hessian)
    g = Counting(f)
    x = np.random.default_rng(0).uniform(0.5, 1.5, n)
    prepare = di.prepare_hessian if hessian else di.prepare_jacobian
    call = di.hessian if hessian else di.jacobian
    prep, preparing = g.during(lambda: prepare(g, backend, x))
    got, per_call = g.during(lambda: call(g, backend, x, prep=prep))
    want = reference(x)
    np.testing.assert_allclose(dense_of(got), want, atol=1e-4 * np.abs(want).max())
    call(g, backend, x)
    _, unprepared = g.during(lambda: call(g, backend, x))
    dense = None
    if n <= 2000:  # a dense call costs n or more evaluations of f
        _, dense = g.during(lambda: call(g, di.AutoFiniteDifferences(), x))
    colors = colors_of(prep, "hessian" if hessian else "jacobian")
    row = [problem, n, detector, colors, preparing, per_call, unprepared]
    row += [per_call / max(colors, 1), dense]
    print(" | ".join(fmt(v) for v in row), flush=True)
    return [fmt(v) for v in row]


def table(sizes=(100, 1000)) -> dict:
    return {"header": HEADER, "rows": [case(p, n) for p in PROBLEMS for n in sizes]}


if __name__ == "__main__":
    import sys

    import jax

    jax.config.update("jax_enable_x64", True)
    table((50,) if "--tiny" in sys.argv else (100, 1000))
