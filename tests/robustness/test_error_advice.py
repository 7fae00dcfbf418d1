"""Errors that point the right way: an f written for another framework names the
backend for it on every backend (finite differences too); the advice of an error is a
call that works (the tests follow it); an empty output is no "tuple" misuse."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_BACKENDS
from helpers import HAVE, native, rounding, to_numpy, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])
FD = di.AutoFiniteDifferences()
OWN = {"jax": di.AutoJax(), "torch": di.AutoTorch()}


def _sin_sum(used):
    if used == "torch":
        import torch

        return lambda t: torch.sin(t).sum()
    import jax.numpy as jnp

    return lambda t: jnp.sin(t).sum()


def _call(op, f, backend, x):
    if op == "jvp":
        return di.jvp(f, backend, x, x)
    return getattr(di, op)(f, backend, x)


def _cases():
    for p in ALL_BACKENDS:
        b = p.values[0]
        for used in ("jax", "torch"):
            if b.framework == used:
                continue
            marks = [*p.marks] + ([] if HAVE[used] else [pytest.mark.skip(f"{used} missing")])
            kinds = ("own", "f's") if b.framework == "finite_differences" else ("own",)
            for kind in kinds:
                yield pytest.param(b, used, kind, id=f"{b!r}-{used} f-{kind} x", marks=marks)


@pytest.mark.parametrize(("backend", "used", "kind"), list(_cases()))
@pytest.mark.parametrize("op", ["gradient", "jacobian", "jvp", "hessian"])
def test_a_foreign_f_names_the_backend_for_it(backend, used, kind, op):
    """torch f under AutoFiniteDifferences once raised torch's TypeError (chained to an
    internal "please report it"), a jax f "must return a NumPy array"; now every backend
    gives the one error that names AutoTorch() / AutoJax() and differentiate_with."""
    f = _sin_sum(used)
    x = native(backend, X) if kind == "own" else native(OWN[used], X)
    name = type(OWN[used]).__name__
    with pytest.raises(di.DiffifaceTypeError) as err:
        _call(op, f, backend, x)
    msg = str(err.value)
    assert msg.startswith(f"{op}(f, {backend!r}, x")
    assert f"f calls {used} functions on the arrays of {type(backend).__name__}()" in msg
    assert f"pass {name}() to differentiate a {used} f" in msg
    assert f"di.differentiate_with(f, {name}())" in msg
    assert "please report" not in repr(err.value.__cause__)
    # the advice works: the wrapped f is differentiated by its own framework
    got = _call(op, di.differentiate_with(f, OWN[used]), backend, x)
    want = {"gradient": np.cos(X), "jacobian": np.cos(X), "jvp": np.cos(X) @ X}
    want = np.diag(-np.sin(X)) if op == "hessian" else want[op]
    tol = 1e-4 if backend.framework == "finite_differences" else 1e-10
    np.testing.assert_allclose(to_numpy(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize(("backend", "used", "kind"), [p for p in _cases() if p.values[2] == "own"])
@pytest.mark.parametrize("detector", ["global", "local"])
@pytest.mark.parametrize("op", ["jacobian", "hessian"])
def test_a_foreign_f_under_autosparse_names_the_backend_for_it(backend, used, kind, detector, op):
    """The sparse operators' first run of f (sizing the output, or detection) gave the
    raw TypeError of the framework f used on autograd, finite differences, torch and
    MLX; now the same error as the dense operators, naming the dense backend. (A sparse
    call at f's framework's x is the crossing error: sparse calls do not cross.)"""
    f = _sin_sum(used)
    g = (lambda t: f(t) * 1.0) if op == "hessian" else (lambda t: f(t) + t * 0)
    sparse = di.AutoSparse(backend, sparsity_detector=detector)
    with pytest.raises(di.DiffifaceTypeError) as err:
        getattr(di, op)(g, sparse, native(backend, X))
    msg = str(err.value)
    assert msg.startswith(f"{op}(f, {sparse!r}, x")
    assert f"f calls {used} functions on the arrays of {type(backend).__name__}()" in msg


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("op", ["jacobian", "value_and_jacobian", "jvp"])
def test_an_empty_output_is_not_called_a_tuple_misuse(backend, op):
    """These operators take pytree outputs (tuples included): an f returning () is told
    it returned no array, not that tuples are refused."""
    x = native(backend, X)
    f = lambda t: ()  # noqa: E731
    args = (x,) if op == "jvp" else ()
    with pytest.raises(di.DiffifaceTypeError) as err:
        getattr(di, op)(f, backend, x, *args)
    msg = str(err.value)
    assert "got an empty tuple" in msg
    assert "or a pytree (tuple, list, dict) of them" in msg
    assert "tuples" not in msg
    ns = xp(backend)  # a tuple of arrays is a valid output, as the message says
    J = di.jacobian(lambda t: (ns.sin(t), t**2), backend, x)
    tol = 1e-5 if backend.framework == "finite_differences" else rounding(backend, 1e-10)
    np.testing.assert_allclose(to_numpy(J[0]), np.diag(np.cos(X)), rtol=tol, atol=tol)
    np.testing.assert_allclose(to_numpy(J[1]), np.diag(2 * X), rtol=tol, atol=tol)


def _advised(msg, start, end):
    """The call the message advises, from ``start`` up to ``end`` (exclusive)."""
    i = msg.index(start)
    return msg[i : msg.index(end, i)]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("op", ["gradient", "value_and_gradient"])
def test_the_complex_output_advice_is_a_call_that_works(backend, op):
    """The holomorphic advice once named jacobian, which refuses complex outputs; the
    test runs each advised call as written in the message, against the closed form."""
    ns = xp(backend)
    real = np.float32 if backend.framework == "mlx" else np.float64  # MLX: complex64 only
    x, z = native(backend, X.astype(real)), native(backend, X + 1j * X[::-1])
    v = native(backend, np.array([1.0, 2.0, -0.5], dtype=real))
    names = {**vars(di), "x": x, "z": z, "v": v}
    tol = 1e-5 if backend.framework == "finite_differences" else 1e-10
    tol = 2e-6 if real == np.float32 else tol
    # a complex f of a real x: the advised jvp is its derivative along v
    names["f"] = lambda t: ns.exp(1j * t).sum()
    with pytest.raises(di.DiffifaceValueError) as err:
        getattr(di, op)(names["f"], backend, x)
    call = _advised(str(err.value), "jvp(f, ", " for a real x")
    assert call == f"jvp(f, {backend!r}, x, v)"
    got = eval(call, names)
    want = (1j * np.exp(1j * X) * to_numpy(v)).sum()
    np.testing.assert_allclose(complex(to_numpy(got)), want, rtol=tol, atol=tol)
    # a holomorphic f of a complex z: the advised jvp is f'(z) v
    names["f"] = lambda t: (t**3).sum()
    with pytest.raises(di.DiffifaceValueError) as err:
        getattr(di, op)(names["f"], backend, z)
    call = _advised(str(err.value), "jvp(lambda p", " is f'(z) v")
    got = eval(call, names)
    want = (3 * (X + 1j * X[::-1]) ** 2 * to_numpy(v)).sum()
    np.testing.assert_allclose(complex(to_numpy(got)), want, rtol=tol, atol=tol)
