"""Preparation: do the one-time work once, then check each call cheaply against it.

``prep = di.prepare_gradient(f, backend, x, *contexts)`` converts nothing twice,
looks the backend up once, compiles (JAX) during preparation, and keeps the
compiled functions on the prepared problem; ``di.gradient(f, backend, x,
*contexts, prep=prep)`` then only compares ``x`` and the contexts with the
prepared signature. A prep is immutable after preparation (its compiled-function
memo only fills in for the sibling operator, e.g. value_and_gradient on a
gradient prep) and can be shared between threads.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from .. import _checks
from .._arrays import framework_of, owner
from .._contexts import Constant, FixedParams, unfix
from .._tangents import Tangents
from .._tree import flatten, paths, static_data
from ..nested.route import route
from . import convert as _convert
from . import outputs
from .backend import SLOW
from .operator import FAMILY, OPS, SHAPED_LIKE_F, of_family
from .problem import Problem


class MismatchError(_checks.DiffifaceValueError):
    """The arguments of a prepared call differ from those of the preparation."""


_KINDS: dict = {}


def _kind(leaf: Any) -> str:
    """The array kind of a leaf: a JAX tracer counts as a jax array, an autograd box as
    NumPy, a torch.func wrapper as a tensor, so prepared calls work under transforms."""
    cls = type(leaf)
    kind = _KINDS.get(cls)
    if kind is None:
        fw = owner(leaf)  # a box is autograd's, NumPy's under an outer pass
        if fw is not None and fw.arrays_are_numpy:
            kind = "numpy"
        else:
            kind = framework_of(leaf) or cls.__name__
        _KINDS[cls] = kind
    return kind


def _leaf_sig(leaf: Any) -> tuple:
    """(kind, shape, dtype): compared on every prepared call, so no strings built."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and not isinstance(leaf, type):
        try:
            return (_kind(leaf), tuple(leaf.shape), dtype)
        except TypeError:  # a dtype-like object without a shape
            pass
    return (_kind(leaf),)


def _tree_sig(tree: Any) -> tuple:
    leaves, treedef = flatten(tree)
    return treedef, tuple(_leaf_sig(v) for v in leaves)


def _ctx_sig(contexts: tuple) -> tuple:
    return tuple(
        ("Constant", _tree_sig(c.value)) if isinstance(c, Constant) else (type(c),)
        for c in contexts
    )


def _tangent_sig(t: Any) -> Any:
    if t is None:
        return None
    if isinstance(t, Tangents):
        return ("Tangents", tuple(_tree_sig(v) for v in t))
    return ("one", _tree_sig(t))


