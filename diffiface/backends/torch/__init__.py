"""The torch backend: its implementation, nested-AD rules, bridge side, Module handling,
sparsity detector and testing helpers. Importing the package registers its array hooks
and imports no torch; ``backend`` (imported on first use) imports torch."""

from . import arrays as arrays
