"""The one signature of a call: what a plan depends on in its arguments.

A :class:`Signature` holds x's tree and leaves, the contexts' and the tangent's, each
leaf by one rule (:func:`leaf`): an array by its kind, shape and dtype, anything else by
its kind. Preparations and the plans kept for unprepared calls compare a call with it:
:meth:`Signature.run` is a runner's cheap check (one array: type, shape and dtype;
native leaves: one walk along the plan's treedef and a key per leaf, see
:class:`Native`), ``==`` the full comparison, and
:func:`rows` the mismatch report.

Tables keyed on the *entered* arguments (converted to the backend's arrays, or its
tracers) use :func:`entered`: output layouts, the nested choice, sparse plans. Its leaf
rule is the backend's ``leaf_signature``, the same for a value and for its tracer.
"""

from __future__ import annotations

import operator
from typing import Any

import optree

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
_VALUE = operator.attrgetter("value")


class Signature:
    """x, the contexts and the tangent of a call, with the forms a runner checks.

    ``x``, ``ctx`` and ``t`` compare calls (:func:`tree`, :func:`contexts`,
    :func:`tangent`); ``kind`` is the form of x where it is one leaf (``single``) and
    ``one`` what a call's one array is matched by (:func:`one`; a Python float: its type
    only); ``x_native``, ``c_native`` and ``t_native`` are the native-leaf forms of x,
    of Constant contexts' values and of the tangent (of a Tangents: of its tuple of
    tangents) (see :class:`Native`), None where a leaf is not a native array; ``call``:
    of the three together ``(x, values, tangent)``, which a LEAVES call is matched by
    (``parts``: the numbers of x's and the contexts' leaves); ``as_is``: a runner of
    one array takes the tangent as it came (one of x's type, a Tangents of them, or
    native leaves).
    """

    __slots__ = (
        "as_is",
        "c_native",
        "call",
        "count",
        "ctx",
        "kind",
        "many",
        "one",
        "parts",
        "t",
        "t_native",
        "x",
        "x_native",
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
        values = tuple(c.value for c in cs) if constants else ()
        self.c_native = native(impl, values) if constants else None
        self.t_native, self.as_is = None, True
        ts = None
        if t is not None:
            ts = t._values if self.many else t
            each = ts if self.many else (t,)
            if self.kind is None or cs or any(type(v) is not type(x) for v in each):
                self.t_native = native(impl, ts)
            self.as_is = all(type(v) is type(x) for v in each) or self.t_native is not None
        # (the LEAVES form: x, the contexts' values and the tangent matched by one walk)
        self.call, self.parts = None, (0, 0)
        if self.form() == LEAVES:
            self.call = native(impl, (x, values, ts))
            nc = len(self.c_native.types) if self.c_native is not None else 0
            self.parts = (len(self.x_native.types), nc)

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
            for c in cs:  # (a loop: no frame)
                if type(c) is not Constant:
                    return SLOW
            values = tuple(map(_VALUE, cs)) if cs else ()
            ts = None
            if t:
                ts = t[0]
                if self.many:
                    if type(ts) is not Tangents:
                        return SLOW
                    ts = ts._values
            leaves = self.call.leaves((x, values, ts))  # (one walk of all three)
            if leaves is None:
                return SLOW
            nx, nc = self.parts
            xs, c_leaves = leaves[:nx], leaves[nx : nx + nc]
            if not t:
                return run(xs, c_leaves, values)
            ts = leaves[nx + nc :]
            if self.many:
                n = len(ts) // self.count
                ts = tuple(ts[i * n : (i + 1) * n] for i in range(self.count))
            return run(xs, c_leaves, values, ts)
        if form == PYTHON:  # a Python float: never its value (the runner checks the dtype)
            return SLOW if cs or type(x) is not float else run(x, *t)
        s = self.one
        if cs or type(x) is not s[0] or (s[3](x) != s[4] and (x.shape != s[1] or x.dtype != s[2])):
            return SLOW
        return run(x, *t) if t else run(x)

    def takes(self, t: Any) -> bool:
        """Whether a tangent has this signature's count (one, or Tangents of as many)."""
        if self.t is None or isinstance(t, Tangents) != self.many:
            return False
        return not self.many or len(t) == len(self.t[1])


class Native:
    """A pytree of native arrays (from a plan's arguments), and the match of a call's
    pytree against it (:meth:`leaves`): optree's ``flatten_up_to`` walks the call's
    containers along the plan's treedef (no new treedef is built, none compared), then
    each leaf is compared by its type and one key (the backend's ``array_key``, else
    its shape and dtype), where the key differs by shape and dtype.

    ``flatten_up_to`` takes an OrderedDict or a defaultdict where the treedef has a
    dict (and any deque for a deque): the plain dicts are checked by their paths
    (``dicts``); a treedef with the other kinds, or a dict below a node of another
    type, is matched by a full flatten and the treedefs compared (``dicts`` None).
    """

    __slots__ = ("dicts", "key", "keys", "metas", "spec", "types")

    def __init__(self, impl: Any, leaves: list, spec: Any):
        self.spec, self.dicts = spec, _dict_paths(spec)
        self.types = list(map(type, leaves))
        self.key = impl.array_key or _SHAPE_DTYPE
        self.keys = list(map(self.key, leaves))
        self.metas = [(v.shape, v.dtype) for v in leaves]

    def leaves(self, t: Any) -> tuple | None:
        """The leaves of ``t`` when its structure and leaves match, else None."""
        if self.dicts is None:
            leaves, spec = flatten(t)
            if spec != self.spec:
                return None
        else:
            try:
                leaves = self.spec.flatten_up_to(t)
            except (ValueError, TypeError):  # another structure
                return None
            for path in self.dicts:  # (loops: no frame)
                node = t
                for entry in path:
                    node = node[entry]
                if type(node) is not dict:
                    return None
        if list(map(type, leaves)) != self.types:  # (type first: a float has no shape)
            return None
        if list(map(self.key, leaves)) != self.keys and not self._same(leaves):
            return None
        return tuple(leaves)

    def _same(self, leaves: list) -> bool:
        """Each leaf has the shape and dtype of the plan's (where its key differs: a JAX
        array of another weak type)."""
        for v, (shape, dtype) in zip(leaves, self.metas, strict=True):
            if v.shape != shape or v.dtype != dtype:
                return False
        return True


_DICTS = (optree.PyTreeKind.DICT,)
_STRICT = {  # kinds ``flatten_up_to`` takes only as they are (a dict: see Native)
    optree.PyTreeKind.LEAF,
    optree.PyTreeKind.NONE,
    optree.PyTreeKind.TUPLE,
    optree.PyTreeKind.LIST,
    optree.PyTreeKind.NAMEDTUPLE,
    optree.PyTreeKind.STRUCTSEQUENCE,
    optree.PyTreeKind.CUSTOM,
    optree.PyTreeKind.DICT,
}


def _dict_paths(spec: Any, path: tuple = ()) -> list | None:
    """The paths (keys and indices) of the dicts in a treedef, or None where it has a
    container ``flatten_up_to`` takes loosely or a dict below a custom node."""
    kind = spec.kind
    if kind not in _STRICT:
        return None
    found = [path] if kind in _DICTS else []
    for entry, child in zip(spec.entries(), spec.children(), strict=True):
        below = _dict_paths(child, (*path, entry))
        if below is None or (below and kind == optree.PyTreeKind.CUSTOM):
            return None
        found += below
    return found


def native(impl: Any, t: Any) -> Native | None:
    """The :class:`Native` of ``t`` when every leaf is a native array, else None."""
    leaves, spec = flatten(t)
    if not all(impl.is_native(v) and not impl.is_traced(v) for v in leaves):
        return None
    return Native(impl, leaves, spec)


def matches_native(t: Any, sig: Native | None) -> tuple | None:
    """The leaves of ``t`` when they match ``sig`` (from :func:`native`), else None."""
    return None if sig is None else sig.leaves(t)


def constant_leaves(cs: tuple, sig: Any) -> tuple | None:
    """(leaves, values) of Constant contexts that match ``sig``, else None."""
    if sig is None or any(type(c) is not Constant for c in cs):
        return None
    values = tuple(c.value for c in cs)
    leaves = matches_native(values, sig)
    return None if leaves is None else (leaves, values)


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
