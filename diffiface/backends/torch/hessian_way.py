"""Which formulation a prepared torch Hessian runs: ``torch.func.hessian`` (forward over
reverse, vmapped) or one double backward batched over the basis. Which is faster
depends on f (a batched backward falls back to a loop for some ops), so a prepared
problem times its first real calls, each way in turn, and keeps the faster: every
call runs f once, as the call itself would (no extra run of f, whose side effects a
measurement must not repeat)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

FUNC, BATCHED = "func", "batched"
KEY = "hessian way"  # a prepared problem's memo: the way, or the Trial choosing it
# the order of the timed calls: the first of each way warms up and is not counted
_ORDER = (BATCHED, FUNC, BATCHED, FUNC, BATCHED, FUNC)


class Trial:
    """The first calls of one prepared Hessian, timed under each way in turn."""

    __slots__ = ("calls", "times")

    def __init__(self) -> None:
        self.calls = 0
        self.times: list = []  # (way, its timer) of the counted calls

    def next_way(self) -> str:
        return _ORDER[self.calls] if self.calls < len(_ORDER) else BATCHED

    def timed(self, way: str, timer: Any) -> str | None:
        """Count one call; the faster way once every call of the trial has run and
        been timed."""
        if 2 <= self.calls < len(_ORDER):
            self.times.append((way, timer))
        self.calls += 1
        return self.choice()

    def choice(self) -> str | None:
        """The faster way, or None while a call is still to run or, on a GPU, still
        running (its time is read when its events are done, never waited for)."""
        if self.calls < len(_ORDER):
            return None
        best = {FUNC: math.inf, BATCHED: math.inf}
        for way, timer in self.times:
            seconds = timer.seconds()
            if seconds is None:
                return None
            best[way] = min(best[way], seconds)
        return FUNC if best[FUNC] < best[BATCHED] else BATCHED


class _Wall:
    """The wall-clock time of a call on the CPU."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def stop(self) -> _Wall:
        self.start = time.perf_counter() - self.start
        return self

    def seconds(self) -> float:
        return self.start


class _Events:
    """The time of a call's kernels on a GPU, by events recorded on its stream: reading
    it neither waits for them nor synchronises."""

    def __init__(self) -> None:
        import torch

        self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        self.start.record()

    def stop(self) -> _Events:
        self.end.record()
        return self

    def seconds(self) -> float | None:
        return self.start.elapsed_time(self.end) / 1e3 if self.end.query() else None


def run(fns: dict, prepared: bool, by_func: Callable[[], Any], batched: Callable[[], Any], x):
    """The Hessian by the way ``fns`` (the problem's memo) has chosen, or, for a prepared
    problem still choosing, by the trial's next way, timed (on a GPU, by events on x's
    stream). An unprepared problem runs the batched double backward; so does f that
    torch.func cannot run (its error decides it, once)."""
    way = fns.get(KEY)
    if way is None:
        if not prepared:
            return batched()
        way = fns[KEY] = Trial()
    if way == BATCHED:
        return batched()
    if way == FUNC:
        return by_func()
    trial, way = way, way.next_way()
    timer = _Events() if x.is_cuda else _Wall()
    if way == FUNC:
        try:
            h = by_func()
        except Exception:  # f that torch.func cannot vmap: the batched backward
            fns[KEY] = BATCHED
            return batched()
    else:
        h = batched()
    chosen = trial.timed(way, timer.stop())
    if chosen is not None:
        fns[KEY] = chosen
    return h
