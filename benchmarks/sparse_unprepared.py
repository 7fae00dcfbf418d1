"""Unprepared against prepared sparse Hessians, per call form (issue 31's "no cliffs":
within 1.3x). Rosenbrock at n = 2000, one thread; paired rounds, medians.

    taskset -c 0 python benchmarks/sparse_unprepared.py [--n 2000] [--rounds 21]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np
from sparse_common import paired

import diffiface as di


def rosen(xp):
    def f(x):
        return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    return f


def forms(xp, cat, native, x0):
    """name -> (f, x, has_aux, make): ``make`` builds f anew per call (a closure)."""
    f = rosen(xp)
    h = len(x0) // 2
    tree = {"a": native(x0[:h]), "b": native(x0[h:])}

    def f_tree(p):
        return f(cat([p["a"], p["b"]]))

    def f_aux(x):
        return f(x), x[0]

    def make():
        c = 100.0

        def g(x):
            return (c * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

        return g

    def make_tree():
        c = 100.0

        def g(p):
            x = cat([p["a"], p["b"]])
            return (c * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

        return g

    return {
        "array": (f, native(x0), False, None),
        "NumPy x": (rosen(xp), x0.copy(), False, None),  # (an f of its own: one kept plan each)
        "has_aux": (f_aux, native(x0), True, None),
        "closure per call": (None, native(x0), False, make),
        "pytree x": (f_tree, tree, False, None),
        "pytree x, closure": (None, tree, False, make_tree),
    }


def configs(backend, xp, cat, native, x0, only="", block=lambda out: out):
    """(form, "prepared" or "unprepared") -> a call, its result ready (``block``: JAX
    dispatches asynchronously, so an unblocked call times its dispatch alone)."""
    out = {}
    for name, (f, x, aux, make) in forms(xp, cat, native, x0).items():
        if only and only not in name:
            continue
        fn = make() if make else f
        prep = di.prepare_hessian(fn, backend, x, has_aux=aux)

        def prepared(fn=fn, x=x, prep=prep, aux=aux):
            return block(di.hessian(fn, backend, x, prep=prep, has_aux=aux))

        def unprepared(f=f, x=x, aux=aux, make=make):
            return block(di.hessian(make() if make else f, backend, x, has_aux=aux))

        out[(name, "prepared")] = prepared
        out[(name, "unprepared")] = unprepared
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--only", default="", help="jax or torch")
    ap.add_argument("--form", default="", help="the call forms whose name holds this")
    a = ap.parse_args()
    x0 = np.random.default_rng(0).uniform(0.5, 1.5, a.n)
    rows = []
    if "jax" in a.only or not a.only:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        rows.append(
            (
                "JAX",
                configs(
                    di.AutoSparse(di.AutoJax()),
                    jnp,
                    jnp.concatenate,
                    jnp.asarray,
                    x0,
                    a.form,
                    jax.block_until_ready,
                ),
            )
        )
    if "torch" in a.only or not a.only:
        import torch

        torch.set_num_threads(1)
        rows.append(
            (
                "torch",
                configs(
                    di.AutoSparse(di.AutoTorch()), torch, torch.cat, torch.from_numpy, x0, a.form
                ),
            )
        )
    for fw, cfg in rows:
        paired(cfg, 3)  # (a first pass warms up: its times run 2-3x the later ones)
        t = paired(cfg, a.rounds)
        for name in dict.fromkeys(k[0] for k in cfg):
            p, u = t[(name, "prepared")], t[(name, "unprepared")]
            print(f"{fw:6s} {name:18s} prepared {p:9.1f} µs  unprepared {u:9.1f} µs  {u / p:5.2f}x")


if __name__ == "__main__":
    main()
