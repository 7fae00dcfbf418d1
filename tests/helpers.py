"""Helpers shared by the tests: array namespaces, conversions, the tolerance table and
the closed-form scenarios."""

from __future__ import annotations

import importlib.util

import numpy as np
import optree
from array_api_compat import array_namespace

import diffiface as di
from diffiface import testing

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("jax", "torch", "autograd", "mlx")}


def namespace(x):
    """The Array API namespace (``array_namespace``) of x, or of a pytree x's first array
    leaf: the tests' functions are written once for every backend."""
    leaves = [a for a in optree.tree_leaves(x, namespace="diffiface") if hasattr(a, "shape")]
    return array_namespace(leaves[0]) if leaves else array_namespace(np.zeros(()))


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
    if name == "mlx":
        import mlx.core as mx

        return mx
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
    if name == "mlx":
        from diffiface.backends.mlx.impl import DTYPES, mx

        a = np.asarray(a)
        return mx.array(a, dtype=DTYPES.get(a.dtype))
    return np.array(a)


def to_numpy(a):
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    return np.asarray(a)


# The tests' one tolerance table, first-order operators: (rtol, atol) with rtol == atol,
# by (finite differences?, dtype). Each is at most diffiface.testing.tolerance, the bound
# a user's check accepts (checked below), so no test is looser than the public promise.
TOLERANCE = {
    (False, "float64"): 1e-10,  # public 1e-8
    (False, "float32"): 2e-5,  # public 1e-4
    (True, "float64"): 1e-6,  # public 1e-5 (central differences, cube-root step)
    (True, "float32"): 2e-2,  # public 2e-2
}
for (_fd, _dtype), _tol in TOLERANCE.items():
    _b = di.AutoFiniteDifferences() if _fd else di.AutoJax()
    assert _tol <= testing.tolerance(_b, np.dtype(_dtype), "jacobian"), (_fd, _dtype)


# MLX's float64 sin, cos and exp are float32-accurate (relative error up to 1.1e-7 on
# mlx 0.32.4): its float64 results are held to its public bound, 1e-6
MLX_FLOAT64 = 1e-6


def rounding(backend, tol):
    """``tol``, a float64 bound of rounding alone (two paths to the same product, f's
    value against NumPy's), or MLX's float64 accuracy where that is larger: MLX's
    float64 sin, cos and exp are float32-accurate, and their last digits depend on how
    many values one call holds (a batched pass against a single one)."""
    return max(tol, MLX_FLOAT64) if backend.framework == "mlx" else tol


def tolerance(backend, dtype):
    """(rtol, atol) of a first-order result by backend and dtype (see TOLERANCE)."""
    if backend.framework == "mlx" and np.dtype(dtype) == np.float64:
        return MLX_FLOAT64, MLX_FLOAT64
    tol = TOLERANCE[(backend.framework == "finite_differences", np.dtype(dtype).name)]
    return tol, tol


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


# ---- closed-form scenarios, as diffiface.testing scenarios -------------------------
# The tests' scenarios are diffiface.testing.Scenario objects: f written once with
# testing.namespace, a float64 point, flat closed-form references (y, jac (m, n)), and
# the scenario's own tangent v and cotangent w. Each test converts the point to the
# dtype and array kind it checks.

_C = np.array([0.5, -1.5, 2.0])


def _scenario(name, family, f, x, jac, contexts=()):
    s = testing.Scenario(name, family, f, x, contexts=contexts)
    y = np.ravel(np.asarray(s.call(x), dtype=np.float64))
    m, jac = y.size, np.asarray(jac, dtype=np.float64)
    return testing.Scenario(name, family, f, x, contexts=contexts, y=y, jac=jac.reshape(m, -1))


def _sin_square(x):
    return namespace(x).sin(x) * x**2


def _scaled_sin(x, c):
    return namespace(x).sin(c * x)


def _sin_times_sum(x):
    return (namespace(x).sin(x) * x).sum()


def _tanh_times_first_row(x):
    return (namespace(x).tanh(x) * x[:1, :] ** 2).sum()


def _sin_shifted(x):
    return namespace(x).sin(x[:2]) * x[1:]


def _outer(x):
    return x[:, None] * x[None, :]


def _gram(x):
    return x @ x.T


def _pytree_sum(t):
    return (t["a"] ** 2).sum() * t["b"][0] + namespace(t["a"]).sin(t["b"][1]).sum()


