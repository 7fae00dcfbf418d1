"""Backend types: frozen dataclasses that name a framework and its options.

This module imports no framework, so creating a backend costs nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import sys
from typing import ClassVar

import numpy as np

from ._errors import DiffifaceTypeError, DiffifaceValueError

_MODES = (None, "forward", "reverse")
_FD_METHODS = ("central", "forward", "backward")
# The smallest relative step AutoFiniteDifferences accepts: 1e-13 is about 450 float64
# epsilons, where the rounding error of a difference (eps / step) is already 2e-3 of the
# result; under eps (2.2e-16) x + step * max(1, |x|) == x and the differences are 0 / 0.
FD_MIN_STEP = 1e-13


@dataclasses.dataclass(frozen=True)
class AbstractBackend:
    """Base of every backend type. Never instantiated itself."""

    framework: ClassVar[str] = ""
    # the module that registers the implementation (imported on first use), and the
    # package it needs (the pip extra; None: NumPy only)
    package: ClassVar[str | None] = None
    needs: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        if type(self) is AbstractBackend:
            raise DiffifaceTypeError(
                "AbstractBackend cannot be instantiated: use AutoJax(), AutoTorch(), "
                "AutoAutograd() or AutoFiniteDifferences()."
            )


def _instance(b: object, what: str, fix: str) -> None:
    """A backend class where an instance belongs is an error that names the call."""
    if isinstance(b, type) and issubclass(b, AbstractBackend):
        name = b.__name__
        raise DiffifaceTypeError(
            f"{what} must be an instance, got the class {name}. Did you mean {fix.format(name)}?"
        )


def _check_mode(backend: AbstractBackend, mode: object) -> None:
    if mode not in _MODES:
        raise DiffifaceValueError(
            f"{type(backend).__name__}(mode={mode!r}): mode must be None, 'forward' or "
            f"'reverse', got {mode!r}. Use mode=None to pick the cheaper direction."
        )


@dataclasses.dataclass(frozen=True)
class AutoJax(AbstractBackend):
    """JAX (jax.jvp / jax.vjp, jit-compiled and cached).

    Args:
        mode: "forward", "reverse", or None to pick the cheaper direction for
            jacobians from the input and output sizes.

    Examples:
        >>> AutoJax(mode="forward")
        AutoJax(mode='forward')
    """

    mode: str | None = None
    framework: ClassVar[str] = "jax"
    package: ClassVar[str | None] = "diffiface.backends.jax.backend"
    needs: ClassVar[str | None] = "jax"

    def __post_init__(self) -> None:
        _check_mode(self, self.mode)


@dataclasses.dataclass(frozen=True)
class AutoTorch(AbstractBackend):
    """PyTorch (torch.autograd, and torch.func inside torch.func transforms).

    Args:
        mode: "forward", "reverse", or None to pick the cheaper direction.

    Examples:
        >>> AutoTorch()
        AutoTorch(mode=None)
    """

    mode: str | None = None
    framework: ClassVar[str] = "torch"
    package: ClassVar[str | None] = "diffiface.backends.torch.backend"
    needs: ClassVar[str | None] = "torch"

    def __post_init__(self) -> None:
        _check_mode(self, self.mode)


@dataclasses.dataclass(frozen=True)
class AutoAutograd(AbstractBackend):
    """HIPS autograd on NumPy arrays (f uses ``autograd.numpy``).

    Args:
        mode: "forward", "reverse", or None to pick the cheaper direction.

    Examples:
        >>> AutoAutograd(mode="reverse")
        AutoAutograd(mode='reverse')
    """

    mode: str | None = None
    framework: ClassVar[str] = "autograd"
    package: ClassVar[str | None] = "diffiface.backends.autograd.backend"
    needs: ClassVar[str | None] = "autograd"

    def __post_init__(self) -> None:
        _check_mode(self, self.mode)


@dataclasses.dataclass(frozen=True)
class AutoMLX(AbstractBackend):
    """Apple's MLX (mx.vjp / mx.jvp / mx.value_and_grad, mx.vmap for several directions).

    float64 runs on the CPU stream only (MLX's own limit): float64 arrays on another
    default device are an error that names the fix.

    Args:
        mode: "forward", "reverse", or None to pick the cheaper direction.

    Examples:
        >>> AutoMLX()
        AutoMLX(mode=None)
    """

    mode: str | None = None
    framework: ClassVar[str] = "mlx"
    package: ClassVar[str | None] = "diffiface.backends.mlx.backend"
    needs: ClassVar[str | None] = "mlx"

    def __post_init__(self) -> None:
        _check_mode(self, self.mode)


def AutoKeras(mode: str | None = None) -> AbstractBackend:
    """The backend of Keras 3's active backend, where ``keras.ops`` code runs: ``AutoJax(mode)``
    under ``KERAS_BACKEND=jax``, ``AutoTorch(mode)`` under ``torch``.

    Keras fixes its backend when it is imported, so import keras first; the backend is
    read from ``keras.backend.backend()`` and found among the backend types by its
    framework's name. A Keras backend that diffiface cannot differentiate (tensorflow,
    numpy, openvino) is an error that names the fix. Keras has no functional grad of its
    own: see the Keras page for gradients with respect to a model's weights.

    Args:
        mode: "forward", "reverse", or None, as for the backend it resolves to.

    Examples:
        Keras reads ``KERAS_BACKEND`` once, at its import (run in tests/package/test_keras.py
        and docs/keras.md, in a process of each backend):

        >>> import os
        >>> os.environ["KERAS_BACKEND"] = "jax"  # doctest: +SKIP
        >>> import keras  # doctest: +SKIP
        >>> import diffiface as di
        >>> di.AutoKeras()  # doctest: +SKIP
        AutoJax(mode=None)
    """
    keras = sys.modules.get("keras")
    if keras is None:
        raise DiffifaceValueError(
            "AutoKeras(): keras is not imported, so its backend is not known yet. Import "
            "keras first (KERAS_BACKEND=jax or torch picks its backend at import), then call "
            "AutoKeras()."
        )
    name = keras.backend.backend()
    found = [b for b in _backend_types() if b.framework == name]
    if not found:
        raise DiffifaceValueError(
            f"AutoKeras(): keras runs on its {name!r} backend, which diffiface cannot "
            "differentiate. Set KERAS_BACKEND=jax or KERAS_BACKEND=torch before importing keras."
        )
    return found[0](mode=mode)


def _backend_types() -> list:
    """Every backend type defined so far (a backend package's own too), by subclassing,
    breadth first: a framework's own type before a user's subclass of it."""
    found, todo = [], list(AbstractBackend.__subclasses__())
    while todo:
        cls = todo.pop(0)
        found.append(cls)
        todo += cls.__subclasses__()
    return found


@dataclasses.dataclass(frozen=True)
class AutoFiniteDifferences(AbstractBackend):
    """Finite differences on any NumPy function.

    Cost: a central jvp takes 2 calls of f, a gradient or jacobian 2n calls
    (n = size of x); "forward" and "backward" take n + 1.

    Args:
        method: "central" (error O(step**2)), "forward" or "backward" (O(step)).
        step: relative step, a finite float from 1e-13 up (smaller steps are lost
            to rounding in float64; a step that cannot change x in x's own dtype is
            an error at the call); None picks it from the dtype (eps**(1/3) for
            central, eps**(1/2) otherwise). It is scaled by max(1, |x|).

    Examples:
        >>> AutoFiniteDifferences()
        AutoFiniteDifferences(method='central', step=None)
    """

    method: str = "central"
    step: float | None = None
    framework: ClassVar[str] = "finite_differences"
    package: ClassVar[str | None] = "diffiface.backends.finite_differences"
    needs: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        if self.method not in _FD_METHODS:
            raise DiffifaceValueError(
                f"AutoFiniteDifferences(method={self.method!r}): method must be 'central', "
                f"'forward' or 'backward', got {self.method!r}."
            )
        step = self.step
        if step is None:
            return
        if not (
            isinstance(step, numbers.Real)
            and not isinstance(step, bool)
            and math.isfinite(step)
            and step >= FD_MIN_STEP
        ):
            raise DiffifaceValueError(
                f"AutoFiniteDifferences(step={step!r}): step must be a positive float, "
                f"finite and at least {FD_MIN_STEP:g}, or None (chosen from the dtype). A "
                f"positive step under {FD_MIN_STEP:g} is lost to rounding in float64 (under "
                "2.2e-16 it cannot change x at all); step=None picks about 6e-06 for central "
                "differences in float64."
            )


@dataclasses.dataclass(frozen=True)
class SecondOrder(AbstractBackend):
    """A backend for second-order operators: ``outer`` differentiates ``inner``'s gradient.

    Build it with :func:`second_order`. ``outer.mode`` picks forward ("forward",
    the default) or reverse ("reverse") for the outer pass; ``inner.mode`` picks
    how the gradient is computed (reverse by default, "forward" for a gradient
    by forward mode). ``outer`` may be of another framework than ``inner``: it
    then differentiates ``inner``'s gradient across a bridge (see
    :func:`differentiate_with`), and ``AutoFiniteDifferences()`` as ``outer``
    takes finite differences of any backend's gradient.

    Examples:
        >>> second_order(AutoJax(mode="forward"), AutoJax(mode="reverse"))
        SecondOrder(outer=AutoJax(mode='forward'), inner=AutoJax(mode='reverse'))
    """

    outer: AbstractBackend
    inner: AbstractBackend
    framework: ClassVar[str] = "second_order"

    @property
    def differences_over_ad(self) -> bool:
        """Finite differences (outer) of an AD framework's gradient (inner)."""
        return self.outer.framework == "finite_differences" != self.inner.framework

    def __post_init__(self) -> None:
        for name in ("outer", "inner"):
            b = getattr(self, name)
            _instance(b, f"second_order(outer, inner): {name}", "{}()")
            if not isinstance(b, AbstractBackend) or isinstance(b, SecondOrder):
                raise DiffifaceTypeError(
                    f"second_order(outer, inner): {name} must be a first-order backend such as "
                    f"AutoJax(), got {b!r}."
                )


