"""autograd's arrays for the consistency matrix: NumPy's, with autograd's own reverse
mode for the outer passes (imports autograd)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import autograd
import numpy as np

from ...testing._kit import ArrayKit


class AutogradKit(ArrayKit):
    outer_pass = True

    def outer_gradient(self, fn: Callable, at: Any, dtype: np.dtype) -> Any:
        return autograd.grad(fn)(at)


KIT = AutogradKit()
