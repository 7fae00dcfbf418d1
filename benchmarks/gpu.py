"""The GPU check's benchmark (``make gpu-check``): diffiface against each framework's own
call on a GPU, same run, as ratios of medians.

- the performance matrix's rows (benchmarks/matrix_cases.py) with x on the GPU:
  gradient, jvp, vjp and hvp at 1e3, 1e5 and 1e7 elements, prepared and unprepared;
  Tangents(4), value_and_gradient and a closure made per call at 1e5; the dense
  Jacobian and Hessian at 1e3 (float64, as the CPU matrix);
- the seeds' nested loss (benchmarks/nested.py's problem, float32): the training
  gradient of a loss holding an inner gradient, FixedParams against the framework's
  own reverse over reverse;
- a crossing: a JAX function inside torch's forward and backward on CUDA tensors,
  against the same function in torch.

Each diffiface result is checked against the native one before it is timed. Calls
wait for the GPU (``torch.cuda.synchronize``, ``block_until_ready``). The table goes
to ``--out`` (markdown) and the terminal.

Run: ``python benchmarks/gpu.py --out build/gpu_check.md [--quick]``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
import traceback

import matrix_cases as mc
import numpy as np
from matrix import check, target
from timing import interleaved

import diffiface as di

ROUNDS = 5
# where the arrays live: the GPU, or the CPU for a dry run of this script (--cpu)
DEV: dict = {"torch": "cuda", "jax": None}


def rows(quick: bool) -> list:
    sizes = (1000, 10**5) if quick else (1000, 10**5, 10**7)
    out = []
    for fw in ("torch", "jax"):
        for op in mc.CORE:
            out += [
                mc.Row(fw, op, "array", f, n) for n in sizes for f in ("prepared", "unprepared")
            ]
        for op in ("jvp", "vjp", "hvp"):
            out.append(mc.Row(fw, op, "array", "Tangents(4)", 10**5))
        out.append(mc.Row(fw, "value_and_gradient", "array", "prepared", 10**5))
        out.append(mc.Row(fw, "gradient", "array", "f per call", 10**5))
        out += [mc.Row(fw, op, "array", "prepared", 1000) for op in ("jacobian", "hessian")]
    return out


def timed(native, ours, quick: bool) -> tuple[float, float]:
    cost = max(_once(native), _once(ours))
    repeat = max(ROUNDS, min(ROUNDS * 200, int((0.2 if quick else 0.6) * 1e6 / 2 / cost)))
    t = interleaved({"native": native, "diffiface": ours}, repeat, ROUNDS, warmup=2)
    return t["native"], t["diffiface"]


def _once(fn) -> float:
    start = time.perf_counter()
    fn()
    return max((time.perf_counter() - start) * 1e6, 1.0)


def matrix_rows(quick: bool) -> list:
    out = []
    for row in rows(quick):
        try:
            native, ours = mc.build(row)
            check(row, native, ours)
            t_native, t_ours = timed(native, ours, quick)
            ratio = t_ours / t_native
            ok = "✓" if ratio <= target(row.n) else "✗"
            out.append((row.name, t_native, t_ours, f"{ratio:.2f}", f"≤ {target(row.n)} {ok}"))
        except Exception as e:  # a row that fails is a finding: shown, not hidden
            out.append((row.name, None, None, "failed", f"{type(e).__name__}: {str(e)[:120]}"))
            traceback.print_exc()
        print(*out[-1], sep=" | ", flush=True)
    return out


def nested_rows(quick: bool) -> list:
    from nested import make_g, problem

    out = []
    for size in ("medium",) if quick else ("medium", "large"):
        t_np, p_np = problem(size)
        for fw, configs in (("torch", _torch_nested), ("jax", _jax_nested)):
            try:
                calls = configs(make_g, t_np, p_np)
                ref = _np(calls["native RoR"]())
                for label, fn in calls.items():
                    got = _np(fn())
                    assert np.allclose(got, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max()), label
                times = interleaved(calls, 20 if quick else 60, ROUNDS, warmup=3)
                base = times["native RoR"]
                for label, us in times.items():
                    ratio = f"{us / base:.2f}"
                    out.append((f"{fw} nested loss {size} {label}", base, us, ratio, ""))
                    print(*out[-1], sep=" | ", flush=True)
            except Exception as e:
                out.append((f"{fw} nested loss {size}", None, None, "failed", str(e)[:120]))
                traceback.print_exc()
    return out


def _sync() -> None:
    if DEV["torch"] == "cuda":
        import torch

        torch.cuda.synchronize()


def _np(tree) -> np.ndarray:
    from diffiface.testing._scenario import flat_result

    return flat_result(tree)


def _torch_nested(make_g, t_np, p_np) -> dict:
    import torch

    dev = DEV["torch"]
    t = torch.tensor(t_np, device=dev)
    p = [(torch.tensor(w, device=dev), torch.tensor(b, device=dev)) for w, b in p_np]
    g = make_g(torch)

    def inputs():
        ps = [(w.detach().requires_grad_(), b.detach().requires_grad_()) for w, b in p]
        return t.detach().requires_grad_(), ps

    def flat(ps):
        return [a for pair in ps for a in pair]

    def ror():
        tt, ps = inputs()
        (y,) = torch.autograd.grad(g(tt, ps), tt, create_graph=True)
        out = torch.autograd.grad(((y - torch.cos(tt)) ** 2).sum(), [tt, *flat(ps)])
        _sync()
        return out

    def with_di(strategy):
        def call():
            tt, ps = inputs()
            y = di.gradient(di.FixedParams(g, ps, strategy=strategy), di.AutoTorch(), tt)
            out = torch.autograd.grad(((y - torch.cos(tt)) ** 2).sum(), [tt, *flat(ps)])
            _sync()
            return out

        return call

    return {
        "native RoR": ror,
        "di auto": with_di("auto"),
        "di forward_over_reverse": with_di("forward_over_reverse"),
    }


def _jax_nested(make_g, t_np, p_np) -> dict:
    import jax
    import jax.numpy as jnp

    gpu = DEV["jax"]
    t = jax.device_put(t_np, gpu)
    p = [(jax.device_put(w, gpu), jax.device_put(b, gpu)) for w, b in p_np]
    g = make_g(jnp)

    def native(t, p):
        return ((jax.grad(g)(t, p) - jnp.cos(t)) ** 2).sum()

    def with_di(strategy):
        def loss(t, p):
            y = di.gradient(di.FixedParams(g, p, strategy=strategy), di.AutoJax(), t)
            return ((y - jnp.cos(t)) ** 2).sum()

        return loss

    losses = {"native RoR": native, "di auto": with_di("auto")}
    losses["di forward_over_reverse"] = with_di("forward_over_reverse")
    calls = {}
    for label, loss in losses.items():
        step = jax.jit(jax.grad(loss, argnums=(0, 1)))
        calls[label] = lambda step=step: jax.block_until_ready(step(t, p))
    return calls


def kernel_rows() -> list:
    """CUDA kernels and copies launched by one warm call of the torch rows at 1e5,
    native and diffiface (what a ratio at a launch-bound size is made of)."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    out = []
    forms = [(op, "prepared") for op in mc.CORE] + [("jvp", "Tangents(4)"), ("vjp", "Tangents(4)")]
    for op, form in forms:
        row = mc.Row("torch", op, "array", form, 10**5)
        native, ours = mc.build(row)
        counts = []
        for fn in (native, ours):
            fn()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    fn()
            kinds = [
                e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            ]
            counts.append(len(kinds))
        out.append((f"{row.name}: CUDA kernels and copies", counts[0], counts[1], "", ""))
        print(*out[-1], sep=" | ", flush=True)
    return out


