"""Nested AD with FixedParams: the training gradient of a loss that contains an
inner gradient, diffiface against each framework's own nesting, same run.

The loss is ``L(t, p) = sum((∇ₜ g(t, p) - cos t)²)`` with ``g(t, p) =
sum(model(t, p)²)`` and ``model`` a tanh MLP (tanh after every layer but the
last); the benchmark computes ``∇_(t,p) L`` (t and every parameter leaf),
float32, CPU, one thread, at three sizes:

* small: layers 1-12-12-12-1 on 16 points,
* medium: 2-64-64-64-1 on 256 points,
* large: 2-256-256-256-256-1 on 1024 points.

Configurations, per framework and size:

* ``native RoR``: the framework's own reverse over reverse (``jax.grad`` of a
  loss calling ``jax.grad``, jitted; ``torch.autograd.grad`` with
  ``create_graph=True`` then ``torch.autograd.grad``; nested ``autograd.grad``).
* ``native FoR``: forward over reverse written by hand: ``y = ∇ₜ g``,
  ``w = 2 (y - cos t)``, one JVP of the full gradient ``∇_(t,p) g`` along
  ``(w, 0)`` gives ``(H_tt w, H_pt w)``; ``dL/dt = H_tt w + w sin t``,
  ``dL/dp = H_pt w`` (``jax.jvp``, ``torch.func.jvp``, ``autograd.core.make_jvp``).
* ``di auto``, ``di forward_over_reverse``: the inner gradient is
  ``di.gradient(di.FixedParams(g, p, strategy=...), backend, t)``, the outer
  gradient the framework's own as in ``native RoR``.
* ``di auto, inline``: ``di auto`` written as the seeds (Lux's manual, the forum
  thread) write it: the inner function made inside the loss on every call,
  ``di.FixedParams(lambda s, q: g(s, q), p)``.
* ``di min_memory``: ``strategy="min_memory"``.
* ``di rules off``: ``di auto`` inside ``with di.nested_ad(False):``.
* ``di outer, auto``: ``di auto`` with the outer gradient by diffiface too
  (``di.gradient(loss, backend, (t, p))``, prepared).

Frameworks: ``jax`` (the outer gradient under ``jax.jit``), ``jax-eager`` (the same
without ``jit``; no ``di outer`` row), ``torch``, ``autograd``. The ``path`` column
gives the strategy a diffiface row ran once warm (``nested_rule_counts``).

Every configuration is checked against ``native RoR`` (each leaf within 1e-3
of its largest magnitude) and the diffiface ones against
``di.nested_rule_counts`` (the path they claim to take), before timing.
Times are medians of interleaved repeats; the ratio is against the faster of
the two native configurations of that framework and size.

Peak extra memory of one call, in MiB, by the backends' own ``peak_bytes`` (what
``strategy="min_memory"`` measures):

* jax: ``temp_size_in_bytes + output_size_in_bytes`` of the compiled
  executable's ``memory_analysis()`` (what XLA plans to allocate beyond the
  arguments).
* torch: the peak of the running sum of the allocation and free events
  (``[memory]`` events) that ``torch.profiler`` records with
  ``profile_memory=True`` during one call.
* autograd: the ``tracemalloc`` peak during one call, over what was traced
  before it (NumPy reports its array buffers to tracemalloc).

Run: ``taskset -c 1 python benchmarks/nested.py [--quick] [--md PATH] [--only torch,jax]
[--sizes small,medium]`` (``--quick``: fewer repeats; ``--md``: also write the table as
markdown; ``--only``: these frameworks; ``--sizes``: these sizes). A configuration
whose warm call takes over ``SLOW_S`` is timed apart, ``ROUNDS`` calls.
"""

from __future__ import annotations

import itertools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved, median_us, one_thread  # first: one thread, before numpy loads

# isort: split
import numpy as np
import optree

import diffiface as di
from diffiface.core.registry import implementation
from diffiface.nested import choose

