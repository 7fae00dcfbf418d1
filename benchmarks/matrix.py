"""The performance matrix: diffiface time / the framework's best native time, for
operator x backend x input kind x call form x size, measured side by side.

Every row (matrix_cases.py) is checked once, outside the timing, against its native
twin (the same numbers, so no row times a wrong call), then both are timed in
interleaved rounds (timing.py: paired rounds, medians, one thread). Rows are printed
worst ratio first; the results go to a JSON file, the "Performance matrix" section of
docs/benchmarks.md and docs/matrix.png.

Targets (issue 29): n >= 1e3 within 1.3x (goal 1.1x), n = 10 (and scalar x) within 2x.

Run pinned: ``taskset -c 0 python benchmarks/matrix.py [--quick] [--json PATH]
[--no-docs] [--only SUBSTRING]`` (``make bench-matrix``, ``QUICK=1`` for the quick
mode: sizes 10 and 1e3, fewer rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOCS = os.path.join(ROOT, "docs")
sys.path[:0] = [HERE, ROOT]  # this checkout's diffiface, whatever is installed

from timing import interleaved, median_us, one_thread  # noqa: E402  (first: one thread)

# isort: split
import warnings  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from matrix_cases import Row, Skip, build, plan  # noqa: E402

import diffiface as di  # noqa: E402

START, END = "<!-- matrix:start -->", "<!-- matrix:end -->"
SMALL, LARGE, GOAL = 2.0, 1.3, 1.1


def target(n: int) -> float:
    return LARGE if n >= 1000 else SMALL


# ------------------------------------------------------------------ checking


def leaves(r) -> list:
    """The arrays of a result, in a fixed order (dicts by key; Tangents, tuples and
    lists in order), as NumPy."""
    if isinstance(r, dict):
        return [a for k in sorted(r) for a in leaves(r[k])]
    if isinstance(r, (tuple, list, di.Tangents)):
        return [a for v in r for a in leaves(v)]
    if hasattr(r, "detach"):
        r = r.detach()
        return [(r.to_dense() if r.layout != _strided() else r).cpu().numpy()]
    if hasattr(r, "todense"):  # a JAX BCOO or a scipy sparse matrix
        return [np.asarray(r.todense())]
    return [np.asarray(r)]


def matvec(J, r):
    """J @ r for a dense or sparse Jacobian of any framework, as NumPy."""
    if hasattr(J, "detach"):
        import torch

        return (J.detach() @ torch.from_numpy(r).to(J.dtype).to(J.device)).cpu().numpy()
    if type(J).__module__.startswith("jax"):
        import jax.numpy as jnp

        return np.asarray(J @ jnp.asarray(r))
    return np.asarray(J @ r)


def _strided():
    import torch

    return torch.strided


def check(row: Row, native, ours) -> None:
    """The two calls give the same numbers (FD rows: to finite-difference accuracy;
    sparse rows: their products with a random vector, never densified)."""
    want, got = native(), ours()
    if row.op.startswith("sparse"):
        r = np.random.default_rng(1).standard_normal(want.shape[-1])
        want, got = matvec(want, r), matvec(got, r)
    want, got = leaves(want), leaves(got)
    flat = lambda ls: np.concatenate([np.ravel(a) for a in ls]).astype(np.float64)  # noqa: E731
    w, g = flat(want), flat(got)
    rtol, atol = (1e-5, 1e-6) if row.fw == "fd" or row.kind == "float" else (1e-7, 1e-9)
    if row.fw == "mlx":  # float32
        rtol, atol = 1e-5, 1e-5
    if w.shape != g.shape or not np.allclose(g, w, rtol=rtol, atol=atol):
        raise AssertionError(
            f"{row.name}: diffiface differs from native (max |diff| "
            f"{np.max(np.abs(g - w)) if w.shape == g.shape else 'shape'})"
        )


# ------------------------------------------------------------------ timing


def measure(row: Row, quick: bool) -> dict:
    native, ours = build(row)
    check(row, native, ours)
    cost = max(median_us(native, 2), median_us(ours, 2))
    rounds = 5 if quick else 9
    if cost > 2e5:
        rounds = 3
    budget = (0.25 if quick else 1.0) * 1e6  # µs per row, both sides together
    repeat = max(rounds, min(rounds * 400, int(budget / 2 / cost)))
    t = interleaved(
        {"native": native, "diffiface": ours},
        repeat,
        rounds,
        warmup=1,
        round_warmup=2 if cost < 1000 else 0,
    )
    ratio = t["diffiface"] / t["native"]
    return {
        "fw": row.fw,
        "op": row.op,
        "kind": row.kind,
        "form": row.form,
        "n": row.n,
        "native_us": round(t["native"], 2),
        "diffiface_us": round(t["diffiface"], 2),
        "ratio": round(ratio, 3),
        "target": target(row.n),
        "ok": ratio <= target(row.n),
    }


def measured(row: Row, quick: bool) -> dict:
    """The row's measure; a row over its target is measured twice more and the median
    of the three ratios kept (``tries``: all three): on a shared machine another
    process's work can land on one side (an MLX call, evaluated by a second thread on
    the same pinned core, took 280 to 570 µs in blocks of one run)."""
    result = measure(row, quick)
    if result["ok"]:
        return result
    tries = [result, measure(row, quick), measure(row, quick)]
    result = sorted(tries, key=lambda r: r["ratio"])[1]
    result["tries"] = [r["ratio"] for r in tries]
    return result


def run(quick: bool, only: str | None) -> tuple[list, list]:
    one_thread()
    warnings.simplefilter("ignore", di.RecompileWarning)
    rows, failed = [], []
    todo = [r for r in plan(quick) if only is None or only in r.name]
    for i, row in enumerate(todo):
        began = time.perf_counter()
        try:
            result = measured(row, quick)
        except Skip as exc:
            print(f"[{i + 1}/{len(todo)}] {row.name}: skipped ({exc})", flush=True)
            continue
        except Exception as exc:  # a failing row is reported, not fatal
            failed.append({"row": row.name, "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(f"[{i + 1}/{len(todo)}] {row.name}: FAILED {failed[-1]['error']}", flush=True)
            if os.environ.get("MATRIX_TRACE"):
                traceback.print_exc()
            continue
        result["seconds"] = round(time.perf_counter() - began, 2)
        rows.append(result)
        mark = "" if result["ok"] else "  over target"
        print(
            f"[{i + 1}/{len(todo)}] {row.name}: {result['ratio']:.2f}x "
            f"({result['native_us']:.1f} / {result['diffiface_us']:.1f} µs){mark}",
            flush=True,
        )
    return rows, failed


# ------------------------------------------------------------------ output


def name(r: dict) -> str:
    return Row(r["fw"], r["op"], r["kind"], r["form"], r["n"]).name


def table(rows: list) -> list[str]:
    lines = [
        "| backend | operator | input | call form | n | native µs | diffiface µs | ratio "
        "| target |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        mark = f"≤ {r['target']:g}" + (" ✓" if r["ok"] else " ✗")
        size = Row(**{k: r[k] for k in Row._fields}).name.rsplit("n=", 1)[1]
        lines.append(
            f"| {r['fw']} | {r['op']} | {r['kind']} | {r['form']} | {size} | "
            f"{r['native_us']:.1f} | {r['diffiface_us']:.1f} | {r['ratio']:.2f} | {mark} |"
        )
    return lines


ABOUT = [  # the section's fixed text, before the measured summary
    "Every operator x backend x input kind x call form x size, as the ratio of "
    "diffiface's time to the framework's best native formulation of the same "
    "result, measured side by side in one process by `benchmarks/matrix.py` "
    "(`make bench-matrix`, `QUICK=1` for sizes 10 and 1e3 with fewer rounds): "
    "float64, one thread pinned, paired interleaved rounds, medians; each row is "
    "first checked to give the native numbers. Input kinds: the framework's "
    "arrays (`array`; autograd's are NumPy), NumPy arrays into JAX or torch (the "
    "native calls `jit` on NumPy then `np.asarray`, or `torch.from_numpy` then "
    "`.numpy()`), a Python float (scalar-x operators), a dict of two arrays "
    "(`pytree`). Call forms: `prepared` (`prep=`), `unprepared`, `f per call` (a "
    "closure made anew each call; the native makes the same closure: JAX's "
    "un-jitted transform, since jit of a new closure compiles every call, and "
    "`(hoisted jit)` against one jit taking the constant as an argument), "
    "`Tangents(4)` (against `jit(vmap(jvp))`, torch's vmap or loop, autograd's "
    "loop; `Tangents(4) stacked`: the same 4 tangents as one array, "
    "`Tangents.stacked(V)`, against the same native), `has_aux`, `pytree out` "
    "(f returns a dict). Sparse rows: unprepared "
    "AutoSparse against the prepared sparse call, and the prepared call against "
    "the dense native. Finite differences have no framework native: their rows "
    "compare with a plain NumPy central difference. MLX rows (benchmarks/matrix_mlx.py) "
    "run float32 (MLX's float64 is CPU only) and evaluate every result (`mx.eval`, both "
    "sides); their `Tangents(4)` natives give the 4 results as 4 arrays, as diffiface "
    "does (MLX evaluates each row of the vmapped stack as a node of its own: 1.2x the "
    "stacked call at n = 1e3). `prepared (vs mx.compile)` compares diffiface's prepared "
    "call with the native under `mx.compile`, which diffiface does not apply: a compiled "
    "function keeps what f read when traced (an array f closes over written in place or "
    "rebound, an `mlx.nn` model's updated parameters, `mx.random`'s state) and skips f's "
    "Python on later calls, and `mx.compile(..., inputs=...)` sees new values only where "
    "f reads them through the container it was given (benchmarks/mlx_gradient.py counts "
    "each case). A row over its target is measured twice more; the median of the three "
    "ratios is shown.",
    "",
    "- Functions: `sum(sin(x) * x)` (gradient, hvp, hessian), `sin(x) * x` "
    "(jvp, vjp, jacobian, scalar x), per sample `sin(x) * x[:, :1]` on a batch of "
    "shape (n, 4) (batched_jacobian), the Brusselator and Rosenbrock (sparse; the "
    "Brusselator's n rounds to 2N²: 2048, 10082, 100352).",
    "- Where the framework has several sensible formulations (`torch.autograd.grad` "
    "or `torch.func`, forward-mode duals, `jacfwd` or `jacrev`, vmap or a loop), "
    "the row's native is the fastest, chosen by a short timing.",
    "- The machine is shared: rows at 10 elements or with calls under 50 µs move by "
    "10-30% between runs; the ratio, measured in paired rounds, moves less than "
    "the times.",
    "",
]


def markdown(saved: dict, path: str) -> None:
    """Replace the matrix section of ``path`` (appended the first time)."""
    rows, failed, quick = saved["rows"], saved["failed"], saved["quick"]
    day, where = saved.get("date", time.strftime("%Y-%m-%d")), saved.get("commit", "unknown")
    over = [r for r in rows if not r["ok"]]
    goal = sum(r["ratio"] <= GOAL for r in rows if r["n"] >= 1000)
    large = sum(r["n"] >= 1000 for r in rows)
    lines = [
        "## Performance matrix",
        "",
        *ABOUT,
        f"Measured {day} on {where}{' (quick mode)' if quick else ''} in "
        f"{saved['wall_s']:.0f} s: {len(rows)} rows, {len(over)} over their target "
        f"(n ≥ 1e3: ≤ {LARGE}x, goal {GOAL}x, met by {goal} of {large}; n ≤ 10: "
        f"≤ {SMALL}x)" + (f"; {len(failed)} rows failed to run" if failed else "") + ".",
        "",
        "![diffiface time / native time, worst rows](matrix.png)",
        "",
        "### Worst rows",
        "",
        *table(rows[:25]),
        "",
        "### All rows, worst first",
        "",
        *table(rows),
    ]
    if failed:
        lines += ["", "Rows that failed to run:", ""]
        lines += [f"- {f['row']}: `{f['error'][:200]}`" for f in failed]
    section = START + "\n" + "\n".join(lines) + "\n" + END
    with open(path) as fh:
        text = fh.read()
    if START in text:
        head, rest = text.split(START)
        text = head + section + rest.split(END)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as fh:
        fh.write(text)


def chart(rows: list, path: str, worst: int = 40) -> None:
    """Two panels of sorted bars (log scale), orange where over target: every row, and
    the worst rows with their names and targets (black ticks)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    color = lambda r: "tab:green" if r["ok"] else "tab:orange"  # noqa: E731
    shown = rows[:worst]
    fig, (top, ax) = plt.subplots(
        2, 1, figsize=(9, 0.22 * len(shown) + 4.5), height_ratios=(2.5, 0.22 * len(shown))
    )
    top.bar(range(len(rows)), [r["ratio"] for r in rows], color=[color(r) for r in rows])
    top.set_yscale("log")
    top.axhline(1.0, color="grey", linewidth=0.8)
    over = sum(not r["ok"] for r in rows)
    top.set_title(f"all {len(rows)} rows, worst first: {over} over target (orange)", fontsize=9)
    top.set_ylabel("diffiface / native")
    top.set_xticks([])
    ax.barh([name(r) for r in shown], [r["ratio"] for r in shown], color=[color(r) for r in shown])
    for i, r in enumerate(shown):
        ax.plot([r["target"]] * 2, [i - 0.4, i + 0.4], color="black", linewidth=1)
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=6)
    ax.set_xlabel(f"diffiface / native time, the worst {len(shown)} rows (black tick: target)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def commit() -> str:
    """The checkout's commit, with "+changes" when diffiface/ has uncommitted edits."""
    git = ["git", "-C", ROOT]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "diffiface"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default=os.path.join(HERE, "matrix_results.json"))
    p.add_argument("--no-docs", action="store_true", help="write no docs/ files")
    p.add_argument("--only", help="only rows whose name contains this")
    p.add_argument(
        "--docs-from",
        metavar="JSON",
        help="measure nothing: rewrite the docs section and picture from a saved run",
    )
    a = p.parse_args(argv)
    if a.docs_from:
        with open(a.docs_from) as fh:
            saved = json.load(fh)
    else:
        saved = measure_all(a.quick, a.only, a.json)
    if not a.no_docs and a.only is None:
        markdown(saved, os.path.join(DOCS, "benchmarks.md"))
        chart(saved["rows"], os.path.join(DOCS, "matrix.png"))
    return saved


def measure_all(quick: bool, only: str | None, path: str) -> dict:
    """Run the matrix, print the worst rows, save everything to ``path``."""
    began = time.perf_counter()
    rows, failed = run(quick, only)
    wall = time.perf_counter() - began
    rows.sort(key=lambda r: -r["ratio"])
    print("\nworst rows:")
    for r in rows[:30]:
        print(f"  {name(r):70} {r['ratio']:8.2f}x  (≤ {r['target']:g})")
    over = sum(not r["ok"] for r in rows)
    print(f"\n{len(rows)} rows, {over} over target, {len(failed)} failed, {wall:.0f} s")
    saved = {
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": round(wall),
        "quick": quick,
        "diffiface": os.path.dirname(di.__file__),
        "commit": commit(),
        "rows": rows,
        "failed": failed,
    }
    print(f"measured {saved['diffiface']} at {saved['commit']}")
    with open(path, "w") as fh:
        json.dump(saved, fh, indent=1)
    return saved


if __name__ == "__main__":
    main()