def crossing_rows(quick: bool) -> list:
    import jax.numpy as jnp
    import torch

    out = []
    for n in (10**4, 10**6) if quick else (10**4, 10**6, 10**7):
        bridged = di.differentiate_with(lambda x: jnp.sin(x) * x, di.AutoJax())
        x = torch.linspace(-1, 1, n, device=DEV["torch"], requires_grad=True)

        def through_jax(bridged=bridged, x=x):
            (g,) = torch.autograd.grad(bridged(x).sum(), x)
            _sync()
            return g

        def in_torch(x=x):
            (g,) = torch.autograd.grad((torch.sin(x) * x).sum(), x)
            _sync()
            return g

        np.testing.assert_allclose(_np(through_jax()), _np(in_torch()), rtol=1e-5, atol=1e-6)
        t_native, t_ours = timed(in_torch, through_jax, quick)
        ratio = f"{t_ours / t_native:.2f}"
        out.append(
            (f"crossing: JAX f in torch fwd+bwd n={mc._size(n)}", t_native, t_ours, ratio, "")
        )
        print(*out[-1], sep=" | ", flush=True)
    return out


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def markdown(sections: dict, path: str, wall: float) -> None:
    import jax
    import torch

    lines = [
        f"GPU check: {device_name()}, {datetime.date.today()}, torch {torch.__version__}, "
        f"jax {jax.__version__}; {wall:.0f} s. Ratios are diffiface / native (medians of "
        f"{ROUNDS} interleaved rounds; each call waits for the GPU).",
        "",
    ]
    for title, rs in sections.items():
        if "kernels" in title:  # counts
            lines += [f"### {title}", "", "| row | native | diffiface |", "| --- | --- | --- |"]
            lines += [f"| {name} | {a} | {b} |" for name, a, b, _, _ in rs] + [""]
            continue
        lines += [f"### {title}", "", "| row | native µs | diffiface µs | ratio | target |"]
        lines.append("| --- | --- | --- | --- | --- |")
        for name, a, b, ratio, tgt in rs:
            fa = "-" if a is None else f"{a:.1f}"
            fb = "-" if b is None else f"{b:.1f}"
            lines.append(f"| {name} | {fa} | {fb} | {ratio} | {tgt} |")
        lines.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="gpu_check.md")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="a dry run of this script on the CPU")
    args = ap.parse_args(argv)
    import jax
    import torch

    if args.cpu:
        DEV.update(torch="cpu", jax=jax.devices("cpu")[0])
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (--cpu for a dry run)")
        return 1
    else:
        DEV.update(torch="cuda", jax=jax.devices("gpu")[0])
        mc.DEVICE.update(DEV)
    start = time.perf_counter()
    sections = {
        "The performance matrix's rows on the GPU (float64)": matrix_rows(args.quick),
        "The seeds' nested loss (float32): ratio to native reverse over reverse": nested_rows(
            args.quick
        ),
        "A crossing (float32)": crossing_rows(args.quick),
    }
    if DEV["torch"] == "cuda":
        sections["torch: CUDA kernels per call (counts, not µs)"] = kernel_rows()
    markdown(sections, args.out, time.perf_counter() - start)
    failed = [r[0] for rs in sections.values() for r in rs if r[3] == "failed"]
    print(f"wrote {args.out}; {len(failed)} rows failed", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
