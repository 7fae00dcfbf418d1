"""The torch backend: its implementation, nested-AD rules and bridge side."""

from . import impl as impl
from . import nested as nested
