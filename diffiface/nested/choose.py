"""``FixedParams(strategy="auto")``: the nested-AD strategy measured once per plan.

The first time an inner gradient on a FixedParams meets an outer differentiation
(or when it is prepared), both strategies run the pass an outer loss pays for,
the inner gradient and the pullback of a cotangent through it to ``x`` and the
parameters, on stand-ins of the call's arrays (same shapes and dtypes), through
diffiface's own outer ``vjp`` (compiled on JAX). The faster one is kept per
function and signature; forward over reverse must win by ``MARGIN``, otherwise the
framework's own nesting stays. ``strategy="min_memory"`` measures the peak memory of
the same pass instead (XLA's memory analysis, torch's allocator events, tracemalloc)
and keeps the one that allocates less.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from .. import _checks
from .._cache import FunctionCache

ROR, FOR = "reverse_over_reverse", "forward_over_reverse"
MARGIN = 0.97  # forward over reverse must take under 97% of the time of the native nesting
MEASURED = ("gradient", "value_and_gradient")  # one rule for both: measured as gradient
REPEATS = 3

# Where a backend cannot measure memory: peak extra memory of the nested loss
# (benchmarks/nested.py, docs/nested_results.md, medium and large sizes): forward over
# reverse allocates less on JAX (17.0 against 17.8 MiB) and autograd (26.6 against
# 32.6 MiB), more on torch (29.5 against 16.0).
LESS_MEMORY = {"jax": FOR, "autograd": FOR, "torch": ROR}


@dataclasses.dataclass(frozen=True)
class Choice:
    """A measured choice: the strategy and what each strategy measured (seconds per
    pass for "auto", peak bytes for "min_memory"; empty where nothing was measured)."""

    strategy: str
    measured: dict
    unit: str = "s"

    def __str__(self) -> str:
        if self.unit == "s":
            each = (f"{s} {v * 1e3:.3g} ms" for s, v in self.measured.items())
        else:
            each = (f"{s} {v / 2**20:.3g} MiB" for s, v in self.measured.items())
        got = ", ".join(each)
        return f"{self.strategy} (measured: {got})" if got else self.strategy


_CHOICES = FunctionCache(per_function=16, clear=False)  # (f, signature) -> Choice


def signature(impl, xs: tuple, ctx: tuple, params: list | None = None) -> tuple:
    """Shapes and dtypes of the arrays (the same for a tracer and its value);
    ``params``: the leaves of ``ctx[0]`` where the caller has them."""
    from .._tree import flatten

    if params is None:
        params = flatten(ctx[0])[0] if ctx else []
    rest = flatten(ctx[1:])[0] if len(ctx) > 1 else []
    leaves = (*xs, *params, *rest)
    try:  # arrays only (the usual case): one pass without a generator
        return (impl.framework, *[(a.shape, a.dtype) for a in leaves])
    except AttributeError:
        return (impl.framework, *(_leaf(a) for a in leaves))


def _leaf(a) -> tuple:
    shape = getattr(a, "shape", None)
    return (type(a),) if shape is None else (shape, a.dtype)


def stored(fixed, key: tuple) -> Choice | None:
    """The choice made before for ``fixed``'s function and ``key`` (``(strategy,
    *signature)``), if any."""
    return _CHOICES.peek(fixed.f, key)


def unmeasured(impl, fixed) -> Choice:
    """The choice for an inner operator that is not measured (not a gradient, or a
    pytree x): the framework's own nesting, or for "min_memory" the table."""
    return Choice(
        LESS_MEMORY.get(impl.framework, ROR) if fixed.strategy == "min_memory" else ROR, {}
    )


def measured(impl, fixed, key: tuple, x, ctx: tuple) -> Choice:
    """Measure (time for "auto", peak memory for "min_memory") and store under ``key``."""
    how = measure_memory if fixed.strategy == "min_memory" else measure
    got = apart(lambda: how(impl, fixed, x, ctx))
    _CHOICES.put(fixed.f, key, got)
    return got


class _Thread(threading.local):
    measuring = False  # a class default: no exception raised and caught per read


_THREAD = _Thread()


def measuring() -> bool:
    """Whether this thread runs a measurement (``apart``)."""
    return _THREAD.measuring


def apart(fn):
    """``fn()`` on a thread of its own: outside the caller's traces and transforms
    (JAX keeps its trace state per thread, and its compiled calls dispatch slowly
    inside a trace), with diffiface's default settings."""
    out: list = []

    def run() -> None:
        _THREAD.measuring = True  # the measured passes leave nested_rule_counts alone
        try:
            out.append((True, fn()))
        except BaseException as exc:  # raised again on the caller's thread
            out.append((False, exc))

    thread = threading.Thread(target=run, name="diffiface-measure")
    thread.start()
    thread.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def measure(impl, fixed, x, ctx: tuple) -> Choice:
    """Time the inner gradient and its pullback under both strategies on stand-ins of
    ``x`` and the contexts (``ctx[0]``: the parameters); the framework's own nesting
    where forward over reverse fails or does not win by ``MARGIN``."""
    import diffiface as di

    backend = impl.backend

    def timed(inner, args: tuple) -> float:
        prep = di.prepare_vjp(inner, backend, *args)
        best = float("inf")
        for _ in range(REPEATS):
            start = time.perf_counter()
            impl.block(di.vjp(inner, backend, *args, prep=prep))
            best = min(best, time.perf_counter() - start)
        return best

    seconds = _each_strategy(impl, fixed, x, ctx, timed)
    wins = len(seconds) == 2 and seconds[FOR] < MARGIN * seconds[ROR]
    return Choice(FOR if wins else ROR, seconds)


def measure_memory(impl, fixed, x, ctx: tuple) -> Choice:
    """The peak memory of the same pass under both strategies (the backend's
    ``peak_bytes``); the framework's table (``LESS_MEMORY``) where it cannot measure,
    the framework's own nesting where forward over reverse fails or ties."""
    import diffiface as di

    backend = impl.backend

    def peak(inner, args: tuple) -> int | None:
        return impl.peak_bytes(lambda xp, w: di.vjp(inner, backend, xp, w), args)

    got = _each_strategy(impl, fixed, x, ctx, peak)
    if any(v is None for v in got.values()):
        return unmeasured(impl, fixed)
    less = len(got) == 2 and got[FOR] < got[ROR]
    return Choice(FOR if less else ROR, got, "bytes")


def _each_strategy(impl, fixed, x, ctx: tuple, how) -> dict:
    """``how(inner, ((x, params), w))`` per strategy, on stand-ins; forward over reverse
    left out where it raises (f cannot run it)."""
    import diffiface as di

    backend = impl.backend
    x, params, *rest = impl.standin((x, *ctx))
    rest = tuple(di.Constant(c) for c in rest)
    out = {}
    for strategy in (ROR, FOR):
        inner = _inner_gradient(fixed.f, strategy, backend, rest)
        try:
            w = impl.standin(inner((x, params)))
            out[strategy] = how(inner, ((x, params), w))
        except Exception:  # on stand-ins: the call itself runs (and explains) natively
            break
    return out


def _inner_gradient(f, strategy: str, backend, rest: tuple):
    """The inner gradient of one strategy, as a function of (x, parameters)."""
    import diffiface as di

    def inner(xp):
        return di.gradient(di.FixedParams(f, xp[1], strategy=strategy), backend, xp[0], *rest)

    return inner


_checks.not_counted(_inner_gradient(None, "auto", None, ()))  # a new one per measurement
