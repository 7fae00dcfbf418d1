"""What diffiface asks of MLX outside its backend: registered on import, which imports
no mlx (only an imported mlx is asked)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..._arrays import Framework, register


class MLX(Framework):
    name = "mlx"
    modules = ("mlx",)
    sparse = "diffiface.backends.mlx.sparse"
    testing = "diffiface.backends.mlx.testing"
    numpy_module = "mlx.core"
    backend_name = "AutoMLX"
    float_cast = "x.astype(mx.float32)"

    def owns(self, leaf: Any) -> bool:
        return isinstance(leaf, sys.modules["mlx.core"].array)

    def stack(self, arrays: list) -> Any:  # (MLX arrays, not NumPy: an outer pass sees them)
        return sys.modules["mlx.core"].stack(arrays)

    def says_foreign_arrays(self, message: str) -> bool:
        """An mlx.core function's nanobind error (its signatures name MLX's streams)."""
        return "incompatible function arguments" in message and "StreamOrDevice" in message

    def values(self, leaf: Any) -> np.ndarray | None:
        try:
            a = np.asarray(leaf)
        except Exception:  # a placeholder of mx.compile or mx.vmap: no values yet
            return None
        return a.astype(np.float32) if a.dtype.kind == "V" else a  # bfloat16


FRAMEWORK = register(MLX())