def _weighted_square(x, c):
    return (c * x**2).sum()


def closed_form_scenarios():
    """Nine scenarios with closed-form Jacobians, one per shape family (scalar, vector,
    matrix and pytree points; scalar, vector and matrix outputs; Constant contexts)."""
    out = []
    x = np.array(0.7)
    out.append(
        _scenario(
            "scalar->scalar",
            "scalar->scalar",
            _sin_square,
            x,
            np.cos(x) * x**2 + 2 * x * np.sin(x),
        )
    )
    x = np.array(0.3)
    out.append(
        _scenario(
            "scalar->vector+Constant",
            "scalar->array",
            _scaled_sin,
            x,
            _C * np.cos(_C * x),
            contexts=(di.Constant(_C),),
        )
    )
    x = np.array([0.4, -0.9, 1.3, 0.2])
    out.append(
        _scenario("vector->scalar", "array->scalar", _sin_times_sum, x, np.cos(x) * x + np.sin(x))
    )
    x = np.array([[0.3, -0.2, 0.8], [1.1, 0.5, -0.7]])
    g = (1 - np.tanh(x) ** 2) * x[:1, :] ** 2
    g[0, :] += np.tanh(x[0, :]) * 2 * x[0, :] + (np.tanh(x[1, :]) * 2 * x[0, :])
    out.append(_scenario("matrix->scalar", "array->scalar", _tanh_times_first_row, x, g))
    x = np.array([0.2, -0.6, 1.4])
    j = np.zeros((2, 3))
    for i in range(2):
        j[i, i] = np.cos(x[i]) * x[i + 1]
        j[i, i + 1] = np.sin(x[i])
    out.append(_scenario("vector->vector", "array->array", _sin_shifted, x, j))
    x = np.array([0.5, -1.2, 2.0])
    eye = np.eye(3)
    j = eye[:, None, :] * x[None, :, None] + x[:, None, None] * eye[None, :, :]
    out.append(_scenario("vector->matrix", "array->array", _outer, x, j))
    x = np.array([[0.3, -0.2, 0.8], [1.1, 0.5, -0.7]])
    eye = np.eye(2)
    # d(X X^T)_{ij} / dX_{kl} = δ_ik X_jl + δ_jk X_il
    j = eye[:, None, :, None] * x[None, :, None, :] + x[:, None, None, :] * eye[None, :, :, None]
    out.append(_scenario("matrix->matrix", "array->array", _gram, x, j))
    x = {"a": np.array([0.5, -0.3]), "b": (np.array(1.5), np.array([[0.2, 0.4]]))}
    a, (b0, b1) = x["a"], x["b"]
    parts = [2 * a * b0, np.array((a**2).sum()), np.cos(b1)]  # flatten order: a, b[0], b[1]
    j = np.concatenate([np.ravel(p) for p in parts])
    out.append(_scenario("pytree->scalar", "pytree", _pytree_sum, x, j))
    x = np.array([1.0, -2.0, 0.5])
    out.append(
        _scenario(
            "vector->scalar+Constant",
            "array->scalar",
            _weighted_square,
            x,
            2 * _C * x,
            contexts=(di.Constant(_C),),
        )
    )
    return out


def jacobian_leaves(s):
    """The closed-form Jacobian of scenario ``s`` per leaf of x, each of shape
    f(x).shape + leaf.shape (flatten order)."""
    y_shape = np.shape(s.call(s.x))
    leaves = optree.tree_leaves(s.x, namespace="diffiface")
    out, start = [], 0
    for leaf in leaves:
        n = int(np.size(leaf))
        out.append(s.jac[:, start : start + n].reshape(y_shape + np.shape(leaf)))
        start += n
    return out


def python_calls(fn) -> int:
    """Python calls inside diffiface during a third ``fn()`` (two warm it up), as
    /work/tools/count_calls.py counts them."""
    import os
    import sys

    import diffiface

    root = os.path.dirname(diffiface.__file__)
    fn()
    fn()
    n = [0]

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            n[0] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n[0]


def counted(f):
    """``(g, calls)``: g calls f and counts its runs in ``calls[0]``."""
    calls = [0]

    def g(*args, **kwargs):
        calls[0] += 1
        return f(*args, **kwargs)

    return g, calls
