"""Conversions at the API boundary: caller's leaves <-> the backend's arrays.

Each backend takes its own arrays, NumPy arrays and Python floats. Results
come back in the kind of ``x``: native in -> native out, NumPy in -> NumPy
out, a Python float in -> a Python float out for 0-d results.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

from .. import _checks
from .._arrays import foreign, framework_of, named
from .._contexts import Constant
from .._tangents import Tangents
from .._tree import flatten, late_node, paths, unflatten
from .operator import names

NATIVE, NUMPY, PYTHON = 0, 1, 2


# the operators that take complex x (a real scalar f; see is_complex below)
COMPLEX_OPS = names(complex_x=True)


def is_complex(a: Any) -> bool:
    """A complex array of any framework (torch dtypes print as torch.complex64)."""
    return "complex" in str(getattr(a, "dtype", ""))


def point(op: str, impl: Any, leaves: list, tree: Any) -> tuple[tuple, tuple]:
    """Native leaves of ``x`` and the kind of each (NATIVE / NUMPY / PYTHON)."""
    out, kinds = [], []
    complex_ok = op in COMPLEX_OPS
    for i, leaf in enumerate(leaves):
        if is_masked(leaf):
            raise masked(op, impl, paths(tree)[i], paths(tree)[i])
        if impl.is_native(leaf):
            if not impl.is_float(leaf) and not (complex_ok and is_complex(leaf)):
                _raise_leaf(op, impl, tree, i, leaf)
            out.append(leaf)
            kinds.append(NATIVE)
        elif isinstance(leaf, np.ndarray | np.generic):
            if leaf.dtype.kind != "f" and not (complex_ok and leaf.dtype.kind == "c"):
                _raise_leaf(op, impl, tree, i, leaf)
            reason = impl.check_numpy_dtype(leaf.dtype)
            if reason:
                raise _checks.DiffifaceValueError(
                    f"{_checks.call_form(op, impl.backend)}: {paths(tree)[i]} is {leaf.dtype}, "
                    f"but {reason}"
                )
            out.append(impl.from_numpy(np.asarray(leaf)))
            kinds.append(NUMPY)
        elif isinstance(leaf, float):
            out.append(impl.default_float(leaf))
            kinds.append(PYTHON)
        else:
            _raise_leaf(op, impl, tree, i, leaf)
    return tuple(out), tuple(kinds)


def is_masked(leaf: Any) -> bool:
    """``leaf`` is a NumPy masked array (a subclass of ndarray that every backend
    would take for its data, mask ignored)."""
    ma = sys.modules.get("numpy.ma")  # none can exist before numpy.ma is imported
    return ma is not None and isinstance(leaf, ma.MaskedArray)


def masked(op: str, impl: Any, where: str, name: str) -> _checks.DiffifaceTypeError:
    """The error for a masked array at ``where``, spelt ``name`` in the fix."""
    return _checks.DiffifaceTypeError(
        f"{_checks.call_form(op, impl.backend)}: {where} is a NumPy masked array "
        "(numpy.ma.MaskedArray), whose mask no backend honours: the derivative would "
        f"silently use the data under the mask. Pass {name}.filled(value) to choose the "
        f"masked entries' values, or np.asarray({name}) for the data as it is (and apply "
        "the mask inside f, e.g. with np.where)."
    )


def _raise_leaf(op: str, impl: Any, tree: Any, i: int, leaf: Any):
    path = paths(tree)[i]
    if is_complex(leaf):
        fix = (
            "Complex x is taken by gradient and value_and_gradient (of a real f); for "
            f"{op}, pass the real and imaginary parts as two real leaves."
        )
        raise _checks.bad_leaf(op, impl.backend, path, leaf, fix)
    if isinstance(leaf, bool | numbers.Integral):
        fix = f"Differentiate with respect to floats only: pass {float(leaf)!r} for a number, "
        fix += "or pass it as di.Constant(...)."
    elif hasattr(leaf, "dtype") and not _is_floating(leaf):
        owner = named(framework_of(leaf))
        cast = "x.astype(float)" if owner is None else owner.float_cast
        fix = f"Differentiate with respect to floats only: cast it (e.g. {cast}) "
        fix += "or pass it as di.Constant(...)."
    elif (late := late_node(leaf)) is not None:  # registered after diffiface met the type
        fix = (
            f"{type(leaf).__name__} was registered as a {late} pytree node after diffiface "
            "first met it as a leaf: register the type before its first use (or with optree "
            "under namespace='diffiface')."
        )
    elif hasattr(type(leaf), "__optree_dataclass_fields__"):
        fix = (
            f"{type(leaf).__name__} is an optree dataclass of another namespace, a leaf to "
            "diffiface: declare it with namespace='' (optree's global one) or 'diffiface'."
        )
    elif callable(leaf):
        fix = (
            "A function is no point to differentiate at: keep it out of x. For an equinox "
            "Module, split off its arrays, params, static = eqx.partition(model, "
            "eqx.is_inexact_array), and differentiate lambda p, s: loss(eqx.combine(p, s)) "
            "at params with di.Constant(static); or mark the field eqx.field(static=True)."
        )
    else:
        kinds = (
            impl.traits.native_kind
            if impl.traits.native_kind == "NumPy arrays"
            else (f"{impl.traits.native_kind}, NumPy arrays")
        )
        fix = f"{type(impl.backend).__name__}() takes {kinds} or Python floats; convert the leaf."
    raise _checks.bad_leaf(op, impl.backend, path, leaf, fix)


def _is_floating(leaf: Any) -> bool:
    dtype = leaf.dtype
    try:
        return np.dtype(dtype).kind == "f"
    except TypeError:
        return bool(getattr(dtype, "is_floating_point", False))


def tangent(op: str, impl: Any, name: str, like: tuple, leaves: list, tree, ref_tree) -> tuple:
    """Native tangent leaves, checked against the reference leaves ``like``."""
    if tree != ref_tree:
        raise _checks.mismatch(op, impl.backend, name, "structure", ref_tree, tree)
    many = len(like) > 1
    return tuple(
        match(op, impl, name, native_tangent(op, impl, name, leaf), ref, path if many else "")
        for leaf, ref, path in zip(leaves, like, paths(ref_tree), strict=True)
    )


def native_tangent(op: str, impl: Any, name: str, leaf: Any) -> Any:
    """A tangent leaf as a native array; a Python float stays a float (cast later)."""
    if is_masked(leaf):
        raise masked(op, impl, name, name)
    if isinstance(leaf, float) or impl.is_native(leaf):
        return leaf
    if isinstance(leaf, np.ndarray | np.generic):
        reason = impl.check_numpy_dtype(leaf.dtype)
        if reason:
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(op, impl.backend)}: {name} is {leaf.dtype}, but {reason}"
            )
        return impl.from_numpy(np.asarray(leaf))
    raise _checks.mismatch(
        op, impl.backend, name, "kind", impl.traits.native_kind, _checks.describe(leaf)
    )


def match(op: str, impl: Any, name: str, leaf: Any, ref: Any, path: str = "") -> Any:
    """``leaf`` checked against ``ref`` for shape and dtype; a float takes ref's dtype."""
    if isinstance(leaf, float):
        leaf = impl.cast(impl.default_float(leaf), ref)
    where = f" at {path[1:]}" if path else ""
    if tuple(leaf.shape) != tuple(ref.shape):
        got = f"{tuple(leaf.shape)}{where}"
        raise _checks.mismatch(op, impl.backend, name, "shape", tuple(ref.shape), got)
    if leaf.dtype != ref.dtype:
        raise _checks.mismatch(op, impl.backend, name, "dtype", ref.dtype, f"{leaf.dtype}{where}")
    return leaf


