"""A closed-over tensor's values, kept and compared on its own device (``sparse.kept``):
a closure made anew per call finds its code's plan with one bool read back, never a
copy of the tensor to the host."""

from __future__ import annotations

from typing import Any

import torch
from torch._C._functorch import is_functorch_wrapped_tensor


def kept_copy(a: Any) -> Any:
    """A copy of a's values on its device, or None for a ``torch.func`` wrapper (its
    values are not there to keep)."""
    return None if is_functorch_wrapped_tensor(a) else a.detach().clone()


def same_values(a: Any, kept: Any) -> bool:
    """``a`` holds the values of ``kept`` (a ``kept_copy``), compared on their device:
    False for a wrapper, another shape, dtype or device."""
    if is_functorch_wrapped_tensor(a) or a.shape != kept.shape or a.dtype != kept.dtype:
        return False
    return a.device == kept.device and torch.equal(a.detach(), kept)