STRATEGIES = (choose.ROR, choose.FOR)

# name: (layer widths, number of points)
SIZES = {
    "small": ((1, 12, 12, 12, 1), 16),
    "medium": ((2, 64, 64, 64, 1), 256),
    "large": ((2, 256, 256, 256, 256, 1), 1024),
}
# calls timed per configuration (split in ROUNDS interleaved rounds), warm-up calls
REPEATS = {"small": (2000, 20), "medium": (600, 5), "large": (60, 2)}
REPEATS_EAGER = {"small": (60, 2), "medium": (30, 2), "large": (10, 1)}  # jax-eager
ROUNDS = 5
NATIVE = ("native RoR", "native FoR")
DI = {  # label: (strategy, nested_ad)
    "di auto": ("auto", True),
    "di auto, inline": ("auto", True),  # the inner function made anew on every call
    "di forward_over_reverse": ("forward_over_reverse", True),
    "di min_memory": ("min_memory", True),
    "di rules off": ("auto", False),
    "di outer, auto": ("auto", True),  # the outer gradient by diffiface too
}
OUTER = "di outer, auto"
INLINE = "di auto, inline"
RTOL = 1e-3
SLOW_S = 1.0


def problem(size):
    """``(t, params)`` as float32 NumPy arrays: params a list of (W, b) pairs."""
    widths, n = SIZES[size]
    rng = np.random.default_rng(0)
    params = []
    for a, b in itertools.pairwise(widths):
        w = rng.standard_normal((a, b)) / np.sqrt(a)
        params.append((w.astype(np.float32), (0.1 * rng.standard_normal(b)).astype(np.float32)))
    t = rng.uniform(-1.0, 1.0, (n, widths[0])).astype(np.float32)
    return t, params


def make_g(ns):
    """``g(t, p) = sum(model(t, p)²)`` with ``ns`` the framework's array namespace."""

    def g(t, p):
        x = t
        for i in range(len(p)):
            w, b = p[i]
            x = x @ w + b
            if i < len(p) - 1:
                x = ns.tanh(x)
        return (x**2).sum()

    return g


def leaves(tree):
    """The arrays of nested tuples and lists, in order."""
    return optree.tree_leaves(tree)


def to_numpy(out):
    return [np.asarray(a.detach() if hasattr(a, "detach") else a) for a in leaves(out)]


def check(label, ref, got):
    assert len(ref) == len(got), (label, len(ref), len(got))
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert a.shape == b.shape, (label, i, a.shape, b.shape)
        scale = max(float(np.abs(a).max()), 1e-30)
        err = float(np.abs(a - b).max())
        assert err <= RTOL * scale, f"{label}: leaf {i} differs by {err:.3g} (scale {scale:.3g})"


def expect_path(framework, label):
    """Check the nested-AD rule counts since the last reset against the label's path."""
    counts = di.nested_rule_counts(reset=True)
    strategy, on = DI[label]
    if not on:
        assert not counts, (framework, label, counts)
        return
    if label == OUTER and framework == "jax" and not counts:
        return  # traced (and routed) once, when its preparation compiled it
    if strategy in ("auto", "min_memory"):  # the measured choice, the same on every call
        assert len(counts) == 1, (framework, label, counts)
        ((fw, op, want),) = counts
        assert (fw, op) == (framework, "gradient") and want in STRATEGIES, (label, counts)
        return
    assert set(counts) == {(framework, "gradient", strategy)}, (framework, label, counts)


# ---------------------------------------------------------------- frameworks


def jax_eager_configs(t_np, p_np):
    return jax_configs(t_np, p_np, jit=False)


