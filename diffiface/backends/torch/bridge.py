"""The torch side of the bridges (see ``diffiface._bridge``).

Inner: a node's jvp, vjp, transpose and vmap are ``torch.func.jvp``,
``torch.func.vjp`` and ``torch.func.vmap``, which compose with each other.

Outer: a node is one ``torch.autograd.Function``. Its backward calls the
node's vjp node and its jvp (forward-mode AD) the jvp node, both through the
same Function, so double backward, ``torch.func.grad``/``jacrev``/``jacfwd``/
``hessian`` and ``torch.func.vmap`` (which calls the node's batched version)
cross the bridge at any order.
"""

from __future__ import annotations

import contextlib
import numbers
import warnings
from typing import Any

import numpy as np
import torch

from ... import _checks
from ...bridge import node as _bridge
from .forward import jvp
from .graph import outer_pass


def to_torch(a: Any) -> torch.Tensor:
    """Any framework's array as a tensor, without a copy where DLPack allows."""
    if isinstance(a, torch.Tensor):
        return a
    sharding = getattr(a, "sharding", None)  # a jax array
    if sharding is not None and type(a) is not np.ndarray:
        if _on_cpu(sharding):  # a NumPy view: 4x cheaper than DLPack, still no copy
            return _from_numpy(np.asarray(a))
        return torch.from_dlpack(a)
    if isinstance(a, np.ndarray | np.generic | numbers.Number):  # also JAX's typed literals
        return _from_numpy(np.asarray(a, dtype=getattr(a, "dtype", None)))
    return torch.from_dlpack(a)


as_array = to_torch
_CPU: dict = {}  # a jax sharding -> all its devices are CPUs (shardings are few and shared)


def _on_cpu(sharding: Any) -> bool:
    try:
        cpu = _CPU.get(sharding)
    except TypeError:  # unhashable
        cpu = None
    if cpu is None:
        cpu = all(d.platform == "cpu" for d in sharding.device_set)
        with contextlib.suppress(TypeError):
            if len(_CPU) < 64:
                _CPU[sharding] = cpu
    return cpu


_QUIET = []  # non-empty once torch has had its one read-only warning


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """A tensor viewing ``a``. torch warns once per process on a read-only array (jax
    arrays and XLA's callback buffers are read-only; nothing here writes to them): that
    one warning is silenced, and later calls pay nothing for it."""
    if _QUIET or a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(a)
    _QUIET.append(True)
    return t


class Kit:
    """torch as the inner framework."""

    name = "torch"

    to_inner = staticmethod(to_torch)

    @staticmethod
    def compile(fn):
        return fn

    @staticmethod
    def to_numpy(a: torch.Tensor) -> np.ndarray:
        return a.detach().cpu().numpy()

    @staticmethod
    def jvp(fn, n: int):
        return lambda *a: jvp(fn, a[:n], a[n:])[1]

    @staticmethod
    def vjp(fn, n: int):
        def run(*a):
            _, pull = torch.func.vjp(fn, *a[:n])
            return pull(tuple(a[n:]))

        return run

    @staticmethod
    def transpose(fn, n: int, lin_avals: tuple):
        def run(*a):
            like = a[0] if a else None
            zeros = [_zeros(s, d, like) for s, d in lin_avals]
            _, pull = torch.func.vjp(lambda *lin: fn(*a[:n], *lin), *zeros)
            return pull(tuple(a[n:]))

        return run

    @staticmethod
    def vmap(fn, dims: tuple):
        return torch.func.vmap(fn, in_dims=dims)

    @staticmethod
    def out_avals(fn, avals: tuple) -> list:
        try:
            metas = [torch.empty(s, dtype=_torch_dtype(d), device="meta") for s, d in avals]
            outs = fn(*metas)
        except Exception:  # an operation without a meta kernel: evaluate at zeros
            with torch.no_grad():
                outs = fn(*(torch.zeros(s, dtype=_torch_dtype(d)) for s, d in avals))
        return [(tuple(o.shape), _np_dtype(o.dtype)) for o in outs]


def _zeros(shape, dtype, like):
    device = like.device if isinstance(like, torch.Tensor) else None
    return torch.zeros(shape, dtype=_torch_dtype(dtype), device=device)