class Prep:
    """The result of a ``prepare_<operator>`` call; pass it as ``prep=`` to the operator."""

    __slots__ = (
        "_ctx_native",
        "_ctx_sig",
        "_direct",
        "_fast",
        "_kinds",
        "_leaves",
        "_many",
        "_probs",
        "_t_sig",
        "_x_native",
        "_x_sig",
        "aux",
        "backend",
        "combo",
        "f",
        "family",
        "impl",
        "nested",
    )

    def __init__(self, family, f, backend, impl, combo, prob, x, kinds, contexts, t):
        self.family, self.f, self.backend, self.impl, self.combo = family, f, backend, impl, combo
        self.aux = prob.aux  # f returns (out, aux): every call takes has_aux=True
        self.nested = None  # FixedParams "auto"/"min_memory": the strategy chosen for it
        f, contexts, _ = unfix(f, contexts)  # FixedParams: its parameters are a context
        self._kinds = kinds
        self._x_sig = _tree_sig(x)
        self._ctx_sig = _ctx_sig(contexts)
        self._t_sig = _tangent_sig(t)
        self._many = len(self._t_sig[1]) if _is_many(self._t_sig) else 0  # Tangents of k
        ops = of_family(family)
        self._probs = {
            op: Problem(op, backend, impl, f, prob.treedef, prob.single, prob.scalar, prob.aux)
            for op in ops
        }
        for p in self._probs.values():
            p.prepared = True
        # one native or NumPy array: the per-call check is a type, shape and dtype comparison
        self._fast = fast_sig(x) if prob.single and kinds[0] in (0, 1) else None
        # native leaves (of x, of the Constant contexts): compared as one list, no conversion
        self._x_native = native_sig(impl, x) if all(k == 0 for k in kinds) else None
        self._ctx_native = (
            native_sig(impl, tuple(c.value for c in contexts))
            if contexts and all(type(c) is Constant for c in contexts)
            else None
        )
        self._direct: dict = {}  # op -> runner(x, *t), one native or NumPy array
        self._leaves: dict = {}  # op -> runner(x leaves, context leaves), native pytrees

    def finalize(self, x: Any = None) -> Prep:
        """Build the direct runners (after the warm-up call ``prepare`` made at ``x``
        compiled what they use); none for an f with aux; for a pytree output, the
        runners of one native array on a backend that compiles (see ``tree_runner``)."""
        f = unfix(self.f, ())[0]
        if self.aux:
            return self
        numpy = self._kinds[0] == _convert.NUMPY
        tree = outputs.returns_tree(f)
        if tree and (numpy or type(self.f) is FixedParams or _is_many(self._t_sig)):
            return self
        if self._fast is not None and not self._ctx_sig:  # (a runner checks its tangents)
            for op, prob in self._probs.items():
                run = self.impl.runner(prob, "numpy" if numpy else ARRAY, self.combo)
                if tree:
                    run = tree_runner(self.impl, f, op, x, run)
                if run is not None:
                    self._direct[op] = run
        elif tree:
            return self
        elif (
            (self._fast is None or self._ctx_sig)
            and self._x_native is not None
            and (self._ctx_native is not None or not self._ctx_sig)
            and self._t_sig is None
            and type(self.f) is not FixedParams
        ):  # native pytree leaves and Constant contexts: runners on the flat leaves
            for op, prob in self._probs.items():
                run = self.impl.runner(prob, LEAVES)
                if run is not None:
                    self._leaves[op] = run
        return self

    def problem(self, op: str) -> Problem:
        """The plan's problem for ``op`` (its compiled functions, once it ran)."""
        return self._probs[op]

    def run_direct(self, op: str, f: Callable, backend: Any, x: Any, contexts: tuple, *t):
        """The result of a call that matches exactly, by the plan's runner, else SLOW
        (the general path runs: it converts, routes, or raises the mismatch)."""
        run = self._direct.get(op)
        if run is None:
            run = self._leaves.get(op)
            if run is None:
                return SLOW
            form, x_sig, c_sig = LEAVES, self._x_native, self._ctx_native
        else:  # one array: run_form's check, inline (it runs on every call)
            fast = self._fast
            if contexts or type(x) is not fast[0] or x.shape != fast[1] or x.dtype != fast[2]:
                return SLOW
            form, x_sig, c_sig = None, None, None
        if f is not self.f and not _same_f(f, self.f):
            return SLOW
        if backend is not self.backend and backend != self.backend:
            return SLOW
        if t and (len(t[0]) if type(t[0]) is Tangents else 0) != self._many:  # (k tangents)
            return SLOW
        return run(x, *t) if form is None else run_form(form, run, x_sig, c_sig, x, contexts, t)

    def __repr__(self) -> str:
        nested = "" if self.nested is None else f"; nested: {self.nested}"
        return f"<diffiface prep for {self.family}(f, {self.backend!r}, x){nested}>"

    def enter(self, op: str, f: Callable, backend: Any, x: Any, contexts: tuple, t: Any):
        """(impl, prob, xs, kinds, ctx) for a call that matches this preparation."""
        fast = self._fast
        if (
            FAMILY.get(op) != self.family
            or not _same_f(f, self.f)
            or (backend is not self.backend and backend != self.backend)
        ):
            raise self._mismatch(op, f, backend, x, contexts, t)
        if (
            fast is not None
            and self._kinds[0] == _convert.NATIVE
            and type(x) is fast[0]
            and x.shape == fast[1]
            and x.dtype == fast[2]
        ):
            xs, kinds = (x,), self._kinds
        elif (xs := _matches_native(x, self._x_native)) is not None:
            kinds = self._kinds
        else:
            leaves, tree = flatten(self.impl.open(x))
            if (tree, tuple(_leaf_sig(v) for v in leaves)) != self._x_sig:
                raise self._mismatch(op, f, backend, x, contexts, t)
            xs, kinds = _convert.point(op, self.impl, leaves, tree)
        given = contexts
        _, contexts, fixed = unfix(f, contexts)
        if self._t_sig is not None and isinstance(t, Tangents) != (self._t_sig[0] == "Tangents"):
            raise self._mismatch(op, f, backend, x, contexts, t)
        if isinstance(t, Tangents) and len(t) != len(self._t_sig[1]):
            raise self._mismatch(op, f, backend, x, contexts, t)
        if not contexts and not self._ctx_sig:
            ctx = ()
        elif (got := _constant_leaves(contexts, self._ctx_native)) is not None:
            ctx = got[1]  # native leaves with the prepared signature: nothing to convert
        else:
            if _ctx_sig(contexts) != self._ctx_sig:
                raise self._mismatch(op, f, backend, x, given, t)
            ctx = _convert.contexts(op, self.impl, contexts)
        if fixed is not None:
            impl = route(self.impl, fixed, op, xs, ctx, self.aux, self._probs[op].single)
        else:
            impl = self.impl
        return impl, self._probs[op], xs, kinds, ctx

    def _mismatch(self, op, f, backend, x, contexts, t) -> MismatchError:
        rows = []

        def row(name, ok, got, want):
            rows.append(
                f"  {name:<10} {'ok' if ok else 'MISMATCH'}: "
                + (f"{got}" if ok else f"got {got}, prepared {want}")
            )

        row("operator", FAMILY.get(op) == self.family, op, f"the {self.family} family")
        same = _same_f(f, self.f)
        other = not same and _name(f) == _name(self.f)
        row("f", same, _name(f) + (" (another object)" if other else ""), _name(self.f))
        row("backend", backend == self.backend, repr(backend), repr(self.backend))
        got_x, want_x = _tree_sig(x), self._x_sig
        row("x", got_x == want_x, *_described(got_x, want_x, _describe_tree))
        got_c = _ctx_sig(unfix(f, contexts)[1])
        row("contexts", got_c == self._ctx_sig, *_described(got_c, self._ctx_sig, _describe_ctx))
        if self._t_sig is not None:
            got_t = _tangent_sig(t)
            same = (
                got_t is not None
                and got_t[0] == self._t_sig[0]
                and len(got_t[1]) == len(self._t_sig[1])
            )
            row("tangent", same, _describe_t(got_t), _describe_t(self._t_sig))
        return MismatchError(
            f"{op}(f, {backend!r}, x, prep=prep): the arguments do not match the "
            "preparation:\n" + "\n".join(rows) + f"\nPrepare again with "
            f"prepare_{FAMILY.get(op, op)}(...) for these arguments, or call {op} without prep."
        )


