"""docs/sparse.md's Newton step: the sparse Hessian in scipy.sparse.linalg.spsolve,
jax.scipy.sparse.linalg.cg (a BCOO) and conjugate gradients on a torch CSR tensor gives
the dense Newton step (jax.hessian and numpy.linalg.solve: the reference)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

PAGE = pathlib.Path(__file__).parents[2] / "docs" / "sparse.md"


@pytest.fixture(scope="module")
def section():
    """The names the section's blocks define, run in order in one namespace."""
    text = PAGE.read_text().split("## One Newton step with a sparse solver\n", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", text.split("\n## ", 1)[0], re.S)
    assert len(blocks) == 3
    namespace: dict = {"__name__": "docs_sparse_newton"}
    for i, block in enumerate(blocks):
        exec(
            compile(block, f"sparse.md Newton block {i + 1}", "exec", dont_inherit=True), namespace
        )
    return namespace


def _dense_step(energy, u):
    x = jax.numpy.asarray(u)
    g = np.asarray(jax.grad(energy)(x))
    h = np.asarray(jax.hessian(energy)(x))
    return u + np.linalg.solve(h, -g)


@pytest.mark.parametrize("name", ["u_scipy", "u_jax", "u_torch"])
def test_each_solver_takes_the_dense_newton_step(section, name):
    u = np.full(1000, 0.9)
    want = _dense_step(section["energy"], u)
    got = section[name]
    got = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


def test_the_step_lowers_the_energy(section):
    energy = section["energy"]
    assert energy(section["u_scipy"]) < energy(np.full(1000, 0.9))


def test_the_cg_helper_solves_a_csr_system(section):
    a = torch.tensor([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]], dtype=torch.float64)
    b = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    x = section["cg"](a.to_sparse_csr(), b)
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(a.numpy(), b.numpy()), rtol=1e-10)
