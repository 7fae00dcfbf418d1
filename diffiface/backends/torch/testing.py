"""torch's arrays for the consistency matrix, and a torch.nn.Module for the "+module"
contexts (imports torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ...testing._kit import ArrayKit


class TorchKit(ArrayKit):
    kinds = ("F", "strided")  # (a transposed view is F)
    numpy_native = False
    native_sparse = True
    has_modules = True
    outer_pass = True

    def default_float(self) -> np.dtype:
        return np.dtype(str(torch.get_default_dtype()).split(".")[-1])

    def arrange(self, kind: str, a: np.ndarray) -> Any:
        if kind == "T":
            base = np.ascontiguousarray(a.T)
            return torch.from_numpy(base).permute(*reversed(range(a.ndim)))
        if kind == "strided":
            big = np.zeros((2 * a.shape[0], *a.shape[1:]), dtype=a.dtype)
            big[::2] = a
            return torch.from_numpy(big)[::2]
        t = torch.from_numpy(np.array(a))
        return t.mT.contiguous().mT if kind == "F" else t

    def constant(self, c: np.ndarray, like: Any) -> Any:
        return torch.as_tensor(c, dtype=like.dtype, device=like.device)

    def outer_gradient(self, fn: Callable, at: Any, dtype: np.dtype) -> Any:
        if isinstance(at, torch.Tensor):
            a = at.detach().clone()
        else:  # a NumPy array or a float (kinds numpy, float)
            a = torch.tensor(np.asarray(at, dtype=dtype))
        a.requires_grad_(True)
        (g,) = torch.autograd.grad(fn(a), a)
        return g

    def module(self, f: Callable, s: Any, dtype: np.dtype) -> Any:
        class Scaled(torch.nn.Module):  # (a class per module, as a user writes one)
            def __init__(self) -> None:
                super().__init__()
                param = torch.as_tensor(float(s), dtype=getattr(torch, dtype.name))
                self.s = torch.nn.Parameter(param)

            def forward(self, z: Any) -> Any:
                return f(z, self.s)

        return Scaled()


KIT = TorchKit()
