"""Calling JAX's compiled functions: the one compiled for a problem, NumPy arrays as
jit takes them, and JAX's tracing errors translated into diffiface's."""

from __future__ import annotations

import jax
import numpy as np

from ... import _checks, _config

_CONCRETE = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
)


# the ones like a (a derivative's tangent), made by a compiled program: on a's device,
# with no host-to-device transfer of the 1 (an eager ``jnp.ones_like`` makes one)
ones_like = jax.jit(jax.numpy.ones_like)

TANGENTS = "tangents"  # a memo entry: the number of tangents a Tangents call passed


def only_compiled(prob):
    """(tag, function) of the one function compiled for ``prob`` (keys (tag, static);
    other memo entries, such as the output size, are strings), or None when there are
    none or several."""
    runs = [(key[0], run) for key, run in prob.fns.items() if type(key) is tuple]
    return runs[0] if len(runs) == 1 else None


def dense(a: np.ndarray) -> np.ndarray:
    """``a`` as jit and device_put take it fast: a copy in C order where it is neither C
    nor F contiguous (a broadcast or a strided slice: jax's own copy of one is about 10x
    slower at 1e6 elements, 3.2 ms against 0.34 ms on this CPU). The copy is 64-byte
    aligned, which jax takes without copying again (NumPy aligns to 16 bytes)."""
    if a.flags.forc:
        return a
    size = a.size * a.dtype.itemsize
    raw = np.empty(size + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    out = raw[start : start + size].view(a.dtype).reshape(a.shape)
    np.copyto(out, a)
    return out


ALIGN = 64  # what XLA's CPU client needs to use a host buffer without a copy


def call(prob, run, *args):
    """``run(*args)``, JAX's tracing errors explained; the compiled shapes bounded."""
    try:
        out = run(*args)
    except jax.errors.TracerBoolConversionError as exc:
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(prob.op, prob.backend)}: f branches in Python on a traced "
            "value, which jax.jit cannot compile. Use jnp.where or jax.lax.cond inside f."
        ) from exc
    except _CONCRETE as exc:
        raise _checks.left_framework(prob.op, prob.backend, exc) from exc
    except TypeError as exc:
        if prob.aux and "is not a valid JAX type" in str(exc):
            raise _checks.DiffifaceTypeError(
                f"{_checks.call_form(prob.op, prob.backend)} with has_aux=True: f's aux holds "
                f"a value that is not an array ({str(exc).splitlines()[0]}), and this "
                "operator runs f under jax.vmap (as jax.jacfwd and jax.hessian with "
                "has_aux=True do), whose outputs must be arrays. Keep only arrays in aux."
            ) from exc
        _checks.reraise(prob.op, prob.backend, exc)
    limit = _config.get("max_compiled_shapes")
    size = getattr(run, "_cache_size", None)  # None: run uncompiled (under an outer trace)
    if limit is not None and size is not None and size() > limit:  # one compilation per shape
        run.clear_cache()
    return out
