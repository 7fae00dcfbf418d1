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


def assert_tree_close(got, want, rtol=1e-10, atol=1e-12):
    """Same pytree structure (dict / list / tuple) and close leaves."""
    if isinstance(want, dict):
        assert isinstance(got, dict), type(got)
        assert sorted(got) == sorted(want)
        for k in want:
            assert_tree_close(got[k], want[k], rtol, atol)
    elif isinstance(want, list | tuple):
        assert type(got) is type(want), (type(got), type(want))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_tree_close(g, w, rtol, atol)
    elif want is None:
        assert got is None
    else:
        g, w = np.asarray(got), np.asarray(want)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def central_grad(f, x, h=1e-6):
    """float64 central differences of a scalar f at an array x."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (float(f(x + e)) - float(f(x - e))) / (2 * h)
    return g


def central_deriv(f, x, h=1e-6):
    """float64 central difference of f at a scalar x."""
    return (np.asarray(f(x + h)) - np.asarray(f(x - h))) / (2 * h)


def zero_or_clear_error(call, shape):
    """An integer-valued or constant f: diffiface gives numeric zeros (a float output
    off the graph, with its DisconnectedWarning) or one of its own errors."""
    import warnings

    import diffiface as di

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", di.DisconnectedWarning)
        try:
            out = call()
        except (di.DiffifaceTypeError, di.DiffifaceValueError):
            return
    arr = np.asarray(out)
    assert np.issubdtype(arr.dtype, np.number), f"leaked dtype {arr.dtype!r} (float0?)"
    assert arr.shape == shape
    assert not arr.any()
