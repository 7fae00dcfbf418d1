"""The generated consistency matrix: every operator x installed backend x array kind of x
x prepared / unprepared x calling context, each result against closed forms
(``diffiface.testing.consistency_matrix``; the case ids read
``scenario-operator-backend-kind-prep|unprep-context``).

Float64 throughout (tests/conftest.py enables JAX's x64). Tolerances are
``testing.tolerance``, relative to max(1, the largest reference entry): 1e-8 for AD;
for finite differences 1e-5 (first order) and 1e-3 (second order, outer and tangent
contexts). A DisconnectedWarning fails the case (every scenario depends on what is
differentiated).

A case that fails for a known defect is named in the known-gaps table
(``diffiface/_gaps.py``, read by tests/conftest.py): a strict xfail, which fails when
the defect is fixed until the row is removed. No case of this matrix is there today.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di
from diffiface import testing

# The defects this matrix found (the torch gradient penalty, torch tangents / cotangents
# detached from an outer pass, finite differences on F-ordered and transposed x, AutoJax
# jacobian with a Python float in a Constant, AutoJax prepared NumPy x inside an outer
# trace) fail 86 cases at 34f4be3.
CASES = testing.consistency_matrix()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_matrix(case):
    result = case.run()
    assert result.ok, result.message


def test_the_matrix_covers_every_dimension():
    ops = {c.op for c in CASES}
    assert ops == set(testing.OPERATORS), set(testing.OPERATORS) - ops
    assert {repr(c.backend) for c in CASES} == {repr(b) for b in testing.available_backends()}
    kinds = {c.kind for c in CASES}
    assert {"C", "F", "T", "strided", "0d", "float"} <= kinds
    if HAVE["torch"] or HAVE["jax"]:
        assert {"numpy", "numpy_F"} <= kinds
    contexts = {c.context for c in CASES}
    assert {"plain", "plain+const", "plain+params", "di_outer", "di_tangent"} <= contexts
    if HAVE["torch"] or HAVE["jax"] or HAVE["autograd"]:
        assert {"fw_outer", "fw_outer+const", "fw_tangent"} <= contexts
    assert {c.prepared for c in CASES} == {False, True}
    assert len({c.id for c in CASES}) == len(CASES), "case ids are unique"


def _cube(x, s):
    return (s * x**3).sum()


X = np.array([[1.0, -0.5], [0.3, 2.0]])


def _closed(s):
    return {"jac": [3 * s * X.ravel() ** 2], "hess": np.diag(6 * s * X.ravel())}


def _d_closed(s):
    return {"y": [(X**3).sum()], "jac": [3 * X.ravel() ** 2], "hess": np.diag(6 * X.ravel())}


def test_a_user_function_with_its_closed_forms_passes():
    cases = testing.consistency_matrix(
        _cube,
        X,
        _closed,
        d_closed=_d_closed,
        name="cube",
        operators=("gradient", "hvp"),
        kinds=("C", "F", "T", "strided"),
    )
    assert {c.context for c in cases} >= {"plain", "di_outer", "di_tangent"}
    failed = [(c.id, r.message) for c in cases if not (r := c.run()).ok]
    assert not failed


def test_a_wrong_closed_form_fails_every_check():
    """The checks are not vacuous: a Jacobian off by 1% fails plain and tangent cases, a
    wrong s-derivative fails the outer ones."""

    def off(s):
        return {"jac": [3.03 * s * X.ravel() ** 2], "hess": np.diag(6.06 * s * X.ravel())}

    def d_off(s):
        return {k: np.asarray(v) * 1.01 for k, v in _d_closed(s).items()}

    cases = testing.consistency_matrix(
        _cube, X, off, d_closed=d_off, backends=[di.AutoFiniteDifferences()]
    )
    cases = [c for c in cases if c.op in ("gradient", "jvp", "vjp", "hessian")]
    results = {c.id: c.run() for c in cases}
    assert results and not any(r.ok for r in results.values())
    assert all("error" in r.message for r in results.values())


def test_without_d_closed_no_outer_context_runs():
    cases = testing.consistency_matrix(_cube, X, _closed, backends=[di.AutoFiniteDifferences()])
    assert cases and not any("outer" in c.context for c in cases)


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_a_disconnected_warning_fails_the_case():
    """f that leaves torch's graph: diffiface warns and returns zeros; the case fails with
    the warning as its message rather than passing on a wrong closed form."""

    def detached(x, s):
        return (s * (x.detach() if hasattr(x, "detach") else x) ** 3).sum()

    cases = testing.consistency_matrix(
        detached,
        X,
        _closed,
        backends=[di.AutoTorch()],
        operators=("gradient",),
        kinds=("C",),
        contexts=("plain",),
        prepared=(False,),
    )
    (result,) = [c.run() for c in cases]
    assert not result.ok
    assert result.message.startswith("DisconnectedWarning")


def test_bad_arguments():
    with pytest.raises(ValueError, match="give x and closed"):
        testing.consistency_matrix(_cube)
    with pytest.raises(ValueError, match="unknown"):
        testing.consistency_matrix(_cube, X, _closed, kinds=("Z",))
    with pytest.raises(ValueError, match="unknown keys"):
        testing.consistency_matrix(_cube, X, lambda s: {"jac": [X.ravel()], "grad": 1})
