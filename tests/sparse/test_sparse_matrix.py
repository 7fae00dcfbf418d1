"""AutoSparse in the consistency matrix: the built-in scenarios on every array kind and
plain calling context (Constant, FixedParams), prepared and not, against closed forms,
with exact zeros where the reference has them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import HAVE

import diffiface as di
from diffiface import testing


def _backends():
    out = []
    if HAVE["jax"]:
        out += [di.AutoSparse(di.AutoJax()), di.AutoSparse(di.AutoJax(mode="reverse"), dense=True)]
    if HAVE["torch"]:
        out += [di.AutoSparse(di.AutoTorch()), di.AutoSparse(di.AutoTorch(mode="forward"))]
    if HAVE["autograd"]:
        out.append(di.AutoSparse(di.AutoAutograd()))  # (global: the NumPy tracer)
        out.append(di.AutoSparse(di.AutoAutograd(), sparsity_detector="local"))
    out.append(di.AutoSparse(di.AutoFiniteDifferences()))
    out.append(di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector="local"))
    if HAVE["mlx"]:  # (global: the NumPy tracer over the scenarios' Array API f)
        out += [di.AutoSparse(di.AutoMLX()), di.AutoSparse(di.AutoMLX(), dense=True)]
    return out


CASES = testing.consistency_matrix(backends=_backends())


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_sparse_matrix(case):
    result = case.run()
    assert result.ok, result.message


def test_the_sparse_matrix_covers_kinds_contexts_and_both_families():
    """... and AutoSparse with its defaults on every backend."""
    defaults = {
        c.backend.backend.framework for c in CASES if c.backend.sparsity_detector == "global"
    }
    want = {"finite_differences"} | {m for m in ("jax", "torch", "autograd", "mlx") if HAVE[m]}
    assert defaults == want
    ops = {c.op for c in CASES}
    assert ops == {"jacobian", "value_and_jacobian", "hessian", "value_gradient_and_hessian"}
    assert {c.context for c in CASES} == {"plain", "plain+const", "plain+params", "plain+module"}
    assert {"C", "F", "strided", "numpy"} <= {c.kind for c in CASES}


def test_a_wrong_sparse_result_fails():
    """The matrix sees a pattern that drops a nonzero (its product lands in a
    neighbour's entry) and a sparse result of the wrong kind."""
    x = np.array([1.0, 2.0, 3.0])

    def f(x, s):
        return s * x * x[::-1]

    def closed(s):
        return {"jac": s * (np.diag(x[::-1]) + np.diag(x)[::-1])}

    small = di.AutoSparse(di.AutoFiniteDifferences(), sparsity_detector=np.eye(3, dtype=bool))
    cases = testing.consistency_matrix(f, x, closed, backends=[small], operators=("jacobian",))
    assert cases and not any(c.run().ok for c in cases)
