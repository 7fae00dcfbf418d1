"""diffiface.testing: the consistency matrix a library author runs on their functions."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import warnings

import numpy as np
import pytest

import diffiface as di
from diffiface import testing


def test_check_runs_every_installed_backend_by_default():
    s = testing.default_scenarios(("float64",))[2]  # array->scalar
    report = testing.check(scenarios=[s], operators=("gradient",))
    report.raise_on_failure()
    assert {r.backend for r in report.results} == {
        testing._check.short_name(b) for b in testing.available_backends()
    }


# one test per backend (the same runs as one check() of them all), so that xdist spreads them
@pytest.mark.parametrize("backend", testing.available_backends(), ids=repr)
def test_the_default_matrix_passes_on_every_installed_backend(backend):
    report = testing.check([backend])
    report.raise_on_failure()
    ran = [r for r in report.results if r.status == "pass"]
    assert {r.family for r in ran} >= {
        "scalar->scalar",
        "scalar->array",
        "array->scalar",
        "array->array",
        "batched",
        "pytree",
        "FixedParams",
    }
    # the second call: JAX runs the compiled function without calling f again
    assert all(r.f_calls == 0 for r in ran if r.backend == "Jax")
    assert all(r.f_calls >= 1 for r in ran if r.backend != "Jax")
    text = str(report)
    assert "FAIL" not in text and "ERROR" not in text and "0 failing" in text


@pytest.mark.parametrize("backend", testing.available_backends(), ids=repr)
def test_prepared_and_numpy_inputs_pass_too(backend):
    scenarios = testing.default_scenarios(("float64",))
    testing.check([backend], scenarios, prepared=True).raise_on_failure()
    testing.check(
        [backend], scenarios, inputs="numpy", operators=("gradient", "vjp")
    ).raise_on_failure()


@pytest.mark.parametrize("backend", testing.available_backends(), ids=repr)
def test_one_parametrized_test_per_backend_for_a_users_function(backend):
    def f(x):
        return (testing.namespace(x).cos(x) * x).sum()

    x = np.array([0.1, 0.5, -1.2])
    s = testing.Scenario("cos_x", "array->scalar", f, x)
    s = testing.compute_references(s, di.AutoFiniteDifferences())
    exact = np.cos(x) - x * np.sin(x)
    np.testing.assert_allclose(s.jac[0], exact, rtol=1e-6)  # the reference itself
    testing.check([backend], [s], operators=("gradient", "jvp", "vjp")).raise_on_failure()


def test_a_wrong_reference_fails_and_names_the_cell():
    s = testing.default_scenarios(("float64",))[2]  # array->scalar
    wrong = testing.Scenario(
        s.name, s.family, s.f, s.x, y=s.y, jac=s.jac * 1.01, hess=s.hess, operators=("gradient",)
    )
    report = testing.check([di.AutoFiniteDifferences()], [wrong])
    assert not report.ok
    assert "FAIL" in str(report)
    with pytest.raises(AssertionError, match=f"FiniteDifferences {s.name} gradient: fail"):
        report.raise_on_failure()


def test_mutation_errors_and_exports_are_reported():
    def mutating(x, c):
        c += 1.0  # changes the caller's Constant in place
        return (x * c).sum()

    def raising(x):
        raise RuntimeError("boom")

    x = np.array([1.0, 2.0])
    s1 = testing.Scenario(
        "mutating",
        "array->scalar",
        mutating,
        x,
        contexts=(di.Constant(np.ones(2)),),
        y=np.array([3.0]),
        jac=np.array([[1.0, 1.0]]),
        operators=("gradient",),
    )
    s2 = testing.Scenario(
        "raising",
        "array->scalar",
        lambda x: (x**2).sum(),
        x,
        y=np.array([5.0]),
        jac=np.array([[2.0, 4.0]]),
        operators=("gradient",),
    )
    s2 = testing.Scenario(
        s2.name, s2.family, raising, x, y=s2.y, jac=s2.jac, w=np.array(0.0), operators=("gradient",)
    )
    report = testing.check([di.AutoFiniteDifferences()], [s1, s2], operators=("gradient",))
    by_name = {r.scenario: r for r in report.results}
    assert by_name["mutating"].status == "fail"
    assert "mutated" in by_name["mutating"].reason
    assert by_name["raising"].status == "error" and "boom" in by_name["raising"].reason
    rows = json.loads(report.to_json())
    assert [r["scenario"] for r in rows] == ["mutating", "raising"]
    table = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert table[1]["status"] == "error"


def test_benchmark_gives_ratios_to_the_fastest_backend():
    scenarios = testing.default_scenarios(("float64",))[2:3]
    rows = testing.benchmark(operators=("gradient",), scenarios=scenarios, repeat=3)
    assert len(rows) == len(testing.available_backends())
    assert min(r["ratio"] for r in rows) == 1.0
    assert all(r["ratio"] >= 1.0 and r["seconds"] > 0 for r in rows)


def test_check_rejects_unknown_operators_and_inputs():
    with pytest.raises(ValueError, match="unknown"):
        testing.check(operators=("grad",))
    with pytest.raises(ValueError, match="inputs must be"):
        testing.check(inputs="torch")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax missing")
def test_check_does_not_blame_its_own_counting_closure():
    """check() wraps each scenario's f in a call-counting closure, one per case by design:
    once ``python -m diffiface check`` raised a RecompileWarning about that closure."""
    scenarios = testing.default_scenarios(("float64",))  # (conftest turns jax x64 on)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = testing.check([di.AutoJax()], scenarios, operators=("jvp", "vjp"))
    report.raise_on_failure()  # each value against its reference
    assert not [w for w in seen if issubclass(w.category, di.RecompileWarning)]
    assert sum(r.status == "pass" for r in report.results) >= 2 * di._checks.RECOMPILE_AFTER
