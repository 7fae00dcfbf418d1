"""The one signature of a call: what a plan depends on in its arguments.

A :class:`Signature` holds x's tree and leaves, the contexts' and the tangent's, each
leaf by one rule (:func:`leaf`): an array by its kind, shape and dtype, anything else by
its kind. Preparations and the plans kept for unprepared calls compare a call with it:
:meth:`Signature.run` is a runner's cheap check (one array: type, shape and dtype;
native leaves: one flatten and one list comparison), ``==`` the full comparison, and
:func:`rows` the mismatch report.

Tables keyed on the *entered* arguments (converted to the backend's arrays, or its
tracers) use :func:`entered`: output layouts, the nested choice, sparse plans. Its leaf
rule is the backend's ``leaf_signature``, the same for a value and for its tracer.
"""

from __future__ import annotations

import operator
from typing import Any

from .._arrays import framework_of, owner
from .._checks import dtype_name
from .._contexts import Constant
from .._tangents import Tangents
from .._tree import flatten, paths, static_data
from . import convert

SLOW = object()  # returned by a runner that must hand over to the general path
# how a runner takes x (BackendImpl.runner): one array of the framework, one NumPy array,
# one Python float, or native pytree leaves
ARRAY, NUMPY, PYTHON, LEAVES = "array", "numpy", "python", "leaves"
_FORMS = {convert.NATIVE: ARRAY, convert.NUMPY: NUMPY, convert.PYTHON: PYTHON}

_KINDS: dict = {}


def kind(a: Any) -> str:
    """The array kind of a leaf: a JAX tracer counts as a jax array, an autograd box as
    NumPy, a torch.func wrapper as a tensor, so prepared calls work under transforms."""
    cls = type(a)
    got = _KINDS.get(cls)
    if got is None:
        fw = owner(a)  # a box is autograd's, NumPy's under an outer pass
        got = "numpy" if fw is not None and fw.arrays_are_numpy else framework_of(a)
        got = got or cls.__name__
        _KINDS[cls] = got
    return got


def leaf(a: Any) -> tuple:
    """(kind, shape, dtype) of an array, (kind,) of anything else: no strings built."""
    dtype = getattr(a, "dtype", None)
    if dtype is not None and not isinstance(a, type):
        try:
            return (kind(a), tuple(a.shape), dtype)
        except TypeError:  # a dtype-like object without a shape
            pass
    return (kind(a),)


def tree(t: Any) -> tuple:
    """(treedef, leaf signatures) of a pytree."""
    leaves, treedef = flatten(t)
    return treedef, tuple(leaf(v) for v in leaves)


def contexts(cs: tuple) -> tuple:
    """A Constant by its value's tree, any other context by its type."""
    return tuple(("Constant", tree(c.value)) if isinstance(c, Constant) else (type(c),) for c in cs)


def tangent(t: Any) -> tuple | None:
    if t is None:
        return None
    if isinstance(t, Tangents):
        return ("Tangents", tuple(tree(v) for v in t))
    return ("one", tree(t))


_FLOAT = (float, (), None, None, None)  # ``one`` of a Python float: its type alone


def one(x: Any, key: Any = None) -> tuple:
    """(type, shape, dtype, key read, key) of one array, compared on every call: the key
    first (``key``: the backend's ``array_key``, else shape and dtype read at once), then,
    where it differs, shape and dtype."""
    key = key or _SHAPE_DTYPE
    return (type(x), tuple(x.shape), x.dtype, key, key(x))


_SHAPE_DTYPE = operator.attrgetter("shape", "dtype")


