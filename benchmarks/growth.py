"""Overhead against input size: does diffiface's ratio stay flat as n grows?

For gradient, jvp, vjp and hvp on each framework (JAX, torch, autograd), prepared
calls (``di.prepare_*`` then ``prep=``) at 10 to 1e6 elements, against the
framework's best native call measured in the same run (the formulations of
overhead.py). The functions are elementwise, so 1e6 elements stay cheap: gradient
and hvp of ``sum(sin(x) * x)``, jvp and vjp of ``sin(x) * x``; float32 for JAX and
torch, float64 for autograd. Every diffiface result is checked against the native
one before it is timed.

What diffiface adds is a fixed cost per call, so its ratio should fall towards 1
as n grows; a ratio that grows with n would mean work (a copy, a conversion, a
check) that scales with the input.

Run pinned to one core: ``taskset -c 1 python benchmarks/growth.py`` (``--quick``
for fewer repeats); it writes docs/growth.png and the growth section of
docs/benchmarks.md.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import (  # first: one thread, before numpy loads
    interleaved,
    median_us,
    one_thread,
)

# isort: split
import numpy as np

import diffiface as di

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
SIZES = (10, 100, 1_000, 10_000, 100_000, 1_000_000)
OPS = ("gradient", "jvp", "vjp", "hvp")
FRAMEWORKS = ("jax", "torch", "autograd")
BUDGET_US = 300_000  # timed calls per configuration and row, in µs
HEADER = f"{'case':<40} {'native µs':>10} {'di µs':>10} {'ratio':>7}"


def _inputs(n: int, dtype):
    x = np.linspace(-1, 1, n, dtype=dtype)
    v = np.cos(np.arange(n, dtype=dtype))
    return x, v


def _check(ours, native, dtype) -> None:
    tight = np.dtype(dtype) == np.float64
    np.testing.assert_allclose(
        np.asarray(ours),
        np.asarray(native),
        rtol=1e-10 if tight else 1e-5,
        atol=0 if tight else 1e-6,
    )


# ------------------------------------------------------------- call pairs
# Each framework's functions are defined once (a function made anew per size would
# be a new function to diffiface); ``at(n)`` gives op -> (native call, diffiface call)
# on that framework's inputs of n elements, every call blocking until its result is
# ready.


def _jax():
    import jax
    import jax.numpy as jnp

    f = lambda x: jnp.sin(x) * x  # noqa: E731
    s = lambda x: (jnp.sin(x) * x).sum()  # noqa: E731
    grad_n = jax.jit(jax.grad(s))
    jvp_n = jax.jit(lambda x, v: jax.jvp(f, (x,), (v,))[1])
    vjp_n = jax.jit(lambda x, w: jax.vjp(f, x)[1](w)[0])
    hvp_n = jax.jit(lambda x, v: jax.jvp(jax.grad(s), (x,), (v,))[1])
    b = di.AutoJax()

    def block(fn):
        return lambda: jax.block_until_ready(fn())

    def at(n):
        x, v = (jnp.asarray(a) for a in _inputs(n, np.float32))
        p = _prepared(f, s, b, x, v)
        pairs = {
            "gradient": (lambda: grad_n(x), lambda: di.gradient(s, b, x, prep=p["gradient"])),
            "jvp": (lambda: jvp_n(x, v), lambda: di.jvp(f, b, x, v, prep=p["jvp"])),
            "vjp": (lambda: vjp_n(x, v), lambda: di.vjp(f, b, x, v, prep=p["vjp"])),
            "hvp": (lambda: hvp_n(x, v), lambda: di.hvp(s, b, x, v, prep=p["hvp"])),
        }
        return {op: (block(nat), block(ours)) for op, (nat, ours) in pairs.items()}

    return at, np.float32


def _torch():
    import torch

    f = lambda x: torch.sin(x) * x  # noqa: E731
    s = lambda x: (torch.sin(x) * x).sum()  # noqa: E731
    b = di.AutoTorch()

    def at(n):
        x, v = (torch.from_numpy(a) for a in _inputs(n, np.float32))

        def grad_n():
            xg = x.detach().requires_grad_()
            return torch.autograd.grad(s(xg), xg)[0]

        def vjp_n():
            xg = x.detach().requires_grad_()
            return torch.autograd.grad(f(xg), xg, v)[0]

        def hvp_n():
            xg = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(s(xg), xg, create_graph=True)
            return torch.autograd.grad(g, xg, v)[0]

        p = _prepared(f, s, b, x, v)
        return {
            "gradient": (grad_n, lambda: di.gradient(s, b, x, prep=p["gradient"])),
            "jvp": (
                lambda: torch.func.jvp(f, (x,), (v,))[1],
                lambda: di.jvp(f, b, x, v, prep=p["jvp"]),
            ),
            "vjp": (vjp_n, lambda: di.vjp(f, b, x, v, prep=p["vjp"])),
            "hvp": (hvp_n, lambda: di.hvp(s, b, x, v, prep=p["hvp"])),
        }

    return at, np.float32


def _autograd():
    import autograd
    import autograd.numpy as anp
    from autograd.differential_operators import make_jvp, make_vjp

    f = lambda x: anp.sin(x) * x  # noqa: E731
    s = lambda x: anp.sum(anp.sin(x) * x)  # noqa: E731
    grad_n, hvp_n = autograd.grad(s), autograd.hessian_vector_product(s)
    b = di.AutoAutograd()

    def at(n):
        x, v = _inputs(n, np.float64)
        p = _prepared(f, s, b, x, v)
        return {
            "gradient": (lambda: grad_n(x), lambda: di.gradient(s, b, x, prep=p["gradient"])),
            "jvp": (lambda: make_jvp(f)(x)(v)[1], lambda: di.jvp(f, b, x, v, prep=p["jvp"])),
            "vjp": (lambda: make_vjp(f)(x)[0](v), lambda: di.vjp(f, b, x, v, prep=p["vjp"])),
            "hvp": (lambda: hvp_n(x, v), lambda: di.hvp(s, b, x, v, prep=p["hvp"])),
        }

    return at, np.float64


PAIRS = {"jax": _jax, "torch": _torch, "autograd": _autograd}


def _prepared(f, s, b, x, v) -> dict:
    """op -> the preparation of diffiface's call (jvp and vjp of f, gradient and hvp of s)."""
    return {
        "gradient": di.prepare_gradient(s, b, x),
        "jvp": di.prepare_jvp(f, b, x, v),
        "vjp": di.prepare_vjp(f, b, x, v),
        "hvp": di.prepare_hvp(s, b, x, v),
    }


