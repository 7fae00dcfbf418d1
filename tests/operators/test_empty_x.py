"""Every operator on every backend at an empty pytree x ({}, [], ()).

What the frameworks do decides it: ``jax.grad`` of a function of {} gives {}, and
``jax.jvp`` along an empty tangent gives zeros like f(x). So a result like x (gradient,
vjp, hvp) is x's empty structure; a jvp is zeros like f(x); a Jacobian has no columns:
x's empty structure for each leaf of f(x) (f's structure outside, x's inside, as
``jacobian`` nests for a pytree x); f(x) is f's value. The operators that take one
array (hessian, batched_jacobian) or a scalar (derivative, second_derivative) raise
their own error, naming the pytree. f's output is still checked (a gradient of a
non-scalar f, a cotangent unlike f(x)). Each call runs unprepared twice (the second by
the kept plan) and prepared; no warning is raised (pytest makes warnings errors)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, to_numpy

import diffiface as di
from diffiface.core.operator import OPS, pick

EMPTIES = [pytest.param({}, id="dict"), pytest.param([], id="list"), pytest.param((), id="tuple")]
SCALAR_X = ("derivative", "second_derivative")  # (and their value_and_ forms)
ONE_ARRAY = ("hessian", "batched_jacobian")
C = {"scalar": np.array(1.5), "vector": np.array([1.5, -2.0])}
_FS: dict = {}


def _f(backend, out: str):
    """f ignoring x, returning the constant ``C[out]`` (or a dict of both, ``out`` "tree")
    as the backend's arrays: one function object per backend and output."""
    key = (repr(backend), out)
    if key not in _FS:
        cs = {k: native(backend, v) for k, v in C.items()}

        def f(x):
            if out == "tree":
                return {"s": cs["scalar"] * 1.0, "v": [cs["vector"] * 1.0, None]}
            return cs[out] * 1.0

        _FS[key] = f
    return _FS[key]


def _tangent(backend, op: str, empty, out: str):
    """The tangent ``op`` takes: v like x (empty), or w like f(x)."""
    if OPS[op].tangent == "v":
        return (type(empty)(),)
    if OPS[op].tangent == "w":
        w = {k: native(backend, np.ones_like(v)) for k, v in C.items()}
        return ({"s": w["scalar"], "v": [w["vector"], None]} if out == "tree" else w[out],)
    return ()


def _calls(backend, op: str, empty, out: str) -> list:
    """``op``'s results at x = ``empty``: unprepared twice, then prepared."""
    f, fn, t = _f(backend, out), getattr(di, op), _tangent(backend, op, empty, out)
    got = [fn(f, backend, type(empty)(), *t) for _ in range(2)]
    prep = getattr(di, f"prepare_{OPS[op].family}")(f, backend, type(empty)(), *t)
    return [*got, fn(f, backend, type(empty)(), *t, prep=prep)]


def _is_array(backend, a, want: np.ndarray):
    """a is the backend's array (NumPy for finite differences) equal to ``want``."""
    assert type(a) is type(native(backend, want)), type(a)
    assert to_numpy(a).dtype == want.dtype and to_numpy(a).shape == want.shape
    np.testing.assert_array_equal(to_numpy(a), want)


def _is_tree(backend, got, want):
    """got has the structure of ``want`` (dicts, lists, None), its arrays equal."""
    if isinstance(want, np.ndarray):
        _is_array(backend, got, want)
    elif want is None:
        assert got is None
    else:
        assert type(got) is type(want), (got, want)
        assert len(got) == len(want), (got, want)
        if type(want) is dict:
            assert list(got) == list(want)
            got, want = list(got.values()), list(want.values())
        for a, b in zip(got, want, strict=True):
            _is_tree(backend, a, b)


