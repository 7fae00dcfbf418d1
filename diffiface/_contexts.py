"""Context arguments passed to ``f`` after ``x``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
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


STRATEGIES = ("auto", "reverse_over_reverse", "forward_over_reverse")


@dataclasses.dataclass(frozen=True, eq=False)
class FixedParams:
    """A pseudo-closure ``x -> f(x, params)`` whose parameters diffiface can see.

    ``FixedParams(f, p)(x) == f(x, p)``. Passed as the function of an operator
    (``di.gradient(di.FixedParams(model, p), backend, x)``), ``p`` is handed to
    ``f`` like a ``di.Constant`` (not differentiated by this call), so JAX
    compiles ``f`` once for every value of ``p``. When an outer differentiation
    (``jax.grad``, ``torch.autograd``, ``autograd.grad``, or diffiface) sees
    ``x`` or ``p``, a nested-AD rule differentiates the inner call with respect
    to both in one pass; ``strategy`` picks how (see the nested-AD guide):

    * ``"auto"``: the measured fastest on this framework (today the
      framework's own reverse-over-reverse on every framework).
    * ``"reverse_over_reverse"``: the outer framework differentiates the
      inner call's own graph.
    * ``"forward_over_reverse"``: the outer cotangent ``w`` of ``y = ∇ₓ g(x, p)``
      is turned into ``(H_xx w, H_px w)`` by one JVP of the full gradient
      ``∇_(x,p) g`` in the direction ``(w, 0)``; for gradient, value_and_gradient,
      vjp, hvp (and jacobian / batched_jacobian on JAX) inner calls.

    The active argument is whatever ``x`` is: the parameter Jacobian at fixed
    inputs is ``di.jacobian(di.FixedParams(lambda p, x: model(x, p), x), b, p)``.

    Args:
        f: function ``f(x, params, *contexts)``.
        params: any pytree (arrays of the backend's framework, NumPy arrays,
            numbers).
        strategy: "auto", "reverse_over_reverse" or "forward_over_reverse".

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> fp = di.FixedParams(lambda x, p: p * (x**2).sum(), 3.0)
        >>> float(fp(np.array([1.0, 2.0])))
        15.0
        >>> di.gradient(fp, di.AutoFiniteDifferences(), np.array([1.0, 2.0])).round(6)
        array([ 6., 12.])
    """

    f: Callable
    params: Any
    strategy: str = "auto"

    def __post_init__(self) -> None:
        if not callable(self.f):
            raise TypeError(
                f"FixedParams(f, params): f must be callable, got {type(self.f).__name__}. "
                "Pass the model function first and its parameters second."
            )
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"FixedParams(f, params, strategy={self.strategy!r}): strategy must be one of "
                f"{', '.join(map(repr, STRATEGIES))}."
            )

    def __call__(self, x: Any, *contexts: Any) -> Any:
        return self.f(x, self.params, *contexts)


def unfix(f: Any, contexts: tuple) -> tuple[Any, tuple, FixedParams | None]:
    """``(function, contexts, fixed)``: a FixedParams becomes its function with the
    parameters as the first Constant."""
    if type(f) is FixedParams:
        return f.f, (Constant(f.params), *contexts), f
    return f, contexts, None
