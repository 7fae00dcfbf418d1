"""The backend x scenario matrix, shared by the tests.

Each backend is skipped when its framework is not installed. JAX runs with
x64 enabled here (a test setting, not the library's) so float64 scenarios run
on every backend; tests of the x64-off error switch it off locally. XLA compiles
with most optimizations off (JAX_DISABLE_MOST_OPTIMIZATIONS, below): another test
setting, for the suite's time.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

# JAX asks XLA for little optimization (LLVM at level 0): compiling is most of a JAX
# test's time (a quarter to a half less CPU with this), no check is about the compiled
# code's speed, and the results pass the same checks. Set before JAX is imported, so
# the tests' subprocesses (scripts, Keras, the benchmarks) inherit it.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import diffiface as di

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("jax", "torch", "autograd", "mlx")}

if HAVE["jax"]:
    import jax

    jax.config.update("jax_enable_x64", True)


def _param(backend, module):
    marks = [] if module is None or HAVE[module] else [pytest.mark.skip(f"{module} missing")]
    return pytest.param(backend, id=repr(backend), marks=marks)


AD_BACKENDS = [
    _param(di.AutoJax(), "jax"),
    _param(di.AutoTorch(), "torch"),
    _param(di.AutoAutograd(), "autograd"),
    _param(di.AutoMLX(), "mlx"),
]
ALL_BACKENDS = [*AD_BACKENDS, _param(di.AutoFiniteDifferences(), None)]
MODED_BACKENDS = [
    _param(cls(mode=m), mod)
    for cls, mod in (
        (di.AutoJax, "jax"),
        (di.AutoTorch, "torch"),
        (di.AutoAutograd, "autograd"),
        (di.AutoMLX, "mlx"),
    )
    for m in ("forward", "reverse")
]


@pytest.fixture(params=ALL_BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(params=AD_BACKENDS)
def ad_backend(request):
    return request.param


@pytest.fixture(autouse=True)
def _auto_nests_natively(request, monkeypatch):
    """FixedParams(strategy="auto") times both nested-AD strategies on first use: a
    choice of this machine's moment. The tests pin it to the framework's own nesting
    (results do not depend on timing noise, and no test pays the measurement), except
    those marked ``measures``, which test the measurement itself."""
    if "measures" in request.keywords:
        return
    from diffiface.nested import choose

    monkeypatch.setattr(choose, "measure", lambda *args: choose.Choice(choose.ROR, {}))


# Where the shared backend lists run AutoMLX so far (issue 30): every suite but the
# oracle suites other than the matrix. Elsewhere its cases are skipped, with this
# reason, until they pass there.
MLX_COVERED = (
    "tests/operators/",
    "tests/backends/",
    "tests/oracle/",
    "tests/preparation/",
    "tests/robustness/",
    "tests/sparse/",
    "tests/package/",
    "tests/scale_out/",
    "tests/bridge/",
    "tests/nested/",
    "tests/devices/",
    "diffiface/",  # (the doctests)
)
MLX_NOT_YET = pytest.mark.skip(reason="AutoMLX: not yet run in this suite (issue 30)")


def _mlx_case(nodeid: str) -> bool:
    return ("AutoMLX" in nodeid or "-MLX-" in nodeid) and not nodeid.startswith(MLX_COVERED)


def pytest_collection_modifyitems(config, items):
    """Every test named in diffiface's known-gaps table is a strict xfail (the reason is
    the gap); on a run of the whole suite, a gap whose tests are gone is an error. An
    AutoMLX case outside ``MLX_COVERED`` is skipped."""
    from diffiface._gaps import KNOWN_GAPS

    matched = set()
    for item in items:
        if _mlx_case(item.nodeid):
            item.add_marker(MLX_NOT_YET)
            continue
        for gap in KNOWN_GAPS:
            if gap.matches(item.nodeid):
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"{gap.backend}: {gap.what}"))
                matched.add(gap)
    whole = [str(a).rstrip("/") in ("tests", ".", str(config.rootpath)) for a in config.args]
    if any(whole) and all(HAVE.values()) and not config.option.keyword:
        stale = [g.what for g in KNOWN_GAPS if g not in matched]
        if stale:
            raise pytest.UsageError(f"known gaps whose tests are gone: {stale}")
