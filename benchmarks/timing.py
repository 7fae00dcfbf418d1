"""The benchmarks' one timing helper: one thread, interleaved repeats, medians.

Every study (overhead.py, mlp.py, nested.py, bridge.py) times its configurations
with :func:`interleaved`: after ``warmup`` untimed calls of each, ``rounds`` rounds
time every configuration in turn (so that they share the machine's noise), each
round giving the median of its calls; a configuration's time is the median of its
round medians, in µs per call. Ratios are then taken between these medians.

Import it before the frameworks do their first computation: it asks for one
thread (OpenMP, XLA's CPU backend, torch's intra-op pool).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")


def one_thread() -> None:
    """torch on one intra-op thread (when torch is installed); the environment
    variables above take care of OpenMP and XLA."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


def median_us(fn: Callable, repeat: int, warmup: int = 0) -> float:
    """The median time of one call of ``fn`` in µs, over ``repeat`` timed calls after
    ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def interleaved(
    configs: dict[str, Callable],
    repeat: int,
    rounds: int,
    warmup: int = 0,
    round_warmup: int = 0,
) -> dict[str, float]:
    """The median µs per call of each configuration, measured in interleaved rounds.

    Args:
        configs: label -> a call taking no arguments (blocking until its result is
            ready).
        repeat: the calls timed per configuration in all, split over the rounds
            (at least one per round).
        rounds: how many times every configuration is timed in turn.
        warmup: untimed calls of each configuration before the first round.
        round_warmup: untimed calls before each configuration's turn in a round.

    Returns:
        label -> the median over the rounds of each round's median, in µs.
    """
    for fn in configs.values():
        for _ in range(warmup):
            fn()
    per_round = max(1, repeat // rounds)
    samples: dict[str, list] = {label: [] for label in configs}
    for _ in range(rounds):
        for label, fn in configs.items():
            samples[label].append(median_us(fn, per_round, warmup=round_warmup))
    return {label: statistics.median(s) for label, s in samples.items()}
