"""The autograd backend itself (imported on first use; imports autograd): its implementation and
nested-AD rules."""

from . import impl as impl
from . import nested as nested
