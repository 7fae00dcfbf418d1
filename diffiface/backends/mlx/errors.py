"""MLX's errors: which say f lacks a direction, which are f's own, and the clear errors
diffiface raises for them.

A runner (``runners``, ``leaves``, ``trees``) hands a call to the general path only
where its own checks found something unusual (``Unusual``) or MLX's transform lacks a
direction (``lacks``): the general path then runs the other one and remembers it. An
error f raised goes on as it came, raised once (f's side effects are not repeated by a
second run), or as diffiface's clear error for it (``clear``, as the general path
gives). MLX passes f's exceptions through its transforms unchanged.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import mlx.core as mx

from ... import _checks
from ..._errors import DiffifaceValueError
from ...core.backend import SLOW

FORWARD, REVERSE = "forward", "reverse"
# MLX's messages for an operation without a JVP or VJP rule (mlx 0.32: "[scatter] JVP
# not yet implemented", "JVP is not implemented for cumulative prod/min/max",
# "[Primitive::vjp] Not implemented for Inverse.", "[DynamicSlice::vjp] Not supported
# for start indices."); not "Cannot calculate JVP with respect to indices" (f
# differentiates an index: neither direction can)
_LACKS = {
    FORWARD: re.compile(r"jvp\b.*\bnot (yet )?(implemented|supported)", re.I | re.S),
    REVERSE: re.compile(r"vjp\b.*\bnot (yet )?(implemented|supported)", re.I | re.S),
}

_NO_VMAP = re.compile(r"vmap\b.*\bnot (yet )?(implemented|supported)", re.I | re.S)


class Unusual(Exception):
    """f's output is no float MLX array (a scalar for gradient and hvp), no pytree of
    them, or unlike the cotangent: the general path explains."""


def no_vmap(exc: BaseException) -> bool:
    """MLX's error ``exc`` says an operation in f has no batching rule (mlx 0.32:
    "[Primitive::vmap] Not implemented for AsStrided."): the general path loops."""
    return isinstance(exc, RuntimeError | ValueError) and bool(_NO_VMAP.search(str(exc)))


def lacks(exc: BaseException) -> str | None:
    """The direction MLX's error ``exc`` says f cannot run in, or None."""
    if not isinstance(exc, RuntimeError | ValueError) or isinstance(exc, DiffifaceValueError):
        return None
    msg = str(exc)
    return next((d for d, pattern in _LACKS.items() if pattern.search(msg)), None)


_LOCAL = threading.local()  # .raised: (the last error f raised in a runner, (op, backend))


def note(exc: Exception, where: tuple) -> None:
    """Inside the ``except`` around f's own call in a runner of ``where`` (op, backend):
    ``exc`` is f's (the runner raises it as it came, or diffiface's clear error for it)."""
    _LOCAL.raised = (exc, where)


def hand_over(exc: Exception) -> Any:
    """Inside a runner's ``except``: SLOW where the general path takes the call (an
    unusual output, a direction MLX lacks); else ``exc`` raised as it came (f's own
    error, once; an error of MLX's transform, which the general path would meet
    again), or diffiface's clear error for f's."""
    raised = getattr(_LOCAL, "raised", None)
    if raised is not None and raised[0] is exc:
        _LOCAL.raised = None
        error = clear(*raised[1], exc)
        if error is not None:
            raise error from exc
    elif isinstance(exc, Unusual) or lacks(exc) or no_vmap(exc):
        return SLOW
    raise  # (called inside the runner's except: exc, unchanged)


def clear(op: str, backend: Any, exc: BaseException) -> Exception | None:
    """diffiface's clear error for an error raised in f (float64 off the CPU, another
    framework's functions), or None: it stands as it is."""
    if not isinstance(exc, TypeError | ValueError | RuntimeError):
        return None
    if isinstance(exc, DiffifaceValueError):  # (diffiface's own: it says what is wrong)
        return None
    if not isinstance(exc, TypeError) and "float64" in str(exc) and float64_refused():
        return DiffifaceValueError(f"{_checks.call_form(op, backend)}: {float64_refused()}")
    return _checks.framework_error(op, backend, exc)  # (None for diffiface's)


def on_cpu() -> bool:
    return mx.default_device() == mx.cpu


def float64_refused() -> str | None:
    """Why float64 cannot run now: MLX has float64 on the CPU stream only."""
    if on_cpu():
        return None
    return (
        f"MLX runs float64 on the CPU only, and the default device is "
        f"{mx.default_device()}. Set mx.set_default_device(mx.cpu) for float64 work, or "
        "convert to float32 first (a.astype(np.float32), x.astype(mx.float32))."
    )
