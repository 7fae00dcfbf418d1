"""What the sparse benchmark's sections share: points, one-shot and paired timings,
dense copies of sparse results, and a prepared plan's colors."""

from __future__ import annotations

import statistics
import time

import numpy as np

import diffiface as di


def point(n, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, n)


def seconds(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def dense_of(a):
    if hasattr(a, "todense"):
        a = a.todense()
    if hasattr(a, "to_dense"):
        a = a.to_dense()
    if hasattr(a, "toarray"):
        a = a.toarray()
    return np.asarray(a)


def plan_of(prep, op):
    from diffiface.sparse.plan import KEY

    return prep._probs[op].fns[KEY]


def colors_of(prep, op) -> int:
    """The number of colors of a prepared sparse operator: the public accessor where
    diffiface has one (``di.ncolors(prep)`` or ``prep.ncolors``), else its plan's."""
    if hasattr(di, "ncolors"):
        return int(di.ncolors(prep))
    got = getattr(prep, "ncolors", None)
    if got is not None:
        return int(got() if callable(got) else got)
    return int(plan_of(prep, op).colors)


def paired(configs: dict, rounds: int, budget: float = 0.2) -> dict:
    """The median µs per call of each configuration over ``rounds`` rounds that time
    every configuration in turn (each round: the median of as many calls as fit in
    ``budget`` seconds, at least one); each configuration is called once first."""
    counts = {}
    for label, fn in configs.items():
        _, t = seconds(fn)
        counts[label] = max(1, min(200, int(budget / max(t, 1e-6))))
    samples: dict = {label: [] for label in configs}
    for _ in range(rounds):
        for label, fn in configs.items():
            times = [seconds(fn)[1] for _ in range(counts[label])]
            samples[label].append(statistics.median(times))
    return {label: statistics.median(s) * 1e6 for label, s in samples.items()}


def fmt(v, digits=3) -> str:
    """A number for a table cell: '—' for None, 3 significant digits."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)) or (float(v).is_integer() and abs(v) < 1e7):
        return str(int(v))
    return f"{v:.{digits}g}"


def nnz_of(a) -> int:
    """The stored entries of a sparse result (BCOO, torch sparse, scipy.sparse)."""
    if hasattr(a, "nse"):
        return int(a.nse)
    if hasattr(a, "_nnz"):
        return int(a._nnz())
    return int(a.nnz)
