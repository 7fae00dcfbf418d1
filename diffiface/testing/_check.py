"""check(): every operator of every scenario on every backend, against the references."""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _checks
from .._backend_types import AutoFiniteDifferences, AutoSparse, SecondOrder
from .._contexts import Constant
from .._errors import DiffifaceValueError
from .._tree import flatten, unflatten
from ..core.operator import names
from ..core.registry import FRAMEWORKS, implementation
from ._calls import prepare_of, tangent_args
from ._kit import of
from ._report import Report, Result
from ._scenario import OPERATORS, SECOND, Scenario, flat_result, is_sparse

SPARSE = names(sparse=True)


def available_backends() -> list:
    """One instance of each backend whose framework is installed (finite differences
    always), for ``@pytest.mark.parametrize("backend", available_backends())``.

    Examples:
        >>> import diffiface as di
        >>> di.AutoFiniteDifferences() in available_backends()
        True
    """
    return [
        cls()
        for cls, module in FRAMEWORKS.items()
        if module is None or importlib.util.find_spec(module) is not None
    ]


def tolerance(backend: Any, dtype: np.dtype, op: str) -> float:
    """The largest error accepted, relative to max(1, the largest reference entry):
    AD 1e-8 in float64 (1e-6 on MLX, whose float64 sin, cos and exp are
    float32-accurate) and 1e-4 in float32; finite differences 1e-5 and 2e-2 for first
    order, 1e-3 in float64 for second order."""
    fd = _is_fd(backend)
    f32 = np.dtype(dtype) == np.float32
    if not fd:
        return 1e-4 if f32 else _float64_accuracy(backend)
    if op in SECOND:
        return 1e-3
    return 2e-2 if f32 else 1e-5


def _float64_accuracy(backend: Any) -> float:
    """AD's float64 bound: 1e-8, or what the frameworks' float64 functions reach (their
    kits' ``float64_accuracy``: MLX's sin, cos and exp are float32-accurate)."""
    backend = dense_backend(backend)
    parts = (backend.outer, backend.inner) if isinstance(backend, SecondOrder) else (backend,)
    return max(of(b).float64_accuracy for b in parts if not isinstance(b, AutoFiniteDifferences))


def dense_backend(backend: Any) -> Any:
    """The backend an AutoSparse runs on (any other backend itself)."""
    return backend.backend if isinstance(backend, AutoSparse) else backend


def _is_fd(backend: Any) -> bool:
    backend = dense_backend(backend)
    if isinstance(backend, SecondOrder):
        return isinstance(backend.outer, AutoFiniteDifferences) or isinstance(
            backend.inner, AutoFiniteDifferences
        )
    return isinstance(backend, AutoFiniteDifferences)


def skip_reason(backend: Any, scenario: Scenario, op: str) -> str | None:
    """Why ``op`` of ``scenario`` is not run on ``backend``, or None."""
    if op not in scenario.operators:
        return "does not apply to these shapes"
    if isinstance(backend, AutoSparse):
        if op not in SPARSE:
            return "AutoSparse makes jacobian and hessian sparse (the rest is its backend's)"
        if flatten(scenario.x)[1] != flatten(0.0)[1]:
            return "a sparse Jacobian or Hessian takes one array"
        backend = backend.backend
    if isinstance(backend, SecondOrder) and op not in SECOND:
        return "a SecondOrder backend is for second-order operators"
    base = backend.inner if isinstance(backend, SecondOrder) else backend
    if scenario.dtype == np.float64 and (note := of(base).float64_note()):
        return note
    if _is_fd(backend) and op in SECOND and scenario.dtype == np.float32:
        return "finite differences of finite differences in float32 keep no digits"
    if all(e is None for e in scenario.expected(op)):
        return "no reference (see compute_references)"
    return None


