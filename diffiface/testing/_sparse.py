"""Scenarios with sparse Jacobians and Hessians, and closed-form references: banded,
arrow, the Brusselator (a periodic 2-D reaction-diffusion stencil) and Rosenbrock.

Their references are dense; the entries outside the pattern are exact zeros, which
a sparse result must reproduce exactly (they are never computed)."""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from ._scenario import Scenario

ALPHA = 10.0  # the Brusselator's diffusion coefficient


def banded(x):
    """Each output reads three neighbours: a tridiagonal Jacobian."""
    xp = array_namespace(x)
    return x[1:-1] ** 2 * x[:-2] - xp.sin(x[2:]) + 2.0 * x[1:-1]


def arrow(x):
    """x[0] couples with every other entry: an arrow Hessian (dense first row/column)."""
    xp = array_namespace(x)
    return x[0] * xp.sum(x[1:] ** 2) + xp.sum(x**4)


def rosenbrock(x):
    return array_namespace(x).sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def brusselator(x):
    """du, dv of the Brusselator on an N x N periodic grid, x = (u, v) flattened."""
    xp = array_namespace(x)
    n = round((x.shape[0] // 2) ** 0.5)
    u, v = xp.reshape(x[: n * n], (n, n)), xp.reshape(x[n * n :], (n, n))

    def lap(a):
        rolls = [xp.roll(a, k, axis=i) for k in (1, -1) for i in (0, 1)]
        return rolls[0] + rolls[1] + rolls[2] + rolls[3] - 4.0 * a

    du = 1.0 + u**2 * v - 4.4 * u + ALPHA * lap(u)
    dv = 3.4 * u - u**2 * v + ALPHA * lap(v)
    return xp.concat([xp.reshape(du, (-1,)), xp.reshape(dv, (-1,))])


def _banded_jac(x):
    n = x.size
    j = np.zeros((n - 2, n))
    for i in range(n - 2):
        j[i, i] = x[i + 1] ** 2
        j[i, i + 1] = 2 * x[i + 1] * x[i] + 2.0
        j[i, i + 2] = -np.cos(x[i + 2])
    return j


def _arrow_hess(x):
    h = np.diag(12 * x**2)
    h[0, 1:] = h[1:, 0] = 2 * x[1:]
    h[1:, 1:] += np.diag(np.full(x.size - 1, 2 * x[0]))
    return h


def _rosenbrock_grad_hess(x):
    n = x.size
    g = np.zeros(n)
    h = np.zeros((n, n))
    for i in range(n - 1):
        a, b = x[i], x[i + 1]
        g[i] += -400 * a * (b - a**2) - 2 * (1 - a)
        g[i + 1] += 200 * (b - a**2)
        h[i, i] += 1200 * a**2 - 400 * b + 2
        h[i + 1, i + 1] += 200
        h[i, i + 1] = h[i + 1, i] = -400 * a
    return g, h


def _brusselator_jac(x):
    n2 = x.size // 2
    n = round(n2**0.5)
    u, v = x[:n2], x[n2:]
    j = np.zeros((2 * n2, 2 * n2))
    for r in range(n):
        for c in range(n):
            i = r * n + c
            for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                k = ((r + dr) % n) * n + (c + dc) % n
                j[i, k] += ALPHA
                j[n2 + i, n2 + k] += ALPHA
            j[i, i] += 2 * u[i] * v[i] - 4.4 - 4 * ALPHA
            j[i, n2 + i] = u[i] ** 2
            j[n2 + i, i] = 3.4 - 2 * u[i] * v[i]
            j[n2 + i, n2 + i] += -(u[i] ** 2) - 4 * ALPHA
    return j


def _jacobian_refs(f, jac):
    return lambda x: {"y": f(x), "jac": jac(x)}


def _arrow_refs(x):
    g = 4 * x**3
    g[0] += (x[1:] ** 2).sum()
    g[1:] += 2 * x[0] * x[1:]
    return {"y": np.array(arrow(x)), "jac": g[None], "hess": _arrow_hess(x)}


def _rosenbrock_refs(x):
    g, h = _rosenbrock_grad_hess(x)
    return {"y": np.array(rosenbrock(x)), "jac": g[None], "hess": h}


# name, family, f, (low, high, size) of the point, the references at a float64 point
_SPARSE = (
    ("banded", "jacobian", banded, (0.5, 1.5, 12), _jacobian_refs(banded, _banded_jac)),
    (
        "brusselator",
        "jacobian",
        brusselator,
        (0.5, 1.5, 2 * 5 * 5),
        _jacobian_refs(brusselator, _brusselator_jac),
    ),
    ("arrow", "hessian", arrow, (0.5, 1.5, 8), _arrow_refs),
    ("rosenbrock", "hessian", rosenbrock, (-1.0, 1.5, 10), _rosenbrock_refs),
)


def sparse_scenarios(dtypes=("float64",)) -> list:
    """Scenarios whose Jacobian or Hessian is sparse, with closed-form references.

    Examples:
        >>> [s.name for s in sparse_scenarios()]
        ['banded/float64', 'brusselator/float64', 'arrow/float64', 'rosenbrock/float64']
    """
    out = []
    for name in dtypes:
        dt = np.dtype(name)
        rng = np.random.default_rng(3)
        for label, family, f, (low, high, size), refs in _SPARSE:
            x = rng.uniform(low, high, size).astype(dt)
            ops = ("jacobian", "value_and_jacobian")
            if family == "hessian":
                ops = ("hessian", "value_gradient_and_hessian")
            out.append(
                Scenario(
                    f"{label}/{dt.name}",
                    f"sparse {family}",
                    f,
                    x,
                    operators=ops,
                    **refs(x.astype(np.float64)),
                )
            )
    return out
