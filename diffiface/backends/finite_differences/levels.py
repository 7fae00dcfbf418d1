"""The levels of finite differencing around a running f: how deep the nest is, which
operator of this backend runs, and the error for a nest whose steps are too fine."""

from __future__ import annotations

import contextvars

import numpy as np

from ... import _checks
from ..._backend_types import FD_MIN_STEP

EPS64 = float(np.finfo(np.float64).eps)

# (levels of differencing around the running f, the product of their relative steps)
NEST: contextvars.ContextVar[tuple[int, float]] = contextvars.ContextVar(
    "diffiface_fd_nest", default=(0, 1.0)
)
# (problem, levels, product of steps) of the finite-difference operator running in this
# context; None while f runs (an operator that f calls is a new, nested one)
RUNNING: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "diffiface_fd_running", default=None
)


def enter(running: tuple) -> tuple:
    """Enters f's evaluations under the operator ``running`` (problem, levels, product of
    steps): the nest deepens, and an operator that f calls is a new, nested one. Returns
    the tokens of ``NEST`` and ``RUNNING`` to reset, in that order."""
    prob, levels, steps = running
    depth, product = NEST.get()
    depth, product = depth + levels, product * steps
    if product < FD_MIN_STEP:
        raise nest_too_fine(prob, depth, product)
    return NEST.set((depth, product)), RUNNING.set(None)


def leave(tokens: tuple) -> None:
    """Resets what ``enter`` set."""
    RUNNING.reset(tokens[1])
    NEST.reset(tokens[0])


def nest_too_fine(prob, levels: int, steps: float) -> _checks.DiffifaceValueError:
    return _checks.DiffifaceValueError(
        f"{_checks.call_form(prob.op, prob.backend)}: finite differences {levels} levels "
        f"deep (nested operators; hvp, hessian and second_derivative count as two) with "
        f"relative steps whose product, {steps:.2g}, is under {FD_MIN_STEP:g}: each level "
        "divides the rounding noise of the level inside it by its step, so the result "
        f"would carry noise of about {EPS64 / steps:.1g} of its size (the default steps "
        "resolve two central levels, not three). Use an AD backend for at least one level "
        "(AutoJax(), AutoTorch(), AutoAutograd(), or second_order(AutoFiniteDifferences(), "
        "AutoJax()) for a Hessian), or coarser steps (AutoFiniteDifferences(step=1e-3) at "
        "each level)."
    )
