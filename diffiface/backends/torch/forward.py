"""The one lock of torch's forward mode, and its jvp on dual numbers.

torch keeps its forward-AD level in a process-wide global: two threads that run
forward mode at once corrupt it ("no level exists", or tangents silently lost).
Every forward-mode call of diffiface (the backend's jvp, jacfwd and
forward-over-reverse, the prepared runners, the bridges, the nested rules)
runs under this lock.
"""

from __future__ import annotations

import threading

import torch
import torch.autograd.forward_ad as fwAD

FORWARD_LOCK = threading.RLock()


def jvp(*args, **kwargs):
    """``torch.func.jvp`` under the forward-mode lock."""
    with FORWARD_LOCK:
        return torch.func.jvp(*args, **kwargs)


def dual_jvp(fn, xs: tuple, vs: tuple, ctx: tuple):
    """(f(x), J v) on forward-mode dual numbers (a zero tangent where y does not depend
    on x, as torch.func.jvp gives)."""
    with fwAD.dual_level():
        y, t = fwAD.unpack_dual(fn(tuple(map(fwAD.make_dual, xs, vs)), *ctx))
    return y, (torch.zeros_like(y) if t is None else t)
