"""The NumPy side of the bridges (see ``diffiface._bridge``): autograd and finite
differences as the inner framework, autograd (or plain NumPy) as the outer one.

Inner: the node's jvp and vjp are ``di.jvp`` / ``di.vjp`` with the backend
(autograd's own modes, or finite differences with the backend's step); vmap
is a loop. Outer: a node is one autograd primitive whose vjp and jvp call the
derived nodes through the same primitive, so autograd's nesting crosses it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _checks
from ..._arrays import framework_of, numpy_dtype
from ...bridge import node as _bridge


def to_numpy(a: Any) -> np.ndarray:
    """Any framework's CPU array as a NumPy array (a view where possible)."""
    if type(a) is np.ndarray:
        return a
    if framework_of(a) == "torch":
        if a.device.type != "cpu":
            raise _checks.DiffifaceValueError(
                f"a bridged call into NumPy got a tensor on {a.device}; NumPy computes on "
                "the CPU: move it with tensor.cpu() first."
            )
        return a.detach().numpy()
    dtype = getattr(a, "dtype", None)  # JAX's typed literals keep theirs; MLX's dtypes
    return np.asarray(a, dtype=None if dtype is None else numpy_dtype(dtype))  # by name


as_array = to_numpy


class Kit:
    """autograd or finite differences as the inner framework."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.name = backend.framework
        if backend.framework == "autograd":
            import autograd.numpy as xnp
        else:
            xnp = np
        self.xnp = xnp  # whose operations f's outputs are raveled with

    to_inner = staticmethod(to_numpy)
    to_numpy = staticmethod(to_numpy)

    @staticmethod
    def compile(fn):
        return fn

    def _flat(self, fn, shapes: list):
        """``fn`` with its outputs raveled into one vector (the operators take one
        array out); ``shapes`` receives the output shapes."""
        xnp = self.xnp

        def flat(xs):
            outs = fn(*xs)
            shapes[:] = [np.shape(o) for o in outs]
            return xnp.concatenate([xnp.ravel(o) for o in outs])

        return flat

    def jvp(self, fn, n: int):
        from ...operators.first_order import jvp

        def run(*a):
            shapes: list = []
            flat = jvp(self._flat(fn, shapes), self.backend, tuple(a[:n]), tuple(a[n:]))
            return _split(flat, shapes)

        return run

    def vjp(self, fn, n: int):
        from ...operators.first_order import vjp

        def run(*a):
            w = self.xnp.concatenate([self.xnp.ravel(c) for c in a[n:]])
            return tuple(vjp(self._flat(fn, []), self.backend, tuple(a[:n]), w))

        return run

    def transpose(self, fn, n: int, lin_avals: tuple):
        def run(*a):  # the vjp in the linear arguments, the others closed over
            zeros = tuple(np.zeros(s, d) for s, d in lin_avals)
            return self.vjp(lambda *lin: fn(*a[:n], *lin), len(zeros))(*zeros, *a[n:])

        return run

    def vmap(self, fn, dims: tuple):
        xnp = self.xnp

        def run(*a):
            size = next(x.shape[0] for x, d in zip(a, dims, strict=True) if d is not None)
            pairs = list(zip(a, dims, strict=True))
            rows = [fn(*(x if d is None else x[i] for x, d in pairs)) for i in range(size)]
            return tuple(xnp.stack(col) for col in zip(*rows, strict=True))

        return run

    @staticmethod
    def out_avals(fn, avals: tuple) -> list:
        outs = fn(*(np.zeros(s, d) for s, d in avals))
        return [(np.shape(o), np.asarray(o).dtype) for o in outs]


def _split(flat: np.ndarray, shapes: list) -> tuple:
    out, start = [], 0
    for s in shapes:
        size = int(np.prod(s, dtype=int))
        out.append(flat[start : start + size].reshape(s))
        start += size
    return tuple(out)


def _value(a: Any) -> Any:
    from autograd.tracer import getval

    return getval(a)


def kit(backend: Any) -> Kit:
    return Kit(backend)


# ---- autograd (or NumPy) as the outer framework ------------------------------------------------


def call(node: _bridge.Node, arrays: list) -> list:
    """``node`` applied to NumPy arrays or autograd boxes: the same kind out."""
    if not any(_bridge.framework_of(a) == "autograd" for a in arrays):  # no box: NumPy
        kit = node.kit
        return [to_numpy(o) for o in node.fn(*(kit.to_inner(to_numpy(a)) for a in arrays))]
    out = _primitive()(node, *arrays)
    return [out[i] for i in range(len(out))]


_PRIMITIVE: list = []  # one autograd primitive for every node: autograd's tables of vjps
# and jvps are global and hold their primitives forever (one per node kept every node)


def _primitive():
    if not _PRIMITIVE:
        with _bridge._LOCK:
            if not _PRIMITIVE:
                _PRIMITIVE.append(_make_primitive())
    return _PRIMITIVE[0]


def _make_primitive():
    from autograd.builtins import tuple as atuple
    from autograd.extend import defjvp_argnums, defvjp_argnums, primitive

    @primitive
    def run(node, *arrays):
        kit = node.kit
        return atuple(to_numpy(o) for o in node.fn(*(kit.to_inner(a) for a in arrays)))

    def vjp_maker(argnums, ans, args, kwargs):
        node, arrays = args[0], args[1:]

        def pull(g):
            cts = call(node.vjp(len(arrays)), [*arrays, *g])
            return tuple(cts[i - 1] for i in argnums)

        return pull

    def jvp_maker(argnums, gs, ans, args, kwargs):
        node, arrays = args[0], args[1:]
        ts = [np.zeros_like(_value(a)) for a in arrays]
        for i, g in zip(argnums, gs, strict=True):
            ts[i - 1] = g
        return atuple(call(node.jvp(len(arrays)), [*arrays, *ts]))

    defvjp_argnums(run, vjp_maker)
    defjvp_argnums(run, jvp_maker)
    return run