_DTYPES = (torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128)
_DTYPES += (torch.int64, torch.int32, torch.bool)
_TO_NP = {d: torch.empty(0, dtype=d).numpy().dtype for d in _DTYPES}
_TO_TORCH = {v: k for k, v in _TO_NP.items()}


def _torch_dtype(dtype) -> torch.dtype:
    return _TO_TORCH[np.dtype(dtype)]


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return _TO_NP[dtype]


def kit(backend: Any) -> Kit:
    return Kit()


# ---- torch as the outer framework: one autograd.Function ---------------------------------------


def call(node: _bridge.Node, arrays: list) -> list:
    """``node`` applied to tensors (NumPy leaves become tensors): tensors out."""
    tensors = [a if type(a) is torch.Tensor else to_torch(a) for a in arrays]
    if len(tensors) > 1:
        _same_device(node, tensors)
    if torch._C._are_functorch_transforms_active():
        return list(_FuncBridge.apply(node, *tensors))
    if not outer_pass(tensors, ()):  # no graph to record, no tangent to carry
        return list(_outputs(_forward(node, tensors)))
    return list(_Bridge.apply(node, *tensors))


def _same_device(node, tensors) -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise _checks.DiffifaceValueError(
            f"a bridged call ({node.kit.name} inside torch) got tensors on "
            f"{', '.join(sorted(map(str, devices)))}. Move them to one device first "
            "(tensor.to(device))."
        )


def _forward(node, args, fn=None):
    to_inner = node.kit.to_inner
    return (fn or node.fn)(*[to_inner(a.detach() if a.requires_grad else a) for a in args])


def _outputs(outs) -> tuple:
    return tuple([to_torch(o) for o in outs])


def _save(ctx, node, args, output) -> None:
    ctx.node = node
    ctx.meta = [(o.shape, o.dtype, o.device) for o in output]
    ctx.save_for_backward(*args)
    ctx.save_for_forward(*args)


class _Bridge(torch.autograd.Function):
    """Outside torch.func transforms: the classic form, which torch applies without
    binding the signature (about 25 µs less per call)."""

    @staticmethod
    def forward(ctx, node, *args):
        pair = node.vjp_forward() if any(ctx.needs_input_grad[1:]) else None
        if pair is None:
            output, ctx.pull = _outputs(_forward(node, args)), None
        else:  # keep the inner framework's residuals for the backward pass
            outs, pull = _forward(node, args, pair[0])
            ctx.pull = (pair[1], pull)
            output = _outputs(outs)
        _save(ctx, node, args, output)
        return output

    @staticmethod
    def backward(ctx, *cts):
        args = ctx.saved_tensors
        cts = [
            torch.zeros(s, dtype=d, device=dev) if c is None else c
            for c, (s, d, dev) in zip(cts, ctx.meta, strict=True)
        ]
        if ctx.pull is not None and not torch.is_grad_enabled():  # not differentiated again:
            pullback, pull = ctx.pull  # the saved residuals' pullback
            gs = pullback(pull, [ctx.node.kit.to_inner(c) for c in cts])
            return (None, *_outputs(gs))
        return (None, *call(ctx.node.vjp(len(args)), [*args, *cts]))

    @staticmethod
    def jvp(ctx, _node_tangent, *tangents):
        args = ctx.saved_tensors
        pairs = zip(args, tangents, strict=True)
        ts = [torch.zeros_like(a) if t is None else t for a, t in pairs]
        return tuple(call(ctx.node.jvp(len(args)), [*args, *ts]))


class _FuncBridge(_Bridge):
    """Inside torch.func transforms, which need setup_context and a vmap rule (backward
    and jvp are _Bridge's)."""

    @staticmethod
    def forward(node, *args):
        return _outputs(_forward(node, args))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.pull = None  # torch.func may differentiate the backward again: the vjp node
        _save(ctx, inputs[0], inputs[1:], output)

    @staticmethod
    def vmap(info, in_dims, node, *args):
        dims = in_dims[1:]
        args = [a if d is None else a.movedim(d, 0) for a, d in zip(args, dims, strict=True)]
        outs = call(node.batch(tuple(None if d is None else 0 for d in dims)), args)
        return tuple(outs), (0,) * len(outs)
