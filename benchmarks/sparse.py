"""Sparse Jacobians and Hessians (AutoSparse), measured in one run (float64, CPU, one
thread, medians of interleaved repeats; every result checked against the dense one).

1. JAX against asdex (when installed): the Brusselator Jacobian (N = 32 and 48: 2048
   and 4608 unknowns) and the Rosenbrock Hessian (n = 4000), prepared sparse call
   against asdex's jitted one, colors, preparation time, and the dense jitted call.
2. torch: the same problems against ``torch.func.jacrev`` / ``torch.func.hessian``.
3. autograd and finite differences: a sparse call against colors x one prepared jvp
   (hvp for the Hessian).
4. Zero missed nonzeros: every global pattern against the dense Jacobian at random
   points, on every problem.
5. How cost grows: Brusselator Jacobians for n = 1e3, 1e4, 1e5, sparse and dense.
6. Colors against SparseMatrixColorings.jl and ColPack (sparse_colors.py).
7. Call, unprepared call and preparation against asdex at n = 2e3, 1e4, 1e5, JAX and
   torch (sparse_scaling.py).
8. Detection and coloring alone against asdex's, at the same sizes (sparse_detection.py).
9. Evaluations of f by finite-difference sparse Hessians and Jacobians (sparse_evals.py).

Run: ``taskset -c 0 python benchmarks/sparse.py [--quick | --tiny] [--md
docs/sparse_results.md] [--png docs/sparse_growth.png]``. ``--quick`` takes smaller
sizes and fewer matrices (about a minute of CPU); ``--tiny`` checks that every
section runs (the tests use it); neither has meaningful timings.
"""

from __future__ import annotations

import sys
import time

from timing import interleaved, one_thread  # first: one thread, before numpy loads

# isort: split
import importlib.util
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import sparse_colors
import sparse_detection
import sparse_evals
import sparse_scaling
import torch
from sparse_common import colors_of, dense_of, nnz_of, point, seconds

import diffiface as di
from diffiface.testing._sparse import brusselator, rosenbrock

jax.config.update("jax_enable_x64", True)
one_thread()
ROUNDS = 5
HAVE_ASDEX = importlib.util.find_spec("asdex") is not None
ROWS: list = []  # (problem, configuration, value, unit, target, ok)


def row(problem, config, value, unit, target="", ok=None):
    ROWS.append((problem, config, value, unit, target, ok))
    mark = "" if ok is None else (" ✓" if ok else " ✗")
    print(f"{problem:28} {config:44} {value:12.4g} {unit:6} {target}{mark}", flush=True)


def blocked(fn):
    return lambda: jax.block_until_ready(fn())


# ---- 1. JAX against asdex ---------------------------------------------------------
def jax_vs_asdex(name, f, n, hessian, quick):
    x = jnp.asarray(point(n) if not hessian else np.random.default_rng(0).uniform(-1, 1.5, n))
    op = "hessian" if hessian else "jacobian"
    sparse = di.AutoSparse(di.AutoJax())
    prepare = di.prepare_hessian if hessian else di.prepare_jacobian
    call = di.hessian if hessian else di.jacobian
    prep, t_prep = seconds(lambda: prepare(f, sparse, x))
    ours = colors_of(prep, op)
    dense = jax.jit(jax.hessian(f) if hessian else jax.jacfwd(f))
    want = np.asarray(dense(x))
    got = dense_of(call(f, sparse, x, prep=prep))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    configs = {"diffiface": blocked(lambda: call(f, sparse, x, prep=prep))}
    if HAVE_ASDEX:
        import asdex

        def asdex_prep():
            if hessian:
                c = asdex.hessian_coloring(f, x)
                fn = jax.jit(asdex.hessian_from_coloring(f, c))
            else:
                c = asdex.jacobian_coloring(f, x)
                fn = jax.jit(asdex.jacobian_from_coloring(f, c))
            jax.block_until_ready(fn(x))
            return c, fn

        (colored, fn), t_asdex = seconds(asdex_prep)
        np.testing.assert_allclose(dense_of(fn(x)), want, rtol=1e-10, atol=1e-10)
        configs["asdex (jit)"] = blocked(lambda: fn(x))
    repeats = 50 if quick else 500
    got = interleaved(configs, repeats, ROUNDS, warmup=5, round_warmup=5)
    got["dense (jit)"] = interleaved({"d": blocked(lambda: dense(x))}, ROUNDS, ROUNDS, warmup=1)[
        "d"
    ]
    us = got["diffiface"]
    row(name, f"JAX sparse {op}, prepared call", us, "µs")
    row(name, "JAX dense (jit)", got["dense (jit)"], "µs", f"sparse {got['dense (jit)'] / us:.0f}x")
    if HAVE_ASDEX:
        ratio = us / got["asdex (jit)"]
        row(name, "asdex (jit)", got["asdex (jit)"], "µs")
        row(name, "diffiface / asdex, call", ratio, "ratio", "≤ 1.2", ratio <= 1.2)
        theirs = colored.coloring.num_colors if hasattr(colored, "coloring") else None
        theirs = theirs or _asdex_colors(colored)
        row(
            name,
            f"colors: ours {ours}, asdex {theirs}",
            ours,
            "",
            "≤ asdex",
            ours <= theirs,
        )
        row(
            name,
            "diffiface / asdex, preparation",
            t_prep / t_asdex,
            "ratio",
            "≤ 2",
            t_prep / t_asdex <= 2,
        )
    else:
        row(name, "asdex not installed (pip install asdex)", float("nan"), "")


