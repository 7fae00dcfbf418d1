"""Whether a call crosses to another framework: the one home of that question.

It is decided before anything is converted, from the backend and the leaves of the
arguments (x, the tangent or ``Tangents``, the ``Constant`` values, the
``FixedParams`` parameters): conversion never meets another framework's array. A
call that crosses runs in ``diffiface.bridge``, which the shell reaches by name
(the bridge sits above the operators: it calls them).
"""

from __future__ import annotations

import importlib
from typing import Any

from .._arrays import framework_of
from .._backend_types import AutoSparse, SecondOrder
from .._contexts import Constant, FixedParams
from .._tangents import Tangents
from .._tree import flatten
from . import registry

# how a call crosses (None: it does not)
SECOND_ORDER = "second_order"  # second_order(outer, inner): outer differentiates a bridge
ARRAYS = "arrays"  # arrays of a framework other than the backend's
DIFFERENCES = "differences"  # finite differences over AD, on a framework's arrays


def of(f: Any, backend: Any, x: Any, t: Any, contexts: tuple) -> str | None:
    """How the call ``op(f, backend, x[, t], *contexts)`` crosses, or None."""
    dense = backend.backend if isinstance(backend, AutoSparse) else backend
    if isinstance(dense, SecondOrder):
        if registry.crosses(dense):
            return SECOND_ORDER
        if dense.differences_over_ad:  # (its finite differences take NumPy arrays)
            return DIFFERENCES if holds_other(f, "numpy", x, t, contexts) else None
    return ARRAYS if holds_other(f, registry.arrays(dense), x, t, contexts) else None


def holds_other(f: Any, own: str, x: Any, t: Any, contexts: tuple) -> bool:
    """The arguments hold an array of a framework other than ``own`` (NumPy's is no
    framework's: every backend takes it)."""
    if not contexts and type(f) is not FixedParams:  # one array x (and t): no flattening
        fw, ft = framework_of(x), None if t is None else framework_of(t)
        if fw is not None and (t is None or ft is not None):
            return fw not in (own, "numpy") or ft not in (None, own, "numpy")
    values = [c.value for c in contexts if isinstance(c, Constant)]
    params = f.params if type(f) is FixedParams else None
    tree = (x, tuple(t) if isinstance(t, Tangents) else t, values, params)
    asked = set()  # (a framework owns whole types: asked once per type)
    for leaf in flatten(tree)[0]:
        kind = type(leaf)
        if kind not in asked:
            asked.add(kind)
            fw = framework_of(leaf)
            if fw is not None and fw != own and fw != "numpy":
                return True
    return False


def run(how: str, public: Any, f: Any, backend: Any, args: tuple, kwargs: dict) -> Any:
    """The call run across the bridge (``public``: the operator the user called)."""
    bridge = importlib.import_module("diffiface.bridge.operators")
    return bridge.cross(how, public, f, backend, args, kwargs)
