"""Helpers shared by the tests: array namespaces, conversions, tolerances."""

from __future__ import annotations

import importlib.util

import numpy as np

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("jax", "torch", "autograd")}


def xp(backend):
    """The array namespace f should use on ``backend``."""
    name = backend.framework
    if name == "jax":
        import jax.numpy as jnp

        return jnp
    if name == "torch":
        import torch

        return torch
    if name == "autograd":
        import autograd.numpy as anp

        return anp
    return np


def native(backend, a):
    """A NumPy array as the backend's own array (same dtype)."""
    name = backend.framework
    if name == "jax":
        import jax.numpy as jnp

        return jnp.asarray(a)
    if name == "torch":
        import torch

        return torch.from_numpy(np.array(a))
    return np.array(a)


def to_numpy(a):
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def tolerance(backend, dtype):
    """(rtol, atol) by backend and dtype. Finite differences: central, cube-root step."""
    fd = backend.framework == "finite_differences"
    if np.dtype(dtype) == np.float32:
        return (2e-2, 2e-2) if fd else (2e-5, 2e-5)
    return (1e-6, 1e-6) if fd else (1e-10, 1e-10)