def check(
    backends: list | None = None,
    scenarios: list | None = None,
    operators: tuple | None = None,
    prepared: bool = False,
    inputs: str = "native",
    progress: Callable | None = None,
) -> Report:
    """Run each operator of each scenario on each backend twice and compare with the
    references.

    Each run checks the values (dtype-aware tolerances, see :func:`tolerance`), that
    the second call equals the first (no state leaks through a prep or a cache),
    that the inputs were not mutated, and that results keep the structure, dtype and
    array kind of the input; it records the time of the second call and how many
    times ``f`` was called.

    Args:
        backends: backend instances (default: :func:`available_backends`).
        scenarios: :class:`Scenario` objects (default: ``default_scenarios()``).
        operators: names of operators to run (default: all).
        prepared: call ``prepare_<operator>`` first and pass ``prep=``.
        inputs: "native" (each backend's own arrays) or "numpy".
        progress: called as ``progress(done, total, label)`` after each run.

    Returns:
        A :class:`Report`.

    Examples:
        >>> import diffiface as di
        >>> from diffiface.testing import check, default_scenarios
        >>> report = check([di.AutoFiniteDifferences()], default_scenarios(("float64",)),
        ...                operators=("gradient",))
        >>> report.ok
        True
    """
    from ._defaults import default_scenarios

    backends = available_backends() if backends is None else list(backends)
    scenarios = default_scenarios() if scenarios is None else list(scenarios)
    ops = tuple(operators or OPERATORS)
    unknown = [op for op in ops if op not in OPERATORS]
    if unknown:
        raise DiffifaceValueError(f"check(operators=...): unknown {unknown}; known: {OPERATORS}.")
    if inputs not in ("native", "numpy"):
        raise DiffifaceValueError(f"check(inputs={inputs!r}): inputs must be 'native' or 'numpy'.")
    jobs = [(b, s, op) for b in backends for s in scenarios for op in ops]
    results = []
    for i, (b, s, op) in enumerate(jobs):
        results.append(run_one(b, s, op, prepared, inputs))
        if progress is not None:
            progress(i + 1, len(jobs), f"{short_name(b)} {s.name} {op}")
    return Report(results, ops)


def run_one(backend: Any, s: Scenario, op: str, prepared: bool, inputs: str) -> Result:
    """One operator of one scenario on one backend (see :func:`check`)."""
    base = Result(short_name(backend), s.name, s.family, op, "skip")
    reason = skip_reason(backend, s, op)
    if reason:
        return dataclasses.replace(base, reason=reason)
    try:
        case = Case(backend, s, op, prepared, inputs)
        first = case()
        case.calls = 0
        start = time.perf_counter()
        second = case()
        seconds = time.perf_counter() - start
    except Exception as exc:  # reported, not raised: one failing cell must not hide the rest
        return dataclasses.replace(base, status="error", reason=f"{type(exc).__name__}: {exc}")
    expected = s.expected(op)
    outs = second if len(expected) > 1 else (second,)
    err = max(relative_error(o, e) for o, e in zip(outs, expected, strict=True) if e is not None)
    tol = tolerance(backend, s.dtype, op)
    if s.reference is not None:  # references are only as accurate as their backend
        tol = max(tol, tolerance(s.reference, s.dtype, op))
    problems = []
    if not np.array_equal(flat_result(first), flat_result(second), equal_nan=True):
        problems.append("the second call differs from the first")
    if case.mutated():
        problems.append("an input was mutated")
    problems += _kinds(outs, case.x, s.dtype, inputs)
    if isinstance(backend, AutoSparse):
        problems += _zeros(outs[-1], expected[-1])
    status = "pass" if err <= tol and not problems else "fail"
    return dataclasses.replace(
        base,
        status=status,
        error=float(err),
        tolerance=tol,
        reason="; ".join(problems) or (f"error {err:.2e} > {tol:.0e}" if status == "fail" else ""),
        seconds=seconds,
        f_calls=case.calls,
    )


class Case:
    """A ready call ``op(f, backend, x, [tangent], *contexts, prep=...)`` on the
    backend's arrays, counting the calls of ``f``."""

    def __init__(self, backend: Any, s: Scenario, op: str, prepared: bool, inputs: str):
        import diffiface as di

        conv = _converter(backend, inputs)
        self.x = conv(s.x)
        self.ctx = tuple(Constant(conv(c.value)) for c in s.contexts)
        self.tangent = tuple(conv(t) for t in tangent_args(op, s.v, s.w))
        self.calls = 0

        def counted(*args):
            self.calls += 1
            return s.f(*args)

        _checks.not_counted(counted)  # one per case by design: no RecompileWarning

        self.fn = counted if s.params is None else di.FixedParams(counted, conv(s.params))
        self.backend = backend
        self._before = self._inputs()
        self.operator = getattr(di, op)
        self.prep = None
        if prepared:
            prepare = prepare_of(op)
            self.prep = prepare(self.fn, backend, self.x, *self.tangent, *self.ctx)

    def __call__(self) -> Any:
        return self.operator(
            self.fn, self.backend, self.x, *self.tangent, *self.ctx, prep=self.prep
        )

    def _inputs(self) -> list:
        return [_np(a) for a in flatten((self.x, self.tangent, [c.value for c in self.ctx]))[0]]

    def mutated(self) -> bool:
        pairs = zip(self._before, self._inputs(), strict=True)
        return any(not np.array_equal(a, b) for a, b in pairs)


