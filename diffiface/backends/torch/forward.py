"""The one lock of torch's forward mode.

torch keeps its forward-AD level in a process-wide global: two threads that run
forward mode at once corrupt it ("no level exists", or tangents silently lost).
Every forward-mode call of diffiface (the backend's jvp, jacfwd and
forward-over-reverse, the prepared runners, the bridges, the nested rules)
runs under this lock.
"""

from __future__ import annotations

import threading

import torch

FORWARD_LOCK = threading.RLock()


def jvp(*args, **kwargs):
    """``torch.func.jvp`` under the forward-mode lock."""
    with FORWARD_LOCK:
        return torch.func.jvp(*args, **kwargs)
