"""The contract of a backend: what a new backend writes, and the hooks it may override.

A backend is an ``Auto*`` type (``AbstractBackend`` with a ``framework`` name) and an
implementation class registered for it (``core.registry.register``). The implementation
subclasses ``core.backend.BackendImpl`` (the derived operators over this contract) and
writes:

- ``traits``: a :class:`~diffiface.core.traits.Traits` (its name, the framework whose
  arrays it takes, its arrays in messages, its flags);
- ``value_and_pullback(prob, xs, ctx)`` and/or ``value_and_jvp(prob, xs, vs, ctx)``: the
  primitives (``BackendImpl`` derives the missing one);
- the array helpers ``is_native``, ``from_numpy`` and ``default_float`` (the others have
  NumPy defaults: ``is_traced``, ``ones_like``, ``stack``, ``concat``, ``cast``, ...).

It may override, for speed or for its framework's semantics: any derived operator of
``BackendImpl`` (``value_and_gradient``, ``value_and_jacobian``, ``gradient_and_hvp``, the
batched ``value_and_jvps``/``value_and_vjps``), ``runner`` (compiled plans), ``compile``,
``protect``, ``own_output``, ``array_key``, ``settle``, ``open``,
``standin``, ``block``, ``peak_bytes`` and the ``*_unsupported`` hooks.
docs/writing-a-backend.md shows one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .signature import leaf_signature
from .traits import Traits


class Contract:
    """The array helpers and hooks of a backend implementation, with NumPy defaults."""

    traits = Traits("")
    # None, or y -> y as the framework's array, for what f may return that the framework
    # traces but does not hold as one array (autograd: an object array of boxes)
    own_output: Any = None
    # None, or a C-level read of one native array whose equal values mean equal shape and
    # dtype (JAX: its interned aval), compared before them by a runner's match (``Signature``)
    array_key: Any = None

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.mode = getattr(backend, "mode", None)

    @property
    def framework(self) -> str:
        """The backend's name (``traits.framework``)."""
        return self.traits.framework

    # ---- arrays (each backend overrides) ------------------------------------
    def is_native(self, leaf: Any) -> bool:
        raise NotImplementedError

    def is_output(self, y: Any) -> bool:
        return self.is_native(y)

    def is_float(self, leaf: Any) -> bool:
        return np.issubdtype(leaf.dtype, np.floating)

    def from_numpy(self, a: np.ndarray) -> Any:
        """NumPy array (any float dtype) -> native array, zero-copy where possible."""
        raise NotImplementedError

    def default_float(self, value: float) -> Any:
        """Python float -> 0-d native array of the framework's default float dtype."""
        raise NotImplementedError

    def to_numpy(self, a: Any) -> np.ndarray:
        return np.asarray(a)

    def is_traced(self, a: Any) -> bool:
        """True when ``a`` carries an outer differentiation (never converted to NumPy)."""
        return False

    def check_numpy_dtype(self, dtype: np.dtype) -> str | None:
        """A reason why this backend cannot take ``dtype`` without loss, or None."""
        return None

    def cast(self, a: Any, like: Any) -> Any:
        return a.astype(like.dtype)

    def ones_like(self, a: Any) -> Any:
        return np.ones_like(a)

    def basis(self, like: Any, i: int) -> Any:
        e = np.zeros(like.size, dtype=like.dtype)
        e[i] = 1
        return self.from_numpy(e.reshape(like.shape))

    def stack(self, arrays: list, axis: int) -> Any:
        return np.stack(arrays, axis=axis)

    def concat(self, arrays: list, axis: int = 0) -> Any:
        """Arrays joined end to end along ``axis``."""
        return np.concatenate(arrays, axis=axis) if len(arrays) > 1 else arrays[0]

    def leaf_signature(self, a: Any) -> Any:
        """What of a leaf of x or of the contexts decides the structure of f(x) (shape and
        dtype), the same for a value and for the tracer the framework makes of it."""
        return leaf_signature(a)

    def settle(self, tree: Any, result: Any) -> Any:
        """Values f computed inside this backend's own pass (its aux, its value), as the
        caller sees them: they keep what an outer pass tracks and lose the inner pass
        (torch detaches them unless ``result``, the call's result, is attached to an
        outer graph; autograd unboxes the inner levels)."""
        return tree

    def reshape(self, a: Any, shape: tuple) -> Any:
        return a.reshape(shape)

    def open(self, tree: Any) -> Any:
        """``tree`` with containers an outer pass wrapped (autograd boxes) opened."""
        return tree

    def is_complex(self, y: Any) -> bool:
        """y is a complex array (NumPy and JAX dtypes)."""
        return getattr(getattr(y, "dtype", None), "kind", "") == "c"

    def connected(self, xs: tuple, y: Any) -> bool | None:
        """Whether y depends on the differentiated leaves xs (None: cannot tell, as
        for NumPy functions)."""
        return None

    def outer_sees(self, leaves: list) -> bool:
        """True when an outer differentiation of this framework sees one of ``leaves``."""
        return any(self.is_native(a) and self.is_traced(a) for a in leaves)

    def can_run_rule(self, xs: tuple, ctx: tuple) -> bool:
        """False where the outer transform cannot run a custom nested-AD rule."""
        return True

    def no_forward(self, xs: tuple, ctx: tuple) -> str | None:
        """Why these arrays cannot take forward-mode AD (torch's DTensor), or None."""
        return None

    def standin(self, tree: Any) -> Any:
        """``tree`` with concrete arrays of the same shapes and dtypes that no outer
        pass sees, to time the nested-AD strategies on (``FixedParams(strategy="auto")``)."""
        return tree

    def block(self, result: Any) -> Any:
        """``result`` once computed (JAX dispatches asynchronously), for timing."""
        return result

    def peak_bytes(self, fn: Callable, args: tuple) -> int | None:
        """The peak memory ``fn(*args)`` allocates beyond its arguments, or None where
        it cannot be measured (``FixedParams(strategy="min_memory")``): here by
        ``tracemalloc``, which sees NumPy's buffers."""
        import tracemalloc

        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            fn(*args)
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            if started:
                tracemalloc.stop()

    protect = None  # xs -> the leaves f receives, copied where f could change the caller's
    compile = None  # the framework's compiler (jax.jit): a pytree output's split, once

    def runner(self, prob, form: str, combo=None, weak: bool = False):
        """The plan's runner, or None (the general path runs every call).

        ``form``: "array" (``x -> result`` for one native array without contexts),
        "numpy" (the same for a NumPy x, results as NumPy) or "leaves" (``(x leaves,
        context leaves, context values[, tangent leaves]) -> result`` for native pytree
        leaves and Constant contexts; see ``Signature.run``). ``weak``: for an
        unprepared call, a runner that holds ``f`` only weakly (see
        ``core.unprepared``); a backend that gives such runners sets
        ``keeps_plans``. A runner may return SLOW to hand over to the general path."""
        return None

    def code_runner(self, prob, form: str):
        """``runner(f, x, *t)`` serving every function object of f's code (a closure
        made anew per call), kept under the code beside f's own runner; None where the
        backend has none (it then keeps one runner per object)."""
        return None

    def forward_unsupported(self, exc: BaseException) -> bool:
        """``exc`` says that f cannot run under the framework's forward mode (or its
        batching), where the reverse formulation can (a JAX custom_vjp, a torch
        autograd.Function without jvp or vmap support). See ``core.direction``."""
        return False

    def reverse_unsupported(self, exc: BaseException) -> bool:
        """``exc`` says that f cannot run under the framework's reverse mode, where the
        forward formulation can (a JAX lax.while_loop with a traced trip count)."""
        return False