def relative_error(out: Any, expected: np.ndarray) -> float:
    got = flat_result(out)
    want = np.ravel(np.asarray(expected, dtype=np.float64))
    if got.shape != want.shape:
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    return float(np.max(np.abs(got - want), initial=0.0)) / scale


def _zeros(out: Any, expected: np.ndarray) -> list:
    """A sparse result is exactly zero where the reference is."""
    got = flat_result(out)
    want = np.ravel(np.asarray(expected, dtype=np.float64))
    if got.shape == want.shape and np.any(got[want == 0] != 0):
        return ["a nonzero where the reference has an exact zero"]
    return []


def _kinds(outs: tuple, x: Any, dtype: np.dtype, inputs: str) -> list:
    """Results are arrays of the input's kind and dtype (Python floats for 0-d float input);
    a sparse matrix's values have the input's dtype."""
    kind = type(flatten(x)[0][0])
    problems = []
    for out in outs:
        if is_sparse(out):
            got = str(getattr(out, "dtype", dtype)).split(".")[-1]
            if got != np.dtype(dtype).name:
                problems.append(f"a sparse result has dtype {got}, not {np.dtype(dtype).name}")
            continue
        for leaf in flatten(out)[0]:
            if isinstance(leaf, float) and kind is float:
                continue
            if not isinstance(leaf, kind) and not (inputs == "numpy" and isinstance(leaf, float)):
                problems.append(f"a result is {type(leaf).__name__}, not {kind.__name__}")
            elif str(getattr(leaf, "dtype", dtype)).split(".")[-1] != np.dtype(dtype).name:
                problems.append(f"a result has dtype {leaf.dtype}, not {np.dtype(dtype).name}")
    return sorted(set(problems))


def _np(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy().copy()
    return np.array(a, copy=True)


def _converter(backend: Any, inputs: str) -> Callable:
    """NumPy leaves -> fresh arrays of the backend (copies of NumPy for "numpy" inputs)."""
    backend = dense_backend(backend)
    base = backend.inner if isinstance(backend, SecondOrder) else backend
    convert = np.array if inputs == "numpy" else implementation(base).from_numpy

    def conv(tree: Any) -> Any:
        leaves, treedef = flatten(tree)
        return unflatten(treedef, [convert(np.array(a)) for a in leaves])

    return conv


def short_name(backend: Any) -> str:
    if isinstance(backend, AutoSparse):
        det = backend.sparsity_detector
        how = f", {det}" if isinstance(det, str) else ", given"
        how = "" if how == ", global" else how
        return f"Sparse({short_name(backend.backend)}{how})"
    if isinstance(backend, SecondOrder):
        return f"{short_name(backend.outer)}-over-{short_name(backend.inner)}"
    mode = getattr(backend, "mode", None)
    name = type(backend).__name__.removeprefix("Auto")
    return f"{name}({mode})" if mode else name


def benchmark(
    backends: list | None = None,
    scenarios: list | None = None,
    operators: tuple | None = None,
    repeat: int = 20,
) -> list:
    """Median time per prepared call of each operator, per backend, and its ratio to
    the fastest backend on that (scenario, operator).

    Examples:
        >>> import diffiface as di
        >>> from diffiface.testing import benchmark, default_scenarios
        >>> rows = benchmark([di.AutoFiniteDifferences()], default_scenarios(("float64",))[:1],
        ...                  operators=("derivative",), repeat=3)
        >>> rows[0]["ratio"]
        1.0
    """
    from ._defaults import default_scenarios

    backends = available_backends() if backends is None else list(backends)
    scenarios = default_scenarios() if scenarios is None else list(scenarios)
    ops = tuple(operators or ("gradient", "jacobian", "jvp", "vjp", "hvp", "hessian"))
    rows = []
    for s in scenarios:
        for op in ops:
            group = []
            for b in backends:
                if skip_reason(b, s, op):
                    continue
                case = Case(b, s, op, True, "native")
                case()
                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    case()
                    times.append(time.perf_counter() - start)
                seconds = float(np.median(times))
                group.append(
                    {
                        "backend": short_name(b),
                        "scenario": s.name,
                        "operator": op,
                        "seconds": seconds,
                    }
                )
            fastest = min((r["seconds"] for r in group), default=0.0)
            for r in group:
                r["ratio"] = r["seconds"] / fastest if fastest else 1.0
            rows += group
    return rows
