"""diffiface's exception and warning classes (a leaf module: it imports nothing)."""

from __future__ import annotations


class DiffifaceTypeError(TypeError):
    """A wrong type was passed to a diffiface operator."""


class DiffifaceValueError(ValueError):
    """A wrong value was passed to a diffiface operator."""


class DisconnectedWarning(UserWarning):
    """f's output does not depend on x: every derivative is zero.

    ``di.options(strict=True)`` (or ``di.config.strict = True``) makes it an error.
    """


class RecompileWarning(UserWarning):
    """diffiface compiles the same code again for a new function object on every call
    (a lambda or a def made inside the loss): define the function once outside."""


class FrameworkMissingError(ImportError):
    """A backend's framework is not installed."""


class SparsityWarning(UserWarning):
    """A sparsity pattern that may miss nonzeros: detected locally (at a few points), or
    widened to dense for an operation the global detector does not know."""