def _pattern_digest(p) -> str:
    """A digest of a pattern's nonzero positions (a scipy.sparse matrix or an array)."""
    if hasattr(p, "tocoo"):
        c = p.tocoo()
        nz = np.asarray(c.data) != 0
        flat = np.unique(c.row[nz].astype(np.int64) * p.shape[1] + c.col[nz])
    else:
        flat = np.flatnonzero(np.asarray(p) != 0)
    return hashlib.sha1(flat.astype(np.int64).tobytes()).hexdigest()


def second_order(outer: AbstractBackend, inner: AbstractBackend) -> SecondOrder | AutoSparse:
    """The backend where ``outer`` differentiates the gradient computed by ``inner``.

    An :class:`AutoSparse` outer or inner makes the whole combination sparse:
    ``second_order(AutoSparse(a), b)`` is ``AutoSparse(second_order(a, b))`` (a sparse
    Hessian whose compressed passes are Hessian-vector products of that combination).

    Examples:
        >>> second_order(AutoTorch(mode="reverse"), AutoTorch())
        SecondOrder(outer=AutoTorch(mode='reverse'), inner=AutoTorch(mode=None))
        >>> second_order(AutoSparse(AutoJax()), AutoJax()).backend
        SecondOrder(outer=AutoJax(mode=None), inner=AutoJax(mode=None))
    """
    sparse = [b for b in (outer, inner) if isinstance(b, AutoSparse)]
    if not sparse:
        return SecondOrder(outer, inner)
    if len(sparse) == 2 and dataclasses.replace(outer, backend=None) != dataclasses.replace(
        inner, backend=None
    ):
        raise DiffifaceValueError(
            f"second_order({outer!r}, {inner!r}): the two AutoSparse settings differ. Wrap "
            "one of them only: second_order(AutoSparse(outer, ...), inner)."
        )
    plain = [b.backend if isinstance(b, AutoSparse) else b for b in (outer, inner)]
    return dataclasses.replace(sparse[0], backend=SecondOrder(*plain))


