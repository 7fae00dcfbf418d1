"""JAX's arrays for the consistency matrix (imports jax)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...testing._kit import ArrayKit


class JaxKit(ArrayKit):
    kinds = ()  # a jax array has one layout
    numpy_native = False
    native_sparse = True
    outer_pass = True

    def float64_note(self) -> str | None:
        if jax.config.jax_enable_x64:
            return None
        return "jax x64 is off (jax.config.update('jax_enable_x64', True))"

    def default_float(self) -> np.dtype:
        return np.dtype(np.float64 if jax.config.jax_enable_x64 else np.float32)

    def arrange(self, kind: str, a: np.ndarray) -> Any:
        return jnp.asarray(np.array(a))

    def result_type(self, x: Any) -> type:
        return jax.Array

    def outer_gradient(self, fn: Callable, at: Any, dtype: np.dtype) -> Any:
        return jax.jit(jax.grad(fn))(jnp.asarray(at))  # a compiled step, as in training


KIT = JaxKit()
