"""The jax backend itself (imported on first use; imports jax): its implementation and
nested-AD rules."""

from . import impl as impl
from . import nested as nested
