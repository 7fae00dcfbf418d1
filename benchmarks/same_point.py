"""Same-point preparations (issue 29 item 7): 20 hvps at one x, as a Newton-Krylov step
makes them, with ``prepare_hvp_same_point`` at that x (its cost included) against 20
ordinary prepared hvps (``prepare_hvp`` made once, outside the timing), on JAX and
torch, float64, one thread, paired rounds (``timing.interleaved``). Target: ratio
<= 0.6. Problems: Rosenbrock n = 1000; an MLP loss (20 -> 100 -> 80 -> 1, tanh, 256
samples) as a function of its 10261 parameters in one flat vector.

Run: ``taskset -c 0 python benchmarks/same_point.py`` (``--quick``: fewer rounds).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved, one_thread  # first: one thread, before numpy loads

# isort: split
import numpy as np

import diffiface as di

HVPS = 20
TARGET = 0.6
LAYERS = [(20, 100), (100, 80), (80, 1)]


def rosenbrock(ns):
    def f(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()

    return f, 1000


def mlp(ns, data):
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
        return ((h - targets) ** 2).mean()

    return f, sum(a * b + b for a, b in LAYERS)


def _configs(backend, f, x, vs, block):
    prep = di.prepare_hvp(f, backend, x, vs[0])

    def same_point():
        sp = di.prepare_hvp_same_point(f, backend, x, vs[0])
        for v in vs:
            out = di.hvp(f, backend, x, v, prep=sp)
        block(out)

    def ordinary():
        for v in vs:
            out = di.hvp(f, backend, x, v, prep=prep)
        block(out)

    return {"same_point": same_point, "ordinary": ordinary}


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch

    jax.config.update("jax_enable_x64", True)
    one_thread()
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((256, 20)), rng.standard_normal((256, 1)))
    frameworks = {
        "jax": (di.AutoJax(), jnp, jnp.asarray, jax.block_until_ready),
        "torch": (di.AutoTorch(), torch, torch.from_numpy, lambda a: a),
    }
    rows = []
    for name, (backend, ns, to, block) in frameworks.items():
        problems = {
            "rosenbrock n=1000": rosenbrock(ns),
            "mlp 10261 params": mlp(ns, tuple(to(a) for a in data)),
        }
        for label, (f, n) in problems.items():
            x = to(rng.standard_normal(n) * 0.5)
            vs = [to(rng.standard_normal(n)) for _ in range(HVPS)]
            times = interleaved(
                _configs(backend, f, x, vs, block),
                repeat=10 if quick else 30,
                rounds=5 if quick else 15,
                warmup=2,
            )
            ratio = times["same_point"] / times["ordinary"]
            rows.append((name, label, times["same_point"], times["ordinary"], ratio))
    print("| framework | problem | same-point (µs) | ordinary (µs) | ratio | target |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, label, sp, od, ratio in rows:
        mark = "ok" if ratio <= TARGET else "over"
        print(f"| {name} | {label} | {sp:.0f} | {od:.0f} | {ratio:.2f} | {mark} |")


if __name__ == "__main__":
    main()