class Signature:
    """x, the contexts and the tangent of a call, with the forms a runner checks.

    ``x``, ``ctx`` and ``t`` compare calls (:func:`tree`, :func:`contexts`,
    :func:`tangent`); ``kind`` is the form of x where it is one leaf (``single``) and
    ``one`` what a call's one array is matched by (:func:`one`; a Python float: its type
    only); ``x_native``,
    ``c_native`` and ``t_native`` are the native-leaf forms of x, of Constant contexts
    and of the tangent (of a Tangents: of its tuple of tangents) (see :func:`native`),
    None where a leaf is not a native array (``xt_native``: of x and one tangent
    together, matched by one flatten, and x's number of leaves); ``as_is``: a runner
    of one array takes the tangent as it came (one of x's type, a Tangents of them, or
    native leaves).
    """

    __slots__ = (
        "as_is",
        "c_native",
        "count",
        "ctx",
        "kind",
        "many",
        "one",
        "t",
        "t_native",
        "x",
        "x_native",
        "xt_native",
    )

    def __init__(self, impl: Any, x: Any, kinds: tuple, cs: tuple, t: Any, single: bool):
        self.x, self.ctx, self.t = tree(x), contexts(cs), tangent(t)
        self.many = isinstance(t, Tangents)
        self.count = len(t) if self.many else 0  # k of a Tangents of k
        self.kind = _FORMS.get(kinds[0]) if single and kinds else None  # x is one leaf
        arrays = self.kind in (ARRAY, NUMPY)
        key = impl.array_key if self.kind == ARRAY else None
        self.one = one(x, key) if arrays else _FLOAT if self.kind == PYTHON else None
        # (one leaf without contexts: ``one`` says all, and native() flattens twice)
        natives = (self.kind is None or cs) and all(k == convert.NATIVE for k in kinds)
        self.x_native = native(impl, x) if natives else None
        constants = cs and all(type(c) is Constant for c in cs)
        self.c_native = native(impl, tuple(c.value for c in cs)) if constants else None
        self.t_native, self.as_is = None, True
        if t is not None:
            ts = t._values if self.many else (t,)
            if self.kind is None or cs or any(type(v) is not type(x) for v in ts):
                self.t_native = native(impl, ts if self.many else t)
            self.as_is = all(type(v) is type(x) for v in ts) or self.t_native is not None
        # (x and one tangent of native leaves, no contexts: matched by one flatten)
        self.xt_native = None
        if self.x_native is not None and self.t_native is not None and not cs and not self.many:
            self.xt_native = (native(impl, (x, t)), len(self.x_native[2]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signature):
            return NotImplemented
        return (self.x, self.ctx, self.t) == (other.x, other.ctx, other.t)

    def __hash__(self) -> int:
        return hash((self.x, self.ctx, self.t))

    def form(self) -> str | None:
        """How a runner takes calls like this one: one array or float (ARRAY, NUMPY,
        PYTHON) without contexts, with its tangent as it came; native leaves (LEAVES)
        with native Constant contexts and a tangent of native leaves, which the runner
        takes as its leaves (see :meth:`run`); None: no runner."""
        if self.kind is not None and not self.ctx:
            return self.kind if self.as_is else None
        if self.x_native is not None and (self.c_native is not None or not self.ctx):
            return LEAVES if self.t is None or self.t_native is not None else None
        return None

    def run(self, form: str, run: Any, x: Any, cs: tuple, t: tuple) -> Any:
        """``run`` on this call when x, the contexts and (LEAVES) the tangent match, else
        SLOW (``t``: ``(tangent,)`` or ``()``). A LEAVES runner takes ``(x leaves,
        context leaves, context values)``, and the tangent's leaves after them (a
        Tangents of k: a tuple of k such tuples)."""
        if form == LEAVES:
            if t and not cs and self.xt_native is not None:
                both = matches_native((x, t[0]), self.xt_native[0])
                k = self.xt_native[1]
                return SLOW if both is None else run(both[:k], (), (), both[k:])
            got = leaves_of(x, cs, self.x_native, self.c_native)
            if got is None:
                return SLOW
            if not t:
                return run(*got)
            ts = self.tangent_leaves(t[0])
            return SLOW if ts is None else run(*got, ts)
        if form == PYTHON:  # a Python float: never its value (the runner checks the dtype)
            return SLOW if cs or type(x) is not float else run(x, *t)
        s = self.one
        if cs or type(x) is not s[0] or (s[3](x) != s[4] and (x.shape != s[1] or x.dtype != s[2])):
            return SLOW
        return run(x, *t) if t else run(x)

    def tangent_leaves(self, t: Any) -> tuple | None:
        """The leaves of a tangent that matches ``t_native`` (of a Tangents of k: k tuples
        of leaves), else None."""
        if not self.many:
            return matches_native(t, self.t_native)
        k = self.count
        if type(t) is not Tangents or len(t) != k:
            return None
        leaves = matches_native(t._values, self.t_native)
        if leaves is None:
            return None
        n = len(leaves) // k
        return tuple(leaves[i * n : (i + 1) * n] for i in range(k))

    def takes(self, t: Any) -> bool:
        """Whether a tangent has this signature's count (one, or Tangents of as many)."""
        if self.t is None or isinstance(t, Tangents) != self.many:
            return False
        return not self.many or len(t) == len(self.t[1])


def native(impl: Any, t: Any) -> tuple | None:
    """(flatten, treedef, [(type, shape, dtype)]) when every leaf is a native array,
    else None. ``flatten`` is the backend's faster one (``jax.tree_util``) where it gives
    the same leaves in the same order as diffiface's."""
    leaves, treedef = flatten(t)
    if not all(impl.is_native(v) and not impl.is_traced(v) for v in leaves):
        return None
    fast = impl.flatten_fast
    if fast is not None:
        other, other_def = fast(t)
        if len(other) == len(leaves) and all(a is b for a, b in zip(other, leaves, strict=True)):
            return fast, other_def, [(type(v), v.shape, v.dtype) for v in leaves]
    return flatten, treedef, [(type(v), v.shape, v.dtype) for v in leaves]


def matches_native(t: Any, sig: Any) -> tuple | None:
    """The leaves of ``t`` when they match ``sig`` (from :func:`native`), else None."""
    if sig is None:
        return None
    leaves, treedef = sig[0](t)
    if treedef != sig[1]:
        return None
    for v, (kind, shape, dtype) in zip(leaves, sig[2], strict=True):
        if type(v) is not kind or v.shape != shape or v.dtype != dtype:  # (type first)
            return None
    return tuple(leaves)


def constant_leaves(cs: tuple, sig: Any) -> tuple | None:
    """(leaves, values) of Constant contexts that match ``sig``, else None."""
    if sig is None or any(type(c) is not Constant for c in cs):
        return None
    values = tuple(c.value for c in cs)
    leaves = matches_native(values, sig)
    return None if leaves is None else (leaves, values)


def leaves_of(x: Any, cs: tuple, x_sig: Any, c_sig: Any) -> tuple | None:
    """(x leaves, context leaves, context values) when x and the contexts match the
    native signatures (``c_sig`` None: no contexts), else None."""
    xs = matches_native(x, x_sig)
    if xs is None:
        return None
    if c_sig is None:
        return None if cs else (xs, (), ())
    got = constant_leaves(cs, c_sig)
    return None if got is None else (xs, *got)


def entered(leaf_rule: Any, xs: tuple, ctx: tuple) -> tuple:
    """(treedef, leaves) of entered arguments (x's leaves and the contexts' values in the
    backend's arrays, or its tracers): what decides the structure of f(x). ``leaf_rule``:
    the backend's ``leaf_signature`` (the same for a value and for its tracer)."""
    leaves, treedef = flatten((xs, ctx))
    return treedef, tuple(leaf_rule(a) for a in leaves)


def leaf_signature(a: Any) -> Any:
    """The default leaf rule of :func:`entered`: shape and dtype of an array, other
    values as they are (their type where they cannot be hashed)."""
    shape = getattr(a, "shape", None)
    if shape is not None and hasattr(a, "dtype"):
        return (tuple(shape), str(a.dtype))
    try:
        hash(a)
    except TypeError:
        return type(a)
    return a


# ------------------------------------------------------------------ mismatch report


def rows(want: Signature, x: Any, cs: tuple, t: Any) -> list[tuple]:
    """(name, same, got, prepared) for x, the contexts and (where the plan has one) the
    tangent of a call, described for a mismatch report."""
    got_x, got_c = tree(x), contexts(cs)
    out = [
        ("x", got_x == want.x, *_described(got_x, want.x, _describe_tree)),
        ("contexts", got_c == want.ctx, *_described(got_c, want.ctx, _describe_ctx)),
    ]
    if want.t is not None:
        got_t = tangent(t)
        same = got_t is not None and want.takes(t)
        out.append(("tangent", same, _describe_t(got_t), _describe_t(want.t)))
    return out


def _describe_tree(sig: tuple) -> str:
    treedef, leaves = sig
    parts = []
    for path, a in zip(paths(treedef), leaves, strict=True):
        shape = str(a[1]) if len(a) > 1 else ""
        what = f"{a[0]} {dtype_name(a[2])}" if len(a) > 2 else a[0]
        where = f"{path} " if path != "x" else ""
        parts.append(f"{where}{shape} {what}".strip())
    return ", ".join(p.strip() for p in parts) or "empty"


def _described(got: tuple, want: tuple, describe: Any) -> tuple[str, str]:
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
    what, body = sig
    return f"Tangents of {len(body)}" if what == "Tangents" else "one tangent"
