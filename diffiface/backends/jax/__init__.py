"""The jax backend: its implementation, nested-AD rules, bridge side, sparsity detector
and testing helpers. Importing the package registers its array hooks and imports no jax;
``backend`` (imported on first use) imports jax."""

from . import arrays as arrays