_DETECTORS = ("global", "local")
# the vertex orders of the greedy colorings (diffiface.sparse.coloring.ORDERS: their one
# home is here, where AutoSparse checks its argument without importing scipy)
COLORING_ORDERS = (
    "largest_first",
    "natural",
    "random",
    "smallest_last",
    "incidence_degree",
    "dynamic_largest_first",
)
_ORDERS = (*COLORING_ORDERS, "best")


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class AutoSparse(AbstractBackend):
    """Sparse Jacobians and Hessians: a few compressed passes of ``backend`` instead of
    one per row or column.

    ``jacobian``, ``value_and_jacobian``, ``hessian`` and ``value_gradient_and_hessian``
    (and their ``prepare_*``) return a sparse matrix of shape ``(f(x).size, x.size)``
    (x and f(x) flattened in C order): ``jax.experimental.sparse.BCOO`` on JAX, a torch
    sparse CSR tensor on torch, ``scipy.sparse.csr_array`` on NumPy (autograd, finite
    differences, and NumPy inputs on any backend). Preparation detects the pattern and
    colors it once; a prepared call costs the compressed passes (one jvp, vjp or hvp per
    color, batched where the framework batches) and one gather. Every other operator
    runs on ``backend`` unchanged.

    Args:
        backend: the dense backend (or ``second_order(outer, inner)`` for Hessians).
            Its ``mode`` picks column coloring and jvps ("forward"), row coloring and
            vjps ("reverse"), or whichever needs fewer colors (None).
        sparsity_detector: "global" (a pattern valid for every x, read from the traced
            program: JAX's jaxpr, torch's aten graph, or the NumPy operations f makes on a
            traced array, for autograd, finite differences and an Array API f on MLX),
            "local" (the nonzeros of dense Jacobians at x and two nearby random points:
            valid near x only, with a ``SparsityWarning``), or the pattern itself, of
            shape ``(f(x).size, x.size)``: a ``scipy.sparse`` matrix, a torch sparse
            tensor, a JAX BCOO or BCSR, or a 2-D boolean array (kept as a boolean
            ``scipy.sparse.csr_array``).
        coloring: the vertex order of the greedy coloring: "largest_first" (the
            default), "natural", "random" (seeded), "smallest_last", "incidence_degree",
            "dynamic_largest_first", or "best" (each of them, the fewest colors kept;
            preparation takes a few times longer).
        bidirectional: Jacobians color rows and columns together (a star bicoloring)
            and run jvps and vjps together, as DifferentiationInterface.jl's
            ``MixedMode``: a pattern with dense rows and dense columns (an arrow) takes
            a few products where a column or row coloring takes n (or the better of
            those alone, where it takes fewer). Needs a backend ``mode`` of None and
            reverse products (not finite differences); Hessians are unchanged.
        decompression: for Hessians, "direct" (a star coloring: each nonzero read
            from one product) or "substitution" (an acyclic coloring: fewer colors,
            fewer Hessian-vector products; H recovered by solving along two-colored
            trees, with rounding that grows with their size, and a slower coloring).
        dense: return a dense array shaped like the dense operator's result instead.
        strict: check every call with one extra random product that no nonzero lies
            outside the pattern (a too-small given or local pattern); an error names it.

    Examples:
        >>> AutoSparse(AutoJax())
        AutoSparse(backend=AutoJax(mode=None), sparsity_detector='global', coloring='largest_first', dense=False, strict=False)
    """  # noqa: E501

    backend: AbstractBackend
    sparsity_detector: object = "global"
    coloring: str = "largest_first"
    dense: bool = False
    strict: bool = False
    bidirectional: bool = False
    decompression: str = "direct"
    package: ClassVar[str | None] = "diffiface.sparse.impl"
    needs: ClassVar[str | None] = "scipy"

    @property
    def framework(self) -> str:  # type: ignore[override]
        return self.backend.framework

    @property
    def mode(self) -> str | None:
        return getattr(self.backend, "mode", None)

    def __repr__(self) -> str:
        d = self.sparsity_detector
        if not isinstance(d, str):  # a given pattern: its shape and size, not its entries
            nnz = getattr(d, "nnz", None)
            nnz = int((d != 0).sum()) if nnz is None else nnz
            d = f"<pattern {d.shape[0]}x{d.shape[1]}, {nnz} nonzeros>"
        else:
            d = repr(d)
        both = ", bidirectional=True" if self.bidirectional else ""  # (shown when set)
        if self.decompression != "direct":
            both += f", decompression={self.decompression!r}"
        return (
            f"AutoSparse(backend={self.backend!r}, sparsity_detector={d}, coloring="
            f"{self.coloring!r}, dense={self.dense!r}, strict={self.strict!r}{both})"
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is AutoSparse and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        d = self.sparsity_detector
        d = d if isinstance(d, str) else ("pattern", tuple(d.shape), self._digest)
        return (
            self.backend,
            d,
            self.coloring,
            self.dense,
            self.strict,
            self.bidirectional,
            self.decompression,
        )

    def __post_init__(self) -> None:
        b = self.backend
        if b is None:  # (a template, see second_order)
            return
        _instance(b, "AutoSparse(backend): backend", "AutoSparse({}())")
        if not isinstance(b, AbstractBackend) or isinstance(b, AutoSparse):
            raise DiffifaceTypeError(
                f"AutoSparse(backend): backend must be a dense backend such as AutoJax() or "
                f"second_order(...), got {b!r}."
            )
        d = self.sparsity_detector
        if isinstance(d, str) and d not in _DETECTORS:
            raise DiffifaceValueError(
                f"AutoSparse(sparsity_detector={d!r}): use 'global', 'local', or the pattern "
                "itself (a scipy.sparse matrix or a 2-D boolean array)."
            )
        if not isinstance(d, str):  # a given pattern, kept in its canonical form
            from .sparse.patterns import given_pattern

            d = given_pattern(d)
            object.__setattr__(self, "sparsity_detector", d)
            object.__setattr__(self, "_digest", _pattern_digest(d))  # equal patterns: equal keys
        if self.coloring not in _ORDERS:
            raise DiffifaceValueError(
                f"AutoSparse(coloring={self.coloring!r}): use one of {', '.join(_ORDERS)}."
            )
        if self.decompression not in ("direct", "substitution"):
            raise DiffifaceValueError(
                f"AutoSparse(decompression={self.decompression!r}): use 'direct' (star "
                "coloring) or 'substitution' (acyclic coloring, fewer colors)."
            )
        for name in ("dense", "strict", "bidirectional"):
            if not isinstance(getattr(self, name), bool):
                raise DiffifaceTypeError(
                    f"AutoSparse({name}={getattr(self, name)!r}): {name} must be True or False."
                )
        if self.bidirectional and self.mode is not None:
            raise DiffifaceValueError(
                f"AutoSparse({b!r}, bidirectional=True): a bicoloring runs forward and "
                f"reverse products, but the backend's mode is {self.mode!r}; use the "
                "backend with mode=None."
            )
        if self.bidirectional and isinstance(self.backend, AutoFiniteDifferences):
            raise DiffifaceValueError(
                f"AutoSparse({b!r}, bidirectional=True): finite differences have no "
                "reverse products (each would take a whole Jacobian, 2n evaluations of f); "
                "leave bidirectional=False (column coloring, 1 + 2 x colors evaluations)."
            )


# the built-in backends, in the order shown to users
BUILTIN = (AutoJax, AutoTorch, AutoAutograd, AutoMLX, AutoFiniteDifferences)