ARRAY, LEAVES = "array", "leaves"  # the forms of a runner (see BackendImpl.runner)


def fast_sig(x: Any) -> tuple:
    """(type, shape, dtype) of one array: compared on every call, no strings built."""
    return (type(x), tuple(x.shape), x.dtype)


def run_form(form: str, run: Callable, x_sig, c_sig, x: Any, contexts: tuple, t: tuple):
    """``run`` on this call when x and the contexts match the runner's signature, else
    SLOW: one array ("array" and "numpy": ``x_sig`` from :func:`fast_sig`, no contexts)
    or native leaves ("leaves": ``x_sig``, ``c_sig`` from :func:`native_sig`)."""
    if form == LEAVES:
        got = leaves_of(x, contexts, x_sig, c_sig)
        return SLOW if got is None else run(*got)
    if contexts or type(x) is not x_sig[0] or x.shape != x_sig[1] or x.dtype != x_sig[2]:
        return SLOW
    return run(x, *t)


def tree_runner(impl: Any, f: Callable, op: str, x: Any, run: Callable | None):
    """``run`` (a runner at one native array x) with the parts of its results shaped like
    f(x) split as f's pytree output, or None. Only for a backend that compiles: the
    compiled function fixed the output's structure when it traced f, and the layout
    recorded then holds for every call of the runner's signature."""
    if run is None or impl.compile is None or OPS[op].tangent == "w":
        return None  # (a cotangent like f's pytree output: the general path ravels it)
    sig = outputs.signature((x,), (), False, impl.leaf_signature, op)
    layout = outputs.layout_of(f, sig)
    if layout is None or layout is outputs.MISSING:
        return None
    shaped = tuple(part in SHAPED_LIKE_F for part in OPS[op].returns)
    split = layout.split
    if len(shaped) == 1:

        def one(*args):
            out = run(*args)
            return out if out is SLOW else split(impl, out)

        return one

    def several(*args):
        out = run(*args)
        if out is SLOW:
            return out
        return tuple(split(impl, o) if s else o for o, s in zip(out, shaped, strict=True))

    return several


