"""What f returns besides one array: auxiliary outputs and pytree outputs.

**Auxiliary outputs** (``has_aux=True``: f returns ``(out, aux)``). The function a
backend differentiates (``Problem.flat``) returns ``out`` and hands ``aux`` to
:func:`put`, which keeps it in the innermost open sink (a thread's stack of them).
The shell opens the outermost sink around the call and returns what it holds. A
framework transform that traces f (``jax.vjp``, ``torch.func.jvp``, ...) must not let
its own tracers escape in ``aux``: backends call such transforms through
:func:`values`, :func:`function` and :func:`mapped`, which open a sink inside the
transform and carry its content out through the transform's own ``has_aux`` (so the
framework lowers it one level), then put it in the enclosing sink. With no sink open
(a call without aux) they are the transform itself.

**Pytree outputs** (jvp, vjp, jacobian, batched_jacobian). ``Problem.flat`` ravels
f's output leaves into one vector (per sample for batched_jacobian), which every
backend differentiates as it would one array, and records the :class:`Layout`: the
leaves' structure, shapes and dtypes. The record is kept per f and per signature of
the arguments (shapes, dtypes, static values), because a compiled function does not
run f again on later calls. Results are split back with ``Layout.split``.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks
from .._arrays import foreign_dtype
from .._cache import FunctionCache
from .._tree import flatten, unflatten
from .operator import names
from .signature import entered, leaf_signature


# ---- auxiliary outputs ------------------------------------------------------------
class _Local(threading.local):
    """Per thread: its stack of open sinks (made at the thread's first use)."""

    def __init__(self) -> None:
        self.stack: list = []


LOCAL = _Local()


class Sink:
    """The aux of the first call of f made while it is open: f at x itself (finite
    differences evaluate f at x before any perturbed point; a transform calls f once).
    Opened by ``with``, or (the shell, on every call with aux) by pushing it on
    ``LOCAL.stack`` and popping it after."""

    box: tuple = ()  # () before any call of f, then (aux,) (set on the instance)

    def __enter__(self) -> Sink:
        LOCAL.stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        LOCAL.stack.pop()

    @property
    def aux(self) -> Any:
        return self.box[0] if self.box else None


def active() -> bool:
    """A sink is open: transforms carry aux out."""
    return bool(LOCAL.stack)


def put(aux: Any) -> None:
    stack = LOCAL.stack
    if stack and not stack[-1].box:
        stack[-1].box = (aux,)


def restore(box: tuple) -> None:
    """Put back what a transform carried out (nothing when f did not run inside it)."""
    stack = LOCAL.stack
    if box and stack and not stack[-1].box:
        stack[-1].box = tuple(box)


def capture(fn: Callable) -> Callable:
    """``fn`` returning ``(its output, the box of aux its calls of f put)``."""

    def run(*args: Any, **kwargs: Any) -> tuple:
        with Sink() as sink:
            out = fn(*args, **kwargs)
        return out, sink.box

    return run


def discard(fn: Callable) -> Callable:
    """``fn`` whose calls of f put nothing (a trace for shapes only: its tracers must
    not reach the sink)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with Sink():
            return fn(*args, **kwargs)

    return run


def values(transform: Callable, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``transform(fn, *args)`` for a transform returning values (``jax.vjp``,
    ``jax.jvp``, ``jax.linearize``, ``torch.func.jvp``, ...), fn's aux carried out."""
    if not active():
        return transform(fn, *args, **kwargs)
    *out, box = transform(capture(fn), *args, has_aux=True, **kwargs)
    restore(box)
    return tuple(out)


def function(transform: Callable, fn: Callable, own_aux: bool = False, **kwargs: Any) -> Callable:
    """``transform(fn)`` for a transform returning a function (``jax.grad``,
    ``jax.jacfwd``, ``torch.func.jacrev``, ...), fn's aux carried out of each call.
    ``own_aux``: fn returns ``(out, its own aux)`` and the result is ``(result, its aux)``."""
    if not active():
        return transform(fn, has_aux=True, **kwargs) if own_aux else transform(fn, **kwargs)
    if own_aux:

        def inner(*args: Any) -> tuple:
            (out, mine), box = capture(fn)(*args)
            return out, (mine, box)

    else:
        inner = capture(fn)
    lifted = transform(inner, has_aux=True, **kwargs)

    def run(*args: Any) -> Any:
        out, extra = lifted(*args)
        if own_aux:
            mine, box = extra
            restore(box)
            return out, mine
        restore(extra)
        return out

    return run


def mapped(vmap: Callable, fn: Callable, axes: str, out: Any = 0, **kwargs: Any) -> Callable:
    """``vmap(fn, **{axes: out})`` (``axes``: "out_axes" for JAX, "out_dims" for torch),
    fn's aux carried out unbatched (it comes from the primal point, never a tangent)."""
    if not active():
        return vmap(fn, **{axes: out}, **kwargs)
    lifted = vmap(capture(fn), **{axes: (out, None)}, **kwargs)

    def run(*args: Any) -> Any:
        result, box = lifted(*args)
        restore(box)
        return result

    return run


def pair(op: str, backend: Any, y: Any) -> tuple:
    """f's ``(out, aux)``, checked."""
    if type(y) is not tuple or len(y) != 2:
        got = f"a {type(y).__name__}" + (f" of length {len(y)}" if type(y) is tuple else "")
        if hasattr(y, "shape") and hasattr(y, "dtype"):  # (a tracer or a box: f's output)
            got = f"one array of shape {tuple(y.shape)}"
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(op, backend)} with has_aux=True: f must return a pair "
            f"(output, aux), got {got}. Return (out, aux), or drop has_aux=True."
        )
    return y