def jax_configs(t_np, p_np, jit=True):
    import jax
    import jax.numpy as jnp

    t = jnp.asarray(t_np)
    p = [(jnp.asarray(w), jnp.asarray(b)) for w, b in p_np]
    g = make_g(jnp)

    def loss_native(t, p):
        return ((jax.grad(g)(t, p) - jnp.cos(t)) ** 2).sum()

    def for_native(t, p):
        w = 2 * (jax.grad(g)(t, p) - jnp.cos(t))
        _, (ht, hp) = jax.jvp(lambda t: jax.grad(g, argnums=(0, 1))(t, p), (t,), (w,))
        return ht + w * jnp.sin(t), hp

    def loss_di(strategy, inline=False):
        def loss(t, p):
            f = (lambda s, q: g(s, q)) if inline else g
            y = di.gradient(di.FixedParams(f, p, strategy=strategy), di.AutoJax(), t)
            return ((y - jnp.cos(t)) ** 2).sum()

        return jax.grad(loss, argnums=(0, 1))

    raw = {"native RoR": jax.grad(loss_native, argnums=(0, 1)), "native FoR": for_native}
    raw.update({label: loss_di(s, label == INLINE) for label, (s, _) in DI.items()})
    if not jit:
        del raw[OUTER]

    def loss_tp(tp):
        t, p = tp
        y = di.gradient(di.FixedParams(g, p), di.AutoJax(), t)
        return ((y - jnp.cos(t)) ** 2).sum()

    if jit:
        outer = di.prepare_gradient(loss_tp, di.AutoJax(), (t, p))
        raw[OUTER] = lambda t, p: di.gradient(loss_tp, di.AutoJax(), (t, p), prep=outer)
    configs = {}
    for label, fn in raw.items():
        if label == OUTER:  # compiled by its preparation; memory of the same function
            configs[label] = (
                lambda fn=fn: jax.block_until_ready(fn(t, p)),
                lambda: configs["di auto"][1](),
            )
            continue
        jitted = jax.jit(fn) if jit else fn
        on = DI.get(label, (None, True))[1]

        def call(jitted=jitted, on=on):
            with di.nested_ad(on):
                return jax.block_until_ready(jitted(t, p))

        def memory(fn=fn, on=on):
            with di.nested_ad(on):
                return peak_mib("jax", fn, (t, p))

        configs[label] = (call, memory)
    return configs


def torch_configs(t_np, p_np):
    import torch

    t = torch.from_numpy(t_np.copy())
    p = [(torch.from_numpy(w.copy()), torch.from_numpy(b.copy())) for w, b in p_np]
    g = make_g(torch)

    def inputs():
        ps = [(w.detach().requires_grad_(), b.detach().requires_grad_()) for w, b in p]
        return t.detach().requires_grad_(), ps

    def ror_native():
        tt, ps = inputs()
        (y,) = torch.autograd.grad(g(tt, ps), tt, create_graph=True)
        loss = ((y - torch.cos(tt)) ** 2).sum()
        return torch.autograd.grad(loss, [tt, *leaves(ps)])

    def for_native():
        tt = t.detach().requires_grad_()
        (y,) = torch.autograd.grad(g(tt, p), tt)
        w = 2 * (y - torch.cos(t))
        full = torch.func.grad(g, argnums=(0, 1))
        _, (ht, hp) = torch.func.jvp(lambda t: full(t, p), (t,), (w,))
        return (ht + w * torch.sin(t), *leaves(hp))

    def di_call(strategy, on, inline=False):
        def call():
            with di.nested_ad(on):
                tt, ps = inputs()
                f = (lambda s, q: g(s, q)) if inline else g
                fp = di.FixedParams(f, ps, strategy=strategy)
                y = di.gradient(fp, di.AutoTorch(), tt)
                loss = ((y - torch.cos(tt)) ** 2).sum()
                return torch.autograd.grad(loss, [tt, *leaves(ps)])

        return call

    raw = {"native RoR": ror_native, "native FoR": for_native}
    raw.update({label: di_call(*spec, label == INLINE) for label, spec in DI.items()})

    def loss_tp(tp):
        tt, ps = tp
        y = di.gradient(di.FixedParams(g, ps), di.AutoTorch(), tt)
        return ((y - torch.cos(tt)) ** 2).sum()

    outer = di.prepare_gradient(loss_tp, di.AutoTorch(), (t, p))
    raw[OUTER] = lambda: di.gradient(loss_tp, di.AutoTorch(), (t, p), prep=outer)
    return {label: (fn, lambda fn=fn: peak_mib("torch", fn)) for label, fn in raw.items()}


