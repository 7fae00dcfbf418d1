"""The one place that tells which framework an array belongs to, and what diffiface
asks of a framework outside its backend.

Each backend package (``diffiface/backends/<name>/``) registers a :class:`Framework` on
import, an import that does not import the framework itself; framework-free code asks
the registered ones. Only frameworks already imported are asked about a leaf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


class TreeNode(NamedTuple):
    """How optree flattens a type that a framework's own registry knows as a pytree
    node: one level of the framework's flatten, as ``optree.register_pytree_node``
    takes it, and the static data read from the metadata it returns."""

    flatten: Callable
    unflatten: Callable
    path_entry: type
    static_data: Callable


class Framework:
    """A framework's hooks. Subclass it in the backend package and :func:`register`
    one instance; the defaults fit a framework that has no arrays of its own (NumPy)."""

    name = ""
    # top-level modules its array types live in (``type(a).__module__``'s first part)
    modules: tuple[str, ...] = ()
    # its sparsity module (global detector, native sparse format), imported on use
    sparse: str | None = None
    # its testing module (the matrix's array kinds), imported on use
    testing: str | None = None
    # the module of its NumPy-like functions and its backend type, named in error messages
    numpy_module = "numpy"
    backend_name = ""
    float_cast = "x.astype(float)"  # how its arrays are cast to floats, in error messages
    # its arrays are NumPy's, boxed while it traces (autograd): NumPy's side of a
    # crossing between frameworks is its
    arrays_are_numpy = False
    # the strategy of a nested call (FixedParams) that keeps the least memory
    less_memory_strategy = "reverse_over_reverse"

    def owns(self, leaf: Any) -> bool:
        """``leaf`` (of a type from one of ``modules``) is an array of this framework;
        the answer is the same for every leaf of its type (an isinstance check)."""
        return False

    def within_gradient(self, x: Any) -> bool:
        """``x`` (one of its arrays) is being differentiated right now."""
        return False

    def values(self, leaf: Any) -> np.ndarray | None:
        """The values of one of its arrays as NumPy; None where they are not known yet
        (traced by an outer transform)."""
        return None

    def stack(self, arrays: list) -> Any:
        """Its arrays stacked on a new leading axis (a stacked ``Tangents``' results)."""
        return np.stack(arrays)

    def is_tracer(self, leaf: Any) -> bool:
        """``leaf`` is traced by an outer transform of this framework (it may hold no
        values)."""
        return False

    def says_foreign_arrays(self, message: str) -> bool:
        """``message`` (of an error f raised) says f called this framework's functions on
        arrays they do not take (another framework's)."""
        return False

    def open_containers(self, args: tuple, leaves: list) -> tuple | None:
        """``args`` (flattened to ``leaves``) with the containers its trace boxed (an
        autograd box around a dict or tuple) opened; None when there are none."""
        return None

    def use_float64(self) -> None:
        """Keep float64 arrays float64 in this process (JAX's x64; imports the
        framework)."""

    def settings(self) -> str | None:
        """A line on its process-wide settings for ``diffiface info`` (JAX's x64); None
        where it has none or is not installed."""
        return None

    def knows_tree_nodes(self) -> bool:
        """It has a pytree registry of its own, loaded now (JAX, once imported)."""
        return False

    def tree_node(self, leaf: Any) -> TreeNode | None:
        """How to flatten ``leaf``'s type where its registry knows it as a node; None
        for a leaf. Asked only while :meth:`knows_tree_nodes`."""
        return None

    def model_function(self, f: Any, params: Any) -> Any:
        """``FixedParams(f, params)`` with ``f`` a model object of this framework (a
        torch.nn.Module): ``f`` as a function of ``(x, params, *contexts)``, ``params``
        checked against it (``FROM_MODULE``, left out: read from it at each call); None
        for any other ``f`` (asked about any object: it imports nothing)."""
        return None

    def as_pattern_input(self, p: Any) -> Any:
        """One of its arrays (dense or sparse) given as a sparsity pattern, as a
        ``scipy.sparse`` array or a NumPy array; None for anything else (asked about
        any object: it imports nothing)."""
        return None


_BY_MODULE: dict[str, Framework] = {}
_BY_NAME: dict[str, Framework] = {}


def register(framework: Framework) -> Framework:
    """Make diffiface ask ``framework`` about the arrays of its modules."""
    _BY_NAME[framework.name] = framework
    for module in framework.modules:
        _BY_MODULE[module] = framework
    return framework


def named(name: str) -> Framework | None:
    """The registered framework called ``name`` (None: none is)."""
    return _BY_NAME.get(name)


def registered() -> tuple[Framework, ...]:
    return tuple(_BY_NAME.values())


def owner(leaf: Any) -> Framework | None:
    """The registered framework whose array ``leaf`` is (None: NumPy's or no array)."""
    fw = _BY_MODULE.get(type(leaf).__module__.partition(".")[0])
    return fw if fw is not None and fw.owns(leaf) else None


def framework_of(leaf: Any) -> str | None:
    """The registered framework's name for its arrays, "numpy" for NumPy's, None for a
    leaf that is no array (a dtype, a device or a module is no array)."""
    if isinstance(leaf, np.ndarray | np.generic):
        return "numpy"
    fw = _BY_MODULE.get(type(leaf).__module__.partition(".")[0])
    return fw.name if fw is not None and fw.owns(leaf) else None


def foreign_dtype(dtype: Any) -> bool:
    """``dtype`` is a registered framework's own dtype object (a torch dtype), which
    NumPy does not take (it takes the name)."""
    return type(dtype).__module__.partition(".")[0] in _BY_MODULE


def foreign(framework: str, leaf: Any) -> bool:
    """``leaf`` is an array of a framework other than ``framework`` (NumPy is no one's)."""
    return framework_of(leaf) not in (None, "numpy", framework)


def is_tracer(a: Any) -> bool:
    """``a`` is traced by an outer transform of its framework."""
    fw = owner(a)
    return fw is not None and fw.is_tracer(a)


def values(leaf: Any) -> np.ndarray | None:
    """The values of a leaf as NumPy; None where they are not known (traced by an outer
    transform) or the leaf is no array."""
    if isinstance(leaf, np.ndarray | np.generic | float):
        return np.asarray(leaf)
    fw = owner(leaf)
    return None if fw is None else fw.values(leaf)


def numpy_dtype(dtype: Any) -> np.dtype | None:
    """NumPy's dtype for any framework's dtype object (an MLX dtype has no NumPy
    conversion: the dtype of the same name); None where NumPy has none (bfloat16)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        try:
            return np.dtype(str(dtype).rpartition(".")[2])
        except TypeError:
            return None
