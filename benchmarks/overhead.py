"""Wrapper overhead: diffiface against each framework's own best call, same run.

Prints median time per call (µs) of the native call and of the diffiface call,
and their ratio, for f(x) = sum(sin(x)) at n = 10 and 10_000 elements and for
a jacobian. Run with one thread: `taskset -c 0 python benchmarks/overhead.py`.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np

import diffiface as di


def median_us(fn, repeat=2000, warmup=50):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def row(name, native, ours, repeat):
    # interleave to share the machine's noise
    a, b = [], []
    for _ in range(5):
        a.append(median_us(native, repeat // 5))
        b.append(median_us(ours, repeat // 5))
    t_nat, t_di = statistics.median(a), statistics.median(b)
    print(f"{name:<38} {t_nat:>10.1f} {t_di:>10.1f} {t_di / t_nat:>7.2f}", flush=True)
    return {"case": name, "native_us": t_nat, "diffiface_us": t_di, "ratio": t_di / t_nat}


def main(sizes=(10, 10_000)):
    import torch

    torch.set_num_threads(1)
    print(f"{'case':<38} {'native µs':>10} {'di µs':>10} {'ratio':>7}")
    for n in sizes:
        gradients(n)
    jacobians()
    second_order()


def gradients(n):
    rows = []
    import autograd
    import autograd.numpy as anp
    import jax
    import jax.numpy as jnp
    import torch

    rep = 2000 if n <= 100 else 300
    x32 = np.linspace(-1, 1, n, dtype=np.float32)

    fj = lambda x: jnp.sin(x).sum()  # noqa: E731
    gj = jax.jit(jax.grad(fj))
    xj = jnp.asarray(x32)
    rows.append(
        row(
            f"jax gradient n={n}",
            lambda: gj(xj).block_until_ready(),
            lambda: di.gradient(fj, di.AutoJax(), xj).block_until_ready(),
            rep,
        )
    )

    prep_j = di.prepare_gradient(fj, di.AutoJax(), xj)
    rows.append(
        row(
            f"jax gradient n={n} (prepared)",
            lambda: gj(xj).block_until_ready(),
            lambda: di.gradient(fj, di.AutoJax(), xj, prep=prep_j).block_until_ready(),
            rep,
        )
    )

    ft = lambda x: torch.sin(x).sum()  # noqa: E731
    xt = torch.from_numpy(x32.copy())

    def native_torch():
        xg = xt.detach().requires_grad_()
        return torch.autograd.grad(ft(xg), xg)[0]

    rows.append(
        row(f"torch gradient n={n}", native_torch, lambda: di.gradient(ft, di.AutoTorch(), xt), rep)
    )
    prep_t = di.prepare_gradient(ft, di.AutoTorch(), xt)
    rows.append(
        row(
            f"torch gradient n={n} (prepared)",
            native_torch,
            lambda: di.gradient(ft, di.AutoTorch(), xt, prep=prep_t),
            rep,
        )
    )

    fa = lambda x: anp.sum(anp.sin(x))  # noqa: E731
    ga = autograd.grad(fa)
    x64 = x32.astype(np.float64)
    rows.append(
        row(
            f"autograd gradient n={n}",
            lambda: ga(x64),
            lambda: di.gradient(fa, di.AutoAutograd(), x64),
            rep,
        )
    )
    return rows


def jacobians():
    rows = []
    import jax
    import jax.numpy as jnp

    m, n = 10, 1000
    A = np.random.default_rng(0).standard_normal((m, n)).astype(np.float32)
    Aj = jnp.asarray(A)
    fj = lambda x: jnp.tanh(Aj @ x)  # noqa: E731
    xj = jnp.ones(n, dtype=jnp.float32)
    jr = jax.jit(jax.jacrev(fj))
    rows.append(
        row(
            "jax jacobian 1000->10 (auto)",
            lambda: jr(xj).block_until_ready(),
            lambda: di.jacobian(fj, di.AutoJax(), xj).block_until_ready(),
            300,
        )
    )
    return rows


def second_order(n=1000):
    """hvp and hessian against the frameworks' own formulations."""
    rows = []
    import jax
    import jax.numpy as jnp
    import torch

    x32 = np.linspace(-1, 1, n, dtype=np.float32)
    v32 = np.ones(n, dtype=np.float32)

    fj = lambda x: (jnp.sin(x) * x**2).sum()  # noqa: E731
    xj, vj = jnp.asarray(x32), jnp.asarray(v32)
    hvp_j = jax.jit(lambda x, v: jax.jvp(jax.grad(fj), (x,), (v,))[1])
    rows.append(
        row(
            f"jax hvp n={n}",
            lambda: hvp_j(xj, vj).block_until_ready(),
            lambda: di.hvp(fj, di.AutoJax(), xj, vj).block_until_ready(),
            500,
        )
    )
    hj = jax.jit(jax.hessian(fj))
    xs = xj[:100]
    rows.append(
        row(
            "jax hessian n=100",
            lambda: hj(xs).block_until_ready(),
            lambda: di.hessian(fj, di.AutoJax(), xs).block_until_ready(),
            300,
        )
    )

    ft = lambda x: (torch.sin(x) * x**2).sum()  # noqa: E731
    xt, vt = torch.from_numpy(x32.copy()), torch.from_numpy(v32.copy())

    def native_hvp():
        xg = xt.detach().requires_grad_()
        (g,) = torch.autograd.grad(ft(xg), xg, create_graph=True)
        return torch.autograd.grad(g, xg, vt)[0]

    rows.append(
        row(f"torch hvp n={n}", native_hvp, lambda: di.hvp(ft, di.AutoTorch(), xt, vt), 500)
    )
    xs = xt[:100]
    rows.append(
        row(
            "torch hessian n=100",
            lambda: torch.func.hessian(ft)(xs),
            lambda: di.hessian(ft, di.AutoTorch(), xs),
            300,
        )
    )
    return rows


if __name__ == "__main__":
    main(tuple(int(a) for a in sys.argv[1:]) or (10, 10_000))
