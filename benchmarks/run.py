"""Run every benchmark, print the tables, write results.json and docs/ratios.png.

`make bench` runs this pinned to one core. Ratios are diffiface time over the
framework's own best call, measured in the same run (medians of interleaved
repeats); below 1 means diffiface was faster.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import mlp  # noqa: E402
import nested  # noqa: E402
import overhead  # noqa: E402


def chart(rows: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["case"] for r in rows]
    ratios = [r["ratio"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1))
    ax.barh(names, ratios, color=["tab:green" if r <= 1.1 else "tab:orange" for r in ratios])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("diffiface time / native time (1 = no overhead)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    import torch

    torch.set_num_threads(1)
    rows = []
    print(f"{'case':<38} {'native µs':>10} {'di µs':>10} {'ratio':>7}")
    for n in (10, 10_000):
        rows += overhead.gradients(n)
    rows += overhead.jacobians()
    rows += overhead.second_order()
    rows += mlp.main()
    rows += nested.main()
    with open(os.path.join(HERE, "results.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    png = os.path.join(os.path.dirname(HERE), "docs", "ratios.png")
    chart(rows, png)
    print(f"wrote {HERE}/results.json and {png}")


if __name__ == "__main__":
    main()
