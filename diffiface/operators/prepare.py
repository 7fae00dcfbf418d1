"""prepare_<operator>: the one-time work of an operator, reused by ``op(..., prep=prep)``.

Preparation looks the backend up, converts and records the signature of ``x``,
the tangent and the contexts, and runs the operator once (JAX compiles then).
A prepared call checks its arguments against the recorded signature and
raises :class:`~diffiface.MismatchError` listing what differs. Each
``prepare_*`` is :func:`~diffiface.core.shell.prepare` of its operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.plan import Prep
from ..core.shell import prepare
from . import batched, first_order, jacobian, second_order


def prepare_gradient(
    f: Callable, backend: Any, x: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
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
    return prepare(first_order.GRADIENT, f, backend, x, contexts, has_aux=has_aux)


def prepare_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`derivative` and :func:`value_and_derivative`.

    Examples:
        >>> import diffiface as di
        >>> f, b = (lambda x: x**2), di.AutoFiniteDifferences()
        >>> prep = di.prepare_derivative(f, b, 1.0)
        >>> round(di.derivative(f, b, 3.0, prep=prep), 5)
        6.0
    """
    return prepare(first_order.DERIVATIVE, f, backend, x, contexts, has_aux=has_aux)


def prepare_jacobian(
    f: Callable, backend: Any, x: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`jacobian` and :func:`value_and_jacobian` (the direction is chosen here).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: x**2), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> di.jacobian(f, b, x, prep=di.prepare_jacobian(f, b, x)).round(6)
        array([[2., 0.],
               [0., 4.]])
    """
    return prepare(jacobian.JACOBIAN, f, backend, x, contexts, has_aux=has_aux)


def prepare_jvp(
    f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`jvp` and :func:`value_and_jvp` for tangents like ``v`` (one or Tangents).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: x**2), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> prep = di.prepare_jvp(f, b, x, x)
        >>> di.jvp(f, b, x, np.array([1.0, 0.0]), prep=prep).round(6)
        array([2., 0.])
    """
    return prepare(first_order.JVP, f, backend, x, contexts, v, has_aux=has_aux)


def prepare_vjp(
    f: Callable, backend: Any, x: Any, w: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`vjp` and :func:`value_and_vjp` for cotangents like ``w``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: 3 * x), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> prep = di.prepare_vjp(f, b, x, x)
        >>> di.vjp(f, b, x, np.array([1.0, 1.0]), prep=prep).round(6)
        array([3., 3.])
    """
    return prepare(first_order.VJP, f, backend, x, contexts, w, has_aux=has_aux)


def prepare_hvp(
    f: Callable, backend: Any, x: Any, v: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`hvp` and :func:`gradient_and_hvp` for directions like ``v``.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: (x**3).sum()), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> prep = di.prepare_hvp(f, b, x, x)
        >>> di.hvp(f, b, x, np.array([1.0, 0.0]), prep=prep).round(4)
        array([6., 0.])
    """
    return prepare(second_order.HVP, f, backend, x, contexts, v, has_aux=has_aux)


def prepare_hessian(
    f: Callable, backend: Any, x: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`hessian` and :func:`value_gradient_and_hessian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: (x**3).sum()), np.array([1.0, 2.0]), di.AutoFiniteDifferences()
        >>> di.hessian(f, b, x, prep=di.prepare_hessian(f, b, x)).round(4)
        array([[ 6.,  0.],
               [ 0., 12.]])
    """
    return prepare(second_order.HESSIAN, f, backend, x, contexts, has_aux=has_aux)


def prepare_second_derivative(
    f: Callable, backend: Any, x: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`second_derivative` and :func:`value_derivative_and_second_derivative`.

    Examples:
        >>> import diffiface as di
        >>> f, b = (lambda x: x**3), di.AutoFiniteDifferences()
        >>> round(di.second_derivative(f, b, 2.0, prep=di.prepare_second_derivative(f, b, 1.0)), 3)
        12.0
    """
    return prepare(
        second_order.VALUE_DERIVATIVE_AND_SECOND_DERIVATIVE,
        f,
        backend,
        x,
        contexts,
        has_aux=has_aux,
    )


def prepare_batched_jacobian(
    f: Callable, backend: Any, x: Any, *contexts: Any, has_aux: bool = False
) -> Prep:
    """Prepare :func:`batched_jacobian` and :func:`value_and_batched_jacobian`.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> f, x, b = (lambda x: x**2), np.ones((3, 2)), di.AutoFiniteDifferences()
        >>> di.batched_jacobian(f, b, x, prep=di.prepare_batched_jacobian(f, b, x)).shape
        (3, 2, 2)
    """
    return prepare(batched.BATCHED_JACOBIAN, f, backend, x, contexts, has_aux=has_aux)
