"""autograd jacobians: reverse mode up to 3 outputs per input (a jvp traces f again, a
pullback walks the recorded graph), f traced once, and each row of a pytree output
pulled back through its own leaf's graph. Every Jacobian is compared with autograd's
own ``jacobian`` (one per output leaf) in float64 at rtol 1e-12."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import counted

import diffiface as di

pytest.importorskip("autograd")
import autograd
import autograd.numpy as anp

X = np.array([0.3, -0.7, 1.1, 0.2, 0.9, -1.3, 0.5, 2.0])
B = di.AutoAutograd()


def tree(x):
    return {"y": anp.sin(x) * x, "z": anp.cos(x[:3]), "w": anp.exp(x[0]) * anp.ones((2, 2))}


def tree_ref(x):
    return {k: autograd.jacobian(lambda x, k=k: tree(x)[k])(x) for k in ("y", "z", "w")}


def _close(got, want):
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("prepared", [False, True])
def test_a_pytree_output_traces_f_once_whatever_its_size(prepared):
    """Before: one jvp (one run of f) per input element, n + 1 runs."""
    f, calls = counted(tree)
    prep = di.prepare_jacobian(f, B, X) if prepared else None
    calls[0] = 0
    _close(di.jacobian(f, B, X, prep=prep), tree_ref(X))
    assert calls[0] <= 2  # the trace, and at most one run that measures f's output


def test_a_tall_output_runs_in_reverse_mode():
    """2 outputs per input: reverse (one trace, 2n pullbacks), not n traces."""

    def tall(x):
        return anp.concatenate([anp.sin(x) * x, anp.cos(x)])

    f, calls = counted(tall)
    got = di.jacobian(f, B, X)
    np.testing.assert_allclose(got, autograd.jacobian(tall)(X), rtol=1e-12, atol=1e-14)
    assert calls[0] <= 2


def test_a_much_taller_output_runs_in_forward_mode():
    """4 outputs per input: n jvps."""

    def taller(x):
        return anp.concatenate([anp.sin(x), anp.cos(x), x**3, anp.exp(x)])

    f, calls = counted(taller)
    got = di.jacobian(f, B, X)
    np.testing.assert_allclose(got, autograd.jacobian(taller)(X), rtol=1e-12, atol=1e-14)
    assert calls[0] >= X.size


def test_a_leaf_that_does_not_depend_on_x_has_zero_rows():
    def f(x):
        return {"y": anp.sin(x) * x, "c": np.arange(3.0)}

    got = di.jacobian(f, B, X)
    np.testing.assert_allclose(got["y"], np.diag(np.cos(X) * X + np.sin(X)), rtol=1e-12)
    np.testing.assert_array_equal(got["c"], np.zeros((3, X.size)))


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_the_mode_the_user_fixes_gives_the_same_jacobian(mode):
    _close(di.jacobian(tree, di.AutoAutograd(mode=mode), X), tree_ref(X))


def test_a_pytree_output_jacobian_inside_an_outer_autograd_pass():
    """The rows are boxes of the outer pass: d/dx sum(J_y * J_y) matches autograd's own."""

    def ours(x):
        return anp.sum(di.jacobian(tree, B, x)["y"] ** 2)

    def own(x):
        return anp.sum(autograd.jacobian(lambda x: tree(x)["y"])(x) ** 2)

    np.testing.assert_allclose(autograd.grad(ours)(X), autograd.grad(own)(X), rtol=1e-12)


def test_a_pytree_x_and_a_pytree_output():
    x = {"a": X[:5], "b": X[5:]}

    def f(x):
        return {"p": anp.sin(x["a"]) * x["b"][0], "q": x["b"] ** 2}

    got = di.jacobian(f, B, x)
    flat = lambda v: f({"a": v[:5], "b": v[5:]})  # noqa: E731
    for k in ("p", "q"):
        want = autograd.jacobian(lambda v, k=k: flat(v)[k])(X)
        np.testing.assert_allclose(got[k]["a"], want[:, :5], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[k]["b"], want[:, 5:], rtol=1e-12, atol=1e-14)
