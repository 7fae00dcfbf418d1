"""The JAX side of the bridges (see ``diffiface._bridge``).

Inner: a node's function is jit-compiled; its jvp, vjp, transpose and vmap are
``jax.jvp``, ``jax.vjp`` and ``jax.vmap``, each compiled once.

Outer: a node is one primitive, ``diffiface_bridge``. Its JVP is the node's
jvp node (linear in the tangents), whose transpose is the vjp node: so
``jax.grad``, ``jax.jvp``, ``jax.hessian`` and any nesting of them cross the
bridge. ``jax.vmap`` calls the node's batched version; under ``jax.jit`` the
call is a ``pure_callback`` (CPU arrays are NumPy views of XLA's buffers).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ... import _checks
from ..._arrays import framework_of
from ..._backend_types import AutoJax
from ...bridge import node as _bridge
from ...core.registry import implementation
from .running import dense

_JAX = (jax.Array, jax.core.Tracer)


def _check_dtype(a: Any) -> None:
    """The JAX backend's dtype check (float64 or complex128 without x64 is an error)."""
    if getattr(a.dtype, "itemsize", 0) >= 8:  # float64, complex64/128, int64
        name = str(a.dtype).removeprefix("torch.")
        reason = implementation(AutoJax()).check_numpy_dtype(np.dtype(name))
        if reason:
            raise _checks.DiffifaceValueError(f"a bridged call into JAX got {name}: {reason}")


def to_jax(a: Any) -> Any:
    """Any framework's array as an argument of a jitted function, without a copy (a
    CPU array as a NumPy view, which jit takes as it is; others by DLPack)."""
    if isinstance(a, _JAX):
        return a
    _check_dtype(a)
    if isinstance(a, np.ndarray):
        return dense(a)
    if isinstance(a, np.generic):
        return a
    if framework_of(a) == "torch":
        a = a.detach()
        if a.device.type == "cpu":  # a NumPy view: jit takes it without a copy (DLPack:
            return dense(a.numpy())  # 30 µs); a broadcast (sum's cotangent) made dense
        return jax.dlpack.from_dlpack(a.contiguous())
    return jnp.asarray(a)


class Kit:
    """JAX as the inner framework."""

    name = "jax"

    compile = staticmethod(jax.jit)
    to_inner = staticmethod(to_jax)

    @staticmethod
    def to_numpy(a: Any) -> np.ndarray:
        return np.asarray(a)

    @staticmethod
    def jvp(fn, n: int):
        return jax.jit(lambda *a: jax.jvp(fn, a[:n], a[n:])[1])

    @staticmethod
    def vjp(fn, n: int):
        def run(*a):
            _, pull = jax.vjp(fn, *a[:n])
            return pull(tuple(a[n:]))

        return jax.jit(run)

    @staticmethod
    def vjp_forward(fn):
        """(outputs and pullback, the pullback applied): the pullback is a pytree, which
        jit returns; its structure (and so the second's one compilation) is fn's, and
        both die with fn's node."""
        return jax.jit(lambda *a: jax.vjp(fn, *a)), jax.jit(lambda pull, cts: pull(tuple(cts)))

    @staticmethod
    def transpose(fn, n: int, lin_avals: tuple):
        def run(*a):
            zeros = [jnp.zeros(s, d) for s, d in lin_avals]
            _, pull = jax.vjp(lambda *lin: fn(*a[:n], *lin), *zeros)
            return pull(tuple(a[n:]))

        return jax.jit(run)

    @staticmethod
    def vmap(fn, dims: tuple):
        return jax.jit(jax.vmap(fn, in_axes=dims))

    @staticmethod
    def out_avals(fn, avals: tuple) -> list:
        outs = jax.eval_shape(fn, *(jax.ShapeDtypeStruct(s, d) for s, d in avals))
        return [(tuple(o.shape), np.dtype(o.dtype)) for o in outs]


