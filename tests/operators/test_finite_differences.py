"""The finite-differences backend:

* a step that is not finite and positive, or too small to change x, is an error (it
  gave NaN);
* finite differences nested in finite differences whose steps multiply to under
  1e-13 are an error (three levels of default steps, two one-sided ones: rounding
  noise of the order of the result);
* the methods agree, the number of calls of f is as documented, and an hvp of a
  scalar is an array."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di

FD = di.AutoFiniteDifferences()

# ---- 6. the finite-difference step ------------------------------------------------


@pytest.mark.parametrize(
    "bad", [np.inf, -np.inf, np.nan, 0, 0.0, -1e-3, 1e-300, 1e-14, 9.9e-14, True, "1e-3"]
)
def test_fd_step_must_be_finite_and_at_least_1e_13(bad):
    with pytest.raises(di.DiffifaceValueError) as err:
        di.AutoFiniteDifferences(step=bad)
    msg = str(err.value)
    assert msg.startswith(f"AutoFiniteDifferences(step={bad!r}): step must be a positive float")
    assert "finite and at least 1e-13" in msg and "None" in msg


@pytest.mark.parametrize("step", [1e-13, 1e-3, 0.5, 1, np.float64(1e-4)])
def test_fd_steps_in_range_are_accepted(step):
    b = di.AutoFiniteDifferences(step=step)
    x = np.array([0.3, -0.7])
    g = di.gradient(lambda x: (x**2).sum(), b, x)  # exact for any step: central, quadratic
    np.testing.assert_allclose(g, 2 * x, rtol=2e-3 if step == 1e-13 else 1e-9)


@pytest.mark.parametrize(
    "call",
    [
        lambda b, x: di.gradient(lambda x: (x**2).sum(), b, x),
        lambda b, x: di.jvp(lambda x: x**2, b, x, np.ones_like(x)),
        lambda b, x: di.jacobian(lambda x: x**2, b, x),
    ],
)
def test_fd_step_that_cannot_change_float32_x_is_an_error(call):
    # 1e-10 is fine for float64 but under float32's eps: x + h == x, and the differences
    # were 0 / 0 (NaN with a RuntimeWarning) or silently zero
    b = di.AutoFiniteDifferences(step=1e-10)
    x = np.array([0.5, 2.0], dtype=np.float32)
    with pytest.raises(di.DiffifaceValueError, match=r"step=1e-10 cannot change x in float32"):
        call(b, x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(call(b, x64), call(FD, x64), rtol=1e-5)


# ---- 6. finite differences nested in finite differences ----------------------------


def _d3_sin(b1, b2, b3, t):
    return di.derivative(
        lambda a: di.derivative(lambda s: di.derivative(np.sin, b3, s), b2, a), b1, t
    )


def _third(b1, b2, b3, x):
    """The diagonal of the third-derivative tensor of sum(x**4): 24 x."""
    f = lambda x: (x**4).sum()  # noqa: E731
    t = di.jacobian(
        lambda a: di.jacobian(lambda z: di.gradient(f, b3, z), b2, a), b1, x
    )  # (3, 3, 3)
    return np.einsum("iii->i", t)


X3 = np.array([1 / 3, -0.8, 4 / 3])  # 24 x = [8, -19.2, 32]


DEEP = r"finite differences 3 levels deep .* whose product, .*, is under 1e-13"


def test_three_nested_fd_levels_of_default_steps_are_an_error():
    # before: derivative^3 of sin at 0.3 gave -1.0000000 (-cos(0.3) = -0.9553365) and
    # the jacobian of a jacobian of a gradient [8.50, -19.25, 32.11] for [8, -19.2, 32]
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        _d3_sin(FD, FD, FD, 0.3)
    with pytest.raises(di.DiffifaceValueError, match=DEEP) as err:
        _third(FD, FD, FD, X3)
    msg = str(err.value)
    assert msg.startswith("gradient(f, AutoFiniteDifferences(method='central', step=None), x):")
    assert "AutoJax()" in msg and "step=1e-3" in msg
    # a second-order operator counts twice
    f = lambda x: (x**4).sum()  # noqa: E731
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        di.jacobian(lambda z: di.hessian(f, FD, z), FD, X3)
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        di.derivative(lambda t: di.second_derivative(np.sin, FD, t), FD, 0.3)
    with pytest.raises(di.DiffifaceValueError, match=DEEP):
        di.gradient(lambda z: di.hvp(f, FD, z, np.ones(3)).sum(), FD, X3)


def test_two_levels_of_one_sided_or_tiny_steps_are_an_error():
    # before: forward differences of forward differences gave sin''(0.3) = -0.5, not
    # -0.2955 (steps 1.5e-08 twice: noise eps / 2.2e-16 ~ 1); a Hessian with step=1e-10
    # was exactly 0
    one_sided = di.AutoFiniteDifferences(method="forward")
    with pytest.raises(di.DiffifaceValueError, match=r"2 levels deep .* is under 1e-13"):
        di.derivative(lambda s: di.derivative(np.sin, one_sided, s), one_sided, 0.3)
    tiny = di.AutoFiniteDifferences(step=1e-10)
    with pytest.raises(di.DiffifaceValueError, match=r"2 levels deep .* product, 1e-20"):
        di.hessian(lambda x: (x**3).sum(), tiny, np.array([0.5, 2.0]))
    # one level of each runs, and so does a one-sided Hessian (outer step eps**(1/4))
    np.testing.assert_allclose(di.derivative(np.sin, one_sided, 0.3), np.cos(0.3), rtol=1e-7)
    np.testing.assert_allclose(di.derivative(np.sin, tiny, 0.3), np.cos(0.3), rtol=1e-5)
    H = di.hessian(lambda x: (x**3).sum(), one_sided, np.array([0.5, 2.0]))
    np.testing.assert_allclose(H, np.diag([3.0, 12.0]), atol=1e-5)


def test_one_and_two_fd_levels_still_run():
    t = 0.3
    d2 = di.derivative(lambda s: di.derivative(np.sin, FD, s), FD, t)
    np.testing.assert_allclose(d2, -np.sin(t), rtol=1e-5)  # 1.4e-6: two levels
    np.testing.assert_allclose(di.second_derivative(np.sin, FD, t), -np.sin(t), rtol=1e-7)
    f = lambda x: (x**4).sum()  # noqa: E731
    for b in (FD, di.second_order(FD, FD)):
        np.testing.assert_allclose(di.hessian(f, b, X3), np.diag(12 * X3**2), atol=1e-5)
    jg = di.jacobian(lambda z: di.gradient(f, FD, z), FD, X3)
    np.testing.assert_allclose(jg, np.diag(12 * X3**2), atol=1e-5)
    # after an error inside f the count is back at zero: one level runs again
    with pytest.raises(di.DiffifaceValueError):
        _d3_sin(FD, FD, FD, t)
    np.testing.assert_allclose(di.derivative(np.sin, FD, t), np.cos(t), rtol=1e-9)


def test_coarser_steps_resolve_three_levels():
    coarse = di.AutoFiniteDifferences(step=1e-3)
    np.testing.assert_allclose(_third(coarse, coarse, coarse, X3), 24 * X3, rtol=1e-5)
    np.testing.assert_allclose(_d3_sin(coarse, coarse, coarse, 0.3), -np.cos(0.3), rtol=1e-5)
    # one default level among coarse ones: steps 1e-3 * 6e-6 * 1e-3 = 6e-12, resolved
    np.testing.assert_allclose(_third(coarse, FD, coarse, X3), 24 * X3, rtol=1e-5)
    with pytest.raises(di.DiffifaceValueError, match=DEEP):  # two default levels
        _third(coarse, FD, FD, X3)


@pytest.mark.skipif(not HAVE["autograd"], reason="autograd missing")
def test_fd_over_an_ad_gradient_is_one_level():
    import autograd.numpy as anp

    fd_over_ad = di.second_order(FD, di.AutoAutograd())
    d3 = di.derivative(lambda t: di.second_derivative(anp.sin, fd_over_ad, t), FD, 0.3)
    np.testing.assert_allclose(d3, -np.cos(0.3), rtol=1e-6)


# ---- 6. NumPy masked arrays ---------------------------------------------------------


# ---- 7. chunked results equal the dense ones -------------------------------------------


# ---- 8. diffiface bench: where to write, and no silent overwrite --------------------


def test_finite_difference_methods_agree():
    x = np.array([0.3, -0.4])
    f = lambda x: (np.exp(x) * x).sum()  # noqa: E731
    exact = np.exp(x) * (1 + x)
    for method, tol in (("central", 1e-8), ("forward", 1e-6), ("backward", 1e-6)):
        g = di.gradient(f, di.AutoFiniteDifferences(method=method), x)
        np.testing.assert_allclose(g, exact, rtol=tol)
    g = di.gradient(f, di.AutoFiniteDifferences(step=1e-4), x)
    np.testing.assert_allclose(g, exact, rtol=1e-7)


def test_finite_differences_call_count():
    calls = []

    def f(x):
        calls.append(1)
        return (x**2).sum()

    x = np.ones(5)
    di.gradient(f, di.AutoFiniteDifferences(), x)
    assert len(calls) == 2 * 5  # 2n for central differences (a gradient needs no f(x))
    calls.clear()
    di.value_and_gradient(f, di.AutoFiniteDifferences(), x)
    assert len(calls) == 1 + 2 * 5  # f(x) plus 2n
    calls.clear()
    di.jvp(f, di.AutoFiniteDifferences(method="forward"), x, np.ones(5))
    assert len(calls) == 2


def test_finite_difference_hvp_of_a_scalar_is_an_array():
    hv = di.hvp(lambda x: x**3, di.AutoFiniteDifferences(), np.array(2.0), np.array(1.0))
    assert isinstance(hv, np.ndarray) and hv.shape == ()
    assert float(hv) == pytest.approx(12.0, rel=1e-5)