def native_sig(impl: Any, tree: Any):
    """(flatten, treedef, [(type, shape, dtype)]) when every leaf is a native array,
    else None. ``flatten`` is the backend's faster one (``jax.tree_util``) where it
    gives the same leaves in the same order as diffiface's."""
    leaves, treedef = flatten(tree)
    if not all(impl.is_native(v) and not impl.is_traced(v) for v in leaves):
        return None
    fast = impl.flatten_fast
    if fast is not None:
        other, other_def = fast(tree)
        if len(other) == len(leaves) and all(a is b for a, b in zip(other, leaves, strict=True)):
            return fast, other_def, [(type(v), v.shape, v.dtype) for v in leaves]
    return flatten, treedef, [(type(v), v.shape, v.dtype) for v in leaves]


def _matches_native(tree: Any, sig: Any) -> tuple | None:
    """The leaves of ``tree`` when they match ``sig`` (from ``_native_sig``), else None."""
    if sig is None:
        return None
    leaves, treedef = sig[0](tree)
    if treedef != sig[1] or [(type(v), v.shape, v.dtype) for v in leaves] != sig[2]:
        return None
    return tuple(leaves)


def _constant_leaves(contexts: tuple, sig: Any) -> tuple | None:
    """(leaves, values) of Constant contexts that match ``sig``, else None."""
    if sig is None or any(type(c) is not Constant for c in contexts):
        return None
    values = tuple(c.value for c in contexts)
    leaves = _matches_native(values, sig)
    return None if leaves is None else (leaves, values)


def leaves_of(x: Any, contexts: tuple, x_sig: Any, c_sig: Any) -> tuple | None:
    """(x leaves, context leaves, context values) when x and the contexts match the
    native signatures (``c_sig`` None: no contexts), else None."""
    xs = _matches_native(x, x_sig)
    if xs is None:
        return None
    if c_sig is None:
        return None if contexts else (xs, (), ())
    got = _constant_leaves(contexts, c_sig)
    return None if got is None else (xs, *got)


def _same_f(f: Any, g: Any) -> bool:
    """The same function; a bound method is the same when its function and instance are
    (each attribute access makes a new method object); a FixedParams when its function
    and strategy are (its parameters are compared as a context)."""
    if f is g:
        return True
    if type(f) is FixedParams and type(g) is FixedParams:
        return f.strategy == g.strategy and _same_f(f.f, g.f)
    return (
        isinstance(f, types.MethodType)
        and isinstance(g, types.MethodType)
        and f.__func__ is g.__func__
        and f.__self__ is g.__self__
    )


def _name(f: Any) -> str:
    if type(f) is FixedParams:
        return f"FixedParams({_name(f.f)}, strategy={f.strategy!r})"
    return getattr(f, "__qualname__", None) or type(f).__name__


def _describe_tree(sig: tuple) -> str:
    treedef, leaves = sig
    parts = []
    for path, leaf in zip(paths(treedef), leaves, strict=True):
        shape = str(leaf[1]) if len(leaf) > 1 else ""
        kind = f"{leaf[0]} {_checks.dtype_name(leaf[2])}" if len(leaf) > 2 else leaf[0]
        where = f"{path} " if path != "x" else ""
        parts.append(f"{where}{shape} {kind}".strip())
    return ", ".join(p.strip() for p in parts) or "empty"


def _described(got: tuple, want: tuple, describe: Callable) -> tuple[str, str]:
    """The descriptions of two signatures; where they read the same but differ, with
    the first static data (of a registered pytree node) that differs."""
    a, b = describe(got), describe(want)
    if a == b and got != want:
        for s, t in zip(_static(got), _static(want), strict=False):
            if s != t:
                return f"{a}, static data {s[0]} {s[1]!r}", f"{b}, static data {t[0]} {t[1]!r}"
    return a, b


def _static(sig: tuple) -> list:
    """(node type name, static data) of the custom nodes of a tree or context signature."""
    if sig and not isinstance(sig[0], tuple):  # a tree signature: (treedef, leaves)
        return static_data(sig[0])
    return [s for c in sig if len(c) > 1 for s in static_data(c[1][0])]


def _describe_ctx(sig: tuple) -> str:
    return f"{len(sig)} context(s)" + (
        ": " + "; ".join(_describe_tree(c[1]) if len(c) > 1 else c[0].__name__ for c in sig)
        if sig
        else ""
    )


def _describe_t(sig: Any) -> str:
    if sig is None:
        return "none"
    kind, body = sig
    return f"Tangents of {len(body)}" if kind == "Tangents" else "one tangent"


def _is_many(t_sig: Any) -> bool:
    return t_sig is not None and t_sig[0] == "Tangents"
