"""The built-in scenarios of the consistency matrix: f(x, s), written once with the Array
API for every framework, with their closed forms (``closed(s, d=True)``: differentiated in s)."""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

QC = np.array([[0.5, -1.0, 0.25], [1.5, 0.75, -0.5]])
QX = np.array([[0.3, -0.7, 0.9], [-0.2, 0.45, 1.1]])
MM = np.array([[0.4, -1.2, 0.7, 0.1], [1.0, 0.3, -0.6, 0.8], [-0.5, 0.9, 0.2, -1.1]])
MX = np.array([[0.6, -0.4, 1.3], [-0.9, 0.2, 0.35]])
SA = np.array([1.0, -2.0, 0.5])


# Array API functions: the namespace of s * x (x, or s under an outer pass, may be the
# framework's array); a constant becomes an array of z's namespace and dtype
def sin_quad(x, s):
    """array -> scalar: sum(sin(s x)) + s <c, x>^2 (a full, symmetric Hessian)."""
    z = s * x
    xp = array_namespace(z)
    return xp.sum(xp.sin(z)) + s * xp.sum(xp.asarray(QC, dtype=z.dtype) * x) ** 2


def sin_matmul(x, s):
    """array -> array: sin(s x) @ m, rows are independent samples (a non-square m)."""
    z = s * x
    xp = array_namespace(z)
    return xp.sin(z) @ xp.asarray(MM, dtype=z.dtype)


def sin_scaled(x, s):
    """scalar -> array: sin(s a x)."""
    z = s * x
    xp = array_namespace(z)
    return xp.sin(z * xp.asarray(SA, dtype=z.dtype))


def quad_closed(s, d=False):
    z, c = QX.ravel(), QC.ravel()
    q = c @ z
    sz, cz = np.sin(s * z), np.cos(s * z)
    if not d:
        return {
            "y": np.array([sz.sum() + s * q**2]),
            "jac": (s * cz + 2 * s * q * c)[None, :],
            "hess": -(s**2) * np.diag(sz) + 2 * s * np.outer(c, c),
        }
    return {
        "y": np.array([(z * cz).sum() + q**2]),
        "jac": (cz - s * z * sz + 2 * q * c)[None, :],
        "hess": -2 * s * np.diag(sz) - s**2 * np.diag(z * cz) + 2 * np.outer(c, c),
    }


def matmul_closed(s, d=False):
    x, m = MX, MM
    b, n = x.shape
    k = m.shape[1]
    if not d:
        y, dz = np.sin(s * x) @ m, s * np.cos(s * x)
    else:
        y, dz = (x * np.cos(s * x)) @ m, np.cos(s * x) - s * x * np.sin(s * x)
    jac = np.zeros((b, k, b, n))
    for i in range(b):
        jac[i, :, i, :] = m.T * dz[i][None, :]
    return {"y": y.ravel(), "jac": jac.reshape(b * k, b * n)}


def scaled_closed(s, d=False, t=0.35):
    a = SA
    sa, ca = np.sin(s * a * t), np.cos(s * a * t)
    if not d:
        return {"y": sa, "jac": (s * a * ca)[:, None], "second": -((s * a) ** 2) * sa}
    return {
        "y": a * t * ca,
        "jac": (a * ca - s * a**2 * t * sa)[:, None],
        "second": -2 * s * a**2 * sa - s**2 * a**3 * t * ca,
    }
