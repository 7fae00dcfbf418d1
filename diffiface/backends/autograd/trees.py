"""f's pytree output in autograd's runners, taken per call as it comes.

autograd traces f anew on every call, so nothing fixes the output's structure: inside
the trace a runner flattens f(x) and hands its leaves on as one autograd tuple when
every leaf is a real float array (or NumPy float) and at least one is on x's trace; one
make_jvp or make_vjp of that tuple gives each leaf's tangent or pulls back each leaf's
cotangent (a leaf that does not depend on x gets zeros, as the general path, which
ravels the output, gives it). Anything else (a Python number, an integer or complex
leaf, a box of an outer pass, no leaf on x's trace, a cotangent unlike the output)
returns None, and the runner hands the call to the general path, which checks f's
output and explains.
"""

from __future__ import annotations

import functools

import numpy as np
import optree
from autograd.builtins import tuple as ag_tuple
from autograd.tracer import Box

from ..._tree import NAMESPACE, unflatten

# diffiface's flatten without its check for a framework's own node types (JAX's): a box
# is a leaf, and a node optree does not know stays one, which no runner takes.
flatten = functools.partial(optree.tree_flatten, none_is_leaf=False, namespace=NAMESPACE)


def joined(y, trace) -> tuple | None:
    """(f's output leaves as one autograd tuple on ``trace``, the treedef) for a pytree
    output ``y`` of real float leaves, at least one of them on x's trace; else None."""
    leaves, treedef = flatten(y)
    traced = False
    for a in leaves:  # (a loop: no frame per leaf)
        if isinstance(a, Box):
            if a._trace != trace:
                return None
            a = a._value
            traced = True
        if not (type(a) is np.ndarray or isinstance(a, np.floating)) or a.dtype.kind != "f":
            return None
    return (ag_tuple(leaves), treedef) if traced else None


def values(ys: tuple, treedef):
    """f's output as the caller gets it: each leaf an array."""
    return unflatten(treedef, [np.asarray(a) for a in ys])


def tangents(ys: tuple, ts: tuple, treedef):
    """The tangents of f's output leaves ``ys`` in its structure, each in its leaf's
    dtype and shape (autograd promotes, and gives scalars)."""
    out = []
    for y, t in zip(ys, ts, strict=True):
        out.append(np.asarray(t, dtype=y.dtype).reshape(np.shape(y)))
    return unflatten(treedef, out)


def cotangents(ys: tuple, treedef, w) -> tuple | None:
    """w's leaves, for the pullback of f's output leaves ``ys``: w of their structure,
    each leaf a NumPy array of its output leaf's shape and dtype; else None."""
    ws, w_tree = flatten(w)
    if w_tree != treedef:
        return None
    for y, v in zip(ys, ws, strict=True):
        if type(v) is not np.ndarray or v.shape != np.shape(y) or v.dtype != y.dtype:
            return None
    return tuple(ws)
