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

    __slots__ = ("best", "calls")

    def __init__(self) -> None:
        self.calls = 0
        self.best = {FUNC: math.inf, BATCHED: math.inf}

    def next_way(self) -> str:
        return _ORDER[self.calls]

    def timed(self, way: str, seconds: float) -> str | None:
        """Count one call; the faster way once every call of the trial has run."""
        if self.calls >= 2:
            self.best[way] = min(self.best[way], seconds)
        self.calls += 1
        if self.calls < len(_ORDER):
            return None
        return FUNC if self.best[FUNC] < self.best[BATCHED] else BATCHED


def run(fns: dict, prepared: bool, by_func: Callable[[], Any], batched: Callable[[], Any]):
    """The Hessian by the way ``fns`` (the problem's memo) has chosen, or, for a prepared
    problem still choosing, by the trial's next way, timed. An unprepared problem runs
    the batched double backward; so does f that torch.func cannot run (its error
    decides it, once)."""
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
    start = time.perf_counter()
    if way == FUNC:
        try:
            h = by_func()
        except Exception:  # f that torch.func cannot vmap: the batched backward
            fns[KEY] = BATCHED
            return batched()
    else:
        h = batched()
    chosen = trial.timed(way, time.perf_counter() - start)
    if chosen is not None:
        fns[KEY] = chosen
    return h
