"""The runner of a gradient or value_and_gradient at one MLX array, prepared or not:
``mx.value_and_grad(f)`` per call, as MLX's users write it (MLX traces f anew on every
call: nothing kept goes stale, so unprepared calls keep plans too).

Not ``mx.compile``: it would make a warm gradient 4x faster at n = 10 and 2x at
n = 1e3 (benchmarks/mlx_gradient.py), but a compiled function takes the arrays f
closes over as constants, frozen at its first call: an outer ``mx.grad`` through such
an array gets zero (the matrix's prepared cases under an outer pass caught it), and an
``mlx.nn`` model's parameters updated in place would be read stale. Nothing tells
diffiface which arrays f reads, so it never compiles f for the user.

Anything unusual (aux, another operator or form, an output that is no float scalar, an
error) is the general path's: the runner is None, or it returns SLOW."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ..._cache import weak_callable
from ...core.backend import SLOW

_OPS = ("gradient", "value_and_gradient")


def runner(prob, form: str, combo: Any, weak: bool):
    """``run(x)`` for a gradient or value_and_gradient of one MLX array (``weak``: it
    holds f weakly, for an unprepared call's plan)."""
    if prob.op not in _OPS or form != "array" or combo is not None or prob.aux:
        return None
    f = weak_callable(prob.f, weak)
    return None if f is None else _plain(f, prob.op)


def _plain(f, op: str):
    """``mx.value_and_grad(f)`` per call; an output that is no float scalar of MLX, or
    any error, is the general path's (it runs f again and explains)."""
    value = op == "value_and_gradient"

    def checked(x: Any) -> Any:
        y = f(x)
        if type(y) is not mx.array or y.ndim or not mx.issubdtype(y.dtype, mx.floating):
            raise _Unusual
        return y

    vg = mx.value_and_grad(checked)

    def run(x: Any) -> Any:
        try:
            y, g = vg(x)
        except Exception:
            return SLOW
        return (y, g) if value else g

    return run


class _Unusual(Exception):
    """f's output is not a float scalar MLX array: the general path explains."""
