"""The runner of a prepared gradient at one MLX array: ``mx.compile(mx.grad(f))``, MLX's
fastest call of its own (measured by benchmarks/mlx_gradient.py: mx.compile makes
mx.grad 4x faster at n = 10 and 2x at n = 1e3). Compiled once per preparation, traced
at the prepared shape and dtype; MLX bakes the arrays f closes over into the compiled
function, as JAX's jit does, so a prepared call sees f as it was when first run.

Anything else (an unprepared call, aux, another operator or form, an error) is the
general path's: the runner is None, or it returns SLOW."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ...core.backend import SLOW

_TRANSFORMS = {"gradient": mx.grad, "value_and_gradient": mx.value_and_grad}


def runner(prob, form: str, combo: Any, weak: bool):
    """``run(x)`` for a prepared gradient or value_and_gradient of one MLX array."""
    transform = _TRANSFORMS.get(prob.op)
    if weak or form != "array" or combo is not None or prob.aux or transform is None:
        return None
    fn = prob.flat()
    compiled = mx.compile(transform(lambda x: fn((x,))))
    failed: list = []

    def run(x: Any) -> Any:
        if failed:
            return SLOW
        try:
            return compiled(x)
        except Exception:  # (f's own error, or one MLX's compiler adds: the general path's)
            failed.append(True)
            return SLOW

    return run