def _asdex_colors(colored):
    for attr in ("num_colors", "n_colors"):
        if hasattr(colored, attr):
            return int(getattr(colored, attr))
    return int(np.max(colored.colors)) + 1


# ---- 2. torch ----------------------------------------------------------------------
def torch_vs_func(name, f, n, hessian, target, quick):
    x = torch.tensor(point(n) if not hessian else np.random.default_rng(0).uniform(-1, 1.5, n))
    sparse = di.AutoSparse(di.AutoTorch())
    prepare = di.prepare_hessian if hessian else di.prepare_jacobian
    call = di.hessian if hessian else di.jacobian
    prep = prepare(f, sparse, x)
    dense = torch.func.hessian(f) if hessian else torch.func.jacrev(f)
    want = dense(x).numpy()
    np.testing.assert_allclose(
        dense_of(call(f, sparse, x, prep=prep)), want, rtol=1e-10, atol=1e-10
    )
    configs = {"diffiface": lambda: call(f, sparse, x, prep=prep), "dense": lambda: dense(x)}
    repeats = 10 if quick else 30
    got = interleaved(configs, repeats, ROUNDS, warmup=1)
    what = "torch.func.hessian" if hessian else "torch.func.jacrev"
    row(name, "torch sparse, prepared call", got["diffiface"], "µs")
    row(name, what, got["dense"], "µs")
    speedup = got["dense"] / got["diffiface"]
    row(name, f"{what} / sparse", speedup, "x", f"≥ {target}", speedup >= target)


# ---- 3. autograd and finite differences -------------------------------------------
def per_color(name, backend, f, n, hessian, quick):
    import autograd.numpy as anp  # noqa: F401  (the scenario functions take its arrays)

    x = point(n) if not hessian else np.random.default_rng(0).uniform(-1, 1.5, n)
    sparse = di.AutoSparse(backend, sparsity_detector=_pattern(f, n, hessian))
    op = "hessian" if hessian else "jacobian"
    if hessian:
        prep = di.prepare_hessian(f, sparse, x)
        v = np.ones(n)
        one = di.prepare_hvp(f, backend, x, v)
        configs = {
            "sparse": lambda: di.hessian(f, sparse, x, prep=prep),
            "one": lambda: di.hvp(f, backend, x, v, prep=one),
        }
    else:
        prep = di.prepare_jacobian(f, sparse, x)
        v = np.ones(n)
        one = di.prepare_jvp(f, backend, x, v)
        configs = {
            "sparse": lambda: di.jacobian(f, sparse, x, prep=prep),
            "one": lambda: di.jvp(f, backend, x, v, prep=one),
        }
    colors = colors_of(prep, op)
    repeats = 20 if quick else 100
    got = interleaved(configs, repeats, ROUNDS, warmup=2)
    ratio = got["sparse"] / (colors * got["one"])
    kind = "hvp" if hessian else "jvp"
    label = f"{type(backend).__name__.removeprefix('Auto')}: sparse / ({colors} x one {kind})"
    row(name, label, ratio, "ratio", "≤ 1.3", ratio <= 1.3)


def _pattern(f, n, hessian):
    """The global pattern (JAX's detector: autograd and finite differences have none)."""
    return di.sparsity_pattern(f, di.AutoJax(), jnp.ones(n), hessian=hessian)


# ---- 4. missed nonzeros ------------------------------------------------------------
def missed(grid, n):
    total = 0
    problems = [(brusselator, 2 * grid * grid, False), (rosenbrock, n, True)]
    for f, n, hessian in problems:
        for backend in (di.AutoJax(), di.AutoTorch()):
            to = jnp.asarray if backend.framework == "jax" else torch.tensor
            x0 = to(point(n))
            p = di.sparsity_pattern(f, backend, x0, hessian=hessian).toarray()
            for seed in range(3):
                x = point(n, seed + 1)
                dense = jax.hessian(f) if hessian else jax.jacfwd(f)
                nz = np.asarray(dense(jnp.asarray(x))) != 0
                total += int((nz & ~p).sum())
    row("every problem", "nonzeros missed by the global patterns", total, "", "= 0", total == 0)


