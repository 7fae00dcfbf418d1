"""The autograd backend: its implementation, nested-AD rules, bridge side and testing
helpers. Importing the package registers its array hooks and imports no autograd;
``backend`` (imported on first use) imports autograd."""

from . import arrays as arrays
