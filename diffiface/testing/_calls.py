"""How each operator is called, and its reference, from its declaration (``core/operator.py``).

Tests that run every operator ask these instead of keeping tables keyed by operator
names, so that a new operator declared in ``core/operator.py`` is covered with no edit:
the point it needs (:func:`point_kind`), its tangent argument (:func:`tangent_args`),
its ``prepare_`` function (:func:`prepare_of`) and its expected result, picked from
dense closed forms by its declared ``returns`` (:func:`expected`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.operator import OPS, of_family, pick

# the base operator of each family (the one ``prepare_<family>`` is named after)
BASES = tuple(dict.fromkeys(d.family for d in OPS.values()))
# the families whose f may return a pytree: those with a ``tree_output`` member
TREE_FAMILIES = tuple(f for f in BASES if any(OPS[op].tree_output for op in of_family(f)))


def point_kind(op: str) -> str:
    """The kind of point and function ``op`` needs.

    "scalar_x" (x a scalar: the derivatives), "batch" (f keeps x's leading axis:
    the batched Jacobian), "scalar_y" (f returns a scalar: gradient, hvp, hessian) or
    "vector" (the rest).

    Examples:
        >>> point_kind("hvp"), point_kind("jvp"), point_kind("derivative")
        ('scalar_y', 'vector', 'scalar_x')
    """
    d = OPS[op]
    if d.scalar_x:
        return "scalar_x"
    if d.family == "batched_jacobian":
        return "batch"
    return "scalar_y" if d.scalar else "vector"


def tangent_args(op: str, v: Any, w: Any) -> tuple:
    """The tangent argument of ``op`` after x: ``(v,)``, ``(w,)`` or ``()``.

    Examples:
        >>> tangent_args("vjp", "v", "w"), tangent_args("gradient", "v", "w")
        (('w',), ())
    """
    tangent = OPS[op].tangent
    return () if tangent is None else ({"v": v, "w": w}[tangent],)


def prepare_of(op: str) -> Any:
    """The ``prepare_<family>`` function that prepares ``op``."""
    import diffiface as di

    return getattr(di, "prepare_" + OPS[op].family)


def parts(y: Any, jac: Any, hess: Any = None, v: Any = None, w: Any = None) -> dict:
    """Every result part's reference at one x from dense closed forms.

    Args:
        y: ``f(x)``.
        jac: the Jacobian, shaped ``f(x).shape + x.shape`` (the gradient for a scalar
            ``f``, the derivative for a scalar ``x``); for a batch point ``x`` of shape
            ``(b, n)`` and ``f(x)`` of shape ``(b, m)``, the batched Jacobian
            ``(b, m, n)`` is also accepted.
        hess: the Hessian ``x.shape * 2`` of a scalar ``f`` (the second derivative for
            a scalar ``x``), or None.
        v, w: the tangent like x and the cotangent like ``f(x)``, or None.
    """
    y, jac = np.asarray(y), np.asarray(jac)
    out = {"value": y, "gradient": jac, "jacobian": jac, "derivative": jac}
    out["batched_jacobian"] = _batched(y, jac)
    if v is not None:
        v = np.asarray(v)
        out["jvp"] = np.tensordot(jac, v, axes=v.ndim)
    if w is not None:
        w = np.asarray(w)
        out["vjp"] = np.tensordot(w, jac, axes=w.ndim)
    if hess is not None:
        hess = np.asarray(hess)
        out["hessian"] = out["second_derivative"] = hess
        if v is not None:
            out["hvp"] = np.tensordot(hess, v, axes=v.ndim)
    return out


def _batched(y: np.ndarray, jac: np.ndarray) -> np.ndarray | None:
    """The batched Jacobian (b, m, n) from a full one (b, m, b, n), or as given."""
    if y.ndim != 2 or jac.ndim not in (3, 4):
        return None
    if jac.ndim == 3:
        return jac
    return np.stack([jac[i, :, i, :] for i in range(jac.shape[0])])


def part_shapes(xs: tuple, ys: tuple) -> dict:
    """The shape of each result part for x of shape ``xs`` and f(x) of shape ``ys``."""
    return {
        "value": ys,
        "derivative": ys,
        "second_derivative": ys,
        "gradient": xs,
        "jacobian": ys + xs,
        "jvp": ys,
        "vjp": xs,
        "hvp": xs,
        "hessian": xs + xs,
        "batched_jacobian": ys[:1] + ys[1:] + xs[1:],
    }


def expected(op: str, references: dict) -> Any:
    """``op``'s expected result from :func:`parts`: one array, or a tuple in the order
    of its declared ``returns``.

    Examples:
        >>> import numpy as np
        >>> ref = parts(np.array(2.0), np.array([1.0, 4.0]), np.eye(2), v=np.ones(2))
        >>> expected("gradient_and_hvp", ref)
        (array([1., 4.]), array([1., 1.]))
    """
    return pick(op, references)