# ---- 5. how cost grows -------------------------------------------------------------
def growth(sizes, quick):
    out = []
    for target in sizes:
        grid = max(3, round((target / 2) ** 0.5))
        for fw in ("jax", "torch"):
            out.append(grow_one(fw, 2 * grid * grid, quick))
    return out


def grow_one(fw, n, quick):
    """(framework, n, µs per prepared call, preparation s, bytes, dense µs or None,
    dense bytes) of the Brusselator Jacobian with n unknowns."""
    backend = di.AutoJax() if fw == "jax" else di.AutoTorch()
    x = jnp.asarray(point(n)) if fw == "jax" else torch.tensor(point(n))
    sparse = di.AutoSparse(backend)
    prep, t_prep = seconds(lambda: di.prepare_jacobian(brusselator, sparse, x))
    colors = colors_of(prep, "jacobian")
    nnz = nnz_of(di.jacobian(brusselator, sparse, x, prep=prep))

    def call():
        return jax.block_until_ready(di.jacobian(brusselator, sparse, x, prep=prep))

    us = interleaved({"s": call}, 10 if quick else 30, 3, warmup=1)["s"]
    mem = colors * n * 8 + nnz * 16  # the products and the result
    dense_us = None
    if n <= (12000 if not quick else 2500):  # a dense float64 Jacobian at n = 1e5 would take 80 GB
        d = jax.jit(jax.jacrev(brusselator)) if fw == "jax" else torch.func.jacrev(brusselator)
        dense_us = interleaved({"d": lambda: jax.block_until_ready(d(x))}, 3, 1, warmup=1)["d"]
    dense_txt = (
        f"cannot run ({n * n * 8 / 1e9:.0f} GB)" if dense_us is None else f"{dense_us / 1e3:.1f} ms"
    )
    row(
        f"Brusselator n={n}",
        f"{fw}: sparse call / prep / memory",
        us,
        "µs",
        f"prep {t_prep:.2f} s, {mem / 1e6:.1f} MB; dense {dense_txt}",
    )
    return fw, n, us, t_prep, mem, dense_us, n * n * 8


def chart(points, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for fw, style in (("jax", "o-"), ("torch", "s-")):
        pts = [p for p in points if p[0] == fw]
        ax.loglog([p[1] for p in pts], [p[2] / 1e3 for p in pts], style, label=f"{fw} sparse")
        dense = [p for p in pts if p[5] is not None]
        ax.loglog(
            [p[1] for p in dense],
            [p[5] / 1e3 for p in dense],
            style[0] + "--",
            label=f"{fw} dense jacrev",
        )
    ax.set_xlabel("unknowns n (Brusselator)")
    ax.set_ylabel("ms per Jacobian (prepared)")
    ax.set_title("Sparse against dense Jacobians, one CPU thread")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


SIZES = {  # Brusselator grids N, Rosenbrock n (JAX, torch), growth, scaling and evals n
    "full": dict(grids=(32, 48), rosen=(4000, 4000), growth=(1000, 10000, 100000),
                 scaling=(2000, 10000, 100000), evals=(100, 1000), missed=(16, 500), rounds=5),
    "quick": dict(grids=(32,), rosen=(2000, 1000), growth=(1000,), scaling=(2000,),
                  evals=(100,), missed=(16, 500), rounds=3),
    "tiny": dict(grids=(6,), rosen=(50, 50), growth=(200,), scaling=(200,), evals=(50,),
                 missed=(4, 20), rounds=1),
}  # fmt: skip


def table_lines(t: dict) -> list:
    lines = ["| " + " | ".join(t["header"]) + " |", "|" + " --- |" * len(t["header"])]
    return lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in t["rows"]]


COLORS_TEXT = """## Colors against SparseMatrixColorings.jl and ColPack

Columns: the colors of every kind and order that `diffiface.sparse.coloring` offers
(`KINDS`, `ORDERS`; "best" is the fewest), against SparseMatrixColorings.jl (SMC) in
natural (N) and largest-first (LF) order, ColPack, and what the matrix's construction
gives ("known"). A symmetric matrix is colored by columns and by its symmetric kinds
(a Jacobian coloring by rows would repeat the columns'); the acyclic kinds are held to
the star references, the bicolorings to the better of the column and row ones. "banded
b" has b diagonals below and b above the main one. The references are stored in
`benchmarks/sparse_reference.json` with their sources:

"""


