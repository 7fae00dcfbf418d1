"""The finite-differences backend (NumPy)."""

from . import impl as impl
