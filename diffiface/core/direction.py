"""Which direction a derivative runs in: forward (jvps) or reverse (pullbacks).

The user fixes it with the backend's ``mode`` (jacobians) or the modes of
``second_order``; otherwise diffiface picks the cheaper one from the input and
output sizes. That choice must not change the answer, so a function that
supports one direction only runs in that one, whatever the sizes:

- reverse only: a JAX ``custom_vjp``, a torch ``autograd.Function`` without
  ``jvp``, a torch f that computes on x under ``torch.no_grad()`` (torch's forward
  mode ignores it, reverse mode treats the block as a constant);
- forward only: a JAX ``lax.while_loop`` whose trip count depends on x, a torch
  ``autograd.Function`` without ``backward``.

:func:`run` is the one place that decides: it tries the usual formulation,
learns from the framework's error which direction f lacks, remembers that per f,
and runs the formulation in the other direction. Where the user fixed the
direction f lacks, a clear error instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from .. import _checks
from .._cache import CodeFacts

FORWARD, REVERSE = "forward", "reverse"
_OTHER = {FORWARD: REVERSE, REVERSE: FORWARD}
# (f's code, the framework) -> (the one direction f supports there, why not the other):
# a fact about f's code on one framework (what autograd cannot differentiate, MLX may:
# an array-API f runs on all of them), kept when compiled functions are cleared (a
# closure made per call learns once)
_ONLY = CodeFacts()


def only(prob: Any) -> str | None:
    """The one direction ``prob``'s f is known to support on its framework, or None."""
    return only_of(prob.f, prob.impl.framework)


def only_of(f: Any, framework: str) -> str | None:
    """The one direction ``f`` is known to support on ``framework``, or None."""
    got = _ONLY.get(f, framework)
    return None if got is None else got[0]


def learn(prob: Any, direction: str, why: str) -> None:
    """Remember that ``prob``'s f runs in ``direction`` only on its framework (``why``:
    the reason, for errors)."""
    _ONLY.put(prob.f, (direction, why), prob.impl.framework)


def fixed_error(prob: Any, lacking: str, why: str) -> Exception:
    """The error for a direction the user fixed and f cannot run in."""
    other = _OTHER[lacking]
    return _checks.DiffifaceTypeError(
        f"{_checks.call_form(prob.op, prob.backend)}: f cannot run in {lacking} mode "
        f"({why}). Use mode='{other}' (or mode=None, which picks what f supports)."
    )


def run(
    impl: Any,
    prob: Any,
    usual: Callable,
    forward: Callable | None = None,
    reverse: Callable | None = None,
    fixed: Collection = (),
) -> Any:
    """``usual()``, or, where f lacks the direction ``usual`` took, ``forward()`` or
    ``reverse()`` (a formulation in the other direction; None: there is none, the
    framework's error stands). ``fixed``: the directions the user fixed, where a
    missing one is a clear error. A function known to support one direction goes
    straight to that formulation."""
    known = _ONLY.get(prob.f, prob.impl.framework)
    if known is not None:
        direction, why = known
        if _OTHER[direction] in fixed:
            raise fixed_error(prob, _OTHER[direction], why)
        other = reverse if direction == REVERSE else forward
        if other is not None:
            return other()
    try:
        return usual()
    except Exception as exc:
        lacking = lacks(impl, exc)
        if lacking is None:
            raise
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        if lacking in fixed:
            raise fixed_error(prob, lacking, why) from exc
        other = reverse if lacking == FORWARD else forward
        if other is None:
            raise
    learn(prob, _OTHER[lacking], why)  # (the other formulation may read it)
    try:
        return other()
    except Exception as exc:  # f lacks both directions: nothing learnt
        _ONLY.put(prob.f, None, prob.impl.framework)
        if lacks(impl, exc) is not None:
            raise neither_error(prob, why, exc) from exc
        raise


def neither_error(prob: Any, why: str, exc: BaseException) -> Exception:
    """The error for an f the framework differentiates in neither direction (an
    operation without a derivative rule: ``why`` and ``exc`` say which)."""
    then = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return _checks.DiffifaceTypeError(
        f"{_checks.call_form(prob.op, prob.backend)}: f must be differentiable in forward "
        f"or reverse mode on {prob.impl.framework}, and it is in neither: an operation in "
        f"f has no derivative rule there ({why}; then {then}). Write that operation with "
        "ones the framework differentiates, or use another backend for f "
        "(AutoFiniteDifferences needs no derivative rules)."
    )


def lacks(impl: Any, exc: BaseException) -> str | None:
    """The direction the framework's error ``exc`` says f cannot run in, or None."""
    if impl.forward_unsupported(exc):
        return FORWARD
    if impl.reverse_unsupported(exc):
        return REVERSE
    return None
