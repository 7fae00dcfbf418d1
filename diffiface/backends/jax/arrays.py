"""What diffiface asks of JAX outside its backend: registered on import, which imports
no jax (only an imported jax is asked)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import numpy as np

from ..._arrays import Framework, register

# what jax's errors say when a jax function is given another framework's array
_FOREIGN_ARRAYS = ("Error interpreting argument", "abstract array", "valid JAX type")


class Jax(Framework):
    name = "jax"
    modules = ("jax", "jaxlib")
    sparse = "diffiface.backends.jax.sparse"
    testing = "diffiface.backends.jax.testing"
    numpy_module = "jax.numpy"
    backend_name = "AutoJax"
    # peak extra memory of the nested loss (benchmarks/nested.py): 17.0 against 17.8 MiB
    less_memory_strategy = "forward_over_reverse"

    def owns(self, leaf: Any) -> bool:
        jax = sys.modules["jax"]
        return isinstance(leaf, jax.Array | jax.core.Tracer)

    def stack(self, arrays: list) -> Any:
        return sys.modules["jax"].numpy.stack(arrays)

    def is_tracer(self, leaf: Any) -> bool:
        return isinstance(leaf, sys.modules["jax"].core.Tracer)

    def says_foreign_arrays(self, message: str) -> bool:
        return any(s in message for s in _FOREIGN_ARRAYS)

    def within_gradient(self, x: Any) -> bool:
        """A tracer of ``jax.grad``, ``jvp``, ``vjp``, ``linearize`` (through ``vmap``
        and ``jit`` tracers wrapped around or inside it)."""
        return self.is_tracer(x) and _differentiated(x)

    def use_float64(self) -> None:
        import jax

        jax.config.update("jax_enable_x64", True)

    def settings(self) -> str | None:
        if importlib.util.find_spec("jax") is None:
            return None
        import jax

        return f"jax x64   {'on' if jax.config.jax_enable_x64 else 'off'}"

    def knows_tree_nodes(self) -> bool:
        return "jax" in sys.modules  # (no JAX node exists before jax is imported)

    def tree_node(self, leaf: Any) -> Any:
        from .trees import node

        return node(leaf)

    def values(self, leaf: Any) -> np.ndarray | None:
        try:
            a = np.asarray(leaf)
        except Exception:  # a tracer: no values yet
            return None
        return a.astype(np.float32) if a.dtype.kind == "V" else a  # bfloat16

    def as_pattern_input(self, p: Any) -> Any:
        import scipy.sparse as sp

        jsparse = sys.modules.get("jax.experimental.sparse")
        if jsparse is None or not isinstance(p, jsparse.JAXSparse):
            return None  # (a dense jax array: NumPy reads it as it is)
        bcoo = p if isinstance(p, jsparse.BCOO) else getattr(p, "to_bcoo", lambda: None)()
        if bcoo is None or bcoo.ndim != 2 or bcoo.n_batch or bcoo.n_dense:
            return np.asarray(p.todense())
        row, col = np.asarray(bcoo.indices).T
        data = np.asarray(bcoo.data)
        real = (row < bcoo.shape[0]) & (col < bcoo.shape[1])  # JAX pads with out-of-range
        return sp.coo_array((data[real], (row[real], col[real])), shape=bcoo.shape)


def _differentiated(t: Any) -> bool:
    from jax._src.interpreters import ad

    tracer_types = tuple(
        cls for cls in (getattr(ad, "JVPTracer", None), getattr(ad, "LinearizeTracer", None)) if cls
    )
    seen = 0
    while t is not None and seen < 64:  # walk nested tracers (vmap of grad, grad of vmap)
        if isinstance(t, tracer_types):
            return True
        t = next(
            (getattr(t, a) for a in ("val", "primal", "tracer") if getattr(t, a, None) is not None),
            None,
        )
        seen += 1
    return False


FRAMEWORK = register(Jax())
