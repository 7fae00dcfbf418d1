"""Context arguments passed to ``f`` after ``x``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ._arrays import registered
from ._errors import DiffifaceTypeError, DiffifaceValueError


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


STRATEGIES = ("auto", "reverse_over_reverse", "forward_over_reverse", "min_memory")


class _FromModule:
    """The default of ``FixedParams(params=...)``: the parameters of a torch module,
    read from it at each call."""

    def __repr__(self) -> str:
        return "<the module's parameters>"


FROM_MODULE = _FromModule()


@dataclasses.dataclass(frozen=True, eq=False, init=False, repr=False)
class FixedParams:
    """A pseudo-closure ``x -> f(x, params)`` whose parameters diffiface can see.

    ``FixedParams(f, p)(x) == f(x, p)``. Passed as the function of an operator
    (``di.gradient(di.FixedParams(model, p), backend, x)``), ``p`` is handed to
    ``f`` like a ``di.Constant`` (not differentiated by this call), so JAX
    compiles ``f`` once for every value of ``p``. When an outer differentiation
    (``jax.grad``, ``torch.autograd``, ``autograd.grad``, or diffiface) sees
    ``x`` or ``p``, a nested-AD rule differentiates the inner call with respect
    to both in one pass; ``strategy`` picks how (see the nested-AD guide):

    * ``"auto"``: the faster of the two below, measured once per code of ``f``
      (a closure made on every call shares one measurement) and shapes, and
      kept; forward over reverse must win by 3%. torch and autograd time the
      first real calls, the strategies taking turns (f runs no more often than
      on a plain call); JAX times both compiled passes of one trace of ``f``.
      ``repr`` of a preparation shows the choice. Other inner operators use
      reverse over reverse.
    * ``"min_memory"``: the one whose pass allocates less: measured by XLA's
      memory analysis on JAX, from the framework's measured table on torch
      (reverse over reverse) and autograd (forward over reverse).
    * ``"reverse_over_reverse"``: the outer framework differentiates the
      inner call's own graph.
    * ``"forward_over_reverse"``: the outer cotangent ``w`` of ``y = ∇ₓ g(x, p)``
      is turned into ``(H_xx w, H_px w)`` by one JVP of the full gradient
      ``∇_(x,p) g`` in the direction ``(w, 0)``; for gradient, value_and_gradient,
      vjp, hvp (and jacobian / batched_jacobian on JAX) inner calls.

    The active argument is whatever ``x`` is: the parameter Jacobian at fixed
    inputs is ``di.jacobian(di.FixedParams(lambda p, x: model(x, p), x), b, p)``.

    A ``torch.nn.Module`` is its own FixedParams: ``FixedParams(model)(x) ==
    model(x)``, with ``params = dict(model.named_parameters())`` and the buffers
    read from the module at each call (never stale after an optimizer step or a
    ``load_state_dict``); a rule that swaps in other tensors calls
    ``torch.func.functional_call(model, (params, buffers), (x, *contexts))``.
    The parameters are the module's own tensors, so
    an outer ``loss.backward()`` fills ``model.weight.grad``; buffers and
    parameters with ``requires_grad=False`` get no gradient. ``FixedParams(model,
    params)`` calls the module with the given dict of parameters instead, as
    ``torch.func.functional_call`` does (the module's own fill in the names it
    lacks).

    Args:
        f: function ``f(x, params, *contexts)``, or a ``torch.nn.Module`` called as
            ``model(x, *contexts)``.
        params: any pytree (arrays of the backend's framework, NumPy arrays,
            numbers). For a Module: optional, a dict of parameter names to tensors;
            omitted, the module's parameters at each call.
        strategy: "auto", "reverse_over_reverse", "forward_over_reverse" or
            "min_memory".

    Attributes:
        f: the function called as ``f(x, params, *contexts)``; for a Module, its
            ``functional_call``.
        params: the parameters (for a Module without params: read from it now).
        strategy: the nested-AD strategy.
        module: the ``torch.nn.Module``, or None.

    Raises:
        DiffifaceTypeError: ``f`` is not callable, ``params`` is omitted and ``f`` is
            no Module, or ``params`` of a Module is no dict.
        DiffifaceValueError: ``strategy`` is none of the four, or a key of a Module's
            ``params`` names none of its parameters and buffers, or its tensor has
            another shape.

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
    strategy: str
    module: Any
    _params: Any

    def __init__(self, f: Callable, params: Any = FROM_MODULE, strategy: str = "auto") -> None:
        fn = _model_function(f, params)
        module = None if fn is None else f
        if fn is not None:
            f = fn
        elif params is FROM_MODULE:
            raise DiffifaceTypeError(
                f"FixedParams(f): params can be left out only when f is a torch.nn.Module, "
                f"got {type(f).__name__}. Pass the parameters: FixedParams(f, params)."
            )
        set_ = object.__setattr__  # frozen
        set_(self, "f", f)
        set_(self, "strategy", strategy)
        set_(self, "module", module)
        set_(self, "_params", params)
        if not callable(f):
            raise DiffifaceTypeError(
                f"FixedParams(f, params): f must be callable, got {type(f).__name__}. "
                "Pass the model function first and its parameters second."
            )
        if strategy not in STRATEGIES:
            raise DiffifaceValueError(
                f"FixedParams(f, params, strategy={strategy!r}): strategy must be one of "
                f"{', '.join(map(repr, STRATEGIES))}."
            )

    @property
    def params(self) -> Any:
        """The parameters given, or the module's, read now."""
        if self._params is FROM_MODULE:
            return dict(self.module.named_parameters())
        return self._params

    def __call__(self, x: Any, *contexts: Any) -> Any:
        return self.f(x, self.params, *contexts)

    def __repr__(self) -> str:
        f = self.f if self.module is None else self.module
        return f"FixedParams(f={f!r}, params={self._params!r}, strategy={self.strategy!r})"


def _model_function(f: Any, params: Any) -> Any:
    """``f`` as a function of ``(x, params, *contexts)`` where a registered framework
    knows it as a model object (a torch.nn.Module), else None."""
    for framework in registered():
        fn = framework.model_function(f, params)
        if fn is not None:
            return fn
    return None


def unfix(f: Any, contexts: tuple) -> tuple[Any, tuple, FixedParams | None]:
    """``(function, contexts, fixed)``: a FixedParams becomes its function with the
    parameters as the first Constant."""
    if type(f) is FixedParams:
        return f.f, (Constant(f.params), *contexts), f
    return f, contexts, None
