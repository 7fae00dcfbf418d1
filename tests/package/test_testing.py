"""diffiface.testing: the consistency matrix a library author runs on their functions."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import json
import warnings

import numpy as np
import pytest
from array_api_compat import array_namespace

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
        xp = array_namespace(x)
        return xp.sum(xp.cos(x) * x)

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


def test_namespace_is_deprecated_for_array_namespace():
    """testing.namespace still gives the module it gave, and warns toward the Array API."""
    with pytest.warns(DeprecationWarning, match=r"array_namespace\(x\)"):
        assert testing.namespace(np.ones(2)) is np
    assert "namespace" in testing.__all__  # (kept until its removal)


# an Array API function of (x, s) with its closed forms: exp(s z) z summed
_X = np.array([[0.4, -0.5], [0.3, 1.1]])
_Z = _X.ravel()


def _exp_weighted(x, s):
    xp = array_namespace(s * x)
    return xp.sum(xp.exp(s * x) * x)


def _closed(s):
    e = np.exp(s * _Z)
    return {"jac": [e * (1 + s * _Z)], "hess": np.diag(s * e * (2 + s * _Z))}


def _d_closed(s):
    e = np.exp(s * _Z)
    return {
        "y": [(_Z**2 * e).sum()],
        "jac": [_Z * e * (2 + s * _Z)],
        "hess": np.diag(e * (2 + 4 * s * _Z + s**2 * _Z**2)),
    }


def _row_names(text):
    return {line.split()[0] for line in text.splitlines()[1:-1]}


def test_one_array_api_function_gives_one_table_on_every_backend():
    """check(): a user's f written once with array_namespace, every installed backend
    (JAX, torch, autograd, MLX, finite differences), one row each, against closed forms."""
    s = testing.Scenario("exp_weighted", "array->scalar", lambda x: _exp_weighted(x, 0.8), _X)
    refs = _closed(0.8)
    s = dataclasses.replace(
        s, y=[_exp_weighted(_X, 0.8)], jac=np.array(refs["jac"]), hess=refs["hess"]
    )
    ops = ("gradient", "jvp", "vjp", "hvp", "hessian")
    report = testing.check(scenarios=[s], operators=ops)
    report.raise_on_failure()
    names = {testing._check.short_name(b) for b in testing.available_backends()}
    assert {r.backend for r in report.results if r.status == "pass"} == names
    assert _row_names(str(report)) == names


def test_run_matrix_shows_the_same_derivatives_on_every_backend():
    """The consistency matrix of an Array API function on every installed backend, as one
    report: a row per backend, every cell within its tolerance of the closed forms (so the
    backends agree), plain and under outer passes (diffiface's and the framework's own)."""
    cases = testing.consistency_matrix(
        _exp_weighted,
        _X,
        _closed,
        d_closed=_d_closed,
        name="exp_weighted",
        operators=("gradient", "hvp", "hessian"),
        kinds=("C",),
        contexts=("plain", "plain+const", "di_outer", "fw_outer", "di_tangent"),
    )
    report = testing.run_matrix(cases)
    report.raise_on_failure()
    names = {testing._check.short_name(b) for b in testing.available_backends()}
    assert {r.backend for r in report.results} == names
    assert {r.scenario for r in report.results} == {c.id for c in cases}  # each case reported
    text = str(report)
    assert text.splitlines()[0].split()[:2] == ["backend", "scenario"]
    assert _row_names(text) == names and f"{len(cases)} runs, 0 failing" in text


def test_run_matrix_names_a_failing_case():
    """A wrong closed form fails its cases; the report names each by its id."""
    wrong = lambda s: {**_closed(s), "hess": 2 * _closed(s)["hess"]}  # noqa: E731
    fd = [di.AutoFiniteDifferences()]
    cases = testing.consistency_matrix(
        _exp_weighted, _X, wrong, name="exp_weighted", backends=fd, operators=("hessian",)
    )
    report = testing.run_matrix(cases)
    assert not report.ok and len(report.failures()) == len(cases)
    assert "FAIL" in str(report)
    with pytest.raises(AssertionError, match=r"exp_weighted-hessian-FiniteDifferences-C-unprep"):
        report.raise_on_failure()
