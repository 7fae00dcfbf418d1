"""Medium size: the gradient of a 94k-parameter MLP loss with respect to its
parameters (a dict pytree), diffiface against each framework's own best call,
unprepared and prepared, measured in the same run (1 thread).

Run: `taskset -c 0 python benchmarks/mlp.py` (or `make bench`).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import one_thread  # first: one thread, before numpy loads

# isort: split
import numpy as np
from overhead import HEADER, row

import diffiface as di

SIZES = [(100, 256), (256, 256), (256, 10)]
UNPREPARED, PREPARED = 1.05, 1.05  # issue 19: every medium row within 5%


def params_np(rng):
    p = {}
    for i, (a, b) in enumerate(SIZES):
        p[f"w{i}"] = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        p[f"b{i}"] = np.zeros(b, np.float32)
    return p


def make_loss(ns):
    def loss(p, batch):
        x, y = batch
        for i in range(len(SIZES)):
            x = x @ p[f"w{i}"] + p[f"b{i}"]
            if i < len(SIZES) - 1:
                x = ns.tanh(x)
        return ((x - y) ** 2).mean()

    return loss


def main():
    import autograd
    import autograd.numpy as anp
    import jax
    import jax.numpy as jnp
    import torch

    one_thread()
    rng = np.random.default_rng(0)
    p = params_np(rng)
    n_params = sum(v.size for v in p.values())
    batch = (
        rng.standard_normal((32, 100)).astype(np.float32),
        rng.standard_normal((32, 10)).astype(np.float32),
    )
    print(f"MLP with {n_params} parameters, batch 32")
    print(HEADER)
    results = []

    lj = make_loss(jnp)
    pj = {k: jnp.asarray(v) for k, v in p.items()}
    bj = tuple(jnp.asarray(a) for a in batch)
    gj = jax.jit(jax.grad(lj))
    b = di.AutoJax()
    ctx = di.Constant(bj)
    prep = di.prepare_gradient(lj, b, pj, ctx)

    def block(t):
        return jax.tree_util.tree_map(lambda a: a.block_until_ready(), t)

    results.append(
        row(
            "jax MLP gradient",
            lambda: block(gj(pj, bj)),
            lambda: block(di.gradient(lj, b, pj, ctx)),
            300,
            UNPREPARED,
        )
    )
    results.append(
        row(
            "jax MLP gradient (prepared)",
            lambda: block(gj(pj, bj)),
            lambda: block(di.gradient(lj, b, pj, ctx, prep=prep)),
            300,
            PREPARED,
        )
    )

    lt = make_loss(torch)
    pt = {k: torch.from_numpy(v.copy()) for k, v in p.items()}
    bt = tuple(torch.from_numpy(a.copy()) for a in batch)

    def native_torch():
        leaves = {k: v.detach().requires_grad_() for k, v in pt.items()}
        return torch.autograd.grad(lt(leaves, bt), list(leaves.values()))

    b = di.AutoTorch()
    ctx = di.Constant(bt)
    prep = di.prepare_gradient(lt, b, pt, ctx)
    results.append(
        row(
            "torch MLP gradient", native_torch, lambda: di.gradient(lt, b, pt, ctx), 300, UNPREPARED
        )
    )
    results.append(
        row(
            "torch MLP gradient (prepared)",
            native_torch,
            lambda: di.gradient(lt, b, pt, ctx, prep=prep),
            300,
            PREPARED,
        )
    )

    la = make_loss(anp)
    pa = {k: v.astype(np.float64) for k, v in p.items()}
    ba = tuple(a.astype(np.float64) for a in batch)
    ga = autograd.grad(la)
    b = di.AutoAutograd()
    ctx = di.Constant(ba)
    prep = di.prepare_gradient(la, b, pa, ctx)
    results.append(
        row(
            "autograd MLP gradient",
            lambda: ga(pa, ba),
            lambda: di.gradient(la, b, pa, ctx),
            100,
            UNPREPARED,
        )
    )
    results.append(
        row(
            "autograd MLP gradient (prepared)",
            lambda: ga(pa, ba),
            lambda: di.gradient(la, b, pa, ctx, prep=prep),
            100,
            PREPARED,
        )
    )
    return results


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    out = main()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh, indent=1)
