"""AutoMLX's warm prepared calls against MLX's own calls and ``mx.compile``, side by
side, and what ``mx.compile`` would break if diffiface applied it to f.

Timing: gradient, jvp, vjp and hvp at n = 10, 1e3 and 1e5, each as MLX's own call
(``mx.grad``, ``mx.jvp``, ``mx.vjp``, ``mx.vjp`` of ``mx.grad``), the same under
``mx.compile``, and diffiface's prepared call, each evaluated (MLX is lazy). Ratios to
MLX's own call.

Hazards: for each way a compiled f differs from f run anew, the compiled gradient,
MLX's own ``mx.grad`` and diffiface's prepared gradient after the change (max |diff|
from ``mx.grad``; f's Python runs counted over 5 calls).

Run pinned: ``taskset -c 0 python benchmarks/mlx_gradient.py [--no-timing]``.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from timing import interleaved  # noqa: E402  (first: one thread)

# isort: split
import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402

import diffiface as di  # noqa: E402

B = di.AutoMLX()


def f(x):
    return (mx.sin(x) * x**2).sum()


def field(x):
    return mx.sin(x) * x**2


def _natives(op: str, t) -> dict:
    """MLX's own call of ``op`` at (x, t), and the same under mx.compile."""
    if op == "gradient":
        call = mx.grad(f)
    elif op == "jvp":
        call = lambda x, t: mx.jvp(field, [x], [t])[1][0]  # noqa: E731
    elif op == "vjp":
        call = lambda x, t: mx.vjp(field, [x], [t])[1][0]  # noqa: E731
    else:
        g = mx.grad(f)
        call = lambda x, t: mx.vjp(g, [x], [t])[1][0]  # noqa: E731
    return {"mlx": call, "mx.compile": mx.compile(call)}


def one_row(op: str, n: int) -> None:
    x = mx.array(np.linspace(-1, 1, n), dtype=mx.float32)
    t = mx.array(np.cos(np.arange(n)), dtype=mx.float32)
    args = (x,) if op == "gradient" else (x, t)
    fn = f if op in ("gradient", "hvp") else field
    prep = getattr(di, f"prepare_{op}")(fn, B, *args)
    calls = {k: (lambda c=c: mx.eval(c(*args))) for k, c in _natives(op, t).items()}
    calls["diffiface prepared"] = lambda: mx.eval(getattr(di, op)(fn, B, *args, prep=prep))
    want = np.asarray(_natives(op, t)["mlx"](*args))  # the same numbers before any timing
    got = np.asarray(getattr(di, op)(fn, B, *args, prep=prep))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    repeat = 2000 if n <= 1000 else 100
    times = interleaved(calls, repeat=repeat, rounds=10, warmup=20)
    base = times["mlx"]
    row = "  ".join(f"{k} {us:8.1f} µs {us / base:5.2f}x" for k, us in times.items())
    print(f"{op:9s} n={n:<6d} {row}")


# ------------------------------------------------------------------ hazards


def _diffs(make_f, change) -> str:
    """After ``change()``: max |diff| from mx.grad of the compiled gradient and of
    diffiface's prepared one, how many different answers 5 calls of each gave, and
    f's Python runs over those 5 calls."""
    runs = [0]
    fn = make_f(runs)
    x = mx.array([0.3, -0.7, 1.1])
    compiled = mx.compile(mx.grad(fn))
    prep = di.prepare_gradient(fn, B, x)
    mx.eval(compiled(x), di.gradient(fn, B, x, prep=prep))
    change()
    want = np.asarray(mx.grad(fn)(x))
    out = []
    for label, call in (("mx.compile", compiled), ("diffiface", None)):
        before = runs[0]
        got = [np.asarray(call(x) if call else di.gradient(fn, B, x, prep=prep)) for _ in range(5)]
        diff = np.max(np.abs(got[0] - want))
        seen = len({g.tobytes() for g in got})
        out.append(f"{label}: |diff| {diff:.3g}, {seen} answer(s), f ran {runs[0] - before}/5")
    return "; ".join(out)


def hazards() -> None:
    a = mx.array([1.0, 2.0, 3.0])
    cell = {"scale": mx.array(2.0)}

    def in_place(runs):
        def fn(x):
            runs[0] += 1
            return (a * mx.sin(x)).sum()

        return fn

    def rebound(runs):
        s = mx.array(2.0)

        def fn(x):
            runs[0] += 1
            return (s * mx.sin(x)).sum()

        cell["set"] = lambda: fn.__closure__[1].__setattr__("cell_contents", mx.array(5.0))
        return fn

    model = nn.Linear(3, 1)

    def module(runs):
        def fn(x):
            runs[0] += 1
            return model(x).sum()

        return fn

    def noisy(runs):
        def fn(x):
            runs[0] += 1
            return (x * mx.random.normal(x.shape)).sum()

        return fn

    def set_a():
        a[0] = 5.0

    cases = {
        "closed-over array written in place (a[0] = 5)": (in_place, set_a),
        "closure cell rebound (s = mx.array(5.0))": (rebound, lambda: cell["set"]()),
        "mlx.nn.Module updated (model.update(...))": (
            module,
            lambda: model.update({"weight": model.weight * 2}),
        ),
        "f draws mx.random (new noise per call expected)": (noisy, lambda: None),
    }
    for label, (make_f, change) in cases.items():
        print(f"{label}: {_diffs(make_f, change)}")
    _control_flow()
    _captured_inputs()


def _control_flow() -> None:
    runs = [0]

    def branchy(x):
        runs[0] += 1
        return (x**2).sum() if x.sum() > 0 else x.sum()

    x = mx.array([0.3, -0.7, 1.1])
    try:
        mx.compile(mx.grad(branchy))(x)
        print("value-dependent branch: compiled")
    except ValueError as exc:
        print(f"value-dependent branch: mx.compile raises ({str(exc)[:60]}...) after f ran")
    print(f"  {runs[0]} time(s); mx.grad and diffiface run it")


def _captured_inputs() -> None:
    """``mx.compile(..., inputs=state)`` sees in-place changes only where f reads the
    arrays through ``state`` itself; an array of ``state`` read directly is refused."""
    a = mx.array([1.0, 2.0, 3.0])
    x = mx.array([0.3, -0.7, 1.1])
    try:
        mx.compile(mx.grad(lambda x: (a * mx.sin(x)).sum()), inputs=[a])(x)
        print("inputs=[a], f reads a: compiled")
    except ValueError as exc:
        print(f"inputs=[a], f reads a directly: mx.compile raises ({exc})")


def main() -> None:
    if "--no-timing" not in sys.argv:
        for op in ("gradient", "jvp", "vjp", "hvp"):
            for n in (10, 1000, 100_000):
                one_row(op, n)
    hazards()


if __name__ == "__main__":
    main()
