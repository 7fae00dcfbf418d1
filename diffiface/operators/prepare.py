"""prepare_<operator>: the one-time work of an operator, reused by ``op(..., prep=prep)``.

Preparation looks the backend up, converts and records the signature of ``x``,
the tangent and the contexts, and runs the operator once (JAX compiles then).
A prepared call checks its arguments against the recorded signature and
raises :class:`~diffiface._prep.MismatchError` listing what differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _checks
from ..bridge.operators import Foreign
from ..core.plan import Prep
from . import batched as _batched
from . import first_order as _api
from . import second_order as _second_order

_SECOND = ("hvp", "hessian", "second_derivative")
_SCALAR = ("gradient", "hvp", "hessian")


def _prep(family: str, f: Callable, backend: Any, x: Any, contexts: tuple, t: Any = None) -> Prep:
    scalar = family in _SCALAR
    try:
        if family in _SECOND:
            impl, combo, prob, _, kinds, _ = _second_order._enter2(
                family, f, backend, x, contexts, scalar
            )
        else:
            impl, prob, _, kinds, _ = _api._enter(family, f, backend, x, contexts, scalar)
            combo = None
    except Foreign:
        raise _checks.DiffifaceValueError(
            f"prepare_{family}(f, {backend!r}, ...): the arguments hold arrays of another "
            "framework (or second_order crosses frameworks), and a preparation holds one "
            "framework's arrays. Prepare with the backend's arrays, or call the operator "
            "without prep= (it then crosses a bridge)."
        ) from None
    return Prep(family, f, backend, impl, combo, prob, x, kinds, contexts, t)


def prepare_gradient(f: Callable, backend: Any, x: Any, *contexts: Any) -> Prep:
    """Prepare :func:`gradient` and :func:`value_and_gradient` for ``x`` like this one.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f = lambda x: (x**2).sum()
        >>> x = np.array([1.0, 2.0])
        >>> prep = di.prepare_gradient(f, di.AutoFiniteDifferences(), x)
        >>> di.gradient(f, di.AutoFiniteDifferences(), x, prep=prep).round(6)
        array([2., 4.])
    """
    prep = _prep("gradient", f, backend, x, contexts)
    _api.gradient(f, backend, x, *contexts, prep=prep)
    return prep.finalize()


def prepare_derivative(f: Callable, backend: Any, x: Any, *contexts: Any) -> Prep:
    """Prepare :func:`derivative` and :func:`value_and_derivative`.

    Examples:
        >>> import diffiface as di
        >>> f, b = (lambda x: x**2), di.AutoFiniteDifferences()
        >>> prep = di.prepare_derivative(f, b, 1.0)
        >>> round(di.derivative(f, b, 3.0, prep=prep), 5)
        6.0
    """
    prep = _prep("derivative", f, backend, x, contexts)
    _api.derivative(f, backend, x, *contexts, prep=prep)
    return prep.finalize()


def prepare_jacobian(f: Callable, backend: Any, x: Any, *contexts: Any) -> Prep:
    """Prepare :func:`jacobian` and :func:`value_and_jacobian` (the direction is chosen here).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: x**2), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> di.jacobian(f, b, x, prep=di.prepare_jacobian(f, b, x)).round(6)
        array([[2., 0.],
               [0., 4.]])
    """
    prep = _prep("jacobian", f, backend, x, contexts)
    _api.jacobian(f, backend, x, *contexts, prep=prep)
    return prep.finalize()


def prepare_jvp(f: Callable, backend: Any, x: Any, v: Any, *contexts: Any) -> Prep:
    """Prepare :func:`jvp` and :func:`value_and_jvp` for tangents like ``v`` (one or Tangents).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: x**2), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> prep = di.prepare_jvp(f, b, x, x)
        >>> di.jvp(f, b, x, np.array([1.0, 0.0]), prep=prep).round(6)
        array([2., 0.])
    """
    prep = _prep("jvp", f, backend, x, contexts, v)
    _api.jvp(f, backend, x, v, *contexts, prep=prep)
    return prep.finalize()


def prepare_vjp(f: Callable, backend: Any, x: Any, w: Any, *contexts: Any) -> Prep:
    """Prepare :func:`vjp` and :func:`value_and_vjp` for cotangents like ``w``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: 3 * x), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> prep = di.prepare_vjp(f, b, x, x)
        >>> di.vjp(f, b, x, np.array([1.0, 1.0]), prep=prep).round(6)
        array([3., 3.])
    """
    prep = _prep("vjp", f, backend, x, contexts, w)
    _api.vjp(f, backend, x, w, *contexts, prep=prep)
    return prep.finalize()


def prepare_hvp(f: Callable, backend: Any, x: Any, v: Any, *contexts: Any) -> Prep:
    """Prepare :func:`hvp` and :func:`gradient_and_hvp` for directions like ``v``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: (x**3).sum()), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> prep = di.prepare_hvp(f, b, x, x)
        >>> di.hvp(f, b, x, np.array([1.0, 0.0]), prep=prep).round(4)
        array([6., 0.])
    """
    prep = _prep("hvp", f, backend, x, contexts, v)
    _second_order.hvp(f, backend, x, v, *contexts, prep=prep)
    return prep.finalize()


def prepare_hessian(f: Callable, backend: Any, x: Any, *contexts: Any) -> Prep:
    """Prepare :func:`hessian` and :func:`value_gradient_and_hessian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: (x**3).sum()), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> di.hessian(f, b, x, prep=di.prepare_hessian(f, b, x)).round(4)
        array([[ 6.,  0.],
               [ 0., 12.]])
    """
    prep = _prep("hessian", f, backend, x, contexts)
    _second_order.hessian(f, backend, x, *contexts, prep=prep)
    return prep.finalize()


def prepare_second_derivative(f: Callable, backend: Any, x: Any, *contexts: Any) -> Prep:
    """Prepare :func:`second_derivative` and :func:`value_derivative_and_second_derivative`.

    Examples:
        >>> import diffiface as di
        >>> f, b = (lambda x: x**3), di.AutoFiniteDifferences()
        >>> round(di.second_derivative(f, b, 2.0, prep=di.prepare_second_derivative(f, b, 1.0)), 3)
        12.0
    """
    prep = _prep("second_derivative", f, backend, x, contexts)
    _second_order.second_derivative(f, backend, x, *contexts, prep=prep)
    return prep.finalize()


def prepare_batched_jacobian(f: Callable, backend: Any, x: Any, *contexts: Any) -> Prep:
    """Prepare :func:`batched_jacobian` and :func:`value_and_batched_jacobian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: x**2), np.ones((3, 2)), di.AutoFiniteDifferences()
        >>> di.batched_jacobian(f, b, x, prep=di.prepare_batched_jacobian(f, b, x)).shape
        (3, 2, 2)
    """
    prep = _prep("batched_jacobian", f, backend, x, contexts)
    _batched.batched_jacobian(f, backend, x, *contexts, prep=prep)
    return prep.finalize()
