"""One package per framework. Importing a package registers its array hooks (which
import no framework); its ``backend`` module, imported on first use, imports the
framework and registers the implementation."""

from . import autograd as autograd
from . import jax as jax
from . import mlx as mlx
from . import torch as torch
