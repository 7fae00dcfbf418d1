"""Run the overhead benchmarks: print the tables, write results.json, the table
in docs/benchmarks.md and docs/ratios.png (`--nested` adds benchmarks/nested.py).

`make bench` runs this pinned to one core. Ratios are diffiface time over the
framework's own best call, measured in the same run (medians of interleaved
repeats); below 1 means diffiface was faster. A `*` after the target marks a
row that missed it in this run.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(os.path.dirname(HERE), "docs")
sys.path.insert(0, HERE)

import mlp  # noqa: E402
import nested  # noqa: E402
import overhead  # noqa: E402
import timing  # noqa: E402


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


START, END = "<!-- overhead:start -->", "<!-- overhead:end -->"


def markdown(rows: list, path: str, wall: float) -> None:
    """Replace the table between the overhead markers of ``path``."""
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `make bench` (2 cores, one thread "
        f"pinned, CPU, float32 except autograd's float64); the run took {wall:.0f} s.",
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
    with open(path) as fh:
        text = fh.read()
    head, rest = text.split(START)
    tail = rest.split(END)[1]
    with open(path, "w") as fh:
        fh.write(head + START + "\n" + "\n".join(lines) + "\n" + END + tail)


def main() -> None:
    timing.one_thread()
    start = time.perf_counter()
    rows = overhead.main() + mlp.main()
    wall = time.perf_counter() - start
    if "--nested" in sys.argv:
        rows += nested.main(quick=overhead.QUICK)
    with open(os.path.join(HERE, "results.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    overhead_rows = [r for r in rows if "nested" not in r["case"]]
    markdown(overhead_rows, os.path.join(DOCS, "benchmarks.md"), wall)
    chart(overhead_rows, os.path.join(DOCS, "ratios.png"))
    print(f"wrote {HERE}/results.json, docs/benchmarks.md and docs/ratios.png")


if __name__ == "__main__":
    main()