def unpack(op: str, backend: Any, y: Any) -> Any:
    """``out`` of f's ``(out, aux)``, its aux put in the open sink."""
    out, aux = pair(op, backend, y)
    put(aux)
    return out


class ValueAsAux:
    """``f`` returning ``(f(x), f(x))`` (``(out, (out, aux))`` for an f with aux); it holds
    f weakly."""

    __slots__ = ("__weakref__", "aux", "backend", "fget", "op")

    def __init__(self, fget, aux: bool, backend, op: str) -> None:
        self.fget, self.aux, self.backend, self.op = fget, aux, backend, op

    def __call__(self, x, *ctx):
        out = self.fget()(x, *ctx)
        if self.aux:
            out = pair(self.op, self.backend, out)
            return out[0], out
        return out, out


# ---- pytree outputs ---------------------------------------------------------------
TREE_OPS = names(tree_output=True)  # the operators whose f may return a pytree
# f -> {signature of the arguments: Layout}; not dropped by clear_caches, since a prepared
# problem keeps its compiled function (which never runs f again) through it
_LAYOUTS = FunctionCache(per_function=1, functions=1 << 16, clear=False)
_PER_FUNCTION = 64  # signatures kept per f (the oldest dropped: then traced anew)
_RECORDING = threading.Lock()


class Layout:
    """Where each leaf of a pytree output lies in the raveled vector (``axis``: 1 for
    per-sample outputs of batched_jacobian, whose first axis is the batch)."""

    __slots__ = ("axis", "compiled", "dtypes", "shapes", "sizes", "treedef")

    def __init__(self, treedef: Any, leaves: list, axis: int) -> None:
        self.treedef, self.axis = treedef, axis
        self.compiled: dict = {}  # impl -> the split compiled (a framework that compiles)
        self.shapes = [tuple(a.shape) for a in leaves]
        self.dtypes = [a.dtype for a in leaves]
        self.sizes = [math.prod(s[axis:]) for s in self.shapes]

    def same_structure(self, other: Layout) -> bool:
        """The same leaves in the same shapes (dtypes are the backend's to check)."""
        return (self.treedef, self.shapes) == (other.treedef, other.shapes)

    def split(self, impl: Any, a: Any) -> Any:
        """A raveled result (the flat axis at ``axis``, any trailing axes after it) as a
        pytree like f(x): each piece reshaped and cast back to its leaf's dtype."""
        if a is None:
            return None
        if impl.compile is not None:  # one compiled call, not two dispatches per leaf
            run = self.compiled.get(impl)
            if run is None:
                run = self.compiled[impl] = impl.compile(functools.partial(self.pieces, impl))
            return run(a)
        return self.pieces(impl, a)

    def pieces(self, impl: Any, a: Any) -> Any:
        """``split`` as the framework's operations (see ``split``)."""
        lead, trail = tuple(a.shape[: self.axis]), tuple(a.shape[self.axis + 1 :])
        pieces, start = [], 0
        for shape, dtype, n in zip(self.shapes, self.dtypes, self.sizes, strict=True):
            index = (slice(None),) * self.axis + (slice(start, start + n),)
            piece = impl.reshape(a[index], (*lead, *shape[self.axis :], *trail))
            pieces.append(cast(piece, dtype))
            start += n
        return unflatten(self.treedef, pieces)

    def ravel(self, impl: Any, leaves: list) -> Any:
        """The leaves as one vector (one row per sample for ``axis`` 1)."""
        if self.axis == 0:
            return impl.concat([impl.reshape(a, (-1,)) for a in leaves])
        b = self.shapes[0][0] if self.shapes else 0
        return impl.concat([impl.reshape(a, (b, -1)) for a in leaves], axis=1)

    def describe(self) -> str:
        return _describe(self.treedef, self.shapes)


