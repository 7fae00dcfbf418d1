"""Detection and coloring on their own, against asdex's (the sparse benchmark's section 8).

The preparation of a sparse operator is its detection (the global pattern), its
coloring and the compilation of the compressed passes. Here the first two are timed
apart, warm (after a first call, so asdex's numba kernels are compiled), as medians:

- detection: ``di.sparsity_pattern(f, backend, x)`` (asdex: ``jacobian_sparsity`` /
  ``hessian_sparsity``); on autograd, the NumPy tracer of ``diffiface.sparse``;
- coloring: ``diffiface.sparse.coloring`` with AutoSparse's defaults (column coloring,
  or star coloring for a Hessian, largest-first order; asdex:
  ``jacobian_coloring_from_sparsity`` / ``hessian_coloring_from_sparsity``, the same
  orders, the same colors);
- the ratio of the sums is the issue's "coloring and detection within 2x of asdex";
  the coloring's own ratio shows what a Python greedy loop costs against asdex's
  numba-compiled one (diffiface has no numba dependency).
"""

from __future__ import annotations

from timing import median_us, one_thread  # first: one thread, before numpy loads

# isort: split
import importlib.util

import jax.numpy as jnp
import numpy as np
import torch
from sparse_common import fmt, point
from sparse_scaling import PROBLEMS

import diffiface as di
from diffiface.sparse import coloring

HAVE_ASDEX = importlib.util.find_spec("asdex") is not None
HEADER = [
    "problem",
    "n",
    "framework",
    "detection ms",
    "coloring ms",
    "asdex detection ms",
    "asdex coloring ms",
    "detection + coloring / asdex's",
    "coloring / asdex's",
]


def median_seconds(fn, rounds: int) -> float:
    """The median of ``rounds`` timed calls, after one untimed call."""
    return median_us(fn, rounds, warmup=1) * 1e-6


def _ours(f, backend, x, hessian: bool, rounds: int) -> tuple:
    pattern = di.sparsity_pattern(f, backend, x, hessian=hessian)
    color = coloring.star_coloring if hessian else coloring.column_coloring
    detect = median_seconds(lambda: di.sparsity_pattern(f, backend, x, hessian=hessian), rounds)
    return detect, median_seconds(lambda: color(pattern), rounds), color(pattern)


def _asdex(f, x, hessian: bool, rounds: int) -> tuple:
    import asdex

    detect = asdex.hessian_sparsity if hessian else asdex.jacobian_sparsity
    color = (
        asdex.hessian_coloring_from_sparsity
        if hessian
        else lambda p: asdex.jacobian_coloring_from_sparsity(p, mode="fwd")
    )
    pattern = detect(f, x)
    colored = color(pattern)
    t_detect = median_seconds(lambda: detect(f, x), rounds)
    return t_detect, median_seconds(lambda: color(pattern), rounds), int(colored.num_colors)


def _x(fw: str, n: int, hessian: bool):
    x0 = np.random.default_rng(0).uniform(-1, 1.5, n) if hessian else point(n)
    return {"jax": jnp.asarray, "torch": torch.tensor}.get(fw, np.asarray)(x0)


BACKENDS = {"jax": di.AutoJax, "torch": di.AutoTorch, "autograd": di.AutoAutograd}


def case(problem: str, n: int, fw: str, rounds: int) -> list:
    """One row: detection and coloring of ``problem`` at about n unknowns on ``fw``."""
    f, hessian = PROBLEMS[problem]
    if problem.startswith("Brusselator"):
        n = 2 * round((n / 2) ** 0.5) ** 2
    x = _x(fw, n, hessian)
    detect, color, colors = _ours(f, BACKENDS[fw](), x, hessian, rounds)
    row = [problem, n, fw, detect * 1e3, color * 1e3]
    if fw == "jax" and HAVE_ASDEX:
        a_detect, a_color, a_colors = _asdex(f, x, hessian, rounds)
        if a_colors != int(colors.max()) + 1:
            raise AssertionError(f"{problem} n={n}: colors {colors.max() + 1}, asdex {a_colors}")
        row += [a_detect * 1e3, a_color * 1e3, (detect + color) / (a_detect + a_color)]
        row.append(color / a_color)
    else:
        row += [None] * 4
    print(" | ".join(fmt(v) for v in row), flush=True)
    return [fmt(v) for v in row]


def table(sizes=(2000, 10000, 100000), rounds: int = 3) -> dict:
    frameworks = ["jax", "torch"]
    if importlib.util.find_spec("autograd") is not None:
        frameworks.append("autograd")
    rows = [
        case(problem, n, fw, rounds) for problem in PROBLEMS for n in sizes for fw in frameworks
    ]
    return {"header": HEADER, "rows": rows}


if __name__ == "__main__":
    import sys

    import jax

    jax.config.update("jax_enable_x64", True)
    one_thread()
    table((200,) if "--tiny" in sys.argv else (2000, 10000, 100000))