def kit(backend: Any) -> Kit:
    return Kit()


# ---- JAX as the outer framework: one primitive ------------------------------------------------

bridge_p = Primitive("diffiface_bridge")
bridge_p.multiple_results = True


def as_array(a: Any) -> Any:
    """Any framework's array as a jax array."""
    return a if isinstance(a, _JAX) else _jax_array(to_jax(a))


def call(node: _bridge.Node, arrays: list) -> list:
    """``node`` applied to jax arrays (or tracers): jax arrays out."""
    arrays = [as_array(a) for a in arrays]
    if not any(isinstance(a, jax.core.Tracer) for a in arrays):  # eager: run it now
        return _impl(*arrays, node=node, avals=None)
    avals = tuple((tuple(a.shape), np.dtype(a.dtype)) for a in arrays)
    outs = _bridge.out_avals(node, avals)
    return bridge_p.bind(*arrays, node=node, avals=outs)


def _impl(*args, node, avals):
    kit = node.kit
    outs = node.fn(*(kit.to_inner(a) for a in args))
    return [_jax_array(o) for o in outs]


def _jax_array(a: Any) -> jax.Array:
    """An output of the inner framework as a jax array (DLPack: no copy where the
    buffer is aligned as XLA needs; about 30 µs either way)."""
    if isinstance(a, jax.Array):
        return a
    if isinstance(a, np.ndarray | np.generic):
        return jax.device_put(a)
    return jax.dlpack.from_dlpack(a.detach())


def _abstract(*args, node, avals):
    return [jax.core.ShapedArray(s, d) for s, d in avals]


def _host(node):
    kit = node.kit

    def run(*arrays):
        outs = node.fn(*(kit.to_inner(a) for a in arrays))
        return tuple(kit.to_numpy(o) for o in outs)

    return run


def _lower(*args, node, avals):
    shapes = [jax.ShapeDtypeStruct(s, d) for s, d in avals]
    return jax.pure_callback(_host(node), shapes, *args)


def _jvp(primals, tangents, *, node, avals):
    outs = bridge_p.bind(*primals, node=node, avals=avals)
    ts = [ad.instantiate_zeros(t) for t in tangents]
    return outs, call(node.jvp(len(primals)), [*primals, *ts])


def _transpose(cts, *args, node, avals):
    lin = node.lin
    if lin is None or any(ad.is_undefined_primal(a) for a in args[:lin]):
        raise _checks.DiffifaceValueError(
            f"{node!r} is not linear in the arguments JAX transposes it in."
        )
    lin_avals = tuple((tuple(a.aval.shape), np.dtype(a.aval.dtype)) for a in args[lin:])
    cts = [
        jnp.zeros(s, d) if type(c) is ad.Zero else c for c, (s, d) in zip(cts, avals, strict=True)
    ]
    outs = call(node.transpose(lin, lin_avals), [*args[:lin], *cts])
    pairs = zip(args[lin:], outs, strict=True)
    return [None] * lin + [c if ad.is_undefined_primal(a) else None for a, c in pairs]


def _batch(args, dims, *, node, avals):
    args = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True)]
    dims0 = tuple(None if d is None else 0 for d in dims)
    outs = call(node.batch(dims0), args)
    return outs, [0] * len(outs)


try:  # JAX's caches keyed on a primitive's params hold a node weakly, as they hold a jaxpr
    from jax._src.util import weakref_cache_key_types
except ImportError:  # another JAX: its caches may keep nodes until they are evicted
    pass
else:
    weakref_cache_key_types.update((_bridge.Node, _bridge.Held))

bridge_p.def_impl(_impl)
bridge_p.def_abstract_eval(_abstract)
mlir.register_lowering(bridge_p, mlir.lower_fun(_lower, multiple_results=True))
ad.primitive_jvps[bridge_p] = _jvp
ad.primitive_transposes[bridge_p] = _transpose
batching.primitive_batchers[bridge_p] = _batch
