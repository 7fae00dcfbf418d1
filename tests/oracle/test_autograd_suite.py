"""autograd's own tests, ported onto diffiface.

Each test names the upstream test it follows (HIPS/autograd ``tests/``:
``test_core.py``, ``test_direct.py``, ``test_wrappers.py``, ``test_graphs.py``,
``test_jacobian.py``, ``test_dict.py``, ``test_tuple.py``, ``test_list.py``,
``test_logic.py``, ``test_misc.py``, ``test_numpy.py``) and computes its result
through ``di.*`` with ``AutoAutograd`` (and ``AutoFiniteDifferences``, which runs
the same ``autograd.numpy`` functions on plain NumPy), comparing with autograd's
own call (``autograd.grad``, ``jacobian``, ``hessian``, ``make_hvp``, ...) and,
where autograd's answer could itself be in question, with float64 central
differences. Tolerances: AD against AD ``rtol=1e-10``; diffiface's finite
differences ``rtol=1e-6``; our own central differences (step 1e-6, float64)
``rtol=1e-6, atol=1e-8``.

Upstream names are the names in autograd at commit bff107b (August 2026).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

autograd = pytest.importorskip("autograd")
import autograd.numpy as anp  # noqa: E402
from autograd import (  # noqa: E402
    checkpoint,
    elementwise_grad,
    grad,
    hessian,
    hessian_tensor_product,
    jacobian,
    make_ggnvp,
    make_hvp,
    make_jvp,
    tensor_jacobian_product,
    value_and_grad,
)
from autograd.tracer import isbox  # noqa: E402
from helpers import (  # noqa: E402
    assert_tree_close,
    central_deriv,
    central_grad,
    tolerance,
    zero_or_clear_error,
)

import diffiface as di  # noqa: E402

A = di.AutoAutograd()
AF = di.AutoAutograd(mode="forward")
AR = di.AutoAutograd(mode="reverse")
FD = di.AutoFiniteDifferences()
ERRORS = (di.DiffifaceTypeError, di.DiffifaceValueError)

# the tests' tolerance table (tests/helpers.py, from diffiface.testing.tolerance): 1e-10, 1e-6
AD_RTOL, _ = tolerance(A, np.float64)
FD_RTOL, _ = tolerance(FD, np.float64)
CD = {"rtol": 1e-6, "atol": 1e-8}
CDA = {"rel": 1e-6, "abs": 1e-8}  # the same, for pytest.approx

RNG = np.random.default_rng(1)
X5 = RNG.standard_normal(5)
V5 = RNG.standard_normal(5)


def _tol(backend):
    return FD_RTOL if isinstance(backend, di.AutoFiniteDifferences) else AD_RTOL


# ------------------------------------------------------------------ test_core.py

BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "div": lambda x, y: x / y,
    "mul": lambda x, y: x * y,
    "pow": lambda x, y: x**y,
    "mod": lambda x, y: x % y,
}


@pytest.mark.parametrize("backend", [A, FD], ids=repr)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_core_binary_ops(name, backend):
    # upstream: test_core.py::test_add, test_sub, test_div, test_mul, test_pow, test_mod
    fun = BINARY[name]
    x, y = 0.7, 1.8
    dx = di.gradient(lambda x, y: fun(x, y), backend, x, di.Constant(y))
    dy = di.gradient(lambda y, x: fun(x, y), backend, y, di.Constant(x))
    assert isinstance(dx, float) and isinstance(dy, float)
    assert dx == pytest.approx(grad(fun)(x, y), rel=_tol(backend))
    assert dy == pytest.approx(grad(fun, 1)(x, y), rel=_tol(backend))
    assert dx == pytest.approx(central_deriv(lambda x: fun(x, y), x), **CDA)
    assert dy == pytest.approx(central_deriv(lambda y: fun(x, y), y), **CDA)
    both = di.gradient(lambda t: fun(*t), backend, (x, y))
    assert both == pytest.approx((dx, dy), rel=_tol(backend))


@pytest.mark.parametrize(
    "cmp",
    [lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x <= y, lambda x, y: x > y],
    ids=["eq", "neq", "leq", "gt"],
)
def test_core_comparisons(cmp):
    # upstream: test_core.py::test_eq, test_neq, test_leq, test_geq, test_lt, test_gt
    # (autograd answers 0 with a warning; a bool output to diffiface is float zeros
    # or its own error)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            assert grad(cmp)(0.7, 1.8) == 0.0
        except TypeError:  # autograd under NumPy 2 has no vector space for np.bool
            pass
    for backend in (A, FD):
        zero_or_clear_error(lambda b=backend: di.gradient(cmp, b, 0.7, di.Constant(1.8)), ())
        zero_or_clear_error(
            lambda b=backend: di.gradient(lambda x: anp.sum(cmp(x, 0.0)) * 1.0, b, X5), (5,)
        )


# ---------------------------------------------------------------- test_direct.py


def _direct_fun(x):
    return (x + anp.sin(x**2)) * x


@pytest.mark.parametrize("backend", [A, FD], ids=repr)
def test_direct_grad_and_deriv(backend):
    # upstream: test_direct.py::test_grad, test_deriv
    want = 3.190948746871
    tol = 1e-6 * want
    assert grad(_direct_fun)(1.3) == pytest.approx(want, abs=tol)
    assert di.gradient(_direct_fun, backend, 1.3) == pytest.approx(want, abs=tol)
    assert di.derivative(_direct_fun, backend, 1.3) == pytest.approx(want, abs=tol)
    v, d = di.value_and_derivative(_direct_fun, backend, 1.3)
    assert v == pytest.approx(_direct_fun(1.3)) and d == pytest.approx(want, abs=tol)


@pytest.mark.parametrize("backend", [A, FD], ids=repr)
def test_direct_grad_complex_output(backend):
    # upstream: test_direct.py::test_grad_complex_output
    def fun(x):
        return x * (1.0 + 0.2j)

    with pytest.raises(TypeError):
        grad(fun)(1.0)
    with pytest.raises(di.DiffifaceValueError, match=r"complex scalar"):
        di.gradient(fun, backend, np.array(1.0))


def test_direct_deriv_of_complex_valued_f():
    # upstream: test_direct.py::test_holomorphic_grad (the real-x half: autograd.deriv of
    # x * (1 + 0.2j) is 1 + 0.2j; di.derivative / di.jvp of a Python float must be too)
    def fun(x):
        return x * (1.0 + 0.2j)

    assert autograd.deriv(fun)(1.0) == pytest.approx(1 + 0.2j)
    np.testing.assert_allclose(di.jvp(fun, A, np.array([1.0]), np.array([1.0])), [1 + 0.2j])
    assert di.derivative(fun, A, 1.0) == pytest.approx(1 + 0.2j)
    assert di.jvp(fun, A, 1.0, 1.0) == pytest.approx(1 + 0.2j)


def test_direct_holomorphic_grad_as_the_error_recommends():
    # upstream: test_direct.py::test_holomorphic_grad (no holomorphic_grad in diffiface;
    # its error for a complex output says to pass the parts of z as real leaves to jvp)
    def fun(x):
        return x * (1.0 + 0.2j)

    z = np.array(1.0 + 0.0j)
    want = autograd.holomorphic_grad(fun)(1.0 + 0.0j)
    assert want == pytest.approx(1 + 0.2j)
    with pytest.raises(di.DiffifaceValueError, match=r"real and imaginary parts"):
        di.gradient(fun, A, z)
    got = di.jvp(lambda p: fun(p[0] + 1j * p[1]), A, np.array([1.0, 0.0]), np.array([1.0, 0.0]))
    assert got == pytest.approx(want)


def test_jacobian_of_complex_valued_f():
    # upstream: test_direct.py::test_grad_complex_output (the Jacobian of a complex-valued
    # f of real x: autograd.jacobian itself fails here (a reshape error), autograd.deriv
    # gives 1 + 0.2j per entry, and diffiface's own finite differences give (1 + 0.2j) I;
    # diffiface must give that or its own error, never only the real part)
    def fun(x):
        return x * (1.0 + 0.2j)

    x = np.array([1.0, 2.0])
    assert autograd.deriv(fun)(1.0) == pytest.approx(1 + 0.2j)
    for backend in (A, FD):  # one clear error, never only the real part
        with pytest.raises(di.DiffifaceTypeError, match="complex values"):
            di.jacobian(fun, backend, x)
    np.testing.assert_allclose(di.jvp(fun, A, x, np.ones(2)), x * 0 + (1 + 0.2j))


# -------------------------------------------------------------- test_wrappers.py


def test_return_both():
    # upstream: test_wrappers.py::test_return_both
    def fun(x):
        return 3.0 * x**3.2

    f, d = value_and_grad(fun)(1.7)
    got_f, got_d = di.value_and_gradient(fun, A, 1.7)
    assert got_f == f == fun(1.7)
    assert got_d == pytest.approx(d, rel=AD_RTOL)
    assert got_d == pytest.approx(grad(fun)(1.7), rel=AD_RTOL)


def test_value_and_grad():
    # upstream: test_wrappers.py::test_value_and_grad (also its gradient: fun2 takes the
    # value from value_and_gradient and is differentiated again)
    def fun(x):
        return anp.sum(anp.sin(x) ** 2)

    v, g = di.value_and_gradient(fun, A, X5)
    assert not isbox(v) and float(v) == pytest.approx(fun(X5))
    np.testing.assert_allclose(g, grad(fun)(X5), rtol=AD_RTOL)

    def fun2(x):
        return di.value_and_gradient(fun, A, x)[0]

    np.testing.assert_allclose(di.gradient(fun2, A, X5), grad(fun)(X5), rtol=AD_RTOL)
    np.testing.assert_allclose(grad(fun2)(X5), grad(fun)(X5), rtol=AD_RTOL)


@pytest.mark.parametrize(
    "backend",
    [A, di.second_order(AF, AR), di.second_order(AR, AR), di.second_order(AR, AF), FD],
    ids=repr,
)
def test_hessian_quadratic(backend):
    # upstream: test_wrappers.py::test_hessian
    H = RNG.standard_normal((5, 5))

    def fun(x):
        return anp.dot(anp.dot(x, H), x)

    tol = 1e-5 if backend is FD else AD_RTOL
    got = di.hessian(fun, backend, X5)
    np.testing.assert_allclose(got, hessian(fun)(X5), rtol=tol, atol=tol)
    np.testing.assert_allclose(got, H + H.T, rtol=tol, atol=tol)


def _complicated_fun(a, b, c, d, e, f=1.1, g=9.0):
    return a + anp.sin(b) + anp.cosh(c) + anp.cos(d) + anp.tan(e) + f + g


@pytest.mark.parametrize("backend", [A, FD], ids=repr)
def test_multigrad(backend):
    # upstream: test_wrappers.py::test_multigrad, test_value_and_multigrad
    a, b, c, d, e, f, g = 0.5, -0.3, 0.2, -1.1, 0.7, 0.6, -0.1
    want = grad(_complicated_fun, argnum=[3, 1])(a, b, c, d, e, f=f, g=g)

    def fun(db, rest):
        return _complicated_fun(rest[0], db[1], rest[1], db[0], rest[2], f=f, g=g)

    v, got = di.value_and_gradient(fun, backend, (d, b), di.Constant((a, c, e)))
    assert isinstance(got, tuple)
    assert got == pytest.approx(tuple(float(w) for w in want), rel=_tol(backend))
    assert v == pytest.approx(_complicated_fun(a, b, c, d, e, f=f, g=g))


def test_multigrad_onearg():
    # upstream: test_wrappers.py::test_multigrad_onearg
    a, b = RNG.standard_normal(3), RNG.standard_normal(3)
    (want,) = grad(lambda x, y: anp.sum(x + anp.sin(y)), argnum=[0])(a, b)
    got = di.gradient(lambda x, y: anp.sum(x + anp.sin(y)), A, a, di.Constant(b))
    np.testing.assert_allclose(got, want)
    got = di.gradient(lambda xy: anp.sum(xy[0] + anp.sin(xy[1])), A, (a, b))
    np.testing.assert_allclose(got[0], want)
    np.testing.assert_allclose(got[1], np.cos(b), rtol=AD_RTOL)


@pytest.mark.parametrize("backend", [A, AF, AR, FD], ids=repr)
def test_elementwise_grad(backend):
    # upstream: test_wrappers.py::test_elementwise_grad (an elementwise gradient is a
    # jvp with ones, a vjp with ones, or the diagonal of the Jacobian)
    def simple_fun(a):
        return a + anp.sin(a) + anp.cosh(a)

    want = elementwise_grad(simple_fun)(X5)
    tol = _tol(backend)
    np.testing.assert_allclose(di.jvp(simple_fun, backend, X5, np.ones(5)), want, rtol=tol)
    np.testing.assert_allclose(di.vjp(simple_fun, backend, X5, np.ones(5)), want, rtol=tol)
    np.testing.assert_allclose(np.diag(di.jacobian(simple_fun, backend, X5)), want, rtol=tol)
    explicit = [di.derivative(simple_fun, backend, float(a)) for a in X5]
    np.testing.assert_allclose(explicit, want, rtol=tol)


def test_elementwise_grad_multiple_args():
    # upstream: test_wrappers.py::test_elementwise_grad_multiple_args
    def simple_fun(a, b):
        return a + anp.sin(a) + anp.cosh(b)

    want = elementwise_grad(simple_fun, 1)(0.9, X5)
    got = di.jvp(lambda b, a: simple_fun(a, b), A, X5, np.ones(5), di.Constant(0.9))
    np.testing.assert_allclose(got, want, rtol=AD_RTOL)
    np.testing.assert_allclose(got, np.sinh(X5), rtol=AD_RTOL)


@pytest.mark.parametrize("shape", [(5,), (5, 4), (5, 4, 3)], ids=["vector", "matrix", "tensor"])
@pytest.mark.parametrize("backend", [A, di.second_order(AR, AR), FD], ids=repr)
def test_hessian_tensor_product(shape, backend):
    # upstream: test_wrappers.py::test_hessian_tensor_product, test_hvp,
    # test_hessian_matrix_product, test_hessian_tensor_product_3d
    def fun(a):
        return anp.sum(anp.sin(a))

    a = RNG.standard_normal(shape)
    V = RNG.standard_normal(shape)
    H = hessian(fun)(a)
    want = np.tensordot(H, V, axes=V.ndim)
    tol = 1e-5 if backend is FD else AD_RTOL
    np.testing.assert_allclose(want, hessian_tensor_product(fun)(a, V), rtol=AD_RTOL)
    np.testing.assert_allclose(make_hvp(fun)(a)[0](V), want, rtol=AD_RTOL)
    np.testing.assert_allclose(di.hvp(fun, backend, a, V), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(di.hessian(fun, backend, a), H, rtol=tol, atol=tol)
    g, hv = di.gradient_and_hvp(fun, backend, a, V)
    np.testing.assert_allclose(g, np.cos(a), rtol=tol)
    np.testing.assert_allclose(hv, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("a_shape", "v_shape"),
    [((5,), (5,)), ((5, 4), (5, 4)), ((5, 4, 3), (5, 4))],
    ids=["vector", "matrix", "tensor"],
)
@pytest.mark.parametrize("backend", [A, AF, FD], ids=repr)
def test_tensor_jacobian_product(a_shape, v_shape, backend):
    # upstream: test_wrappers.py::test_tensor_jacobian_product, test_matrix_jacobian_product,
    # test_tensor_jacobian_product (3-d)
    def fun(a):
        return anp.roll(anp.sin(a), 1)

    a = RNG.standard_normal(a_shape)
    V = RNG.standard_normal(v_shape)
    J = jacobian(fun)(a)
    if len(a_shape) == len(v_shape):
        want = np.tensordot(V, J, axes=V.ndim)
        np.testing.assert_allclose(want, tensor_jacobian_product(fun)(a, V), rtol=AD_RTOL)
        np.testing.assert_allclose(di.vjp(fun, backend, a, V), want, rtol=_tol(backend))
        np.testing.assert_allclose(di.jacobian(fun, backend, a), J, rtol=_tol(backend), atol=1e-9)
    else:
        # V covers the leading output axes: one vjp per index k of the last output axis
        want = np.tensordot(V, J, axes=V.ndim)  # shape (3, 5, 4, 3)
        np.testing.assert_allclose(want, tensor_jacobian_product(fun)(a, V), rtol=AD_RTOL)
        got = np.stack([di.vjp(fun, backend, a, V[..., None] * np.eye(3)[k]) for k in range(3)])
        np.testing.assert_allclose(got, want, rtol=_tol(backend), atol=1e-9)


def test_make_jvp():
    # upstream: test_wrappers.py::test_make_jvp
    Am = RNG.standard_normal((3, 5))

    def fun(x):
        return anp.tanh(anp.dot(Am, x))

    want = make_jvp(fun)(X5)(V5)[1]
    np.testing.assert_allclose(want, jacobian(fun)(X5) @ V5, rtol=AD_RTOL)
    for backend in (A, AF, AR):
        np.testing.assert_allclose(di.jvp(fun, backend, X5, V5), want, rtol=AD_RTOL)
    np.testing.assert_allclose(di.jvp(fun, FD, X5, V5), want, rtol=FD_RTOL, atol=1e-8)
    v, t = di.value_and_jvp(fun, A, X5, V5)
    np.testing.assert_allclose(v, fun(X5))
    np.testing.assert_allclose(t, want, rtol=AD_RTOL)


@pytest.mark.parametrize("nondefault_g", [False, True], ids=["default_g", "nondefault_g"])
def test_make_ggnvp(nondefault_g):
    # upstream: test_wrappers.py::test_make_ggnvp, test_make_ggnvp_nondefault_g
    # (J^T H_g J v from di.jvp, di.hvp and di.vjp)
    Am = RNG.standard_normal((5, 4))
    x = RNG.standard_normal(4)
    v = RNG.standard_normal(4)
    g = (lambda y: anp.sum(2.0 * y**2 + y**4)) if nondefault_g else (lambda y: 0.5 * anp.dot(y, y))
    for fun in (lambda x: anp.dot(Am, x), lambda x: anp.tanh(anp.dot(Am, x))):
        want = make_ggnvp(fun, g)(x)(v) if nondefault_g else make_ggnvp(fun)(x)(v)
        Jv = di.jvp(fun, A, x, v)
        HJv = di.hvp(g, A, fun(x), Jv)
        got = di.vjp(fun, A, x, HJv)
        np.testing.assert_allclose(got, want, rtol=1e-9)
        J = di.jacobian(fun, A, x)
        np.testing.assert_allclose(J.T @ di.hessian(g, A, fun(x)) @ J @ v, want, rtol=1e-9)


def test_partial():
    # upstream: test_wrappers.py::test_partial
    def f(x, y):
        return x * y

    pf = functools.partial(f, y=3.0)
    assert di.gradient(pf, A, 2.0) == grad(pf)(2.0) == 3.0
    prep = di.prepare_gradient(pf, A, 2.0)
    assert di.gradient(pf, A, 5.0, prep=prep) == 3.0


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_dtypes(dtype):
    # upstream: test_wrappers.py::test_dtypes
    def f(x):
        return anp.real(anp.sum(x**2))

    y = RNG.standard_normal((10, 10)).astype(dtype)
    want = grad(f)(y)
    assert want.dtype.type is dtype
    got = di.gradient(f, A, y)
    assert got.dtype.type is dtype
    np.testing.assert_allclose(got, want, rtol=np.finfo(dtype).eps * 4)
    assert di.hvp(f, A, y, np.ones_like(y)).dtype.type is dtype


def test_checkpoint_correctness():
    # upstream: test_wrappers.py::test_checkpoint_correctness
    def bar(x, y):
        return 2 * x + y + 5

    cbar = checkpoint(bar)

    def foo(x):
        return bar(x, x / 3.0) + bar(x, x**2)

    def foo2(x):
        return cbar(x, x / 3.0) + cbar(x, x**2)

    assert di.gradient(foo2, A, 3.0) == pytest.approx(grad(foo)(3.0))
    assert di.gradient(foo2, A, 3.0) == pytest.approx(grad(foo2)(3.0))
    assert di.second_derivative(foo2, A, 3.0) == pytest.approx(2.0)


# ---------------------------------------------------------------- test_graphs.py


def test_grad_fanout():
    # upstream: test_graphs.py::test_grad_fanout
    def fun(x):
        return anp.sin(anp.sin(x) + anp.sin(x))

    for x in (0.3, -1.4):
        assert di.derivative(fun, A, x) == pytest.approx(grad(fun)(x), rel=AD_RTOL)
        assert di.second_derivative(fun, A, x) == pytest.approx(grad(grad(fun))(x), rel=AD_RTOL)
        assert di.second_derivative(fun, A, x) == pytest.approx(central_deriv(grad(fun), x), **CDA)


def test_grad_const():
    # upstream: test_graphs.py::test_grad_const (autograd warns and gives 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert grad(lambda x: 1.0)(2.0) == 0.0
    with pytest.warns(di.DisconnectedWarning):
        got = di.gradient(lambda x: anp.array(1.0), A, 2.0)
    assert got == 0.0
    with pytest.warns(di.DisconnectedWarning):
        got = di.gradient(lambda x: anp.sum(anp.ones(3)), A, X5)
    np.testing.assert_array_equal(got, np.zeros(5))
    with pytest.raises(di.DiffifaceTypeError, match=r"must return an array"):
        di.gradient(lambda x: 1.0, A, 2.0)


def test_grad_identity():
    # upstream: test_graphs.py::test_grad_identity
    assert di.derivative(lambda x: x, A, 2.0) == grad(lambda x: x)(2.0) == 1.0
    assert di.second_derivative(lambda x: x, A, 2.0) == 0.0
    with pytest.warns(di.DisconnectedWarning):
        assert di.gradient(lambda x: di.derivative(lambda y: y, A, x), A, 2.0) == 0.0


def test_hess_vector_prod():
    # upstream: test_graphs.py::test_hess_vector_prod
    randv = RNG.standard_normal(10)

    def fun(x):
        return anp.sin(anp.dot(x, randv))

    def vector_product(x, v):
        return anp.sin(anp.dot(v, di.gradient(fun, A, x)))

    a, b = RNG.standard_normal(10), RNG.standard_normal(10)
    want = grad(lambda x, v: anp.sin(anp.dot(v, grad(fun)(x))))(a, b)
    got = di.gradient(vector_product, A, a, di.Constant(b))
    np.testing.assert_allclose(got, want, rtol=1e-9)
    np.testing.assert_allclose(got, central_grad(lambda x: vector_product(x, b), a), **CD)
    np.testing.assert_allclose(grad(vector_product)(a, b), want, rtol=1e-9)


@pytest.mark.parametrize("order", ["x*y", "y*x"])
@pytest.mark.parametrize("outer", ["autograd", "diffiface"])
def test_enclosing_scope_ref(order, outer):
    # upstream: test_graphs.py::test_enclosing_scope_ref, test_enclosing_scope_ref_2
    def fun(x):
        inner = (lambda y: x * y) if order == "x*y" else (lambda y: y * x)
        return x * di.derivative(inner, A, 2.0)

    d = grad(fun) if outer == "autograd" else (lambda x: di.derivative(fun, A, x))
    assert d(1.0) == pytest.approx(2.0)
    assert d(1.5) == pytest.approx(3.0)
    assert d(1.0) == pytest.approx(central_deriv(fun, 1.0), **CDA)


def test_perturbation_confusion():
    # upstream: test_graphs.py::test_enclosing_scope_ref (Siskind & Pearlmutter's
    # D(x -> x * D(y -> x + y)(1))(1) == 1)
    def fun(x):
        return x * di.derivative(lambda y: x + y, A, 1.0)

    assert di.derivative(fun, A, 1.0) == 1.0
    assert grad(fun)(1.0) == 1.0


def test_mutating_outgrad_from_indexing():
    # upstream: test_graphs.py::test_mutating_outgrad, test_mutating_outgrad_from_indexing
    def fun(a):
        b = a + 1.0
        c = b[0] + 1.5
        d = a + b
        return d + c

    for backend in (A, AF, AR, FD):
        np.testing.assert_allclose(
            di.jacobian(fun, backend, X5), jacobian(fun)(X5), rtol=_tol(backend)
        )


def test_complex_mutating_outgrad_from_indexing():
    # upstream: test_graphs.py::test_complex_mutating_outgrad_from_indexing
    def fun(a):
        b = a + 1.0j
        c = b[0] + 1.5
        d = a + b
        e = d + c
        return anp.sum(anp.sin(anp.real(e)))

    want = grad(fun)(X5)
    np.testing.assert_allclose(di.gradient(fun, A, X5), want, rtol=AD_RTOL)
    np.testing.assert_allclose(di.gradient(fun, FD, X5), want, rtol=FD_RTOL)
    np.testing.assert_allclose(
        di.gradient(lambda x: anp.sum(di.gradient(fun, A, x)), A, X5),
        grad(lambda x: anp.sum(grad(fun)(x)))(X5),
        rtol=1e-9,
    )


def test_complex_separate_real_and_imaginary():
    # upstream: test_graphs.py::test_complex_separate_real_and_imaginary (diffiface returns
    # df/dRe + i df/dIm, the conjugate of autograd's convention)
    def fun(a):
        r, i = anp.real(a), anp.imag(a)
        a = anp.abs(r) ** 1.4 + anp.abs(i) ** 1.3
        return anp.sum(anp.sin(a))

    Z = RNG.standard_normal((5, 3)) + 0.1j * RNG.standard_normal((5, 3))
    want = np.conj(grad(fun)(Z))
    got = di.gradient(fun, A, Z)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, want, rtol=AD_RTOL)
    re = central_grad(lambda r: fun(r + 1j * Z.imag), Z.real)
    im = central_grad(lambda i: fun(Z.real + 1j * i), Z.imag)
    np.testing.assert_allclose(got, re + 1j * im, **CD)
    np.testing.assert_allclose(di.gradient(fun, FD, Z), want, rtol=FD_RTOL)


def _third_fun(x, y):
    return anp.sin(anp.sin(x) + anp.sin(y))


@pytest.mark.parametrize("argnum", [0, 1])
def test_third_derivative_other_args(argnum):
    # upstream: test_graphs.py::test_third_derivative, test_third_derivative_other_args,
    # test_third_derivative_other_args2 (nested first-order di calls)
    x, y = 0.4, -0.9
    want = grad(grad(grad(_third_fun, argnum), argnum), argnum)(x, y)

    def f1(t, c):
        return _third_fun(t, c) if argnum == 0 else _third_fun(c, t)

    c, t = (y, x) if argnum == 0 else (x, y)
    assert want == pytest.approx(central_deriv(lambda s: grad(grad(f1))(s, c), t), **CDA)
    got = di.gradient(
        lambda t: di.gradient(lambda s: di.gradient(f1, A, s, di.Constant(c)), A, t), A, t
    )
    assert got == pytest.approx(want, rel=1e-9)
    got = di.derivative(
        lambda t: di.derivative(lambda s: di.derivative(f1, A, s, di.Constant(c)), A, t), A, t
    )
    assert got == pytest.approx(want, rel=1e-9)
    got = di.second_derivative(lambda s: di.derivative(f1, A, s, di.Constant(c)), A, t)
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("outer", ["diffiface", "autograd"])
def test_third_derivative_through_second_derivative(outer):
    # upstream: test_graphs.py::test_third_derivative (the third derivative as the
    # derivative of diffiface's second derivative; AutoJax gets this right)
    def sd(t):
        return di.second_derivative(_third_fun, A, t, di.Constant(-0.9))

    want = grad(grad(grad(_third_fun)))(0.4, -0.9)
    got = di.derivative(sd, A, 0.4) if outer == "diffiface" else grad(sd)(0.4)
    assert got == pytest.approx(want, rel=1e-9)


def test_second_derivative_of_inner_call_on_python_float():
    # upstream: test_graphs.py::test_enclosing_scope_ref, twice differentiated
    # (f(x) = (d/dy x*y at y=2)^2 = x^2, so f'' = 2; AutoJax and autograd's own
    # deriv(grad(f)) give 2)
    def f(x):
        return di.derivative(lambda y: y * x, A, 2.0) ** 2

    assert autograd.deriv(grad(f))(10.0) == 2.0
    assert di.gradient(lambda x: di.gradient(f, A, x), A, 10.0) == 2.0
    assert di.second_derivative(f, A, 10.0) == pytest.approx(2.0)
    assert di.hessian(lambda x: f(x[0]), A, np.array([10.0])) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("shape", "kw"),
    [
        ((3, 3), {"keepdims": True}),
        ((3, 1), {"axis": 0}),
        ((1, 3), {"axis": 1}),
        ((3, 1), {"axis": 0, "keepdims": True}),
        ((1, 3), {"axis": 1, "keepdims": True}),
    ],
    ids=["keepdims", "axis0", "axis1", "axis0_keepdims", "axis1_keepdims"],
)
def test_singleton_array_output(shape, kw):
    # upstream: test_graphs.py::test_singleton_array_output and the axis variants
    # (autograd takes a size-1 output as a scalar; diffiface's gradient asks for shape (),
    # jacobian and vjp take it)
    def fun(x):
        return anp.sum(anp.sin(x), **kw)

    x = RNG.standard_normal(shape)
    want = grad(fun)(x)
    with pytest.raises(di.DiffifaceValueError, match=r"scalar"):
        di.gradient(fun, A, x)
    J = di.jacobian(fun, A, x)
    np.testing.assert_allclose(J.reshape(x.shape), want, rtol=AD_RTOL)
    np.testing.assert_allclose(di.vjp(fun, A, x, np.ones(fun(x).shape)), want, rtol=AD_RTOL)
    np.testing.assert_allclose(di.gradient(lambda x: anp.sum(fun(x)), A, x), want, rtol=AD_RTOL)


def test_assignment_raises_error():
    # upstream: test_graphs.py::test_assignment_raises_error
    def fun(a, b):
        a[1] = b
        return anp.sum(a)

    x = RNG.standard_normal(5)
    before = x.copy()
    with pytest.raises(TypeError):
        grad(fun)(x.copy(), 3.0)
    with pytest.raises(di.DiffifaceTypeError, match=r"^gradient\(f, AutoAutograd"):
        di.gradient(fun, A, x, di.Constant(3.0))
    np.testing.assert_array_equal(x, before)
    # finite differences hand f copies, so the assignment is harmless there
    np.testing.assert_allclose(di.gradient(fun, FD, x, di.Constant(3.0)), [1, 0, 1, 1, 1])
    np.testing.assert_array_equal(x, before)


# ------------------------------------------------------------ test_jacobian.py


def test_jacobian_against_grad():
    # upstream: test_jacobian.py::test_jacobian_against_grad
    def fun(x):
        return anp.sum(anp.sin(x), axis=1, keepdims=True)

    a = RNG.standard_normal((1, 3))
    want = grad(fun)(a)
    for backend in (A, AF, AR):
        np.testing.assert_allclose(di.jacobian(fun, backend, a).reshape(1, 3), want)
    np.testing.assert_allclose(jacobian(fun)(a).reshape(1, 3), want)


@pytest.mark.parametrize("backend", [A, AF, AR, FD], ids=repr)
def test_jacobian_scalar_to_vector(backend):
    # upstream: test_jacobian.py::test_jacobian_scalar_to_vector
    def fun(x):
        return anp.array([x, x**2, x**3])

    val = 0.7
    want = jacobian(fun)(val)
    np.testing.assert_allclose(want, [1.0, 2 * val, 3 * val**2])
    np.testing.assert_allclose(di.jacobian(fun, backend, val), want, rtol=_tol(backend))
    np.testing.assert_allclose(di.derivative(fun, backend, val), want, rtol=_tol(backend))
    np.testing.assert_allclose(di.second_derivative(fun, A, val), [0.0, 2.0, 6 * val], rtol=AD_RTOL)


def test_jacobian_against_stacked_grads():
    # upstream: test_jacobian.py::test_jacobian_against_stacked_grads (one of the scalar
    # functions is itself a di.gradient closing over x)
    scalar_funs = [
        lambda x: anp.sum(x**3),
        lambda x: anp.prod(anp.sin(x) + anp.sin(x)),
        lambda x: di.gradient(lambda y: anp.exp(y) * anp.tanh(x[0]), A, x[1]),
    ]
    ref_funs = [*scalar_funs[:2], lambda x: grad(lambda y: anp.exp(y) * anp.tanh(x[0]))(x[1])]

    def vector_fun(x):
        return anp.array([f(x) for f in scalar_funs])

    want = jacobian(lambda x: anp.array([f(x) for f in ref_funs]))(X5)
    np.testing.assert_allclose(want, np.vstack([grad(f)(X5) for f in ref_funs]), rtol=1e-10)
    for backend in (A, AR, AF):
        np.testing.assert_allclose(di.jacobian(vector_fun, backend, X5), want, rtol=1e-9)
    for f, w in zip(scalar_funs, want, strict=True):
        np.testing.assert_allclose(di.gradient(f, A, X5), w, rtol=1e-9)


def test_jacobian_higher_order():
    # upstream: test_jacobian.py::test_jacobian_higher_order
    def fun(x):
        return anp.sin(anp.outer(x, x)) + anp.cos(anp.dot(x, x))

    x = RNG.standard_normal(2)
    assert di.jacobian(fun, A, x).shape == (2, 2, 2)
    jj = di.jacobian(lambda y: di.jacobian(fun, A, y), A, x)
    assert jj.shape == (2, 2, 2, 2)
    np.testing.assert_allclose(jj, jacobian(jacobian(fun))(x), rtol=1e-9)

    def g1(x):
        return anp.sum(anp.sin(di.jacobian(fun, A, x)))

    want = grad(lambda x: anp.sum(anp.sin(jacobian(fun)(x))))(x)
    np.testing.assert_allclose(di.gradient(g1, A, x), want, rtol=1e-9)
    np.testing.assert_allclose(grad(g1)(x), want, rtol=1e-9)
    np.testing.assert_allclose(want, central_grad(g1, x), **CD)


# ------------------------------------------------- test_dict / tuple / list.py


def test_dict_getter_unused_key():
    # upstream: test_dict.py::test_getter
    def fun(d):
        return anp.sum(d["item_1"]) + 2 * anp.sum(d["item_2"])

    d = {
        "item_1": RNG.standard_normal((5, 6)),
        "item_2": RNG.standard_normal((4, 3)),
        "item_X": RNG.standard_normal((2, 4)),
    }
    want = grad(fun)(d)
    for backend in (A, FD):
        got = di.gradient(fun, backend, d)
        assert_tree_close(got, want, rtol=_tol(backend), atol=1e-8)
        np.testing.assert_array_equal(got["item_X"], np.zeros((2, 4)))


@pytest.mark.parametrize("container", ["dict", "tuple", "list"])
def test_container_grads_of_grads(container):
    # upstream: test_dict.py::test_grads / test_iter / test_items_values_keys,
    # test_tuple.py::test_grads, test_list.py::test_grads
    leaves = [RNG.standard_normal((5, 6)), RNG.standard_normal((4, 3)), RNG.standard_normal(2)]
    if container == "dict":
        x = dict(zip(["item_1", "item_2", "item_X"], leaves, strict=True))
        k = ["item_1", "item_2"]
    else:
        x = tuple(leaves) if container == "tuple" else list(leaves)
        k = [0, 1]

    def fun(t):
        return anp.sum(anp.sin(t[k[0]])) + anp.sum(anp.cos(t[k[1]]))

    def d_fun(t):
        g = di.gradient(fun, A, t)
        return anp.sum(g[k[0]]) + anp.sum(anp.sin(g[k[0]])) + anp.sum(anp.sin(g[k[1]]))

    def d_fun_ref(t):
        g = grad(fun)(t)
        return anp.sum(g[k[0]]) + anp.sum(anp.sin(g[k[0]])) + anp.sum(anp.sin(g[k[1]]))

    assert_tree_close(di.gradient(fun, A, x), grad(fun)(x))
    want = grad(d_fun_ref)(x)
    assert_tree_close(di.gradient(d_fun, A, x), want, rtol=1e-9)
    assert_tree_close(grad(d_fun)(x), want, rtol=1e-9)
    assert_tree_close(di.gradient(fun, FD, x), grad(fun)(x), rtol=FD_RTOL, atol=1e-8)


def test_dict_get():
    # upstream: test_dict.py::test_get
    def fun(d, x):
        return d.get("item_1", x) ** 2

    for d in ({"item_1": 3.0}, {"item_2": 4.0}, {}):
        want = grad(lambda t: fun(*t))((d, 2.0))
        got = di.gradient(lambda t: fun(*t), A, (d, 2.0))
        assert got == want


def test_tuple_nested_higher_order():
    # upstream: test_tuple.py::test_nested_higher_order
    def outer_fun(x):
        def inner_fun(y):
            return y[0] * y[1]

        return anp.sum(anp.sin(anp.array(di.gradient(inner_fun, A, (x, x)))))

    def outer_ref(x):
        return anp.sum(anp.sin(anp.array(grad(lambda y: y[0] * y[1])((x, x)))))

    assert di.derivative(outer_fun, A, 5.0) == pytest.approx(grad(outer_ref)(5.0))
    assert grad(outer_fun)(5.0) == pytest.approx(2 * np.cos(5.0))
    assert di.second_derivative(outer_fun, A, 10.0) == pytest.approx(grad(grad(outer_ref))(10.0))
    third = di.gradient(
        lambda x: di.gradient(lambda z: di.gradient(outer_fun, A, z), A, x), A, 10.0
    )
    assert third == pytest.approx(grad(grad(grad(outer_ref)))(10.0))
    assert third == pytest.approx(-2 * np.cos(10.0))


def test_list_slices_and_nested_list():
    # upstream: test_list.py::test_slices, test_nested_list
    def f1(x):
        return x[slice(None, -1, None)][0]

    def f2(x):
        return x[1:3][0]

    for f in (f1, f2):
        got = di.gradient(f, A, [1.0, 2.0, 3.0])
        assert got == grad(f)([1.0, 2.0, 3.0])
    got = di.gradient(lambda x: x[1:][0], A, [[1.0], 2.0, 1.5])
    assert got == [[0.0], 1.0, 0.0] == grad(lambda x: x[1:][0])([[1.0], 2.0, 1.5])


def test_flatten_nodes_in_containers():
    # upstream: test_misc.py::test_flatten_nodes_in_containers
    from autograd.misc import flatten

    def f(t):
        xy, _ = flatten(list(t))
        return anp.sum(xy)

    want = grad(lambda x, y: f((x, y)), argnum=[0, 1])(1.0, 2.0)
    assert di.gradient(f, A, (1.0, 2.0)) == tuple(float(w) for w in want) == (1.0, 1.0)


# -------------------------------------------------------------- test_logic.py


def test_assert_inside_f():
    # upstream: test_logic.py::test_assert
    def fun(x):
        assert anp.allclose(x, (x * 3.0) / 3.0)
        return anp.sum(x)

    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(di.gradient(fun, A, x), grad(fun)(x))


def test_nograd_bool_output():
    # upstream: test_logic.py::test_nograd
    def fun(x):
        return anp.allclose(x, (x * 3.0) / 3.0)

    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(TypeError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grad(fun)(x)
    with pytest.raises(di.DiffifaceTypeError, match=r"must return an array"):
        di.gradient(fun, A, x)


def test_falseyness():
    # upstream: test_logic.py::test_falseyness (a Python branch on x is fine in autograd)
    def fun(x):
        return anp.real(x**2 if anp.iscomplex(x) else anp.sum(x))

    assert di.gradient(fun, A, 2.0) == grad(fun)(2.0) == 1.0
    got = di.gradient(fun, A, np.array(2.0 + 1j))
    np.testing.assert_allclose(got, np.conj(grad(fun)(2.0 + 1j)))
    np.testing.assert_allclose(got, 4.0 - 2.0j)  # Re(z^2) = a^2 - b^2: (2a, -2b)


# -------------------------------------------------------------- test_numpy.py

NUMPY_OPS = {
    "dot": (lambda x: anp.dot(x.reshape(2, 3), np.arange(3.0)), (6,)),
    "outer": (lambda x: anp.outer(x, x[::-1]), (4,)),
    "max_axis": (lambda x: anp.max(x.reshape(2, 3), axis=1), (6,)),
    "cumsum_axis0": (lambda x: anp.cumsum(x.reshape(2, 3), axis=0), (6,)),
    "index_mixed": (lambda x: x[1:, [0, 2]], (3, 4)),
    "reshape_method": (lambda x: x.reshape((3, -1)), (2, 3)),
    "concatenate": (lambda x: anp.concatenate((x, x[::-1] ** 2)), (5,)),
    "trace": (lambda x: anp.trace(x.reshape(3, 3) ** 2), (9,)),
    "roll": (lambda x: anp.roll(x, 2) * x, (5,)),
    "triu": (lambda x: anp.triu(x.reshape(3, 3), k=1) * x.reshape(3, 3), (9,)),
    "prod": (lambda x: anp.prod(x.reshape(2, 3), axis=0), (6,)),
    "array_from_scalars": (lambda x: anp.array([x[0], x[1] ** 2, 3.0]) * x[2], (3,)),
    "mean_list_of_boxes": (lambda x: anp.mean([x[0], x[1], x[2] ** 2]), (3,)),
    "clip": (lambda x: anp.clip(x, -0.5, 0.5), (5,)),
}


@pytest.mark.parametrize("name", sorted(NUMPY_OPS))
def test_numpy_ops(name):
    # upstream: test_numpy.py::test_dot, test_outer, test_max_axis, test_cumsum_axis0,
    # test_index_mixed, test_reshape_method, test_concatenate_axis_0, test_trace,
    # test_roll, test_triu, test_prod_2, test_array_from_scalar, test_mean_list_of_boxes,
    # test_clip
    fun, shape = NUMPY_OPS[name]
    x = np.random.default_rng(7).uniform(0.1, 1.0, shape) * np.where(
        np.arange(np.prod(shape)).reshape(shape) % 2, 1, -1
    )
    out = np.asarray(fun(x))
    w = np.random.default_rng(8).standard_normal(out.shape)
    want_vjp = autograd.make_vjp(fun)(x)[0](w)
    np.testing.assert_allclose(di.vjp(fun, A, x, w), want_vjp, rtol=AD_RTOL)
    want_J = jacobian(fun)(x)
    for backend in (AF, AR):
        np.testing.assert_allclose(di.jacobian(fun, backend, x), want_J, rtol=AD_RTOL, atol=1e-14)
    np.testing.assert_allclose(di.jacobian(fun, FD, x), want_J, rtol=FD_RTOL, atol=1e-7)
    v = np.random.default_rng(9).standard_normal(shape)
    np.testing.assert_allclose(
        di.jvp(fun, A, x, v), np.tensordot(want_J, v, axes=v.ndim), rtol=1e-9, atol=1e-12
    )


# ---------------------------------------------- composition: prepared, nested


def _sinsum(x):
    return anp.sum(anp.sin(x) * x)


def _sinvec(x):
    return anp.sin(x) * anp.sum(x)


_PREP_SINSUM = di.prepare_gradient(_sinsum, A, X5)
OPS = {
    "gradient": (
        lambda p: di.gradient(_sinsum, A, X5, prep=p),
        di.prepare_gradient,
        (_sinsum, A, X5),
        lambda: grad(_sinsum)(X5),
    ),
    "jacobian": (
        lambda p: di.jacobian(_sinvec, A, X5, prep=p),
        di.prepare_jacobian,
        (_sinvec, A, X5),
        lambda: jacobian(_sinvec)(X5),
    ),
    "jvp": (
        lambda p: di.jvp(_sinvec, A, X5, V5, prep=p),
        di.prepare_jvp,
        (_sinvec, A, X5, V5),
        lambda: make_jvp(_sinvec)(X5)(V5)[1],
    ),
    "vjp": (
        lambda p: di.vjp(_sinvec, A, X5, V5, prep=p),
        di.prepare_vjp,
        (_sinvec, A, X5, V5),
        lambda: tensor_jacobian_product(_sinvec)(X5, V5),
    ),
    "hvp": (
        lambda p: di.hvp(_sinsum, A, X5, V5, prep=p),
        di.prepare_hvp,
        (_sinsum, A, X5, V5),
        lambda: make_hvp(_sinsum)(X5)[0](V5),
    ),
    "hessian": (
        lambda p: di.hessian(_sinsum, A, X5, prep=p),
        di.prepare_hessian,
        (_sinsum, A, X5),
        lambda: hessian(_sinsum)(X5),
    ),
    "derivative": (
        lambda p: di.derivative(_sinvec, A, 0.7, prep=p),
        di.prepare_derivative,
        (_sinvec, A, 0.7),
        lambda: autograd.deriv(_sinvec)(0.7),
    ),
    "second_derivative": (
        lambda p: di.second_derivative(_sinsum, A, 0.7, prep=p),
        di.prepare_second_derivative,
        (_sinsum, A, 0.7),
        lambda: grad(grad(_sinsum))(0.7),
    ),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_plain_and_prepared_agree_with_autograd(op):
    # upstream: test_wrappers.py (grad, jacobian, make_jvp, tensor_jacobian_product,
    # make_hvp, hessian, deriv), plain and prepared
    call, prepare, args, want = OPS[op]
    prep = prepare(*args)
    for got in (call(None), call(prep), call(prep)):
        np.testing.assert_allclose(got, want(), rtol=AD_RTOL, atol=1e-14)


@pytest.mark.parametrize(
    ("name", "inner", "ref"),
    [
        ("gradient", lambda x: di.gradient(_sinsum, A, x), grad(_sinsum)),
        ("jvp", lambda x: di.jvp(_sinvec, A, x, V5), lambda x: make_jvp(_sinvec)(x)(V5)[1]),
        (
            "vjp",
            lambda x: di.vjp(_sinvec, A, x, V5),
            lambda x: tensor_jacobian_product(_sinvec)(x, V5),
        ),
        ("jacobian", lambda x: di.jacobian(_sinvec, A, x), jacobian(_sinvec)),
        ("hvp", lambda x: di.hvp(_sinsum, A, x, V5), lambda x: make_hvp(_sinsum)(x)[0](V5)),
        ("prepared", lambda x: di.gradient(_sinsum, A, x, prep=_PREP_SINSUM), grad(_sinsum)),
    ],
    ids=lambda p: p if isinstance(p, str) else "",
)
def test_di_inside_autograd_grad(name, inner, ref):
    # upstream: test_graphs.py::test_hess_vector_prod, test_jacobian.py::
    # test_jacobian_higher_order (autograd.grad around a di call)
    want = grad(lambda x: anp.sum(anp.sin(ref(x))))(X5)
    got = grad(lambda x: anp.sum(anp.sin(inner(x))))(X5)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    got = di.gradient(lambda x: anp.sum(anp.sin(inner(x))), A, X5)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    np.testing.assert_allclose(want, central_grad(lambda x: np.sum(np.sin(ref(x))), X5), **CD)


def test_closure_over_outer_differentiated_value():
    # upstream: test_graphs.py::test_enclosing_scope_ref (an array-valued closure)
    def outer(a):
        return anp.sum(di.gradient(lambda z: anp.sum(a * anp.sin(z) * z), A, X5)) * a

    def ref(a):
        return anp.sum(grad(lambda z: anp.sum(a * anp.sin(z) * z))(X5)) * a

    want = grad(ref)(2.0)
    assert grad(outer)(2.0) == pytest.approx(want, rel=1e-10)
    assert di.derivative(outer, A, 2.0) == pytest.approx(want, rel=1e-10)
    assert di.gradient(outer, A, 2.0) == pytest.approx(want, rel=1e-10)
    assert float(central_deriv(outer, 2.0)) == pytest.approx(want, rel=1e-6)


def test_cotangent_and_tangent_differentiated():
    # upstream: test_wrappers.py::test_tensor_jacobian_product (the product differentiated
    # with respect to its cotangent / tangent: a linear map's gradient)
    w = np.array([1.0, 0.5, -2.0, 0.25, 3.0])
    got = di.gradient(lambda w: anp.sum(di.vjp(anp.sin, A, X5, w)), A, w)
    np.testing.assert_allclose(got, np.cos(X5), rtol=AD_RTOL)
    got = di.gradient(lambda v: anp.sum(di.jvp(anp.sin, A, X5, v)), A, w)
    np.testing.assert_allclose(got, np.cos(X5), rtol=AD_RTOL)
    got = grad(lambda w: anp.sum(di.vjp(_sinvec, A, X5, w)))(w)
    np.testing.assert_allclose(got, jacobian(_sinvec)(X5).sum(1), rtol=AD_RTOL)
    got = di.jacobian(lambda v: di.hvp(_sinsum, A, X5, v), A, w)
    np.testing.assert_allclose(got, hessian(_sinsum)(X5), rtol=AD_RTOL)


def test_di_gradient_of_function_calling_di_vjp_and_jvp():
    # upstream: test_graphs.py::test_hess_vector_prod (a product inside the differentiated f)
    def via_vjp(x):
        return anp.sum(di.vjp(_sinvec, A, x, V5) ** 2)

    def via_jvp(x):
        return anp.sum(di.jvp(_sinvec, A, x, V5) ** 2)

    refs = [
        lambda x: anp.sum(tensor_jacobian_product(_sinvec)(x, V5) ** 2),
        lambda x: anp.sum(make_jvp(_sinvec)(x)(V5)[1] ** 2),
    ]
    for fn, ref in zip((via_vjp, via_jvp), refs, strict=True):
        want = grad(ref)(X5)
        np.testing.assert_allclose(di.gradient(fn, A, X5), want, rtol=1e-9)
        np.testing.assert_allclose(di.gradient(fn, AF, X5), want, rtol=1e-9)
        np.testing.assert_allclose(want, central_grad(ref, X5), **CD)


# --------------------------------------------------------------- input kinds


def test_zero_d_array_and_python_float():
    # upstream: test_direct.py::test_grad (scalars in every form)
    want = grad(_direct_fun)(1.3)
    g = di.gradient(_direct_fun, A, 1.3)
    assert isinstance(g, float) and g == pytest.approx(want)
    g = di.gradient(_direct_fun, A, np.array(1.3))
    assert isinstance(g, np.ndarray) and g.shape == () and float(g) == pytest.approx(want)
    g = di.gradient(_direct_fun, A, np.float64(1.3))
    assert float(g) == pytest.approx(want)
    h = di.hessian(_direct_fun, A, np.array(1.3))
    assert h.shape == () and float(h) == pytest.approx(grad(grad(_direct_fun))(1.3))


def _layout_inputs():
    return {
        "F_ordered": np.asfortranarray(np.arange(1.0, 7.0).reshape(2, 3)),
        "transposed": np.arange(1.0, 7.0).reshape(3, 2).T,
        "strided": np.arange(1.0, 13.0)[::2].reshape(2, 3),
        "col_slice": np.arange(1.0, 13.0).reshape(2, 6)[:, ::2],
    }


@pytest.mark.parametrize("backend", [A, FD], ids=repr)
@pytest.mark.parametrize("layout", sorted(_layout_inputs()))
def test_numpy_layouts(layout, backend):
    # upstream: test_numpy.py::test_transpose / test_index_slice (non-C-contiguous x)
    x = _layout_inputs()[layout]
    c = np.arange(6.0).reshape(2, 3)

    def f(z):
        return anp.sum(z**3 * c)

    tol = {"rtol": _tol(backend), "atol": 1e-6 if backend is FD else 0}
    np.testing.assert_allclose(di.gradient(f, backend, x), grad(f)(x), **tol)
    np.testing.assert_allclose(di.vjp(lambda z: z**2, backend, x, c), 2 * x * c, **tol)
    np.testing.assert_allclose(
        di.jacobian(lambda z: z**2, backend, x), jacobian(lambda z: z**2)(x), **tol
    )
    np.testing.assert_allclose(
        di.hvp(f, backend, x, np.ones_like(x)), 6 * x * c, rtol=1e-5, atol=1e-5
    )


def test_pytree_with_none_and_python_floats():
    # upstream: test_dict.py::test_getter / test_list.py::test_nested_list (mixed leaves)
    x = {"a": X5, "b": (0.5, None), "c": [np.array(2.0)]}

    def f(p):
        return anp.sum(anp.sin(p["a"]) * p["b"][0]) * p["c"][0]

    got = di.gradient(f, A, x)
    assert got["b"][1] is None and isinstance(got["b"][0], float)
    y = {"a": X5, "b": 0.5, "c": np.array(2.0)}
    want = grad(lambda p: anp.sum(anp.sin(p["a"]) * p["b"]) * p["c"])(y)
    np.testing.assert_allclose(got["a"], want["a"], rtol=AD_RTOL)
    assert got["b"][0] == pytest.approx(want["b"])
    np.testing.assert_allclose(got["c"][0], want["c"])
    v = {"a": V5, "b": (1.0, None), "c": [np.array(0.5)]}
    hv = di.hvp(f, A, x, v)
    assert hv["b"][1] is None
    want = make_hvp(lambda p: anp.sum(anp.sin(p["a"]) * p["b"]) * p["c"])(y)[0](
        {"a": V5, "b": 1.0, "c": np.array(0.5)}
    )
    np.testing.assert_allclose(hv["a"], want["a"], rtol=1e-9)
    assert hv["b"][0] == pytest.approx(want["b"], rel=1e-9)
    np.testing.assert_allclose(hv["c"][0], want["c"], rtol=1e-9)


INT_OPS = {
    "gradient": (lambda b: di.gradient(lambda x: anp.sum(x > 0), b, X5), (5,)),
    "gradient_int": (
        lambda b: di.gradient(lambda x: anp.sum(anp.floor(x).astype(int)), b, X5),
        (5,),
    ),
    "jvp": (lambda b: di.jvp(lambda x: anp.floor(x).astype(int), b, X5, V5), (5,)),
    "vjp": (lambda b: di.vjp(lambda x: anp.floor(x).astype(int), b, X5, V5), (5,)),
    "jacobian": (lambda b: di.jacobian(lambda x: anp.floor(x).astype(int), b, X5), (5, 5)),
    "derivative": (lambda b: di.derivative(lambda x: anp.floor(x).astype(int), b, 0.5), ()),
}


@pytest.mark.parametrize(
    ("op", "backend"),
    [
        *[(op, A) for op in sorted(INT_OPS)],
        *[(op, FD) for op in sorted(INT_OPS)],
    ],
    ids=lambda p: p if isinstance(p, str) else repr(p),
)
def test_integer_valued_outputs(op, backend):
    # upstream: test_logic.py::test_nograd / test_core.py::test_eq (integer- and bool-valued
    # outputs: numeric zeros, with a DisconnectedWarning, or diffiface's own error)
    call, shape = INT_OPS[op]
    zero_or_clear_error(lambda: call(backend), shape)


@pytest.mark.parametrize("op", ["derivative", "jvp"])
def test_constant_f_forward_mode_warns_once(op):
    # upstream: test_graphs.py::test_grad_const (autograd.deriv of a constant warns
    # "Output seems independent of input."; diffiface's promise is one DisconnectedWarning)
    with pytest.warns(UserWarning, match="independent of input"):
        autograd.deriv(lambda x: anp.array(1.0))(2.0)
    with pytest.warns(di.DisconnectedWarning):
        if op == "derivative":
            got = di.derivative(lambda x: anp.array(1.0), A, 2.0)
        else:
            got = di.jvp(lambda x: anp.ones(5), A, X5, V5)
    np.testing.assert_array_equal(got, 0.0)


def test_unprepared_call_sees_changed_closure():
    # upstream: test_misc.py::test_const_graph (autograd re-traces f on every call, so a
    # changed closure is always seen)
    state = {"scale": 2.0}

    def f(x):
        return anp.sum(state["scale"] * x**2)

    np.testing.assert_allclose(di.gradient(f, A, X5), 4 * X5)
    state["scale"] = 5.0
    np.testing.assert_allclose(di.gradient(f, A, X5), grad(f)(X5))
    np.testing.assert_allclose(di.gradient(f, A, X5), 10 * X5)