def peak_mib(framework, fn, args=()):
    """Peak extra memory of ``fn(*args)`` in MiB, by the measure diffiface's
    ``strategy="min_memory"`` uses on that framework (the backend's ``peak_bytes``)."""
    backend = {"jax": di.AutoJax, "torch": di.AutoTorch, "autograd": di.AutoAutograd}[framework]
    return implementation(backend()).peak_bytes(fn, args) / 2**20


def autograd_configs(t, p_np):
    import autograd
    import autograd.numpy as anp
    from autograd.core import make_jvp

    p = tuple(p_np)
    g = make_g(anp)
    sizes = [a.size for a in leaves(p)]

    def loss_native(tp):
        t, p = tp
        return anp.sum((autograd.grad(g)(t, p) - anp.cos(t)) ** 2)

    def for_native():
        w = 2 * (autograd.grad(g)(t, p) - np.cos(t))
        full = autograd.grad(g, argnum=(0, 1))

        def flat(t):  # forward mode wants one array output: the full gradient, flat
            gt, gp = full(t, p)
            parts = [gt] + [gp[i][j] for i in range(len(p)) for j in range(2)]
            return anp.concatenate([anp.ravel(a) for a in parts])

        _, hw = make_jvp(flat, t)(w)
        out, start = [hw[: t.size].reshape(t.shape) + w * np.sin(t)], t.size
        for a, n in zip(leaves(p), sizes, strict=True):
            out.append(hw[start : start + n].reshape(a.shape))
            start += n
        return out

    def loss_di(strategy, on, inline=False):
        def loss(tp):
            t, p = tp
            f = (lambda s, q: g(s, q)) if inline else g
            y = di.gradient(di.FixedParams(f, p, strategy=strategy), di.AutoAutograd(), t)
            return anp.sum((y - anp.cos(t)) ** 2)

        grad = autograd.grad(loss)

        def call():
            with di.nested_ad(on):
                return grad((t, p))

        return call

    ror = autograd.grad(loss_native)
    raw = {"native RoR": lambda: ror((t, p)), "native FoR": for_native}
    raw.update({label: loss_di(*spec, label == INLINE) for label, spec in DI.items()})

    def loss_tp(tp):
        t, p = tp
        y = di.gradient(di.FixedParams(g, p), di.AutoAutograd(), t)
        return anp.sum((y - anp.cos(t)) ** 2)

    outer = di.prepare_gradient(loss_tp, di.AutoAutograd(), (t, p))
    raw[OUTER] = lambda: di.gradient(loss_tp, di.AutoAutograd(), (t, p), prep=outer)
    return {label: (fn, lambda fn=fn: peak_mib("autograd", fn)) for label, fn in raw.items()}


FRAMEWORKS = {
    "jax": jax_configs,
    "jax-eager": jax_eager_configs,
    "torch": torch_configs,
    "autograd": autograd_configs,
}


# ------------------------------------------------------------------ running


