"""Bridges between frameworks, measured in one run (float32, CPU, one thread).

1. The crossing: ``y = 2 x`` written in JAX and called on torch tensors through
   ``di.differentiate_with``, against the same function jitted in JAX on jax
   arrays (the extra µs is the crossing), at 10 and 10^6 elements. Also the
   forward + backward of ``sum(y)`` against torch's own ``2 x``.
2. The seeds' nested loss of ``benchmarks/nested.py`` (``∇_(t,p)`` of
   ``sum((∇ₜ g(t, p) - cos t)²)``) at its three sizes with torch outside and
   JAX inside (``di.gradient(di.FixedParams(g, p), di.AutoJax(), t)`` on torch
   tensors, differentiated by ``torch.autograd.grad``), against all-torch
   double backward and all-JAX ``jax.grad`` of ``jax.grad`` (jitted).

Every configuration is checked against the native one before timing. Times are
medians of interleaved repeats.

Run: ``taskset -c 1 python benchmarks/bridge.py [--quick] [--md PATH]``
"""

from __future__ import annotations

import sys
import time

from timing import interleaved, one_thread  # first: one thread, before numpy loads

# isort: split
import jax
import jax.numpy as jnp
import numpy as np
import torch
from nested import REPEATS, SIZES, check, leaves, make_g, problem, to_numpy

import diffiface as di

one_thread()
ROUNDS = 5


def timed(configs, repeats, warm):
    """Median µs per configuration, interleaved over ROUNDS rounds (benchmarks/timing.py)."""
    return interleaved(configs, repeats, ROUNDS, warmup=warm, round_warmup=20)


def crossing(n, quick):
    twice = jax.jit(lambda x: x * 2.0)
    bridged = di.differentiate_with(lambda x: x * 2.0, di.AutoJax())
    xj, xt = jnp.ones(n, jnp.float32), torch.ones(n)
    xg = torch.ones(n, requires_grad=True)
    np.testing.assert_array_equal(bridged(xt).numpy(), np.asarray(twice(xj)))

    def fwd_bwd_bridged():
        return torch.autograd.grad(bridged(xg).sum(), xg)

    def fwd_bwd_torch():
        return torch.autograd.grad((xg * 2.0).sum(), xg)

    np.testing.assert_array_equal(fwd_bwd_bridged()[0].numpy(), fwd_bwd_torch()[0].numpy())
    configs = {
        "jax jit on jax arrays": lambda: twice(xj).block_until_ready(),
        "bridged on torch tensors": lambda: bridged(xt),
        "torch fwd+bwd": fwd_bwd_torch,
        "bridged fwd+bwd": fwd_bwd_bridged,
    }
    repeats = 200 if quick else (3000 if n < 1000 else 300)
    return timed(configs, repeats, 10)


def nested(size, quick):
    t_np, p_np = problem(size)
    g_t, g_j = make_g(torch), make_g(jnp)
    t = torch.from_numpy(t_np.copy())
    p = [(torch.from_numpy(w.copy()), torch.from_numpy(b.copy())) for w, b in p_np]

    def inputs():
        ps = [(w.detach().requires_grad_(), b.detach().requires_grad_()) for w, b in p]
        return t.detach().requires_grad_(), ps

    def all_torch():
        tt, ps = inputs()
        (y,) = torch.autograd.grad(g_t(tt, ps), tt, create_graph=True)
        loss = ((y - torch.cos(tt)) ** 2).sum()
        return torch.autograd.grad(loss, [tt, *leaves(ps)])

    def torch_outer_jax_inner():
        tt, ps = inputs()
        y = di.gradient(di.FixedParams(g_j, ps), di.AutoJax(), tt)
        loss = ((y - torch.cos(tt)) ** 2).sum()
        return torch.autograd.grad(loss, [tt, *leaves(ps)])

    tj = jnp.asarray(t_np)
    pj = [(jnp.asarray(w), jnp.asarray(b)) for w, b in p_np]

    def loss_j(t, p):
        return ((jax.grad(g_j)(t, p) - jnp.cos(t)) ** 2).sum()

    all_jax_fn = jax.jit(jax.grad(loss_j, argnums=(0, 1)))

    def all_jax():
        return jax.block_until_ready(all_jax_fn(tj, pj))

    ref = to_numpy(all_torch())
    check("torch outer, jax inner", ref, to_numpy(torch_outer_jax_inner()))
    check("all jax", ref, to_numpy(all_jax()))
    repeats, warm = REPEATS[size]
    if quick:
        repeats = max(ROUNDS, repeats // 10)
    configs = {
        "all torch (double backward)": all_torch,
        "all jax (grad of grad, jit)": all_jax,
        "torch outer, jax inner (di)": torch_outer_jax_inner,
    }
    return timed(configs, repeats, warm)


def main(quick=False, md=None):
    """Print (and with ``md`` write) the table; return ``{"crossing": {n: µs by
    configuration}, "nested": {size: µs by configuration}}``."""
    start = time.perf_counter()
    results = {"crossing": {}, "nested": {}}
    lines = ["| case | configuration | µs | ratio |", "| --- | --- | --- | --- |"]
    for n in (10, 10**6):
        got = results["crossing"][n] = crossing(n, quick)
        base = got["jax jit on jax arrays"]
        for label, us in got.items():
            ref = got["torch fwd+bwd"] if "fwd+bwd" in label else base
            extra = f" (+{us - ref:.1f} µs)" if label.startswith("bridged") else ""
            lines.append(f"| crossing, n={n:g} | {label} | {us:.1f}{extra} | {us / ref:.2f} |")
    for size in SIZES:
        got = results["nested"][size] = nested(size, quick)
        base = got["all torch (double backward)"]
        for label, us in got.items():
            lines.append(f"| nested loss, {size} | {label} | {us:.1f} | {us / base:.2f} |")
    table = "\n".join(lines)
    print(table)
    print(f"\n{time.perf_counter() - start:.0f} s")
    if md:
        with open(md, "w") as fh:
            fh.write(
                "# Bridge benchmark\n\n"
                "Written by `benchmarks/bridge.py` (float32, CPU, one thread, medians of "
                "interleaved repeats). Crossing rows: ratio against JAX's jitted call on jax "
                "arrays (fwd+bwd rows: against torch's own); the extra µs is the crossing. "
                "Nested-loss rows: ratio against all-torch double backward.\n\n"
                f"{table}\n"
            )
    return results


if __name__ == "__main__":
    args = sys.argv[1:]
    md = args[args.index("--md") + 1] if "--md" in args else None
    main(quick="--quick" in args, md=md)
