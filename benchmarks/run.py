"""Every benchmark, pinned to one thread: print each target with its measured ratio
and a ✓ or ✗, write results.json and regenerate the docs' benchmark pages.

`make bench` runs this on one core (``--quick`` for fewer repeats). Ratios are
diffiface time over the framework's own best call, measured in the same run
(medians of interleaved repeats); below 1 means diffiface was faster. It runs
overhead.py and mlp.py (docs/benchmarks.md, docs/ratios.png), nested.py
(docs/nested_results.md), bridge.py (docs/bridge_results.md) and growth.py
(docs/growth.png and its section of docs/benchmarks.md), then checks issue 19's
targets against what they measured; last, the performance matrix (matrix.py: its
section of docs/benchmarks.md, docs/matrix.png, benchmarks/matrix_results.json), in
a process of its own since it runs JAX in float64.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(os.path.dirname(HERE), "docs")
sys.path.insert(0, HERE)

import overhead  # noqa: E402  (first: one thread, before numpy loads)
import timing  # noqa: E402

timing.one_thread()

import bridge  # noqa: E402
import growth  # noqa: E402
import mlp  # noqa: E402
import nested  # noqa: E402

NESTED_LIMIT = 1.05  # against the faster native formulation, each framework and size
CROSSING_US = 10.0  # added per crossing at 10 elements
CROSSING_BIG = 1.1  # bridged call at 1e6 against the framework's own
FWD_BWD_BIG = 1.2  # bridged forward + backward at 1e6 against torch's own
TORCH_OVER_JAX = 1.0  # torch outer, JAX inner, large, against all-torch


def chart(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["case"] for r in rows]
    ratios = [r["ratio"] for r in rows]
    ok = [r.get("target") is None or r["ratio"] <= r["target"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1))
    ax.barh(names, ratios, color=["tab:green" if k else "tab:orange" for k in ok])
    for i, r in enumerate(rows):
        if r.get("target") is not None:
            ax.plot([r["target"]] * 2, [i - 0.4, i + 0.4], color="black", linewidth=1)
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("diffiface time / native time (1 = no overhead; black tick = target)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def check(what: str, value: float, limit: float, unit: str = "x", strict=False) -> dict:
    ok = value < limit if strict else value <= limit
    sign = "<" if strict else "≤"
    return {"target": what, "measured": f"{value:.2f}{unit}", "limit": f"{sign} {limit:.3g}{unit}",
            "ok": ok}  # fmt: skip


def targets(rows: list, nested_rows: list, bridged: dict) -> list[dict]:
    """Issue 19's targets, each with what this run measured."""
    out = [check(r["case"], r["ratio"], r["target"]) for r in rows if r.get("target")]
    for r in nested_rows:
        where = f"nested loss, {r['framework']} {r['size']}"
        if r["config"] in ("di auto", nested.INLINE, nested.OUTER):
            outer = "diffiface" if r["config"] == nested.OUTER else "native"
            inline = " (inner made per call)" if r["config"] == nested.INLINE else ""
            out.append(check(f"{where}, {outer} outer, auto{inline}", r["ratio"], NESTED_LIMIT))
        if r["config"] == "di auto" and r["native_config"] == "native FoR":
            ratio = r["diffiface_us"] / r["native_ror_us"]  # strictly faster than the default
            out.append(check(f"{where}, auto against native RoR", ratio, 1.0, strict=True))
        if r["config"] == "di min_memory":
            least = min(r["memory_by_strategy_mib"].values())  # within 1% + 10 KiB
            limit = least * 1.01 + 0.01
            out.append(check(f"{where}, min_memory peak MiB", r["memory_mib"], limit, " MiB"))
    small, big = bridged["crossing"][10], bridged["crossing"][10**6]
    added = small["bridged on torch tensors"] - small["jax jit on jax arrays"]
    out.append(check("crossing at 10 elements, µs added", added, CROSSING_US, " µs"))
    ratio = big["bridged on torch tensors"] / big["jax jit on jax arrays"]
    out.append(check("crossing at 1e6 elements", ratio, CROSSING_BIG))
    ratio = big["bridged fwd+bwd"] / big["torch fwd+bwd"]
    out.append(check("bridged forward+backward at 1e6", ratio, FWD_BWD_BIG))
    large = bridged["nested"]["large"]
    ratio = large["torch outer, jax inner (di)"] / large["all torch (double backward)"]
    out.append(check("nested loss large, torch outer over JAX inner", ratio, TORCH_OVER_JAX))
    return out


