"""Crossing between frameworks: a layer above the operators.

Nothing below imports it: the operator shell hands it a call on arrays of another
framework through its one hook (``core.shell.on_foreign``), registered here.
"""

from ..core import shell as _shell
from .operators import cross

_shell.on_foreign(cross)
