"""What diffiface asks of autograd outside its backend: registered on import, which
imports no autograd. Its arrays are NumPy's; a box is autograd's while it traces."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..._arrays import Framework, register, values


class Autograd(Framework):
    name = "autograd"
    modules = ("autograd",)
    testing = "diffiface.backends.autograd.testing"
    numpy_module = "autograd.numpy"
    backend_name = "AutoAutograd"
    arrays_are_numpy = True
    # peak extra memory of the nested loss (benchmarks/nested.py): 26.6 against 32.6 MiB
    less_memory_strategy = "forward_over_reverse"

    def owns(self, leaf: Any) -> bool:
        return isinstance(leaf, sys.modules["autograd.tracer"].Box)

    def within_gradient(self, x: Any) -> bool:
        return True  # a box is traced by autograd's grad

    def stack(self, arrays: list) -> Any:  # (boxes, traced: autograd's own stack)
        return sys.modules["autograd.numpy"].stack(arrays)

    def open_containers(self, args: tuple, leaves: list) -> tuple | None:
        tracer = sys.modules.get("autograd.tracer")
        if tracer is None or not any(
            isinstance(leaf, tracer.Box) and isinstance(leaf._value, dict | list | tuple)
            for leaf in leaves
        ):
            return None
        from .impl import open_boxes

        return open_boxes(args)

    def values(self, leaf: Any) -> np.ndarray | None:
        return values(leaf._value)  # the boxed value


FRAMEWORK = register(Autograd())
