"""Backend types: frozen dataclasses that name a framework and its options.

This module imports no framework, so creating a backend costs nothing.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import ClassVar

from ._errors import DiffifaceValueError

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
            raise TypeError(
                "AbstractBackend cannot be instantiated: use AutoJax(), AutoTorch(), "
                "AutoAutograd() or AutoFiniteDifferences()."
            )


def _check_mode(backend: AbstractBackend, mode: object) -> None:
    if mode not in _MODES:
        raise ValueError(
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
    package: ClassVar[str | None] = "diffiface.backends.jax"
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
    package: ClassVar[str | None] = "diffiface.backends.torch"
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
    package: ClassVar[str | None] = "diffiface.backends.autograd"
    needs: ClassVar[str | None] = "autograd"

    def __post_init__(self) -> None:
        _check_mode(self, self.mode)


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
            raise ValueError(
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
    def crosses(self) -> bool:
        """The outer AD framework differentiates another framework's gradient (a bridge)."""
        o, i = self.outer.framework, self.inner.framework
        return o != i and o != "finite_differences"

    @property
    def differences_over_ad(self) -> bool:
        """Finite differences (outer) of an AD framework's gradient (inner)."""
        return self.outer.framework == "finite_differences" != self.inner.framework

    def __post_init__(self) -> None:
        for name in ("outer", "inner"):
            b = getattr(self, name)
            if isinstance(b, type) and issubclass(b, AbstractBackend):
                raise TypeError(
                    f"second_order(outer, inner): {name} must be an instance, got the class "
                    f"{b.__name__}. Did you mean {b.__name__}()?"
                )
            if not isinstance(b, AbstractBackend) or isinstance(b, SecondOrder):
                raise TypeError(
                    f"second_order(outer, inner): {name} must be a first-order backend such as "
                    f"AutoJax(), got {b!r}."
                )


def second_order(outer: AbstractBackend, inner: AbstractBackend) -> SecondOrder:
    """The backend where ``outer`` differentiates the gradient computed by ``inner``.

    Examples:
        >>> second_order(AutoTorch(mode="reverse"), AutoTorch())
        SecondOrder(outer=AutoTorch(mode='reverse'), inner=AutoTorch(mode=None))
    """
    return SecondOrder(outer, inner)


# the built-in backends, in the order shown to users
BUILTIN = (AutoJax, AutoTorch, AutoAutograd, AutoFiniteDifferences)
