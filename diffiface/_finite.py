"""``check_finite``: NaN and inf in the inputs raise, naming the path and the index.

Values are read where they can be: arrays of every framework and Python floats;
leaves traced by an outer transform (a jax tracer) have no values yet and are
skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _checks
from ._arrays import values as _values
from ._contexts import Constant, FixedParams
from ._tangents import Tangents
from ._tree import flatten, paths


def check(op: str, backend: Any, f: Any, x: Any, contexts: tuple, t: Any) -> None:
    """Raise on the first non-finite value of x, the tangent(s), the Constants and
    the parameters of a FixedParams."""
    _check_tree(op, backend, "x", x)
    t_name = "w" if "vjp" in op else "v"
    if t is not None:
        for i, one in enumerate(t if isinstance(t, Tangents) else (t,)):
            name = f"{t_name}[{i}]" if isinstance(t, Tangents) else t_name
            _check_tree(op, backend, name, one)
    for i, c in enumerate(contexts):
        if isinstance(c, Constant):
            _check_tree(op, backend, f"Constant #{i}", c.value)
    if type(f) is FixedParams:
        _check_tree(op, backend, "params", f.params)


def _check_tree(op: str, backend: Any, name: str, tree: Any) -> None:
    leaves, treedef = flatten(tree)
    for path, leaf in zip(paths(treedef), leaves, strict=True):
        values = _values(leaf)
        if values is None or values.dtype.kind not in "fc":
            continue
        bad = ~np.isfinite(values)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            where = name + path[1:]
            raise _checks.DiffifaceValueError(
                f"{_checks.call_form(op, backend)}: {where} holds {values[index]} at index "
                f"{index} and check_finite is on. Pass finite values, or turn check_finite "
                "off to let NaN and inf propagate."
            )
