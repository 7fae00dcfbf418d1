"""``FixedParams(strategy="auto")``: the nested-AD strategy measured once per code and
signature.

A measurement is kept per *code* (``f``'s code object, or its class; for a closure
also the kinds of the values it closes over; for ``functools.partial`` and bound
methods those of the function and what is bound) and *signature* (shapes and dtypes
of x, the parameters and the contexts), so a loss that makes its inner function anew
on every call measures once. It is made once per process, shared between threads,
and runs f as often as the strategy of each call does, except: JAX traces f once more
(one trace per code and signature), and a call whose forward-over-reverse rule fails
(an operation of f without a forward-mode rule) runs f again by the framework's own
nesting:

* torch and autograd time the first real calls, the strategies taking turns
  (reverse over reverse first), from the inner call to the end of its part of the
  outer pass (``Trial``). Once each has ``REPEATS`` timed calls, the faster is kept;
  forward over reverse must win by ``MARGIN``. Where the rule fails on a call (no
  forward-mode rule for an operation of f), that call falls back to the framework's
  own nesting and the measurement keeps it. An exception raised by f itself reaches
  the caller as on a plain call and decides nothing.
* JAX runs its calls compiled, outside diffiface: f is traced once into a jaxpr
  (``jax.closure_convert``) and both strategies' passes are compiled from it and
  timed on stand-ins of the call's arrays.

``strategy="min_memory"`` compares the peak memory of the same pass where it can be
measured without running f (XLA's memory analysis of the compiled passes, JAX), and
otherwise follows the framework's ``less_memory_strategy``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import warnings
from collections import OrderedDict

from .. import _checks
from .._arrays import named
from .._cache import FunctionCache, code_of
from ..core.operator import names
from ..core.signature import entered

ROR, FOR = "reverse_over_reverse", "forward_over_reverse"
MARGIN = 0.97  # forward over reverse must take under 97% of the time of the native nesting
MEASURED = names(family="gradient")  # one rule for both: measured as gradient
REPEATS = 3  # timed passes per strategy (on stand-ins: rounds of ROUND_S each)
ROUND_S = 0.01
MOST_CALLS = 12  # real calls timed at most (a call is timed once its outer pass ran); as
# many more run untimed, waiting for those outer passes, before the choice is made anyway
KEPT = 4096  # measurements kept (by code and signature)
NEW_OBJECTS = 5  # warn when a function that cannot share its measurement arrives anew


def less_memory(impl) -> str:
    """Where a backend cannot measure memory without running f: the strategy its
    framework declares (``Framework.less_memory_strategy``, from the peak extra memory
    of the nested loss in benchmarks/nested.py); reverse over reverse for others."""
    framework = named(impl.traits.arrays)
    return ROR if framework is None else framework.less_memory_strategy


# framework -> how it measures: Marks (timed real calls) or a converter (stand-ins);
# EAGER: framework -> whether an outer pass runs eagerly (JAX outside jit), where its
# rule costs a trace of f per call and "auto" keeps the framework's own nesting
MARKS: dict = {}
CONVERT: dict = {}
EAGER: dict = {}


@dataclasses.dataclass(frozen=True)
class Marks:
    """How a framework times the outer pass of a real call.

    Attributes:
        outputs: ``(arrays, sample) -> arrays``: the inner results, marked so that the
            outer pass calls ``sample.begin()`` when it reaches them and
            ``sample.end()`` when it is past them.
        inputs: ``(array, sample) -> array``: x and the parameters, marked to call
            ``sample.end()`` when the outer pass reaches them (None: ``outputs``
            sees the end itself).
    """

    outputs: object
    inputs: object = None


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


# ------------------------------------------------------------------ keys


def signature(impl, xs: tuple, ctx: tuple) -> tuple:
    """The framework, and shapes and dtypes of the arrays (the same for a tracer and its
    value), other values by their type (a measurement holds for every value): the one
    signature of entered arguments (``core.signature.entered``)."""
    return (impl.framework, *entered(_leaf, xs, ctx))


def _leaf(a) -> tuple:
    shape = getattr(a, "shape", None)
    return (type(a),) if shape is None else (shape, a.dtype)


# ------------------------------------------------------------------ the store

_LOCK = threading.RLock()  # one measurement at a time: racing first uses wait for it
_STORE: OrderedDict = OrderedDict()  # (strategy, code, *signature) -> Choice | Trial
_BY_OBJECT = FunctionCache(per_function=16, clear=False)  # f without code: per object
_NEW: dict = {}  # class -> objects of it measured one by one (for the warning)


def lookup(impl, fixed, key: tuple, x, ctx: tuple):
    """The choice (or the measurement under way) for ``fixed``'s code and ``key``
    (``(strategy, *signature)``); the first call measures (``measure``), once."""
    code = code_of(fixed.f)
    full = (code, *key)
    got = _STORE.get(full) if code is not None else _BY_OBJECT.peek(fixed.f, key)
    if got is not None:
        return got
    with _LOCK:
        got = _STORE.get(full) if code is not None else _BY_OBJECT.peek(fixed.f, key)
        if got is not None:
            return got
        got = measure(impl, fixed, x, ctx)  # f's exception: nothing stored
        if isinstance(got, Trial):
            got.full = full if code is not None else None
        if code is None:
            _BY_OBJECT.put(fixed.f, key, got)
            _warn_unshared(fixed.f)
        else:
            _keep(full, got)
    return got


def _keep(full: tuple, got) -> None:
    with _LOCK:
        _STORE[full] = got
        _STORE.move_to_end(full)
        while len(_STORE) > KEPT:
            _STORE.popitem(last=False)


def _warn_unshared(f) -> None:
    n = _NEW[type(f)] = _NEW.get(type(f), 0) + 1
    if n == NEW_OBJECTS:
        warnings.warn(
            f"FixedParams(f, strategy='auto') measured the nested-AD strategy anew for "
            f"{n} objects of {type(f).__name__}: f has no Python code of its own to share "
            "a measurement by, and it arrives as a new object on each call. Define f once "
            "outside the loss (or wrap it in a def), or name the strategy: "
            "FixedParams(f, params, strategy='reverse_over_reverse').",
            _checks.RecompileWarning,
            stacklevel=2,
        )


def eager(impl, fixed, x) -> bool:
    """Whether "auto" keeps the framework's own nesting unmeasured for this call: an
    outer pass that runs eagerly, where the measured (compiled) passes do not apply."""
    check = EAGER.get(impl.framework)
    return check is not None and fixed.strategy == "auto" and check(x)


def forget() -> None:
    """Drop every measurement (the next call of each code and signature measures)."""
    with _LOCK:
        _STORE.clear()
        _BY_OBJECT.clear()
        _NEW.clear()


def unmeasured(impl, fixed) -> Choice:
    """The choice for an inner operator that is not measured (not a gradient, or a
    pytree x): the framework's own nesting, or for "min_memory" the framework's
    less-memory strategy."""
    return Choice(less_memory(impl) if fixed.strategy == "min_memory" else ROR, {})


def measure(impl, fixed, x, ctx: tuple):
    """A new measurement for a code and signature: a ``Choice`` where it is made at
    once (on stand-ins, or from the table), else a ``Trial`` of the first real calls."""
    framework = impl.framework
    if framework in CONVERT:
        how = stand_in_memory if fixed.strategy == "min_memory" else stand_in_time
        return stand_in(impl, fixed, x, ctx, how)
    if fixed.strategy == "min_memory" or framework not in MARKS:
        return unmeasured(impl, fixed)
    return Trial(MARKS[framework])


# ------------------------------------------------------------------ real calls


class Sample:
    """One timed real call: its own time, then its part of the outer pass."""

    __slots__ = ("failed", "first", "forward", "last", "strategy")

    def __init__(self, strategy: str) -> None:
        self.strategy = strategy
        self.forward = self.first = self.last = None
        self.failed = False  # the rule failed in the outer pass (and fell back)

    def begin(self) -> None:
        """The outer pass reached the inner results."""
        if self.forward is not None and self.first is None:
            self.first = time.perf_counter()

    def end(self) -> None:
        """The outer pass went past (a part of) the inner call."""
        if self.first is not None:
            self.last = time.perf_counter()

    def seconds(self) -> float | None:
        if self.last is None:
            return None
        return self.forward + self.last - self.first


class Trial:
    """The first real calls of one code and signature, timed under the strategies in
    turn; then the faster is kept (``choice``)."""

    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.full = None  # the key it is stored under, to store the choice
        self.choice: Choice | None = None
        self._lock = threading.Lock()
        self._samples: list = []
        self._waited = 0  # calls run untimed after MOST_CALLS, waiting for their outer passes
        self._failed = False

    def take(self) -> tuple[str, Sample | None]:
        """The strategy of the next call, and its Sample while measuring."""
        choice = self.choice  # decided: no lock (a Trial kept per object stays in use)
        if choice is not None:
            return choice.strategy, None
        with self._lock:
            if self.choice is None:
                self._decide()
            if self.choice is not None:
                return self.choice.strategy, None
            if len(self._samples) >= MOST_CALLS:  # the outer passes of those may yet come
                self._waited += 1
                return ROR, None
            sample = Sample((ROR, FOR)[len(self._samples) % 2])
            self._samples.append(sample)
            return sample.strategy, sample

    def drop(self, sample: Sample, failed: bool = False) -> None:
        """Forget a call that raised; ``failed``: the rule cannot run this f."""
        with self._lock:
            if sample in self._samples:
                self._samples.remove(sample)
            self._failed = self._failed or failed

    def _decide(self) -> None:
        timed: dict = {ROR: [], FOR: []}
        for s in self._samples:
            seconds = s.seconds()
            if seconds is not None:
                timed[s.strategy].append(seconds)
        self._failed = self._failed or any(s.failed for s in self._samples)
        enough = all(len(v) >= REPEATS for v in timed.values())
        if not (self._failed or enough or self._waited >= MOST_CALLS):
            return
        best = {s: min(v) for s, v in timed.items() if v and not (self._failed and s == FOR)}
        wins = len(best) == 2 and best[FOR] < MARGIN * best[ROR]
        self.choice = Choice(FOR if wins else ROR, best)
        if self.full is not None:
            _keep(self.full, self.choice)

    @property
    def strategy(self) -> str | None:
        return None if self.choice is None else self.choice.strategy

    def __str__(self) -> str:
        if self.choice is not None:
            return str(self.choice)
        return f"auto (timing the first calls: {len(self._samples)} so far)"


class _Thread(threading.local):
    measuring = False  # a class default: no exception raised and caught per read
    sample = None  # the Sample of the timed call running on this thread


_THREAD = _Thread()


def measuring() -> bool:
    """Whether this thread runs a measurement on stand-ins (``apart``)."""
    return _THREAD.measuring


def timed_sample() -> Sample | None:
    """The Sample of the real call this thread times, if any (a rule that fails in the
    outer pass then falls back to the framework's own nesting, and says so)."""
    return _THREAD.sample


class Timed:
    """``view`` (the implementation or its rule view) whose gradient operators time
    the call for ``trial``; ``impl``: the framework's own nesting, for a fallback."""

    __slots__ = ("_impl", "_sample", "_trial", "_view")

    def __init__(self, view, impl, trial: Trial, sample: Sample) -> None:
        self._view, self._impl, self._trial, self._sample = view, impl, trial, sample

    def __getattr__(self, name: str):
        if name in MEASURED:
            return functools.partial(self._run, name)
        return getattr(self._view, name)

    def _run(self, name: str, prob, xs: tuple, ctx: tuple):
        from .._tree import flatten, unflatten

        sample, marks = self._sample, self._trial.marks
        raised: list = []
        watched = _watched(prob, raised)
        start = time.perf_counter()
        given = xs, ctx
        if marks.inputs is not None:
            xs = tuple(marks.inputs(a, sample) for a in xs)
            leaves, tree = flatten(ctx)
            ctx = unflatten(tree, [marks.inputs(a, sample) for a in leaves])
        outer, _THREAD.sample = _THREAD.sample, sample
        try:
            out = getattr(self._view, name)(watched, xs, ctx)
        except Exception:
            if sample.strategy == ROR or raised:  # f's own exception: as on a plain call
                self._trial.drop(sample)
                raise
            self._trial.drop(sample, failed=True)  # the rule cannot run this f
            return getattr(self._impl, name)(prob, *given)
        finally:
            _THREAD.sample = outer  # (a nested inner call inside f has its own)
        if name == "gradient":
            out = marks.outputs(out, sample)
        else:
            y, gs = out
            y, *gs = marks.outputs((y, *gs), sample)
            out = (y, tuple(gs))
        sample.forward = time.perf_counter() - start
        return out


def _watched(prob, raised: list):
    """A copy of the Problem whose f notes an exception of its own in ``raised``."""
    from ..core.problem import Problem

    f = prob.f

    def watched(*args):
        try:
            return f(*args)
        except BaseException:
            raised.append(True)
            raise

    return Problem(
        prob.op, prob.backend, prob.impl, watched, prob.treedef, prob.single, prob.scalar, prob.aux
    )


# ------------------------------------------------------------------ stand-ins


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


def stand_in(impl, fixed, x, ctx: tuple, how) -> Choice:
    """``how(impl, passes)`` on the passes of both strategies, built from one trace of
    f (its jaxpr, on the caller's thread: an exception of f reaches the caller) and run
    on stand-ins of the arrays on a thread of their own."""
    import diffiface as di

    fn, consts = CONVERT[impl.framework](fixed.f, x, ctx[0], ctx[1:])
    backend = impl.backend
    given = (x, ctx[0], consts)

    def passes() -> dict:
        x, params, consts = impl.standin(given)  # here: outside the caller's trace
        rest = tuple(di.Constant(c) for c in consts)
        out = {}
        for strategy in (ROR, FOR):
            inner = _inner_gradient(fn, strategy, backend, rest)
            try:
                w = impl.standin(inner((x, params)))
                out[strategy] = (inner, ((x, params), w))
            except Exception:  # the rule cannot run this f: the native nesting stays
                break
        return how(impl, out)

    return apart(passes)


def stand_in_time(impl, passes: dict) -> Choice:
    """The faster pass (forward over reverse by ``MARGIN``): the best of ``REPEATS``
    rounds, each timing every strategy in turn for about ``ROUND_S`` (the medians of
    its calls), so that both share the machine's noise."""
    import diffiface as di

    backend = impl.backend
    runs = {}
    for strategy, (inner, args) in passes.items():
        prep = di.prepare_vjp(inner, backend, *args)
        runs[strategy] = lambda inner=inner, args=args, prep=prep: impl.block(
            di.vjp(inner, backend, *args, prep=prep)
        )
    seconds = {s: float("inf") for s in runs}
    for _ in range(REPEATS):
        for strategy, run in runs.items():
            seconds[strategy] = min(seconds[strategy], _median_call(run))
    wins = len(seconds) == 2 and seconds[FOR] < MARGIN * seconds[ROR]
    return Choice(FOR if wins else ROR, seconds)


def _median_call(run) -> float:
    """The median time of ``run()`` over about ``ROUND_S`` of calls (at least 3)."""
    times: list = []
    spent = 0.0
    while len(times) < 3 or (spent < ROUND_S and len(times) < 100):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return sorted(times)[len(times) // 2]


def stand_in_memory(impl, passes: dict) -> Choice:
    """The pass of lower peak memory (the backend's ``peak_bytes``; the table where it
    cannot measure)."""
    import diffiface as di

    backend = impl.backend
    got = {}
    for strategy, (inner, args) in passes.items():
        got[strategy] = impl.peak_bytes(
            lambda xp, w, inner=inner: di.vjp(inner, backend, xp, w), args
        )
    if any(v is None for v in got.values()):
        return Choice(less_memory(impl), {})
    less = len(got) == 2 and got[FOR] < got[ROR]
    return Choice(FOR if less else ROR, got, "bytes")


def _inner_gradient(f, strategy: str, backend, rest: tuple):
    """The inner gradient of one strategy, as a function of (x, parameters)."""
    import diffiface as di

    def inner(xp):
        return di.gradient(di.FixedParams(f, xp[1], strategy=strategy), backend, xp[0], *rest)

    return inner


_checks.not_counted(_inner_gradient(None, "auto", None, ()))  # a new one per measurement
