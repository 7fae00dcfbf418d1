"""The performance matrix (benchmarks/matrix.py) builds valid rows: on tiny sizes each
diffiface call gives its native twin's numbers (the framework's own transform is the
reference), and the check that guards every timed row rejects a wrong result. No
timing is asserted."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

pytest.importorskip("jax")
pytest.importorskip("torch")
pytest.importorskip("autograd")

import matrix  # noqa: E402
from matrix_cases import CORE, EXTRA, KINDS, Row, build, plan  # noqa: E402


def _tiny_rows() -> list:
    """Every input kind and call form of gradient, the other call forms of jvp, vjp and
    hvp, one prepared row of each other operator (finite differences included), and
    sparse rows at 50 unknowns: on every backend, at n = 10 (scalar x: n = 1)."""
    keep = []
    for r in plan(quick=True):
        tiny = r.n in (1, 10) and (r.kind == "array" or r.op == "gradient")
        first = r.form == "prepared" and r.op not in ("jvp", "vjp", "hvp")
        if tiny and (r.op == "gradient" or r.form in EXTRA["jvp"][1:] or first):
            keep.append(r)
    for fw in ("jax", "torch"):
        keep += [Row(fw, "sparse hessian", "array", "unprepared", 50),
                 Row(fw, "sparse jacobian", "array", "prepared (vs dense)", 50)]  # fmt: skip
    return keep


@pytest.mark.parametrize("row", _tiny_rows(), ids=lambda r: r.name)
def test_row_matches_native(row):
    native, ours = build(row)
    matrix.check(row, native, ours)  # raises when the numbers differ


def test_check_rejects_a_wrong_result():
    row = Row("jax", "gradient", "numpy", "prepared", 10)
    native, _ = build(row)
    with pytest.raises(AssertionError, match="differs from native"):
        matrix.check(row, native, lambda: 2 * np.asarray(native()))


def test_plan_covers_every_call_form_of_the_core_operators():
    measured = {(r.fw, r.op, r.kind, r.form) for r in plan(quick=True)}
    for fw, kinds in KINDS.items():
        for op in CORE:
            for form in ("prepared", "unprepared"):
                assert {(fw, op, k, form) for k in kinds} <= measured
            assert {(fw, op, "array", form) for form in EXTRA[op]} <= measured