def colors_md(t: dict) -> str:
    sources = "\n".join(f"- **{k}**: {v}" for k, v in sparse_colors.SOURCES.items())
    known = "\n".join(f"- {r}" for r in t["known"])
    return (
        COLORS_TEXT + sources + "\n\n" + "\n".join(table_lines(t)) + "\n\n"
        "Known counts by construction:\n\n" + known + "\n\n"
        f"diffiface's colorings took {t['coloring_seconds']:.1f} s in all.\n"
    )


SCALING_TEXT = """## Against asdex from 2e3 to 1e5 unknowns

""" + sparse_scaling.__doc__.split("\n\n", 1)[1]

DETECTION_TEXT = """## Detection and coloring against asdex

""" + sparse_detection.__doc__.split("\n\n", 1)[1]

EVALS_TEXT = """## Finite differences: evaluations of f

""" + sparse_evals.__doc__.split("\n\n", 1)[1]


def markdown(path, wall, cpu, tables):
    lines = [
        "| problem | configuration | value | unit | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for problem, config, value, unit, target, ok in ROWS:
        mark = "" if ok is None else (" ✓" if ok else " ✗")
        lines.append(f"| {problem} | {config} | {value:.4g} | {unit} | {target}{mark} |")
    parts = [
        "# Sparse benchmark\n\n"
        "Written by `benchmarks/sparse.py` (`make bench-sparse`; float64, CPU, one thread, "
        "medians of interleaved repeats; each sparse result checked against the dense one "
        f"or the framework's own products first). Whole run: {wall:.0f} s ({cpu:.0f} s of "
        "CPU).\n\n"
        "## Checks\n\n" + "\n".join(lines) + "\n\n"
        "![sparse against dense](sparse_growth.png)\n"
    ]
    if "colors" in tables:
        parts.append(colors_md(tables["colors"]))
    if "scaling" in tables:
        parts.append(SCALING_TEXT + "\n" + "\n".join(table_lines(tables["scaling"])) + "\n")
    if "detection" in tables:
        parts.append(DETECTION_TEXT + "\n" + "\n".join(table_lines(tables["detection"])) + "\n")
    if "evals" in tables:
        parts.append(EVALS_TEXT + "\n" + "\n".join(table_lines(tables["evals"])) + "\n")
    with open(path, "w") as fh:
        fh.write("\n".join(parts))


def checks(size: dict, quick: bool) -> list:
    """Sections 1 to 5; returns the growth points for the chart."""
    rosen, rosen_torch = size["rosen"]
    for grid in size["grids"]:
        n = 2 * grid * grid
        jax_vs_asdex(f"Brusselator {n}", brusselator, n, False, quick)
    jax_vs_asdex(f"Rosenbrock Hessian {rosen}", rosenbrock, rosen, True, quick)
    n = 2 * size["grids"][0] ** 2
    torch_vs_func(f"Brusselator {n}", brusselator, n, False, 50, quick)
    name = f"Rosenbrock Hessian {rosen_torch}"
    torch_vs_func(name, rosenbrock, rosen_torch, True, 30, quick)
    if importlib.util.find_spec("autograd") is not None:
        per_color(f"Brusselator {n}", di.AutoAutograd(), brusselator, n, False, quick)
        name = f"Rosenbrock Hessian {rosen}"
        per_color(name, di.AutoAutograd(), rosenbrock, rosen, True, quick)
    per_color(f"Brusselator {n}", di.AutoFiniteDifferences(), brusselator, n, False, quick)
    missed(*size["missed"])
    return growth(size["growth"], quick)


def main(mode="full", md=None, png=None):
    """Every section at the sizes of ``mode`` ("full", "quick" or "tiny"); the tables
    of sections 6 to 9 are returned (and written with the checks to ``md``)."""
    start, cpu = time.perf_counter(), time.process_time()
    size, quick = SIZES[mode], mode != "full"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        points = checks(size, quick)
        tables = {
            "colors": sparse_colors.table(mode),
            "scaling": sparse_scaling.table(size["scaling"], size["rounds"]),
            "detection": sparse_detection.table(size["scaling"], size["rounds"]),
            "evals": sparse_evals.table(size["evals"]),
        }
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"\n{wall:.0f} s ({cpu:.0f} s of CPU)")
    if md:
        markdown(md, wall, cpu, tables)
    if png:
        chart(points, png)
    return tables


if __name__ == "__main__":
    args = sys.argv[1:]
    md = args[args.index("--md") + 1] if "--md" in args else None
    png = args[args.index("--png") + 1] if "--png" in args else None
    mode = "tiny" if "--tiny" in args else "quick" if "--quick" in args else "full"
    main(mode, md=md, png=png)