def _expected(op: str, empty, out: str):
    """``op``'s result at an empty x, by the frameworks' rule (see the module)."""
    value = C[out] if out != "tree" else {"s": C["scalar"], "v": [C["vector"], None]}
    zeros = {k: np.zeros_like(v) for k, v in C.items()}
    jvp = zeros[out] if out != "tree" else {"s": zeros["scalar"], "v": [zeros["vector"], None]}
    cols = type(empty)()
    jac = cols if out != "tree" else {"s": cols, "v": [cols, None]}
    parts = {"value": value, "gradient": cols, "hvp": cols, "vjp": cols, "jvp": jvp}
    return pick(op, {**parts, "jacobian": jac})


def _out(op: str) -> str:
    return "scalar" if OPS[op].family in ("gradient", "hvp") else "vector"


DIFFERENTIATED = sorted(n for n, d in OPS.items() if d.family not in (*SCALAR_X, *ONE_ARRAY))


@pytest.mark.parametrize("empty", EMPTIES)
@pytest.mark.parametrize("op", DIFFERENTIATED)
def test_an_empty_x_gives_empty_derivatives(backend, op, empty):
    """Results like x are x's empty structure, a jvp is zeros like f(x)."""
    want = _expected(op, empty, _out(op))
    for got in _calls(backend, op, empty, _out(op)):
        _is_tree(backend, got, want)


TREE_OUT = sorted(n for n, d in OPS.items() if d.family in ("jvp", "vjp", "jacobian"))


@pytest.mark.parametrize("empty", EMPTIES)
@pytest.mark.parametrize("op", TREE_OUT)
def test_an_empty_x_with_a_pytree_output(backend, op, empty):
    """f returning a dict: a jvp is zeros in f's structure, a Jacobian x's empty
    structure for each of f's leaves (None stays None)."""
    want = _expected(op, empty, "tree")
    for got in _calls(backend, op, empty, "tree"):
        _is_tree(backend, got, want)


@pytest.mark.parametrize("empty", EMPTIES)
@pytest.mark.parametrize("op", sorted(n for n, d in OPS.items() if d.family in ONE_ARRAY))
def test_an_empty_x_where_one_array_is_needed(backend, op, empty):
    with pytest.raises(di.DiffifaceTypeError, match=r"single array .* a pytree with 0 leaves"):
        _calls(backend, op, empty, _out(op))


@pytest.mark.parametrize("empty", EMPTIES)
@pytest.mark.parametrize("op", sorted(n for n, d in OPS.items() if d.family in SCALAR_X))
def test_an_empty_x_where_a_scalar_is_needed(backend, op, empty):
    """The message names the pytree (not a shape it does not have)."""
    with pytest.raises(di.DiffifaceValueError, match=r"scalar .*, got a pytree with 0 leaves"):
        _calls(backend, op, empty, "scalar")


@pytest.mark.parametrize("empty", EMPTIES)
@pytest.mark.parametrize("op", sorted(n for n, d in OPS.items() if d.family in ("gradient", "hvp")))
def test_an_empty_x_still_checks_that_f_is_scalar(backend, op, empty):
    """f is run and its output checked, as at any x (finite differences need no f(x)
    for a central gradient, yet run f once to check it)."""
    with pytest.raises(di.DiffifaceValueError, match=r"f must return a scalar .* got shape \(2,\)"):
        _calls(backend, op, empty, "vector")


@pytest.mark.parametrize("empty", EMPTIES)
@pytest.mark.parametrize("op", ["vjp", "value_and_vjp"])
@pytest.mark.parametrize(
    "w, match",
    [((3,), "w must have the shape of f"), ((2,), "w must have the dtype of f")],
    ids=["shape", "dtype"],
)
def test_an_empty_x_still_checks_the_cotangent(backend, op, empty, w, match):
    f = _f(backend, "vector")
    bad = native(backend, np.ones(w, dtype=np.float32 if w == (2,) else np.float64))
    for _ in range(2):
        with pytest.raises(di.DiffifaceValueError, match=match):
            getattr(di, op)(f, backend, type(empty)(), bad)