# ---------------------------------------------------------------- timing
def _row(fw: str, op: str, n: int, native, ours, quick: bool) -> dict:
    """Time one pair, interleaved; the repeats scale with the call's cost (many calls
    at 10 elements, a few at 1e6)."""
    pilot = median_us(native, 3, warmup=2)
    budget = BUDGET_US / (8 if quick else 1)
    rounds = 9 if pilot < 20_000 else 5
    repeat = int(min(3000, max(rounds, budget / pilot)))
    round_warmup = min(20, max(1, repeat // (2 * rounds)))
    t = interleaved(
        {"native": native, "diffiface": ours}, repeat, rounds=rounds, round_warmup=round_warmup
    )
    case = f"{fw} {op} n={n} (prepared)"
    ratio = t["diffiface"] / t["native"]
    print(f"{case:<40} {t['native']:>10.1f} {t['diffiface']:>10.1f} {ratio:>7.2f}", flush=True)
    return {
        "case": case,
        "framework": fw,
        "op": op,
        "n": n,
        "native_us": round(t["native"], 2),
        "diffiface_us": round(t["diffiface"], 2),
        "ratio": round(ratio, 3),
        "target": None,
    }


def main(quick: bool = False) -> list[dict]:
    """Every (framework, operator, size) row, each result checked before it is timed."""
    one_thread()
    print(HEADER)
    rows = []
    for fw in FRAMEWORKS:
        at, dtype = PAIRS[fw]()
        for n in SIZES:
            pairs = at(n)
            for op in OPS:
                native, ours = pairs[op]
                _check(ours(), native(), dtype)
                rows.append(_row(fw, op, n, native, ours, quick))
    return rows


# ---------------------------------------------------------------- output
def chart(rows: list[dict], path: str) -> None:
    """One panel per framework: ratio against size, a line per operator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fws = [fw for fw in FRAMEWORKS if any(r["framework"] == fw for r in rows)]
    top = max(1.3, max(r["ratio"] for r in rows) * 1.05)
    fig, axes = plt.subplots(1, len(fws), figsize=(4 * len(fws), 3.6), sharey=True, squeeze=False)
    for ax, fw in zip(axes[0], fws, strict=True):
        for op, marker in zip(OPS, "osD^", strict=True):
            pts = sorted(
                (r["n"], r["ratio"]) for r in rows if r["framework"] == fw and r["op"] == op
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker + "-", label=op, markersize=4)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_ylim(min(0.8, min(r["ratio"] for r in rows) * 0.95), top)
        ax.set_title(f"{fw} (prepared)")
        ax.set_xlabel("input elements n")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("diffiface time / native time")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


START, END = "<!-- growth:start -->", "<!-- growth:end -->"
ANCHOR = "![ratios](ratios.png)"


def _size(n: int) -> str:
    return str(n) if n < 1000 else f"1e{len(str(n)) - 1}"


def markdown(rows: list[dict], path: str, wall: float | None = None) -> None:
    """Replace the growth section of ``path`` (placed after the ratios chart the
    first time) with a paragraph and a table of ratios."""
    sizes = sorted({r["n"] for r in rows})
    ratio = {(r["framework"], r["op"], r["n"]): r["ratio"] for r in rows}
    took = "" if wall is None else f"; the run took {wall:.0f} s"
    lines = [
        "### Overhead against input size",
        "",
        "Prepared calls (`di.prepare_*` then `prep=`) of gradient, jvp, vjp and hvp, "
        "from 10 to 1e6 elements, against the same native calls as above, measured "
        "in the same run by `benchmarks/growth.py` (gradient and hvp of "
        "`sum(sin(x) * x)`, jvp and vjp of `sin(x) * x`; float32 except autograd's "
        "float64; one thread pinned; each result checked against the native one "
        f"first). Measured {time.strftime('%Y-%m-%d')}{took}. Cells are diffiface "
        "time / native time: diffiface's cost is fixed per call, so the ratio falls "
        "towards 1 as the work grows.",
        "",
        "| framework, operator | " + " | ".join(_size(n) for n in sizes) + " |",
        "| --- |" + " ---: |" * len(sizes),
    ]
    for fw in FRAMEWORKS:
        for op in OPS:
            cells = [ratio.get((fw, op, n)) for n in sizes]
            if any(c is not None for c in cells):
                body = " | ".join("" if c is None else f"{c:.2f}" for c in cells)
                lines.append(f"| {fw} {op} | {body} |")
    lines += ["", "![overhead against input size](growth.png)"]
    section = START + "\n" + "\n".join(lines) + "\n" + END
    with open(path) as fh:
        text = fh.read()
    if START in text:
        head, rest = text.split(START)
        text = head + section + rest.split(END)[1]
    else:
        head, tail = text.split(ANCHOR)
        text = head + ANCHOR + "\n\n" + section + tail
    with open(path, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    start = time.perf_counter()
    rows = main(quick="--quick" in sys.argv)
    wall = time.perf_counter() - start
    print(f"{wall:.0f} s")
    chart(rows, os.path.join(DOCS, "growth.png"))
    markdown(rows, os.path.join(DOCS, "benchmarks.md"), wall)
    print("wrote docs/growth.png and the growth section of docs/benchmarks.md")
