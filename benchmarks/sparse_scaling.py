"""Call, unprepared call and preparation against asdex, from n = 2e3 to 1e5.

The Rosenbrock Hessian, a banded (tridiagonal) Jacobian and the Brusselator
Jacobian, on JAX (against asdex's jitted call, when asdex is importable) and torch
(asdex is JAX only). Times are medians over paired rounds on one thread:

- prepared call: ``jacobian(f, backend, x, prep=prep)`` (asdex: its jitted
  ``jacobian_from_coloring`` / ``hessian_from_coloring``);
- unprepared call: ``jacobian(f, backend, x)`` after a first one (asdex has no such
  call: its user keeps the function ``asdex.jacobian(f, x)`` returns);
- preparation: one ``prepare_*`` and the first prepared call, compilation included
  (asdex: its coloring, ``jax.jit`` and the first call).

Each result is checked first against the framework's own jvp (hvp) along a random
direction (float64, rtol 1e-9).
"""

from __future__ import annotations

from timing import one_thread  # first: one thread, before numpy loads

# isort: split
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import torch
from sparse_common import colors_of, fmt, paired, point, seconds

import diffiface as di
from diffiface.testing._sparse import banded, brusselator, rosenbrock

HAVE_ASDEX = importlib.util.find_spec("asdex") is not None
PROBLEMS = {
    "Rosenbrock Hessian": (rosenbrock, True),
    "banded Jacobian": (banded, False),
    "Brusselator Jacobian": (brusselator, False),
}
HEADER = [
    "problem",
    "n",
    "framework",
    "colors (asdex)",
    "prepared µs",
    "unprepared µs",
    "unprepared / prepared",
    "preparation s",
    "asdex call µs",
    "diffiface / asdex call",
    "asdex preparation s",
    "diffiface / asdex preparation",
]


def unknowns(problem: str, n: int) -> int:
    if problem.startswith("Brusselator"):
        return 2 * round((n / 2) ** 0.5) ** 2
    return n


def _x(n, hessian):
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1.5, n) if hessian else point(n)


def _check(got, f, x, hessian, fw):
    """got (sparse) times a random v against the framework's own jvp (hvp)."""
    v = np.random.default_rng(1).standard_normal(x.shape[0])
    if fw == "jax":
        vj = jnp.asarray(v)
        g = jax.grad(f) if hessian else f
        want = np.asarray(jax.jvp(g, (x,), (vj,))[1])
        have = np.asarray(got @ vj)
    else:
        vt = torch.tensor(v)
        g = torch.func.grad(f) if hessian else f
        want = torch.func.jvp(g, (x,), (vt,))[1].numpy()
        have = (got @ vt[:, None]).to_dense().numpy().ravel()
    np.testing.assert_allclose(have, want, rtol=1e-9, atol=1e-9)


def _ours(f, backend, x, hessian):
    sparse = di.AutoSparse(backend)
    prepare = di.prepare_hessian if hessian else di.prepare_jacobian
    call = di.hessian if hessian else di.jacobian

    def block(a):
        return jax.block_until_ready(a) if isinstance(backend, di.AutoJax) else a

    def prep_and_first():
        p = prepare(f, sparse, x)
        return p, block(call(f, sparse, x, prep=p))

    (prep, got), t_prep = seconds(prep_and_first)
    op = "hessian" if hessian else "jacobian"
    configs = {
        "prepared": lambda: block(call(f, sparse, x, prep=prep)),
        "unprepared": lambda: block(call(f, sparse, x)),
    }
    return got, t_prep, colors_of(prep, op), configs


def _asdex(f, x, hessian):
    import asdex

    def prep_and_first():
        if hessian:
            c = asdex.hessian_coloring(f, x)
            fn = jax.jit(asdex.hessian_from_coloring(f, c))
        else:
            c = asdex.jacobian_coloring(f, x)
            fn = jax.jit(asdex.jacobian_from_coloring(f, c))
        return c, fn, jax.block_until_ready(fn(x))

    (c, fn, got), t = seconds(prep_and_first)
    return got, t, int(c.num_colors), lambda: jax.block_until_ready(fn(x))


def case(problem: str, n: int, fw: str, rounds: int) -> list:
    """One row of the table: problem at n unknowns on JAX or torch."""
    f, hessian = PROBLEMS[problem]
    n = unknowns(problem, n)
    x0 = _x(n, hessian)
    x = jnp.asarray(x0) if fw == "jax" else torch.tensor(x0)
    backend = di.AutoJax() if fw == "jax" else di.AutoTorch()
    got, t_prep, colors, configs = _ours(f, backend, x, hessian)
    _check(got, f, x, hessian, fw)
    theirs = None
    if fw == "jax" and HAVE_ASDEX:
        a_got, a_prep, a_colors, configs["asdex"] = _asdex(f, x, hessian)
        _check(a_got, f, x, hessian, fw)
        theirs = (a_prep, a_colors)
    us = paired(configs, rounds)
    row = [problem, n, fw, f"{colors} ({theirs[1]})" if theirs else str(colors)]
    row += [us["prepared"], us["unprepared"], us["unprepared"] / us["prepared"], t_prep]
    if theirs:
        row += [us["asdex"], us["prepared"] / us["asdex"], theirs[0], t_prep / theirs[0]]
    else:
        row += [None] * 4
    print(" | ".join(fmt(v) for v in row), flush=True)
    return [fmt(v) for v in row]


def table(sizes=(2000, 10000, 100000), rounds: int = 5) -> dict:
    rows = []
    for problem in PROBLEMS:
        for n in sizes:
            for fw in ("jax", "torch"):
                rows.append(case(problem, n, fw, rounds))
    return {"header": HEADER, "rows": rows}


if __name__ == "__main__":
    import sys

    jax.config.update("jax_enable_x64", True)
    one_thread()
    sizes = (200,) if "--tiny" in sys.argv else (2000,) if "--quick" in sys.argv else None
    table(sizes or (2000, 10000, 100000))
