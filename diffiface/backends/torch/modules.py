"""torch.nn.Module as ``FixedParams(model, params)``: its parameters swapped in by
``torch.func.functional_call``, checked by name and shape (imported once torch is)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import torch
import torch.func

from ..._arrays import framework_of
from ..._contexts import FROM_MODULE
from ..._errors import DiffifaceTypeError, DiffifaceValueError
from ..._tree import flatten


def model_function(module: Any, params: Any) -> Any:
    """``module`` as a function of ``(x, params, *contexts)``, ``params`` checked
    against it (``FROM_MODULE``: read from the module at each call)."""
    if params is not FROM_MODULE and not isinstance(params, Mapping):
        raise DiffifaceTypeError(
            f"FixedParams(model, params): with a torch.nn.Module, params must be a "
            f"dict of parameter names to tensors, got {type(params).__name__}. "
            "Pass dict(model.named_parameters()) (or leave params out to read them "
            "from the module at each call)."
        )
    if params is not FROM_MODULE:
        check_module_params(module, params)
    return types.MethodType(functional_call, module)


def check_module_params(module: Any, params: Mapping) -> None:
    """Each entry of ``params`` names a parameter or a buffer of ``module`` and has its
    shape (``torch.func.functional_call`` ignores an unknown name and leaves the
    module's own tensor in use)."""
    own = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))
    what = f"the {type(module).__name__} module"
    for name, value in params.items():
        kind = "parameter" if name in own else "buffer"
        tensor = own.get(name, buffers.get(name))
        if tensor is None:
            known = f"its parameters: {_names(own)}; its buffers: {_names(buffers)}"
            raise DiffifaceValueError(
                f"FixedParams(model, params): params has the key {name!r}, which is neither "
                f"a parameter nor a buffer of {what} ({known}). Use the module's names, as "
                "dict(model.named_parameters()) gives them."
            )
        lazy = isinstance(tensor, torch.nn.parameter.UninitializedTensorMixin)
        shape = getattr(value, "shape", None)
        if not lazy and shape is not None and tuple(shape) != tuple(tensor.shape):
            raise DiffifaceValueError(
                f"FixedParams(model, params): params[{name!r}] has shape {tuple(shape)}, and "
                f"the {kind} {name!r} of {what} has shape {tuple(tensor.shape)}. Pass a "
                f"tensor of shape {tuple(tensor.shape)}."
            )


def _names(tensors: dict, most: int = 12) -> str:
    names = list(tensors)
    if len(names) > most:
        return f"{', '.join(map(repr, names[:most]))}, ... ({len(names)} in all)"
    return ", ".join(map(repr, names)) or "none"


def functional_call(module: Any, x: Any, params: Any, *contexts: Any) -> Any:
    """``module(x, *contexts)`` with ``params`` for its parameters and its current
    buffers, by ``torch.func.functional_call``; a plain call when ``params`` are the
    module's own tensors (the same result, without the cost of swapping them in)."""
    other = {framework_of(a) for a in flatten(x)[0]} - {"torch", None}
    if other:  # finite differences call f on NumPy, another framework's backend on its arrays
        raise DiffifaceTypeError(
            f"FixedParams({type(module).__name__}): a torch.nn.Module runs on torch tensors, "
            f"and this backend called it with {' and '.join(sorted(other))} arrays. "
            "Differentiate it with AutoTorch() (or second_order(AutoTorch(), AutoTorch()))."
        )
    own = dict(module.named_parameters())
    if len(own) == len(params) and all(params.get(k) is p for k, p in own.items()):
        return module(x, *contexts)
    buffers = {k: b for k, b in module.named_buffers() if k not in params}
    return torch.func.functional_call(module, (params, buffers), (x, *contexts))
