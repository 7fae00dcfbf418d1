"""Context arguments passed to ``f`` after ``x``."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Constant:
    """An extra argument of ``f`` that this call does not differentiate.

    ``di.gradient(f, backend, x, di.Constant(c))`` differentiates
    ``f(x, c)`` with respect to ``x`` only. NumPy array leaves of ``c`` are
    converted to the backend's arrays like ``x``; other values pass as they
    are. An outer differentiation can still see through ``c`` (a torch tensor
    that requires grad, a JAX tracer).

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> di.gradient(lambda x, c: c * (x**2).sum(), di.AutoFiniteDifferences(),
        ...             np.array([1.0, 2.0]), di.Constant(3.0)).round(6)
        array([ 6., 12.])
    """

    value: Any
