"""Guards around the torch operators: autograd available under inference mode, and
copies of x where torch.func would hand the caller's storage to f."""

from __future__ import annotations

import contextvars
import functools

import torch

from ...core.operator import backend_methods


def _outside_inference(method):
    """Run an operator with autograd available: under ``torch.inference_mode()`` torch
    records no graph at all, and every gradient would silently be zero."""

    @functools.wraps(method)
    def run(self, *args):
        if torch.is_inference_mode_enabled():
            with torch.inference_mode(False):
                return method(self, *args)
        return method(self, *args)

    return run


# operators that hand x to torch.func, which passes the caller's storage on to f
_FUNC_OPERATORS = (
    "jacobian",
    "hessian",
    "value_and_jvp",
    "value_and_jvps",
    "value_and_jacobian",
    "value_and_batched_jacobian",
    "value_derivative_and_second_derivative",
)
OWNED: contextvars.ContextVar[bool] = contextvars.ContextVar("diffiface_owned", default=False)


def _own_inputs(method):
    """Give the operator copies of x (cheap, outside any transform) so that an in-place
    op in f cannot reach the caller's tensor through torch.func's wrappers."""

    tangents = method.__name__ in ("value_and_jvp", "value_and_jvps")

    @functools.wraps(method)
    def run(self, prob, xs, *rest):
        if tangents:  # an in-place op on a dual tensor changes its tangent too
            vs = rest[0]
            vs = tuple(v.clone() for v in vs) if type(vs) is tuple else [_clones(v) for v in vs]
            rest = (vs, *rest[1:])
        token = OWNED.set(True)
        try:
            return method(self, prob, _clones(xs), *rest)
        finally:
            OWNED.reset(token)

    return run


def _clones(xs: tuple) -> tuple:
    return tuple(x.clone() for x in xs)


def guard(cls):
    """The operators of ``cls``: outside inference mode, and with their own copies of x
    where torch.func would pass the caller's storage on to f."""
    for name in _FUNC_OPERATORS:
        setattr(cls, name, _own_inputs(getattr(cls, name)))
    for name in backend_methods():  # those cls defines itself
        if name in vars(cls):
            setattr(cls, name, _outside_inference(getattr(cls, name)))
    return cls
