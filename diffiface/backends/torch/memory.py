"""Peak memory of one call, for ``FixedParams(strategy="min_memory")``: CUDA's
allocator statistics on a GPU, the profiler's allocation events on the CPU."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator

import torch

from ..._tree import flatten


def peak_bytes(fn: Callable, args: tuple) -> int | None:
    """The peak of what ``fn(*args)`` allocates beyond what was allocated before it
    (None on a device without either measure)."""
    leaves = [a for a in flatten(args)[0] if isinstance(a, torch.Tensor)]
    device = leaves[0].device if leaves else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn(*args)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    if device.type != "cpu":
        return None
    return _cpu_peak_bytes(fn, args)


def _cpu_peak_bytes(fn: Callable, args: tuple) -> int:
    """The peak of the running sum of the profiler's ``[memory]`` events (allocations
    positive, frees negative) during the call. The profiler's own lines on starting and
    stopping ("External init callback must run in same thread", USDT probes), which
    are about diffiface's use of it and nothing the caller did, are kept off the
    terminal; f's output is not."""
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _quiet():
            prof.__enter__()
        try:
            fn(*args)
        finally:
            with _quiet():
                prof.__exit__(None, None, None)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        current += e.nbytes()
        peak = max(peak, current)
    return peak


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """File descriptors 1 and 2 sent to the null device (the profiler writes from C++)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