def _describe(treedef: Any, shapes: list) -> str:
    return f"{treedef} with shapes {shapes}"


def cast(a: Any, dtype: Any) -> Any:
    """``a`` as ``dtype`` (NumPy, JAX, autograd and torch arrays; a torch dtype names the
    NumPy one for a result already converted back to NumPy)."""
    have, want = str(a.dtype).rsplit(".", 1)[-1], str(dtype).rsplit(".", 1)[-1]
    if have == want:
        return a
    if hasattr(a, "astype"):
        return a.astype(want if foreign_dtype(dtype) else dtype)
    return a.to(dtype)


def ravel_output(
    op: str,
    backend: Any,
    impl: Any,
    f: Callable,
    check: Callable,
    y: Any,
    xs: tuple,
    ctx: tuple,
    aux: bool = False,
) -> Any:
    """f(x) as the vector a backend differentiates, its Layout recorded; ``y`` as it is
    when it is one array (or not a pytree of arrays: the output check explains).
    ``aux``: y is the ``out`` of f's ``(out, aux)`` (the same f called without has_aux
    returns the whole pair, which has its own Layout)."""
    leaves, tree = flatten(y)
    if not leaves or (len(leaves) == 1 and leaves[0] is y):
        return y  # not a pytree of arrays: the output check explains
    for a in leaves:
        check(a)  # each leaf: an array of the framework, not integers
    leaves = [a if hasattr(a, "shape") else np.asarray(a) for a in leaves]  # (a number)
    kinds = {"c" if "complex" in str(a.dtype) else "f" for a in leaves}
    if len(kinds) > 1:
        raise _checks.DiffifaceTypeError(
            f"{_checks.call_form(op, backend)}: f returns a pytree mixing real and "
            "complex leaves. Return them in separate calls, or make the real ones complex."
        )
    layout = Layout(tree, leaves, 1 if "batched" in op else 0)
    record(f, signature(xs, ctx, aux, impl.leaf_signature, op), layout)
    return layout.ravel(impl, leaves)


SEEN = [False]  # no f has returned a pytree yet: nothing to look up


def record(f: Callable, sig: Any, layout: Layout | None) -> None:
    """f's output for arguments of signature ``sig`` is ``layout`` (None: one array). An f
    that cannot be weakly referenced is never cached anywhere: it ran in this very call,
    so the record of its last call on this thread serves."""
    SEEN[0] = True
    with _RECORDING:
        table = _LAYOUTS.peek(f, "layouts")
        if table is None:
            table = {}
            _LAYOUTS.put(f, "layouts", table)
            if _LAYOUTS.peek(f, "layouts") is None:  # not weakly referenceable
                LOCAL.last = (f, sig, layout)
                return
        table[sig] = layout
        if len(table) > _PER_FUNCTION:
            del table[next(iter(table))]


def layout_of(f: Callable, sig: Any) -> Layout | None:
    """The Layout f's output had for arguments of signature ``sig``, None (one array), or
    MISSING (f has not run for them since it first returned a pytree)."""
    table = _LAYOUTS.peek(f, "layouts")
    if table is None:
        last = getattr(LOCAL, "last", None)
        if last is not None and last[0] is f:
            return last[2] if last[1] == sig else MISSING
        return None
    return table.get(sig, MISSING)


MISSING = object()  # no record: f last ran (was compiled) before any pytree was seen


def layouts(f: Callable) -> dict:
    """Every Layout recorded for ``f``, by signature (a copy; empty when none)."""
    return dict(_LAYOUTS.peek(f, "layouts") or {})


def returns_tree(f: Callable) -> bool:
    if not SEEN[0]:
        return False
    if _LAYOUTS.peek(f, "layouts"):
        return True
    last = getattr(LOCAL, "last", None)
    return last is not None and last[0] is f


def signature(
    xs: tuple, ctx: tuple, aux: bool = False, leaf: Callable | None = None, op: str = ""
) -> tuple:
    """What decides the structure of f(x) and its layout: shapes and dtypes of the arrays,
    other values as they are (their type where they cannot be hashed), has_aux, and the
    operator's axis (batched_jacobian ravels per sample). ``leaf``: the backend's
    ``leaf_signature``, the same for a value and for its tracer (JAX traces a float)."""
    return (*entered(leaf or leaf_signature, xs, ctx), bool(aux), "batched" in op)
