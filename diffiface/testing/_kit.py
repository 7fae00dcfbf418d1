"""A framework's arrays for the consistency matrix and the scenarios: the default is
NumPy's (finite differences, autograd); each backend package with arrays of its own
gives its kit in its testing module (``Framework.testing``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from .._arrays import named
from ..core import registry


class ArrayKit:
    """How the matrix makes and checks the arrays of one framework (NumPy's here)."""

    # layouts of its own arrays besides C ("F" and "T" for 2-d x and more)
    kinds: tuple[str, ...] = ("F", "T", "strided")
    numpy_native = True  # NumPy arrays are its own (no "numpy" kinds on top of them)
    native_sparse = False  # AutoSparse returns its framework's sparse type
    has_modules = False  # FixedParams(model) takes its model objects ("+module")
    outer_pass = False  # it has a reverse mode of its own (the "fw_" contexts)
    # the relative error its float64 functions reach (AD's bound in float64)
    float64_accuracy = 1e-8

    def float64_note(self) -> str | None:
        """Why float64 cannot run in this process (JAX with x64 off); None where it can."""
        return None

    def default_float(self) -> np.dtype:
        """The dtype of a result for a Python float x."""
        return np.dtype(np.float64)

    def arrange(self, kind: str, a: np.ndarray) -> Any:
        """``a`` as its array of ``kind``: C, 0d, F (column-major), T (a transposed view
        of a C array) or strided (``big[::2]`` of a twice larger array)."""
        if kind == "T":
            return np.ascontiguousarray(a.T).T
        if kind == "strided":
            big = np.zeros((2 * a.shape[0], *a.shape[1:]), dtype=a.dtype)
            big[::2] = a
            return big[::2]
        return np.asfortranarray(a) if kind == "F" else np.array(a)

    def result_type(self, x: Any) -> type:
        """The type its results come back as for an x of its own."""
        return type(x)

    def constant(self, c: np.ndarray, like: Any) -> Any:
        """A NumPy constant usable with its array ``like`` inside f."""
        return c

    def outer_gradient(self, fn: Callable, at: Any, dtype: np.dtype) -> Any:
        """d fn / d at by its own reverse mode (only where ``outer_pass``)."""
        raise NotImplementedError("a framework without a reverse mode of its own")

    def module(self, f: Callable, s: Any, dtype: np.dtype) -> Any:
        """A model object whose forward is ``f(x, s)``, s its parameter (only where
        ``has_modules``)."""
        raise NotImplementedError("a framework without model objects")


NUMPY = ArrayKit()
_KITS: dict[str, ArrayKit] = {}


def of(backend: Any) -> ArrayKit:
    """The array kit of the arrays ``backend`` takes (its traits' ``arrays``)."""
    return kit(registry.arrays(backend))


def kit(framework: str | None) -> ArrayKit:
    """The array kit of ``framework`` (a framework of arrays, or "numpy")."""
    got = _KITS.get(framework)  # type: ignore[arg-type]
    if got is None:
        fw = named(framework) if framework else None
        got = NUMPY if fw is None or fw.testing is None else importlib.import_module(fw.testing).KIT
        _KITS[framework] = got  # type: ignore[index]
    return got