def report(checks: list[dict]) -> list[str]:
    lines = ["| target | measured | limit | |", "| --- | ---: | ---: | --- |"]
    for c in checks:
        lines.append(
            f"| {c['target']} | {c['measured']} | {c['limit']} | {'✓' if c['ok'] else '✗'} |"
        )
    return lines


def replace(path: str, start: str, end: str, lines: list[str]) -> None:
    """Replace the text between the ``start`` and ``end`` markers of ``path``."""
    with open(path) as fh:
        text = fh.read()
    head, rest = text.split(start)
    tail = rest.split(end)[1]
    with open(path, "w") as fh:
        fh.write(head + start + "\n" + "\n".join(lines) + "\n" + end + tail)


def overhead_table(rows: list, wall: float) -> list[str]:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `make bench` (2 cores, one thread "
        f"pinned, CPU, float32 except autograd's float64); these rows took {wall:.0f} s.",
        "",
        "| case | native µs | diffiface µs | ratio | target |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        target = r.get("target")
        mark = "" if target is None else f"{target:.2f}" + ("" if r["ratio"] <= target else " ✗")
        lines.append(
            f"| {r['case']} | {r['native_us']:.1f} | {r['diffiface_us']:.1f} "
            f"| {r['ratio']:.2f} | {mark} |"
        )
    return lines


def main() -> None:
    import warnings

    import diffiface as di

    # nested.py and bridge.py build one model function per size, compiled once each
    warnings.simplefilter("ignore", di.RecompileWarning)
    quick = overhead.QUICK
    start = time.perf_counter()
    rows = overhead.main() + mlp.main()
    wall = time.perf_counter() - start
    nested_rows = nested.main(quick=quick, md=os.path.join(DOCS, "nested_results.md"))
    bridged = bridge.main(quick=quick, md=os.path.join(DOCS, "bridge_results.md"))
    began = time.perf_counter()
    grown = growth.main(quick=quick)
    growth.chart(grown, os.path.join(DOCS, "growth.png"))
    growth.markdown(grown, os.path.join(DOCS, "benchmarks.md"), time.perf_counter() - began)
    checks = targets(rows, nested_rows, bridged)
    total = time.perf_counter() - start
    lines = report(checks)
    print("\n" + "\n".join(lines))
    missed = sum(not c["ok"] for c in checks)
    print(f"\n{len(checks) - missed} of {len(checks)} targets met; the run took {total:.0f} s")
    summary = [
        f"Measured {time.strftime('%Y-%m-%d')} by `make bench`"
        f"{' --quick' if quick else ''} in {total:.0f} s: {len(checks) - missed} of "
        f"{len(checks)} targets met.",
        "",
        *lines,
    ]
    path = os.path.join(DOCS, "benchmarks.md")
    replace(path, "<!-- targets:start -->", "<!-- targets:end -->", summary)
    replace(path, "<!-- overhead:start -->", "<!-- overhead:end -->", overhead_table(rows, wall))
    chart(rows, os.path.join(DOCS, "ratios.png"))
    everything = {"overhead": rows, "nested": nested_rows, "bridge": bridged, "growth": grown}
    everything["targets"] = checks
    with open(os.path.join(HERE, "results.json"), "w") as fh:
        json.dump(everything, fh, indent=1, default=str)
    print("wrote benchmarks/results.json and docs/benchmarks.md, ratios.png, growth.png,")
    print("nested_results.md, bridge_results.md")
    matrix = [sys.executable, os.path.join(HERE, "matrix.py")] + (["--quick"] if quick else [])
    subprocess.run(matrix, check=True)


if __name__ == "__main__":
    main()