def contexts(op: str, impl: Any, contexts: tuple) -> tuple:
    """Unwrap Constant contexts; NumPy leaves become native arrays."""
    out = []
    for n, c in enumerate(contexts):
        if not isinstance(c, Constant):
            raise _checks.DiffifaceTypeError(
                f"{_checks.call_form(op, impl.backend)}: contexts must be di.Constant(...), "
                f"got {type(c).__name__}. Wrap extra arguments of f as di.Constant(value)."
            )
        value = impl.open(c.value)
        leaves, tree = flatten(value)
        numpy = False
        for v in leaves:
            if impl.is_native(v):  # never a masked array (autograd's check says so)
                continue
            if is_masked(v):
                raise masked(op, impl, f"a leaf c of Constant #{n}", "c")
            if isinstance(v, np.ndarray):
                numpy = True
            elif foreign(impl.traits.arrays, v):  # (an operator crossed before converting)
                raise _checks.DiffifaceTypeError(
                    f"{_checks.call_form(op, impl.backend)}: Constant #{n} holds "
                    f"{_checks.describe(v)}, an array of another framework; "
                    f"{type(impl.backend).__name__}() takes {impl.traits.native_kind}, NumPy "
                    "arrays or Python floats. Convert it."
                )
        if numpy:
            leaves = [_context_leaf(op, impl, v) for v in leaves]
            out.append(unflatten(tree, leaves))
        else:
            out.append(value)
    return tuple(out)


def _context_leaf(op: str, impl: Any, v: Any) -> Any:
    if not isinstance(v, np.ndarray):
        return v
    reason = impl.check_numpy_dtype(v.dtype)
    if reason:
        raise _checks.DiffifaceValueError(
            f"{_checks.call_form(op, impl.backend)}: a Constant holds {v.dtype}, but {reason}"
        )
    return impl.from_numpy(v)


def back(impl: Any, a: Any, kind: int) -> Any:
    """A native result to the caller's kind."""
    if kind == NATIVE or a is None or impl.is_traced(a):
        return a
    arr = impl.to_numpy(a)
    if kind == PYTHON and arr.ndim == 0:
        return arr.item()  # a float, or a complex for a complex f(x)
    return arr


def zeros(impl: Any, shape: tuple, like: Any) -> Any:
    """Native zeros of ``shape`` with the dtype (and device) of ``like``."""
    return impl.cast(impl.from_numpy(np.zeros(shape, dtype=np.float32)), like)


def tangents(op: str, impl: Any, prob: Any, xs: tuple, v: Any) -> list:
    """The native tangent leaves of each direction in ``v`` (one, or a Tangents)."""
    if prob.single and impl.is_native(v):  # fast path: one array like x
        x = xs[0]
        if v.shape == x.shape and v.dtype == x.dtype:
            return [(v,)]
    many = v if isinstance(v, Tangents) else (v,)
    out = []
    for one in many:
        vl, vtree = flatten(one)
        out.append(tangent(op, impl, "v", xs, vl, vtree, prob.treedef))
    return out
