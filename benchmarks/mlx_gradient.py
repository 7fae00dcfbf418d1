"""AutoMLX's warm prepared gradient against MLX's own calls, side by side: mx.grad,
mx.compile(mx.grad), and diffiface's prepared gradient with MLX arrays in and out
(each call evaluated: MLX is lazy). Ratios to mx.grad, n = 10 and 1e3.

Run pinned: ``taskset -c 0 python benchmarks/mlx_gradient.py``.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from timing import interleaved  # noqa: E402  (first: one thread)

# isort: split
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

import diffiface as di  # noqa: E402


def f(x):
    return (mx.sin(x) * x**2).sum()


def one_size(n: int) -> None:
    b = di.AutoMLX()
    x = mx.array(np.linspace(-1, 1, n), dtype=mx.float32)
    prep = di.prepare_gradient(f, b, x)
    native, compiled = mx.grad(f), mx.compile(mx.grad(f))
    configs = {
        "mx.grad": lambda: mx.eval(native(x)),
        "mx.compile(mx.grad)": lambda: mx.eval(compiled(x)),
        "diffiface prepared": lambda: mx.eval(di.gradient(f, b, x, prep=prep)),
        "diffiface unprepared": lambda: mx.eval(di.gradient(f, b, x)),
    }
    want = np.asarray(native(x))  # the same numbers before any timing
    np.testing.assert_allclose(np.asarray(di.gradient(f, b, x, prep=prep)), want, 1e-6)
    np.testing.assert_allclose(np.asarray(di.gradient(f, b, x)), want, 1e-6)
    t = interleaved(configs, repeat=2000, rounds=10, warmup=50)
    base = t["mx.grad"]
    for label, us in t.items():
        print(f"n={n:5d} {label:22s} {us:8.1f} us  {us / base:5.2f}x mx.grad")


def main() -> None:
    for n in (10, 1000):
        one_size(n)


if __name__ == "__main__":
    main()
