"""Tangents: several directions at once for jvp, vjp and hvp, as k arrays or stacked."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays
from ._errors import DiffifaceTypeError, DiffifaceValueError
from ._tree import flatten, tree_map, unflatten


class Tangents:
    """Several tangents (or cotangents) passed together: one batched pass where the
    framework has vmap (JAX, torch), a loop otherwise (autograd, finite differences).

    ``di.jvp(f, backend, x, di.Tangents(v1, v2))`` returns
    ``di.Tangents(jvp(v1), jvp(v2))``; likewise ``vjp``, ``hvp`` and their
    ``value_and_`` variants (the value is returned once).

    ``di.Tangents.stacked(V)`` passes k tangents stacked on a leading axis (``V[i]`` is
    tangent i; for a pytree x, a pytree whose leaves each carry that axis). Its results
    come stacked the same way: ``.stack`` gives them as one array (a pytree for a
    pytree result), with no split into k arrays, which is what a batched framework
    computes (JAX, torch); indexing, ``len`` and iteration work as for k arrays.

    Examples:
        >>> import numpy as np
        >>> import diffiface as di
        >>> t = di.jvp(lambda x: x**2, di.AutoFiniteDifferences(), np.array([1.0, 2.0]),
        ...            di.Tangents(np.array([1.0, 0.0]), np.array([0.0, 1.0])))
        >>> len(t), t[1].round(6)
        (2, array([0., 4.]))
        >>> s = di.jvp(lambda x: x**2, di.AutoFiniteDifferences(), np.array([1.0, 2.0]),
        ...            di.Tangents.stacked(np.eye(2)))
        >>> s.stack.round(6)
        array([[2., 0.],
               [0., 4.]])
        >>> len(s), s[1].round(6)
        (2, array([0., 4.]))
    """

    # _values: the k tangents (of a stacked Tangents: made from the stack on first use)
    __slots__ = ("_stack", "_values")

    def __init__(self, *values: Any) -> None:
        if not values:
            raise DiffifaceValueError(
                "Tangents(): give at least one tangent, e.g. Tangents(v1, v2)."
            )
        self._values = tuple(values)
        self._stack = None

    @classmethod
    def stacked(cls, stack: Any) -> Tangents:
        """k tangents stacked on the leading axis of ``stack`` (of each of its leaves).

        Raises:
            DiffifaceValueError: a leaf without a leading axis, or leaves whose leading
                axes differ.
        """
        k = stack_size(stack, "Tangents.stacked(V)")
        if k == 0:
            raise DiffifaceValueError(
                "Tangents.stacked(V): V's leading axis has length 0; give at least one "
                "tangent (V of shape (k, *x.shape) with k >= 1)."
            )
        return of_stack(stack)

    @property
    def stack(self) -> Any:
        """The k tangents as one array on a leading axis (a pytree of such arrays).

        Raises:
            DiffifaceValueError: for a Tangents of k separate arrays.
        """
        if self._stack is None:
            raise DiffifaceValueError(
                f"Tangents.stack: this Tangents holds {len(self._values)} separate "
                "arrays, not one stack; pass Tangents.stacked(V) to get stacked results "
                "(or stack them yourself, e.g. np.stack(list(t)))."
            )
        return self._stack

    def __getattr__(self, name: str) -> Any:
        if name != "_values" or self._stack is None:  # (only a stack's values are lazy)
            raise AttributeError(name)
        leaves, treedef = flatten(self._stack)
        k = len(leaves[0])
        values = tuple(unflatten(treedef, [a[i] for a in leaves]) for i in range(k))
        self._values = values
        return values

    def __len__(self) -> int:
        if self._stack is not None and not _has_values(self):
            return len(flatten(self._stack)[0][0])
        return len(self._values)

    def __iter__(self):
        return iter(self._values)

    def __getitem__(self, i: int) -> Any:
        if self._stack is not None and not _has_values(self):
            return tree_map(lambda a: a[i], self._stack)
        return self._values[i]

    def __repr__(self) -> str:
        if self._stack is not None:
            return f"Tangents.stacked({self._stack!r})"
        return f"Tangents({', '.join(map(repr, self._values))})"


def of_stack(stack: Any) -> Tangents:
    """A stacked Tangents of ``stack`` as it is (diffiface's own results: no checks)."""
    t = object.__new__(Tangents)
    t._stack = stack
    return t


def _has_values(t: Tangents) -> bool:
    try:
        object.__getattribute__(t, "_values")
    except AttributeError:
        return False
    return True


def stack_size(stack: Any, call: str) -> int:
    """The length k of the leading axis of every leaf of ``stack`` (``call`` names the
    call in errors)."""
    leaves, _ = flatten(stack)
    if not leaves:
        raise DiffifaceValueError(
            f"{call}: V has no arrays; give the k tangents stacked on a leading axis, "
            "e.g. Tangents.stacked(np.stack([v1, v2]))."
        )
    sizes = set()
    for a in leaves:
        shape = getattr(a, "shape", None)
        if not shape:
            raise DiffifaceValueError(
                f"{call}: every leaf of V must carry the k tangents on its leading axis, "
                f"got {type(a).__name__} of shape {shape}. Stack the tangents first, "
                "e.g. Tangents.stacked(np.stack([v1, v2])), or pass Tangents(v1, v2)."
            )
        sizes.add(shape[0])
    if len(sizes) > 1:
        raise DiffifaceValueError(
            f"{call}: the leaves of V must share their leading axis (the k tangents), got "
            f"lengths {sorted(sizes)}. Stack each leaf's tangents on axis 0."
        )
    return sizes.pop()


def stack_results(results: Any) -> Tangents:
    """k results (each an array or a pytree of arrays, of one framework) as a stacked
    ``Tangents``: each leaf stacked on a new leading axis by its framework."""
    if type(results) is Tangents and results._stack is not None:
        return results
    flat = [flatten(r) for r in results]
    treedef = flat[0][1]
    cols = zip(*(leaves for leaves, _ in flat), strict=True)
    return of_stack(unflatten(treedef, [_stack_leaves(list(c)) for c in cols]))


def _stack_leaves(leaves: list) -> Any:
    fw = _arrays.owner(leaves[0])
    return np.stack(leaves) if fw is None else fw.stack(leaves)


def restacked(out: Any) -> Any:
    """A call's result with its Tangents of k arrays stacked (a call given a stacked
    Tangents: ``out`` is a Tangents, or a tuple holding one: value_and_, has_aux)."""
    if type(out) is Tangents:
        return out if out._stack is not None else stack_results(out)
    if type(out) is tuple and any(type(o) is Tangents or type(o) is tuple for o in out):
        return tuple(restacked(o) for o in out)
    return out


def one_by_one(run: Any, value: bool, slow: Any) -> Any:
    """A runner ``run(x, t)`` of one tangent that also takes a ``Tangents`` of k: one
    call per tangent (the framework's native loop), the value given once (``value``);
    ``slow`` (the runners' SLOW) as soon as one call hands over to the general path. A
    stacked Tangents gives stacked results."""

    def run_all(x: Any, t: Any) -> Any:
        if type(t) is not Tangents:
            return run(x, t)
        outs = []
        for v in t._values:
            out = run(x, v)
            if out is slow:
                return slow
            outs.append(out)
        ts = [o[1] for o in outs] if value else outs
        ts = stack_results(ts) if t._stack is not None else Tangents(*ts)
        return (outs[0][0], ts) if value else ts

    return run_all


def stacked_call(run: Any, t: Tangents, name: str) -> Any:
    """``run()`` (a call given the stacked Tangents ``t`` as its tangent ``name``), its
    results stacked like ``t``; an error about the tangent says how a stack is read."""
    try:
        out = run()
    except (DiffifaceValueError, DiffifaceTypeError) as exc:
        msg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
        if f" {name} must" in msg or f" {name}[" in msg:
            like = "x" if name == "v" else "f(x)"
            exc.args = (
                f"{msg} Here {name} is Tangents.stacked(V) with k = {len(t)} on the leading "
                f"axis of V's leaves: each V[i] is one {name}, so V must be shaped (k, "
                f"*{like}.shape). If the tangents lie on another axis, move it to the "
                "front first, e.g. Tangents.stacked(np.moveaxis(V, -1, 0)).",
                *exc.args[1:],
            )
        raise
    last = out[-1] if type(out) is tuple else out
    if type(last) is Tangents and last._stack is not None:  # (stacked by the runner)
        return out
    return restacked(out)
