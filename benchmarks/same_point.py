"""Same-point preparations (issue 29 item 7): 20 hvps at one x, as a Newton-Krylov
step makes them, with ``prepare_hvp_same_point`` at that x (its cost included) against
20 ordinary prepared hvps (``prepare_hvp`` made once, outside the timing); and 20 jvps,
20 vjps of the problems' vector forms (Rosenbrock's residuals, the MLP's outputs) the
same way. JAX and torch, float64, one thread, paired rounds (``timing.interleaved``).
Target for hvp: ratio <= 0.6. Problems: Rosenbrock n = 1000; an MLP loss (20 -> 100 ->
80 -> 1, tanh, 256 samples) as a function of its 10261 parameters in one flat vector.

Run: ``taskset -c 0 python benchmarks/same_point.py`` (``--quick``: fewer rounds;
``--cpu-time``: time this process's CPU time instead of the wall clock, which excludes
what other processes take on a shared machine; JAX's own threads are counted).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import timing  # first: one thread, before numpy loads
from timing import interleaved, one_thread

# isort: split
import time
import types

import numpy as np

import diffiface as di

HVPS = 20
TARGET = 0.6
LAYERS = [(20, 100), (100, 80), (80, 1)]


def rosenbrock(ns, out=False):
    """The Rosenbrock function (out: its residuals, whose squares it sums)."""

    def residuals(x):
        return ns.concatenate([10.0 * (x[1:] - x[:-1] ** 2), 1.0 - x[:-1]])

    return (residuals if out else lambda x: (residuals(x) ** 2).sum()), 1000


def mlp(ns, data, out=False):
    """The MLP's mean squared error (out: its outputs) as a function of its parameters."""
    inputs, targets = data

    def f(theta):
        h, start = inputs, 0
        for i, (a, b) in enumerate(LAYERS):
            w = theta[start : start + a * b].reshape(a, b)
            bias = theta[start + a * b : start + a * b + b]
            start += a * b + b
            h = h @ w + bias
            if i < len(LAYERS) - 1:
                h = ns.tanh(h)
        return h.reshape(-1) if out else ((h - targets) ** 2).mean()

    return f, sum(a * b + b for a, b in LAYERS)


OPS = {
    "hvp": (di.hvp, di.prepare_hvp, di.prepare_hvp_same_point),
    "jvp": (di.jvp, di.prepare_jvp, di.prepare_jvp_same_point),
    "vjp": (di.vjp, di.prepare_vjp, di.prepare_vjp_same_point),
}


def _configs(op, backend, f, x, ts, block):
    run, prepare, prepare_same_point = OPS[op]
    prep = prepare(f, backend, x, ts[0])

    def same_point():
        sp = prepare_same_point(f, backend, x, ts[0])
        for t in ts:
            out = run(f, backend, x, t, prep=sp)
        block(out)

    def ordinary():
        for t in ts:
            out = run(f, backend, x, t, prep=prep)
        block(out)

    return {"same_point": same_point, "ordinary": ordinary}


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch

    jax.config.update("jax_enable_x64", True)
    one_thread()
    quick = "--quick" in sys.argv
    if "--cpu-time" in sys.argv:  # (timing's clock, for this process only)
        timing.time = types.SimpleNamespace(perf_counter=time.process_time)
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((256, 20)), rng.standard_normal((256, 1)))
    frameworks = {
        "jax": (di.AutoJax(), jnp, jnp.asarray, jax.block_until_ready),
        "torch": (di.AutoTorch(), torch, torch.from_numpy, lambda a: a),
    }
    rows = []
    for name, (backend, ns, to, block) in frameworks.items():
        for op in OPS:
            out = op != "hvp"
            problems = {
                "rosenbrock n=1000": rosenbrock(ns, out),
                "mlp 10261 params": mlp(ns, tuple(to(a) for a in data), out),
            }
            for label, (f, n) in problems.items():
                x = to(rng.standard_normal(n) * 0.5)
                m = {"vjp": 256 if "mlp" in label else 2 * (n - 1)}.get(op, n)
                ts = [to(rng.standard_normal(m)) for _ in range(HVPS)]
                times = interleaved(
                    _configs(op, backend, f, x, ts, block),
                    repeat=10 if quick else 30,
                    rounds=5 if quick else 15,
                    warmup=2,
                )
                ratio = times["same_point"] / times["ordinary"]
                rows.append((name, op, label, times["same_point"], times["ordinary"], ratio))
    print("| framework | 20 of | problem | same-point (µs) | ordinary (µs) | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, op, label, sp, od, ratio in rows:
        mark = "" if op != "hvp" else (" (ok)" if ratio <= TARGET else " (over 0.6)")
        print(f"| {name} | {op} | {label} | {sp:.0f} | {od:.0f} | {ratio:.2f}{mark} |")


if __name__ == "__main__":
    main()
