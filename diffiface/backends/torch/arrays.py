"""What diffiface asks of torch outside its backend: registered on import, which imports
no torch (only an imported torch is asked)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..._arrays import Framework, register


class Torch(Framework):
    name = "torch"
    modules = ("torch",)
    sparse = "diffiface.backends.torch.sparse"
    testing = "diffiface.backends.torch.testing"
    numpy_module = "torch"
    backend_name = "AutoTorch"
    float_cast = "x.float()"
    # (less_memory_strategy: reverse over reverse, the default; the nested loss of
    # benchmarks/nested.py peaks at 16.0 MiB, forward over reverse at 29.5)

    def owns(self, leaf: Any) -> bool:
        return isinstance(leaf, sys.modules["torch"].Tensor)

    def stack(self, arrays: list) -> Any:
        return sys.modules["torch"].stack(arrays)

    def is_tracer(self, leaf: Any) -> bool:
        return False  # a torch.func wrapper holds values

    def says_foreign_arrays(self, message: str) -> bool:
        return "must be Tensor, not" in message

    def within_gradient(self, x: Any) -> bool:
        """A tensor that requires grad while grad mode is on; a ``torch.func`` grad
        wrapper (also under ``vmap``); a forward-mode dual tensor."""
        torch = sys.modules["torch"]
        from torch._C import _functorch as ft

        if x.requires_grad and torch.is_grad_enabled():
            return True
        fw = sys.modules.get("torch.autograd.forward_ad")
        if fw is not None and fw._current_level >= 0 and fw.unpack_dual(x).tangent is not None:
            return True
        seen = 0
        while ft.is_functorch_wrapped_tensor(x) and seen < 64:
            if ft.is_gradtrackingtensor(x):
                return True
            x = ft.get_unwrapped(x)
            seen += 1
        return bool(x.requires_grad and torch.is_grad_enabled())

    def values(self, leaf: Any) -> np.ndarray | None:
        try:
            t = leaf.detach().cpu().resolve_conj()
            if t.is_floating_point() and t.element_size() < 4:  # bfloat16, float16
                t = t.float()
            return t.numpy()
        except Exception:  # a torch.func wrapper: no values here
            return None

    def model_function(self, f: Any, params: Any) -> Any:
        torch = sys.modules.get("torch")  # a Module exists only once torch is imported
        if torch is None or not isinstance(f, torch.nn.Module):
            return None
        from .modules import model_function

        return model_function(f, params)

    def as_pattern_input(self, p: Any) -> Any:
        import scipy.sparse as sp

        torch = sys.modules.get("torch")
        if torch is None or not isinstance(p, torch.Tensor):
            return None
        t = p.detach().cpu()
        if t.layout == torch.strided:
            return t.numpy()
        t = t.to_sparse_coo().coalesce()
        if t.sparse_dim() != 2 or t.dense_dim() != 0:  # batched or hybrid: its dense form
            return t.to_dense().numpy()
        row, col = t.indices().numpy()
        return sp.coo_array((t.values().numpy(), (row, col)), shape=tuple(t.shape))


FRAMEWORK = register(Torch())
