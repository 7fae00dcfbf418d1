"""Every error message starts with the call the user wrote: each public operator, its
value_ variant and its prepare_ function, and sparsity_pattern, on every backend (once
``second_derivative`` reported ``value_derivative_and_second_derivative(``,
``batched_jacobian`` ``value_and_batched_jacobian(``, ``sparsity_pattern``
``jacobian(f, AutoSparse(...``, and a prepare_ function its operator's name)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import AD_BACKENDS, ALL_BACKENDS
from helpers import HAVE, native

import diffiface as di
from diffiface.core.operator import FAMILY, OPS, names

X = np.array([[0.3, -0.7], [1.1, 0.5]])


def _bad(x, *_):
    return "loss"  # no array: each operator's output check refuses it


# name -> (x, extra arguments after x, the call form the user wrote)
TANGENT = {"jvp", "value_and_jvp", "hvp", "gradient_and_hvp", "value_gradient_and_hvp"}
COTANGENT = {"vjp", "value_and_vjp"}
SCALAR_X = {"derivative", "value_and_derivative", "second_derivative"}
SCALAR_X |= {"value_derivative_and_second_derivative"}
OPERATORS = list(FAMILY)  # every public operator, with its family
PREPARE = {f"prepare_{family}": family for family in dict.fromkeys(FAMILY.values())}


def _args(backend, name):
    base = PREPARE.get(name, name)
    x = native(backend, np.array(0.4)) if base in SCALAR_X else native(backend, X)
    if base in TANGENT:
        return x, (x,), "x, v"
    if base in COTANGENT:
        return x, (x,), "x, w"
    return x, (), "x"


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("name", OPERATORS + list(PREPARE))
def test_an_error_starts_with_the_call_written(backend, name):
    x, extra, tail = _args(backend, name)
    with pytest.raises((di.DiffifaceTypeError, di.DiffifaceValueError)) as err:
        getattr(di, name)(_bad, backend, x, *extra)
    assert str(err.value).startswith(f"{name}(f, {backend!r}, {tail}): f must return"), str(
        err.value
    )


SECOND = sorted(op for op in names() if OPS[op].second)  # (the declarations)


@pytest.mark.parametrize("backend", AD_BACKENDS)
@pytest.mark.parametrize("outer", ["fd", "other AD"])
@pytest.mark.parametrize("arrays", ["numpy", "inner's"])
@pytest.mark.parametrize("name", [*SECOND, "prepare_hvp", "prepare_hessian"])
def test_an_error_under_a_second_order_of_two_frameworks_names_the_call(
    backend, outer, arrays, name
):
    """second_order(outer, inner) of two frameworks (finite differences over AD, or
    another AD framework over inner): the inner gradient is a public call inside
    diffiface; its errors still start with the call the user wrote."""
    other = di.AutoJax() if backend.framework != "jax" else di.AutoTorch()
    if outer == "other AD" and not HAVE[other.framework]:
        pytest.skip(f"{other.framework} missing")
    so = di.second_order(di.AutoFiniteDifferences() if outer == "fd" else other, backend)
    x, extra, tail = _args(backend, name)
    if arrays == "numpy":
        x, extra = np.asarray(x), tuple(np.asarray(a) for a in extra)
    with pytest.raises((di.DiffifaceTypeError, di.DiffifaceValueError)) as err:
        getattr(di, name)(_bad, so, x, *extra)
    want = f"{name}(f, {so!r}, {tail}): f must return"
    if name.startswith("prepare") and (not isinstance(x, np.ndarray) or outer != "fd"):
        want = f"{name}(f, {so!r}, ...): the arguments hold arrays of another framework"
    assert str(err.value).startswith(want), str(err.value)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("detector", ["global", "local"])
@pytest.mark.parametrize("hessian", [False, True])
def test_sparsity_pattern_errors_name_sparsity_pattern(backend, detector, hessian):
    """Every backend's global detector (the NumPy tracer's on autograd, finite
    differences and MLX checks f's output too: it gave an empty pattern) and local one."""
    backend = di.AutoSparse(backend, sparsity_detector=detector)
    with pytest.raises((di.DiffifaceTypeError, di.DiffifaceValueError)) as err:
        di.sparsity_pattern(_bad, backend, native(backend, X.ravel()), hessian=hessian)
    assert str(err.value).startswith(f"sparsity_pattern(f, {backend!r}, x): "), str(err.value)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("name", OPERATORS)
def test_a_prep_that_is_no_preparation_names_the_call(backend, name):
    x, extra, tail = _args(backend, name)
    with pytest.raises(di.DiffifaceTypeError) as err:
        getattr(di, name)(lambda t: (t**2).sum(), backend, x, *extra, prep="prep")
    want = f"{name}(f, {backend!r}, {tail}, prep=prep): prep must come from a "
    want += f"di.prepare_{FAMILY[name]}("
    assert str(err.value).startswith(want), str(err.value)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("name", OPERATORS)
def test_a_prepared_call_error_names_prep(backend, name):
    """A prepared call's error starts with the call as written, ``prep=prep`` included:
    here x of another shape than the preparation's."""
    x, extra, tail = _args(backend, name)
    if OPS[name].scalar or FAMILY[name] in ("hvp", "hessian", "gradient"):
        good = lambda t: (t**2).sum()  # noqa: E731
    else:
        good = lambda t: t**2  # noqa: E731
    prep = getattr(di, f"prepare_{FAMILY[name]}")(good, backend, x, *extra)
    other = native(backend, np.ones(3)) if np.ndim(X) and name not in SCALAR_X else None
    if other is None:
        pytest.skip("a scalar x has no other shape")
    more = tuple(other for _ in extra)
    with pytest.raises((di.DiffifaceTypeError, di.DiffifaceValueError)) as err:
        getattr(di, name)(good, backend, other, *more, prep=prep)
    assert str(err.value).startswith(f"{name}(f, {backend!r}, {tail}, prep=prep): "), str(err.value)
