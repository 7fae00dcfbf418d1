"""The default scenarios: one per family of shapes, in float64 and float32, with
closed-form references. Points stay away from kinks. Each function is written once
with the Array API (``xp = array_namespace(x)``), as a user's would be."""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from .._contexts import Constant
from ._scenario import Scenario


# written once with the Array API: they run on every backend's arrays
def sin_square(x):
    return array_namespace(x).sin(x) * x**2


def scaled_sin(x, a):
    return array_namespace(x).sin(x * a)


def exp_coupled(x):
    xp = array_namespace(x)
    return xp.sum(xp.exp(x) * x) + xp.sum(x) ** 2


def tanh_matmul(x, m):
    return array_namespace(x).tanh(x) @ m


def sin_times_first(x):
    return array_namespace(x).sin(x) * x[:, :1]


def pytree_product(x):
    xp = array_namespace(x["a"], x["b"])
    return xp.sum(x["a"] ** 2) * xp.sum(xp.sin(x["b"]))


def weighted_square(x, p):
    xp = array_namespace(x)
    return xp.sum(p["w"] * x**2) + xp.sum(p["c"] * x)


def default_scenarios(dtypes=("float64", "float32")) -> list:
    """Scenarios for every family: scalar->scalar, scalar->array, array->scalar
    (vector and matrix), array->array (vector and matrix, non-square constants that
    catch transposition), batched, pytree, Constant contexts and FixedParams.

    Examples:
        >>> [s.name for s in default_scenarios(("float64",))][:3]
        ['sin_square/float64', 'scaled_sin/float64', 'exp_coupled_vector/float64']
    """
    out = []
    for name in dtypes:
        out += _scenarios(np.dtype(name))
    return out


def _scenarios(dt: np.dtype) -> list:
    rng = np.random.default_rng(0)
    tag = f"/{dt.name}"
    out = []

    # scalar -> scalar
    x = np.asarray(0.7, dtype=dt)
    t = float(x)
    d = np.cos(t) * t**2 + 2 * t * np.sin(t)
    d2 = -np.sin(t) * t**2 + 4 * t * np.cos(t) + 2 * np.sin(t)
    out.append(_make("sin_square" + tag, "scalar->scalar", sin_square, x, (), [[d]], [[d2]], [d2]))

    # scalar -> array, with a Constant
    a = np.asarray([1.0, -2.0, 0.5], dtype=dt)
    x = np.asarray(0.3, dtype=dt)
    a64, t = a.astype(np.float64), float(x)
    out.append(
        _make(
            "scaled_sin" + tag,
            "scalar->array",
            scaled_sin,
            x,
            (Constant(a),),
            (a64 * np.cos(t * a64))[:, None],
            None,
            -(a64**2) * np.sin(t * a64),
        )
    )

    # array -> scalar, vector and matrix
    for shape, label in (((5,), "vector"), ((2, 3), "matrix")):
        x = rng.uniform(-1, 1, shape).astype(dt)
        z = x.astype(np.float64).ravel()
        g = (z + 1) * np.exp(z) + 2 * z.sum()
        h = np.diag((z + 2) * np.exp(z)) + 2.0
        out.append(_make(f"exp_coupled_{label}" + tag, "array->scalar", exp_coupled, x, (), [g], h))

    # array -> array, vector and matrix (a non-square constant)
    m = rng.uniform(-1, 1, (3, 4)).astype(dt)
    m64 = m.astype(np.float64)
    for shape, label in (((3,), "vector"), ((2, 3), "matrix")):
        x = rng.uniform(-1, 1, shape).astype(dt)
        z = x.astype(np.float64).reshape(-1, 3)
        b = z.shape[0]
        jac = np.zeros((b, 4, b, 3))
        for i in range(b):
            jac[i, :, i, :] = m64.T * (1 - np.tanh(z[i]) ** 2)[None, :]
        jac = jac.reshape(b * 4, b * 3)
        out.append(
            _make(f"tanh_matmul_{label}" + tag, "array->array", tanh_matmul, x, (Constant(m),), jac)
        )

    # a batch of samples that do not interact
    x = rng.uniform(-1, 1, (3, 2)).astype(dt)
    z = x.astype(np.float64)
    jac = np.zeros((3, 2, 3, 2))
    for i in range(3):
        for j in range(2):
            jac[i, j, i, j] += np.cos(z[i, j]) * z[i, 0]
            jac[i, j, i, 0] += np.sin(z[i, j])
    out.append(_make("sin_times_first" + tag, "batched", sin_times_first, x, (), jac.reshape(6, 6)))

    # a pytree point
    xa, xb = rng.uniform(-1, 1, 2).astype(dt), rng.uniform(-1, 1, 3).astype(dt)
    a64, b64 = xa.astype(np.float64), xb.astype(np.float64)
    big_a, big_s = (a64**2).sum(), np.sin(b64).sum()
    g = np.concatenate([2 * a64 * big_s, big_a * np.cos(b64)])
    h = np.zeros((5, 5))
    h[:2, :2] = 2 * big_s * np.eye(2)
    h[:2, 2:] = 2 * np.outer(a64, np.cos(b64))
    h[2:, :2] = h[:2, 2:].T
    h[2:, 2:] = -big_a * np.diag(np.sin(b64))
    out.append(
        _make("pytree_product" + tag, "pytree", pytree_product, {"a": xa, "b": xb}, (), [g], h)
    )

    # FixedParams
    x = rng.uniform(-1, 1, 4).astype(dt)
    p = {"w": rng.uniform(0.5, 2, 4).astype(dt), "c": rng.uniform(-1, 1, 4).astype(dt)}
    z, w64 = x.astype(np.float64), p["w"].astype(np.float64)
    out.append(
        _make(
            "weighted_square" + tag,
            "FixedParams",
            weighted_square,
            x,
            (),
            [2 * w64 * z + p["c"].astype(np.float64)],
            np.diag(2 * w64),
            params=p,
        )
    )
    return out


def _make(name, family, f, x, contexts, jac, hess=None, second=None, params=None) -> Scenario:
    s = Scenario(name, family, f, x, contexts=contexts, params=params)
    y = np.ravel(np.asarray(s.call(x), dtype=np.float64))
    return Scenario(
        name,
        family,
        f,
        x,
        contexts=contexts,
        params=params,
        y=y,
        jac=np.asarray(jac, dtype=np.float64),
        hess=None if hess is None else np.asarray(hess, dtype=np.float64),
        second=None if second is None else np.ravel(np.asarray(second, dtype=np.float64)),
    )
