"""Elementwise aten ops for the torch detector: an output element depends on the same
element of each operand whose derivative is not zero everywhere.

The classification follows SparseConnectivityTracer.jl's (``is_der1_arg_zero_global``):
an operand in which the op is piecewise constant (the mask of a relu-style backward, the
sign source of ``copysign``, both operands of a rounding division) carries no
derivative. The Hessian is the Jacobian of the gradient's program, so the second-order
classification follows from the first: relu's gradient is ``threshold_backward(g, x)``,
constant in x, hence a zero Hessian, as JAX's detector and SparseConnectivityTracer give.
"""

from __future__ import annotations

import numpy as np
import torch

from .rules import Call, Sym, broadcast, is_float, metadata_only, movement, take_rows, union

# operands (by schema name) in which the op is piecewise constant: zero derivative
FLAT_OPERANDS = {
    "threshold_backward": ("self",),
    "hardtanh_backward": ("self",),
    "leaky_relu_backward": ("self",),
    "hardsigmoid_backward": ("self",),
    "softshrink_backward": ("self",),
    "hardshrink_backward": ("self",),
    "rrelu_with_noise_backward": ("self", "noise"),
    "rrelu_with_noise_functional": ("noise",),
    "copysign": ("other",),
    "nextafter": ("other",),
    "heaviside": ("self",),
}
# ops piecewise constant in every operand: the values depend on x, the derivative is zero
FLAT_OPS = "detach sign sgn floor ceil round trunc fix floor_divide"


def pointwise(call: Call):
    """The union of the patterns (broadcast) of the operands with a derivative."""
    name = call.op.overloadpacket.__name__
    flat = FLAT_OPERANDS.get(name, ())
    shape = call.out_meta().shape
    p = union([broadcast(s, shape) for s in call.syms(skip=flat)])
    if p is not None and flat and name.endswith("_backward"):
        return _masked(call, p, flat)
    return p


def _masked(call: Call, p, flat):
    """A relu-style backward, ``op(g, x) = g * mask(x)``, with x known (a local
    pattern's linearization at x): the rows where the mask is zero go."""
    b = call.bound()
    if any(isinstance(b.get(k), Sym) for k in flat):
        return p

    def ones(a):
        return torch.ones(a.shape, dtype=a.meta.dtype, device=a.meta.device)

    args = [ones(a) if isinstance(a, Sym) else a for a in call.args]
    kwargs = {k: ones(v) if isinstance(v, Sym) else v for k, v in call.kwargs.items()}
    zero = (call.op(*args, **kwargs) == 0).cpu().numpy().ravel()
    return take_rows(p, np.where(zero, -1, np.arange(zero.size))) if zero.any() else p


def first_output(call: Call):
    """Ops whose first output is elementwise, the others without derivative (the noise
    of ``rrelu_with_noise_functional``)."""
    return [pointwise(call)] + [None] * (len(call.meta) - 1)


def no_derivative(call: Call):
    """detach, sign, floor, ...: the values depend on x, the derivative is zero."""
    return None


def fill(call: Call):
    """``fill``: the output takes only the fill value (a 0-dim tensor or a number)."""
    value = call.bound()["value"]
    if isinstance(value, Sym):
        return broadcast(value, call.out_meta().shape) if value.p is not None else None
    return metadata_only(call)


class Signed:
    """A rule's pattern for a value that is ``base`` times a piecewise constant factor."""

    def __init__(self, p, base):
        self.p, self.base = p, base


def copysign(call: Call):
    """``copysign(a, b) = a * sign(a) * sign(b)``: a's pattern; the value remembers a,
    so that ``copysign(a, b) / a`` (torch's own backward of copysign) is flat."""
    base = call.bound()["self"]
    return Signed(pointwise(call), base if isinstance(base, Sym) else None)


def division(call: Call):
    """div: flat with a rounding mode (floor, trunc), and for ``copysign(a, b) / a``."""
    b = call.bound()
    if b.get("rounding_mode") is not None:
        return None
    num, den = b["self"], b["other"]
    if isinstance(num, Sym) and num.sign_of is not None and num.sign_of is den:
        return None
    return pointwise(call)


def power(call: Call):
    """pow: flat for a concrete exponent 0 (x ** 0 is 1: torch's gradient of x ** 1
    holds it)."""
    exponent = call.bound()["exponent"]
    if not isinstance(exponent, (Sym, torch.Tensor)) and exponent == 0:
        return None
    return pointwise(call)


def product(call: Call):
    """mul: as pointwise, less the elements where a concrete operand is zero
    (d(0 * y)/dy = 0, as JAX's detector)."""
    p = pointwise(call)
    if p is None:
        return None
    shape = tuple(call.out_meta().shape)
    zero = np.zeros(shape, dtype=bool)
    for a in call.args[:2]:
        if isinstance(a, torch.Tensor):
            zero |= np.broadcast_to((a.detach().cpu() == 0).numpy(), shape)
        elif isinstance(a, (int, float)) and a == 0:
            zero[...] = True
    if not zero.any():
        return p
    return take_rows(p, np.where(zero.ravel(), -1, np.arange(zero.size)))


def choice(call: Call):
    """where / masked_fill: with a concrete condition each element takes the operand it
    selects (run on index tensors); with one computed from x, the union of both."""
    if any(isinstance(s, Sym) and not is_float(s.meta) for s in call.leaves()):
        return pointwise(call)
    return movement(call)