def measure(framework, size, quick=False):
    """``{label: (median µs, peak MiB, path)}`` for every configuration at one size
    (``path``: the strategy a diffiface row runs once warm)."""
    t, p = problem(size)
    configs = FRAMEWORKS[framework](t, p)
    repeat, warmup = (REPEATS_EAGER if framework == "jax-eager" else REPEATS)[size]
    if quick:
        repeat, warmup = max(repeat // 5, ROUNDS), max(warmup // 4, 1)
    di.nested_rule_counts(reset=True)
    ref = to_numpy(configs["native RoR"][0]())
    slow, first = {}, {}
    for label, (fn, _) in configs.items():
        di.nested_rule_counts(reset=True)
        check(f"{framework} {size} {label}", ref, to_numpy(fn()))
        first[label] = di.nested_rule_counts()  # under jit: routed once, when traced
        if label in DI:
            expect_path(framework.split("-")[0], label)
        for _ in range(warmup):
            start = time.perf_counter()
            fn()
            if time.perf_counter() - start > SLOW_S:
                slow[label] = fn
                break
    calls = {label: fn for label, (fn, _) in configs.items() if label not in slow}
    times = interleaved(calls, repeat, ROUNDS, round_warmup=1)
    times.update({label: median_us(fn, ROUNDS) for label, fn in slow.items()})
    paths = {}
    for label, (fn, _) in configs.items():
        di.nested_rule_counts(reset=True)
        fn()
        ran = {strategy for (_, _, strategy) in di.nested_rule_counts(reset=True) or first[label]}
        paths[label] = (
            "/".join(sorted(ran))
            .replace("reverse_over_reverse", "RoR")
            .replace("forward_over_reverse", "FoR")
        )
    return {label: (times[label], memory(), paths[label]) for label, (_, memory) in configs.items()}


HEADER = ("framework", "size", "config", "µs", "ratio", "peak MiB", "path")
WIDTHS = (9, 7, 24, 10, 6, 9, 5)


def show(cells):
    print(
        " ".join(
            f"{c:<{w}}" if i < 3 else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(cells, WIDTHS, strict=True))
        ),
        flush=True,
    )


def main(quick=False, md=None, only=None, sizes=None):
    """Print the table; return the diffiface rows for results.json."""

    one_thread()
    start = time.perf_counter()
    show(HEADER)
    table, rows = [], []
    for framework in only or FRAMEWORKS:
        for size in sizes or SIZES:
            res = measure(framework, size, quick)
            best = min(NATIVE, key=lambda label: res[label][0])
            t_best = res[best][0]
            for label, (us, mib, path) in res.items():
                ratio = f"{us / t_best:.2f}"
                cells = (framework, size, label, f"{us:.1f}", ratio, f"{mib:.2f}", path)
                table.append(cells)
                show(cells)
                if label in DI:
                    rows.append(
                        {
                            "case": f"{framework} nested {size} ({label[3:]})",
                            "framework": framework,
                            "size": size,
                            "config": label,
                            "native_us": t_best,
                            "diffiface_us": us,
                            "ratio": us / t_best,
                            "native_config": best,
                            "native_ror_us": res["native RoR"][0],
                            "strategy": DI[label][0],
                            "nested_ad": DI[label][1],
                            "memory_mib": mib,
                            "path": path,
                            "memory_by_strategy_mib": {
                                choose.ROR: res["native RoR"][1],
                                choose.FOR: res["di forward_over_reverse"][1],
                            },
                        }
                    )
    wall = time.perf_counter() - start
    print(f"nested benchmark: {wall:.0f} s", flush=True)
    if md:
        write_markdown(md, table, wall, quick)
    return rows


def write_markdown(path, table, wall, quick):
    lines = [
        "| " + " | ".join(HEADER) + " |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
        *("| " + " | ".join(line) + " |" for line in table),
    ]
    note = (
        f"Machine: 2 cores, 1 thread pinned (taskset -c 1), CPU, float32, "
        f"{time.strftime('%Y-%m-%d')}; run took {wall:.0f} s"
        f"{' (--quick)' if quick else ''}. µs: median time per call of ∇_(t,p) L; "
        "ratio: against the faster native configuration of that framework and size; "
        "peak MiB: see the docstring of benchmarks/nested.py."
    )
    with open(path, "w") as fh:
        fh.write(note + "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    md_path = args[args.index("--md") + 1] if "--md" in args else None
    only = args[args.index("--only") + 1].split(",") if "--only" in args else None
    sizes = args[args.index("--sizes") + 1].split(",") if "--sizes" in args else None
    main(quick="--quick" in args, md=md_path, only=only, sizes=sizes)
