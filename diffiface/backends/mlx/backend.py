"""The MLX backend itself (imported on first use; imports mlx): its implementation."""

from . import impl as impl
