"""Sparse results as torch sparse CSR tensors, and the index arrays of a sparse plan as
tensors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch


def as_input(x: Any) -> Any:
    """x as a tensor (a NumPy x: finite differences over torch)."""
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x)


class Format:
    """``result(data)``: a sparse CSR tensor of the pattern, on like's device."""

    def __init__(self, rows: np.ndarray, indices: np.ndarray, indptr: np.ndarray, mn, like):
        dev = like.device
        self.mn = tuple(mn)
        self.crow = torch.as_tensor(indptr, device=dev)
        self.col = torch.as_tensor(indices, device=dev)
        with warnings.catch_warnings():  # torch's once-per-process "beta" notice: here
            warnings.simplefilter("ignore", UserWarning)
            self(torch.zeros(len(indices), dtype=like.dtype, device=dev))

    def __call__(self, data: Any) -> Any:
        return torch.sparse_csr_tensor(  # (device: else torch's default device)
            self.crow, self.col, data, size=self.mn, device=data.device, check_invariants=False
        )


def index(idx: np.ndarray, like: Any) -> Any:
    return torch.as_tensor(idx, device=like.device)


def scatter(data: Any, flat: Any, total: int) -> Any:
    out = torch.zeros(total, dtype=data.dtype, device=data.device)
    return out.index_put((flat,), data)
