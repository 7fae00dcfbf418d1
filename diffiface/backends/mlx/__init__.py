"""The MLX backend: its implementation and testing helpers. Importing the package
registers its array hooks and imports no mlx; ``backend`` (imported on first use)
imports mlx."""

from . import arrays as arrays
