"""Wrapper overhead: diffiface against each framework's own best call, same run.

For each (backend, operator, size) it prints the median time per call (µs) of
the native call and of the diffiface call, their ratio, and the preparation
issue's target for that row. Native calls are the frameworks' best
formulations: jitted JAX transforms, ``torch.autograd.grad`` (``torch.func``
where forward mode is needed), autograd's own operators; where two native
formulations exist (jacobian directions, torch Hessians) the faster one is the
reference. Run with one thread: `taskset -c 0 python benchmarks/overhead.py`
(`--quick` for fewer repeats).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import (  # first: one thread, before numpy loads
    interleaved,
    median_us,
    one_thread,
)

# isort: split
import numpy as np

import diffiface as di

QUICK = "--quick" in sys.argv
# issue 19's targets for a tiny gradient (autograd's are the preparation issue's)
TINY = {"jax": (1.15, 1.15), "torch": (1.3, 1.1), "autograd": (1.5, 1.15)}
HEADER = f"{'case':<44} {'native µs':>10} {'di µs':>10} {'ratio':>7} {'target':>7}"


def row(name, native, ours, repeat, target=None):
    """Median µs of ``native`` and ``ours``, interleaved 9 times to share the noise."""
    repeat = max(18, repeat // 10) if QUICK else repeat
    t = interleaved({"native": native, "diffiface": ours}, repeat, rounds=9, round_warmup=20)
    t_nat, t_di = t["native"], t["diffiface"]
    ratio = t_di / t_nat
    mark = "" if target is None else f"{target:>7.2f}" + (" " if ratio <= target else "*")
    print(f"{name:<44} {t_nat:>10.1f} {t_di:>10.1f} {ratio:>7.2f} {mark}", flush=True)
    return {
        "case": name,
        "native_us": round(t_nat, 2),
        "diffiface_us": round(t_di, 2),
        "ratio": round(ratio, 3),
        "target": target,
    }


def faster(*fns, repeat=200):
    """The fastest of several native formulations of the same result."""
    return min(fns, key=lambda fn: median_us(fn, repeat, warmup=20))


def jax_block(fn):
    import jax

    return lambda: jax.block_until_ready(fn())


# ---------------------------------------------------------------- gradients
def gradients(n: int) -> list:
    """sum(sin(x)) on n elements: unprepared and prepared, every framework."""
    import autograd
    import autograd.numpy as anp
    import jax
    import jax.numpy as jnp
    import torch

    small = n <= 100
    rep = 3000 if small else 300
    # the targets are for 10 elements (the medium size is the MLP in mlp.py and the
    # operators below): (unprepared, prepared) per framework
    tj, tt, ta = TINY["jax"], TINY["torch"], TINY["autograd"]
    if not small:
        tj = tt = ta = (None, None)
    rows = []
    x32 = np.linspace(-1, 1, n, dtype=np.float32)

    fj = lambda x: jnp.sin(x).sum()  # noqa: E731
    gj = jax.jit(jax.grad(fj))
    xj, bj = jnp.asarray(x32), di.AutoJax()
    prep = di.prepare_gradient(fj, bj, xj)
    rows.append(
        row(
            f"jax gradient n={n}",
            jax_block(lambda: gj(xj)),
            jax_block(lambda: di.gradient(fj, bj, xj)),
            rep,
            tj[0],
        )
    )
    rows.append(
        row(
            f"jax gradient n={n} (prepared)",
            jax_block(lambda: gj(xj)),
            jax_block(lambda: di.gradient(fj, bj, xj, prep=prep)),
            rep,
            tj[1],
        )
    )
    if small:  # NumPy in, NumPy out: jax's own call converts too
        xn = x32.copy()
        rows.append(
            row(
                f"jax gradient n={n} (NumPy in and out)",
                lambda: np.asarray(gj(xn)),
                lambda: di.gradient(fj, bj, xn),
                rep,
                1.05,
            )
        )

    ft = lambda x: torch.sin(x).sum()  # noqa: E731
    xt, bt = torch.from_numpy(x32.copy()), di.AutoTorch()

    def native_torch():
        xg = xt.detach().requires_grad_()
        return torch.autograd.grad(ft(xg), xg)[0]

    prep = di.prepare_gradient(ft, bt, xt)
    rows.append(
        row(f"torch gradient n={n}", native_torch, lambda: di.gradient(ft, bt, xt), rep, tt[0])
    )
    rows.append(
        row(
            f"torch gradient n={n} (prepared)",
            native_torch,
            lambda: di.gradient(ft, bt, xt, prep=prep),
            rep,
            tt[1],
        )
    )

    fa = lambda x: anp.sum(anp.sin(x))  # noqa: E731
    ga, ba = autograd.grad(fa), di.AutoAutograd()
    x64 = x32.astype(np.float64)
    prep = di.prepare_gradient(fa, ba, x64)
    rows.append(
        row(
            f"autograd gradient n={n}",
            lambda: ga(x64),
            lambda: di.gradient(fa, ba, x64),
            rep,
            ta[0],
        )
    )
    rows.append(
        row(
            f"autograd gradient n={n} (prepared)",
            lambda: ga(x64),
            lambda: di.gradient(fa, ba, x64, prep=prep),
            rep,
            ta[1],
        )
    )
    return rows


# ------------------------------------------------ jacobian directions (auto)
JAC_SHAPES = ((100, 100), (1000, 10), (10, 1000))  # (inputs, outputs)


def jacobians() -> list:
    """tanh(A x) with the automatic direction, against the faster native direction."""
    rows = []
    rng = np.random.default_rng(0)
    for n, m in JAC_SHAPES:
        A = (rng.standard_normal((m, n)) / np.sqrt(n)).astype(np.float32)
        rows += _jacobian_rows(A, np.linspace(-1, 1, n, dtype=np.float32))
    return rows


def _jacobian_rows(A, x) -> list:
    import jax
    import jax.numpy as jnp
    import torch

    m, n = A.shape
    Aj, xj, bj = jnp.asarray(A), jnp.asarray(x), di.AutoJax()
    fj = lambda x: jnp.tanh(Aj @ x)  # noqa: E731
    fwd, rev = jax.jit(jax.jacfwd(fj)), jax.jit(jax.jacrev(fj))
    native = faster(jax_block(lambda: fwd(xj)), jax_block(lambda: rev(xj)))
    prep = di.prepare_jacobian(fj, bj, xj)
    rows = [
        row(
            f"jax jacobian {n}->{m} (auto, prepared)",
            native,
            jax_block(lambda: di.jacobian(fj, bj, xj, prep=prep)),
            300,
            1.1,
        )
    ]
    At, xt, bt = torch.from_numpy(A), torch.from_numpy(x), di.AutoTorch()
    ft = lambda x: torch.tanh(At @ x)  # noqa: E731
    tf, tr = torch.func.jacfwd(ft), torch.func.jacrev(ft)
    native = faster(lambda: tf(xt), lambda: tr(xt))
    prep_t = di.prepare_jacobian(ft, bt, xt)
    rows.append(
        row(
            f"torch jacobian {n}->{m} (auto, prepared)",
            native,
            lambda: di.jacobian(ft, bt, xt, prep=prep_t),
            300,
            1.1,
        )
    )
    return rows


# ------------------------------------------- jvp, vjp, hvp, hessian (medium)
def operators(n: int = 1000, nh: int = 100) -> list:
    """Prepared jvp and vjp of tanh(A x) and hvp of sum(tanh(A x)^2) at n = 1000, the
    Hessian at n = 100: each against the framework's best native formulation."""
    import autograd
    import autograd.numpy as anp
    import jax
    import jax.numpy as jnp
    import torch
    from autograd.differential_operators import make_jvp, make_vjp

    rows = []
    rng = np.random.default_rng(1)
    A = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = np.linspace(-1, 1, n, dtype=np.float32)
    v = np.cos(np.arange(n, dtype=np.float32))

    # jax
    Aj, xj, vj, b = jnp.asarray(A), jnp.asarray(x), jnp.asarray(v), di.AutoJax()
    fj = lambda x: jnp.tanh(Aj @ x)  # noqa: E731
    sj = lambda x: (jnp.tanh(Aj[: x.shape[0], : x.shape[0]] @ x) ** 2).sum()  # noqa: E731
    jvp_n = jax.jit(lambda x, v: jax.jvp(fj, (x,), (v,))[1])
    vjp_n = jax.jit(lambda x, w: jax.vjp(fj, x)[1](w)[0])
    hvp_n = jax.jit(lambda x, v: jax.jvp(jax.grad(sj), (x,), (v,))[1])
    hes_n = jax.jit(jax.hessian(sj))
    xh = xj[:nh]
    p_jvp, p_vjp = di.prepare_jvp(fj, b, xj, vj), di.prepare_vjp(fj, b, xj, vj)
    p_hvp, p_hes = di.prepare_hvp(sj, b, xj, vj), di.prepare_hessian(sj, b, xh)
    for name, nat, ours in (
        (f"jvp n={n}", lambda: jvp_n(xj, vj), lambda: di.jvp(fj, b, xj, vj, prep=p_jvp)),
        (f"vjp n={n}", lambda: vjp_n(xj, vj), lambda: di.vjp(fj, b, xj, vj, prep=p_vjp)),
        (f"hvp n={n}", lambda: hvp_n(xj, vj), lambda: di.hvp(sj, b, xj, vj, prep=p_hvp)),
        (f"hessian n={nh}", lambda: hes_n(xh), lambda: di.hessian(sj, b, xh, prep=p_hes)),
    ):
        rows.append(row(f"jax {name} (prepared)", jax_block(nat), jax_block(ours), 300, 1.05))

    # torch
    At, xt, vt, b = torch.from_numpy(A), torch.from_numpy(x), torch.from_numpy(v), di.AutoTorch()
    ft = lambda x: torch.tanh(At @ x)  # noqa: E731
    st = lambda x: (torch.tanh(At[: x.shape[0], : x.shape[0]] @ x) ** 2).sum()  # noqa: E731

    def vjp_t():
        xg = xt.detach().requires_grad_()
        return torch.autograd.grad(ft(xg), xg, vt)[0]

    def hvp_t():
        xg = xt.detach().requires_grad_()
        (g,) = torch.autograd.grad(st(xg), xg, create_graph=True)
        return torch.autograd.grad(g, xg, vt)[0]

    xh = xt[:nh].clone()
    hes_t = faster(
        lambda: torch.func.hessian(st)(xh),
        lambda: torch.autograd.functional.hessian(st, xh, vectorize=True),
    )
    p_jvp, p_vjp = di.prepare_jvp(ft, b, xt, vt), di.prepare_vjp(ft, b, xt, vt)
    p_hvp, p_hes = di.prepare_hvp(st, b, xt, vt), di.prepare_hessian(st, b, xh)
    for name, nat, ours in (
        (
            f"jvp n={n}",
            lambda: torch.func.jvp(ft, (xt,), (vt,))[1],
            lambda: di.jvp(ft, b, xt, vt, prep=p_jvp),
        ),
        (f"vjp n={n}", vjp_t, lambda: di.vjp(ft, b, xt, vt, prep=p_vjp)),
        (f"hvp n={n}", hvp_t, lambda: di.hvp(st, b, xt, vt, prep=p_hvp)),
        (f"hessian n={nh}", hes_t, lambda: di.hessian(st, b, xh, prep=p_hes)),
    ):
        rows.append(row(f"torch {name} (prepared)", nat, ours, 300, 1.05))

    # autograd (float64, its native precision)
    A64, x64, v64, b = (
        A.astype(np.float64),
        x.astype(np.float64),
        v.astype(np.float64),
        di.AutoAutograd(),
    )
    fa = lambda x: anp.tanh(A64 @ x)  # noqa: E731
    sa = lambda x: anp.sum(anp.tanh(A64[: x.shape[0], : x.shape[0]] @ x) ** 2)  # noqa: E731
    hvp_a, hes_a = autograd.hessian_vector_product(sa), autograd.hessian(sa)
    xh = x64[:nh].copy()
    p_jvp, p_vjp = di.prepare_jvp(fa, b, x64, v64), di.prepare_vjp(fa, b, x64, v64)
    p_hvp, p_hes = di.prepare_hvp(sa, b, x64, v64), di.prepare_hessian(sa, b, xh)
    for name, nat, ours in (
        (
            f"jvp n={n}",
            lambda: make_jvp(fa)(x64)(v64)[1],
            lambda: di.jvp(fa, b, x64, v64, prep=p_jvp),
        ),
        (
            f"vjp n={n}",
            lambda: make_vjp(fa)(x64)[0](v64),
            lambda: di.vjp(fa, b, x64, v64, prep=p_vjp),
        ),
        (f"hvp n={n}", lambda: hvp_a(x64, v64), lambda: di.hvp(sa, b, x64, v64, prep=p_hvp)),
        (f"hessian n={nh}", lambda: hes_a(xh), lambda: di.hessian(sa, b, xh, prep=p_hes)),
    ):
        rows.append(row(f"autograd {name} (prepared)", nat, ours, 100, 1.05))
    return rows


def main() -> list:
    one_thread()
    print(HEADER)
    rows = []
    for n in (10, 10_000):
        rows += gradients(n)
    rows += jacobians()
    rows += operators()
    return rows


if __name__ == "__main__":
    main()
