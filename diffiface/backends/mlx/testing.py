"""MLX's arrays for the consistency matrix, with MLX's own mx.grad for the outer passes
(imports mlx)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np

from ...testing._kit import ArrayKit
from .impl import DTYPES


class MLXKit(ArrayKit):
    kinds = ()  # an mlx array has one layout (MLX copies strided NumPy arrays)
    numpy_native = False
    outer_pass = True
    # MLX's float64 sin, cos and exp on the CPU are float32-accurate (relative errors up
    # to 1.1e-7 measured on mlx 0.32.4; log, tanh and powers are float64-accurate)
    float64_accuracy = 1e-6

    def default_float(self) -> np.dtype:
        return np.dtype(np.float32)

    def arrange(self, kind: str, a: np.ndarray) -> Any:
        return mx.array(a, dtype=DTYPES.get(a.dtype))

    def result_type(self, x: Any) -> type:
        return mx.array

    def constant(self, c: np.ndarray, like: Any) -> Any:
        return mx.array(c, dtype=like.dtype)

    def outer_gradient(self, fn: Callable, at: Any, dtype: np.dtype) -> Any:
        if not isinstance(at, mx.array):  # a NumPy array or a float (kinds numpy, float)
            at = mx.array(np.asarray(at, dtype=dtype), dtype=DTYPES[np.dtype(dtype)])
        return mx.grad(fn)(at)


KIT = MLXKit()
