"""Auxiliary outputs (``has_aux=True``) and pytree outputs, ported from the frameworks'
own tests.

Sources: jax-ml/jax ``tests/api_test.py`` (``APITest``, commit cec06d1, August 2026)
and pytorch/pytorch ``test/functorch/test_eager_transforms.py`` (``TestGradTransform``,
``TestJac``, ``TestJvp``, ``TestHessian``). Each test names the upstream test it ports.
The math of an upstream test is framework-neutral here (``f`` written once with
``diffiface.testing.namespace``), so each runs through diffiface on every backend
(JAX, torch, autograd, finite differences) and is compared with the upstream
framework's own transform (``jax.grad(..., has_aux=True)``, ``jax.jacfwd``,
``torch.func.vjp``, ...) computed on the same float64 point.

diffiface's order is uniform: the operator's usual result, then ``aux``
(``di.value_and_gradient(f, b, x, has_aux=True) -> ((y, g), aux)``); JAX's
``jax.value_and_grad(f, has_aux=True) -> ((y, aux), g)`` and torch.func's
``jvp(..., has_aux=True) -> (y, t, aux)`` are translated in the comparisons. The
Jacobian of a pytree-output ``f`` at a pytree ``x`` is nested as ``jax.jacobian``
nests it (``f(x)``'s structure outside, ``x``'s inside).

Tolerances (tests/helpers.py): AD against AD ``rtol = atol = 1e-10``; diffiface's
finite differences ``1e-6`` (first order) and ``1e-5`` (second order); ``aux`` is
computed by ``f`` at ``x`` itself, so it matches to ``1e-12`` on every backend.
"""

from __future__ import annotations

import collections
import functools
import math

import numpy as np
import optree
import pytest
from conftest import AD_BACKENDS, ALL_BACKENDS, MODED_BACKENDS
from helpers import (
    HAVE,
    assert_tree_close,
    namespace,
    native,
    rounding,
    to_numpy,
    tolerance,
    zero_or_clear_error,
)

import diffiface as di
from diffiface.core.operator import OPS
from diffiface.testing._calls import expected, point_kind, prepare_of, tangent_args

if HAVE["jax"]:
    import jax
    import jax.numpy as jnp
if HAVE["torch"]:
    import torch

needs_jax = pytest.mark.skipif(not HAVE["jax"], reason="jax missing (the reference)")
needs_torch = pytest.mark.skipif(not HAVE["torch"], reason="torch missing (the reference)")

B = di.AutoJax()
FD = di.AutoFiniteDifferences()
ERRORS = (di.DiffifaceTypeError, di.DiffifaceValueError)
AUX_TOL = 1e-12  # aux is f's own value at x: no differentiation in it
FD_SECOND = 1e-5  # finite differences, second order (public bound: 1e-3)
FORWARD_REVERSE = [
    *MODED_BACKENDS,
    pytest.param(FD, id=repr(FD)),
]
# torch.func's jacrev / jacfwd tests: both modes on torch and autograd; JAX in its
# automatic mode (its two directions are the JAX tests' subject)
JAC_BACKENDS = [p for p in FORWARD_REVERSE if p.values[0].framework != "jax"] + [
    pytest.param(B, id=repr(B), marks=[] if HAVE["jax"] else [pytest.mark.skip("jax missing")])
]


# --------------------------------------------------------------------- helpers


def arr(backend, a):
    """A float64 NumPy value as the backend's own array."""
    return native(backend, np.asarray(a, dtype=np.float64))


def npy(tree):
    """Every array leaf as NumPy (structure kept: dict, list, tuple, namedtuple)."""
    return optree.tree_map(to_numpy, tree)


def tol(backend, order=1):
    if backend.framework == "finite_differences" and order == 2:
        return FD_SECOND
    return tolerance(backend, np.float64)[0]


def close(got, want, backend, order=1):
    """Same structure, close leaves (converted to NumPy)."""
    t = tol(backend, order)
    assert_tree_close(npy(got), npy(want), rtol=t, atol=t)


def close_aux(got, want, backend):
    """aux against f's value at x, to rounding (MLX: its float64 accuracy)."""
    t = rounding(backend, AUX_TOL)
    assert_tree_close(npy(got), npy(want), rtol=t, atol=t)


_ONCE = {}


def once(key, compute):
    """A reference computed once for all the backends a test runs on (JAX compiles each
    transform of a new function anew)."""
    if key not in _ONCE:
        _ONCE[key] = compute()
    return _ONCE[key]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def jax_np(x):
    """A NumPy point as a JAX array (the reference's input)."""
    return optree.tree_map(jnp.asarray, x)


def torch_np(x):
    return optree.tree_map(lambda a: torch.from_numpy(np.array(a, dtype=np.float64)), x)


def assert_no_inner_trace(backend, aux):
    """aux leaves carry no trace of diffiface's own differentiation pass."""
    for leaf in optree.tree_leaves(aux):
        if backend.framework == "jax":
            assert not isinstance(leaf, jax.core.Tracer), type(leaf)
        elif backend.framework == "torch":
            if isinstance(leaf, torch.Tensor):
                assert not leaf.requires_grad
                assert not torch._C._functorch.is_functorch_wrapped_tensor(leaf)
        elif backend.framework == "autograd":
            from autograd.tracer import isbox

            assert not isbox(leaf), type(leaf)
        elif backend.framework == "mlx":  # (MLX shows no tracer type to look for)
            import mlx.core as mx

            assert isinstance(leaf, mx.array | np.ndarray | np.generic | float), type(leaf)
        else:
            assert isinstance(leaf, np.ndarray | np.generic | float), type(leaf)


# ============================================================================
# jax-ml/jax tests/api_test.py (APITest)
# ============================================================================


def _cube_and_square(x):
    return x**3, [x**2]


# upstream: APITest.test_grad_and_aux_basic
@needs_jax
def test_grad_and_aux_basic(backend):
    want_g, want_aux = once("grad_aux", lambda: jax.grad(_cube_and_square, has_aux=True)(3.0))
    assert float(want_g) == 27.0 and [float(a) for a in want_aux] == [9.0]
    x = arr(backend, 3.0)
    g, aux = di.gradient(_cube_and_square, backend, x, has_aux=True)
    close(g, want_g, backend)
    assert isinstance(aux, list) and len(aux) == 1
    close_aux(aux, want_aux, backend)
    # value_and_grad: JAX's ((y, aux), g) is diffiface's ((y, g), aux)
    (want_y, want_aux2), want_g2 = once(
        "value_and_grad_aux", lambda: jax.value_and_grad(_cube_and_square, has_aux=True)(3.0)
    )
    (y, g2), aux2 = di.value_and_gradient(_cube_and_square, backend, x, has_aux=True)
    close((y, g2), (want_y, want_g2), backend)
    close_aux(aux2, want_aux2, backend)


_NOT_PAIRS = {
    "triple": lambda x: (1, 2, 3),  # jax: "two-element tuple"
    "no_tuple": lambda x: x,
    "one_tuple": lambda x: (x,),
    "list_pair": lambda x: [x, x],  # torch.func: "output of function f should be a tuple"
    "tensor_triple": lambda x: (x, x + 2, x + 3),
}


# upstream: APITest.test_grad_and_aux_error; TestGradTransform.test_grad_aux_tensor,
# TestVJP (TestGradTransform).test_vjp_aux_tensor, TestJvp.test_aux_tensor (their error
# halves): f that returns no (out, aux) pair is a clear error of every operator
@pytest.mark.parametrize("bad", sorted(_NOT_PAIRS))
def test_grad_and_aux_error(backend, bad):
    f = _NOT_PAIRS[bad]
    x = arr(backend, [1.0, 2.0])
    if HAVE["jax"] and bad in ("triple", "no_tuple", "one_tuple"):
        with pytest.raises(TypeError, match="two-element tuple"):
            jax.grad(f, has_aux=True)(1.0)
    if HAVE["torch"] and bad in ("list_pair", "tensor_triple"):
        with pytest.raises(RuntimeError, match="output of function f should be a tuple"):
            torch.func.grad(f, has_aux=True)(torch.ones(2, dtype=torch.float64))
    calls = {
        "gradient": lambda: di.gradient(f, backend, x, has_aux=True),
        "value_and_gradient": lambda: di.value_and_gradient(f, backend, x, has_aux=True),
        "jacobian": lambda: di.jacobian(f, backend, x, has_aux=True),
        "jvp": lambda: di.jvp(f, backend, x, x, has_aux=True),
        "vjp": lambda: di.vjp(f, backend, x, x, has_aux=True),
        "hessian": lambda: di.hessian(f, backend, x, has_aux=True),
        "prepare_vjp": lambda: di.prepare_vjp(f, backend, x, x, has_aux=True),
    }
    for name, call in calls.items():
        with pytest.raises(
            di.DiffifaceTypeError, match=r"must return a pair \(output, aux\)"
        ) as err:
            call()
        assert str(err.value).startswith(name + "(f, "), name  # the call written


def _cube_aux(x):
    return x**3, [x**3]


def _after_grad(x):
    _, aux = di.gradient(_cube_aux, B, x, has_aux=True)
    return aux[0] * jnp.sin(x)


def _after_jacfwd(x):
    _, aux = di.jacobian(_cube_aux, di.AutoJax(mode="forward"), x, has_aux=True)
    return aux[0] * jnp.sin(x)


def _after_jacrev(x):
    _, aux = di.jacobian(_cube_aux, di.AutoJax(mode="reverse"), x, has_aux=True)
    return aux[0] * jnp.sin(x)


def _after_grad_aux_only(x):
    return di.gradient(_cube_aux, B, x, has_aux=True)[1][0]


# upstream: APITest.test_grad_and_aux_nested, test_jacfwd_and_aux_nested,
# test_jacrev_and_aux_nested (aux carries the outer trace: differentiating it is
# differentiating f)
@needs_jax
@pytest.mark.parametrize(
    "inner, outer",
    [
        (_after_grad, "grad"),
        (_after_grad_aux_only, "grad"),
        (_after_jacfwd, "jacfwd"),
        (_after_jacrev, "jacrev"),
    ],
    ids=["grad", "grad_aux_only", "jacfwd", "jacrev"],
)
def test_grad_and_aux_nested(inner, outer):
    transform = {"grad": jax.grad, "jacfwd": jax.jacfwd, "jacrev": jax.jacrev}[outer]
    # upstream compares with transform(f2): f2 = x**3 (aux only) or x**3 * sin(x)
    if inner is _after_grad_aux_only:
        want = 3 * 4.0**2
    else:
        want = 3 * 4.0**2 * math.sin(4.0) + 4.0**3 * math.cos(4.0)
    assert float(transform(inner)(4.0)) == pytest.approx(want, rel=1e-12)
    assert float(jax.jit(transform(jax.jit(inner)))(4.0)) == pytest.approx(want, rel=1e-12)
    if outer == "grad":  # and differentiated by diffiface itself
        assert di.gradient(inner, B, 4.0) == pytest.approx(want, rel=1e-12)


def _framework_outer_grad(backend, g):
    """d/dx g(x) at 4.0 by the backend's framework itself (no diffiface outside)."""
    if backend.framework == "torch":
        x = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
        (d,) = torch.autograd.grad(g(x), x)
        return float(d), float(torch.func.grad(g)(torch.tensor(4.0, dtype=torch.float64)))
    if backend.framework == "autograd":
        import autograd

        d = float(autograd.grad(g)(4.0))
        return d, d
    if backend.framework == "mlx":
        import mlx.core as mx

        x = mx.array(4.0, dtype=mx.float64)
        return float(mx.grad(g)(x)), float(mx.value_and_grad(g)(x)[1])
    d = float(jax.grad(g)(4.0))
    return d, float(jax.jit(jax.grad(g))(4.0))


# upstream: APITest.test_grad_and_aux_nested, on each AD backend with its own outer
# transform (jax.grad / torch.autograd.grad and torch.func.grad / autograd.grad /
# mx.grad and mx.value_and_grad): the aux
# of an inner di call is still differentiable by the outer pass
@pytest.mark.parametrize("backend", AD_BACKENDS)
@pytest.mark.parametrize("op", ["gradient", "jacobian", "value_and_gradient", "derivative"])
def test_grad_and_aux_nested_framework_outer(backend, op):
    m = {"jax": "jax.numpy", "torch": "torch", "autograd": "autograd.numpy", "mlx": "mlx.core"}
    ns = pytest.importorskip(m[backend.framework])
    call = getattr(di, op)

    def g(x):
        _, aux = call(_cube_aux, backend, x, has_aux=True)
        return aux[0] * ns.sin(x)

    want = 3 * 16 * math.sin(4.0) + 64 * math.cos(4.0)
    for got in _framework_outer_grad(backend, g):
        assert got == pytest.approx(want, rel=rounding(backend, 1e-12))


def _cube_const_aux(x):
    return x**3, [4.0]


def _cube_mixed_aux(x):
    return x**3, [x**2, 4.0]


# upstream: APITest.test_grad_and_aux_constant
@needs_jax
def test_grad_and_aux_constant(backend):
    x = arr(backend, 4.0)
    for f, want_aux in [(_cube_const_aux, [4.0]), (_cube_mixed_aux, [16.0, 4.0])]:
        want_g, jax_aux = once(f, lambda f=f: jax.grad(f, has_aux=True)(4.0))
        assert [float(a) for a in jax_aux] == want_aux
        g, aux = di.gradient(f, backend, x, has_aux=True)
        close(g, want_g, backend)
        assert isinstance(aux, list) and [float(a) for a in aux] == want_aux


def _identity_aux(x):
    return x**2, {"identity": x, "p1": x + 1}


# upstream: APITest.test_grad_and_aux_no_tracers (and under jax.jit, and inside an outer
# jax.grad, where aux is the outer pass's tracer, as jax.grad(has_aux=True) leaves it)
@needs_jax
def test_grad_and_aux_no_tracers():
    _, want = jax.grad(_identity_aux, has_aux=True)(3.0)
    for val in want.values():
        assert not isinstance(val, jax.core.Tracer)
    _, aux = di.gradient(_identity_aux, B, 3.0, has_aux=True)
    assert isinstance(aux, dict) and sorted(aux) == ["identity", "p1"]
    assert_no_inner_trace(B, aux)
    close_aux(aux, want, B)
    # under jit: the values come out of the jitted function
    _, aux = jax.jit(lambda x: di.gradient(_identity_aux, B, x, has_aux=True))(3.0)
    assert_no_inner_trace(B, aux)
    close_aux(aux, want, B)
    # inside an outer jax.grad aux is the outer trace's value: d(p1**2)/dx = 2 (x + 1)
    outer = jax.grad(lambda x: di.gradient(_identity_aux, B, x, has_aux=True)[1]["p1"] ** 2)
    ref = jax.grad(lambda x: jax.grad(_identity_aux, has_aux=True)(x)[1]["p1"] ** 2)
    assert float(outer(3.0)) == float(ref(3.0)) == 8.0


# upstream: APITest.test_jacfwd_and_aux_basic, APITest.test_jacrev_and_aux_basic
@needs_jax
@pytest.mark.parametrize("backend", FORWARD_REVERSE)
def test_jacfwd_and_jacrev_and_aux_basic(backend):
    ref = jax.jacrev if getattr(backend, "mode", None) == "reverse" else jax.jacfwd
    want_jac, want_aux = once((ref, 0), lambda: jax.jit(ref(_cube_and_square, has_aux=True))(3.0))
    assert float(want_jac) == float(ref(lambda x: x**3)(3.0)) == 27.0
    jac, aux = di.jacobian(_cube_and_square, backend, arr(backend, 3.0), has_aux=True)
    close(jac, want_jac, backend)
    assert isinstance(aux, list)
    close_aux(aux, want_aux, backend)
    # and at a vector point, its Jacobian diagonal
    x = np.array([3.0, -1.0])
    want_jac, want_aux = once((ref, 1), lambda: jax.jit(ref(_cube_and_square, has_aux=True))(x))
    jac, aux = di.jacobian(_cube_and_square, backend, arr(backend, x), has_aux=True)
    close(jac, want_jac, backend)
    close_aux(aux, want_aux, backend)


# upstream: APITest.test_jvp_and_aux_basic
@needs_jax
def test_jvp_and_aux_basic(backend):
    want_p, want_t, want_aux = once(
        "jvp_aux", lambda: jax.jvp(_cube_and_square, (3.0,), (4.0,), has_aux=True)
    )
    assert [float(a) for a in want_aux] == [9.0]
    (p, t), aux = di.value_and_jvp(
        _cube_and_square, backend, arr(backend, 3.0), arr(backend, 4.0), has_aux=True
    )
    close((p, t), (want_p, want_t), backend)
    assert isinstance(aux, list)
    close_aux(aux, want_aux, backend)
    t2, aux2 = di.jvp(_cube_and_square, backend, arr(backend, 3.0), arr(backend, 4.0), has_aux=True)
    close(t2, want_t, backend)
    close_aux(aux2, want_aux, backend)


def _affine_and_sign(x):
    return x * 2 - 3, x > 0


def _linearize_ref():
    f, lin, aux = jax.linearize(_affine_and_sign, 3.4, has_aux=True)
    return f, lin(5.0), aux


# upstream: APITest.test_linearize_aux (jax.linearize's value, linear map and aux: here
# value_and_jvp; a boolean aux comes back as computed)
@needs_jax
def test_linearize_aux(backend):
    f, lin_5, want_aux = once("linearize", _linearize_ref)
    (y, t), aux = di.value_and_jvp(
        _affine_and_sign, backend, arr(backend, 3.4), arr(backend, 5.0), has_aux=True
    )
    close((y, t), (f, lin_5), backend)
    close((y, t), (3.8, 10.0), backend)
    assert bool(aux) is bool(want_aux) is True
    assert to_numpy(aux).dtype == np.bool_


_R = np.random.default_rng(0)
_A44 = _R.standard_normal((4, 4))
_X4 = _R.standard_normal(4)


def _hessian_aux_ref():
    return jax.jit(jax.hessian(_quadratic_aux, has_aux=True))(jnp.asarray(_X4))


def _quadratic_aux(x):
    return x @ (native_like(x, _A44) @ x), x


def native_like(x, a):
    """A NumPy constant as the array kind of x (torch tensors and MLX arrays need their
    own constants)."""
    if type(x).__module__.startswith("torch"):
        return torch.from_numpy(a)
    if type(x).__module__.startswith("mlx"):
        import mlx.core as mx

        return mx.array(a, dtype=x.dtype)
    return a


# upstream: APITest.test_hessian_aux (and the other second-order operators with it)
@needs_jax
def test_hessian_aux(backend):
    h_want, aux_want = once("hessian_aux", _hessian_aux_ref)
    np.testing.assert_allclose(h_want, _A44 + _A44.T, rtol=1e-12)
    x, v = arr(backend, _X4), arr(backend, np.arange(4.0))
    h, aux = di.hessian(_quadratic_aux, backend, x, has_aux=True)
    close(h, _A44 + _A44.T, backend, order=2)
    close_aux(aux, aux_want, backend)
    (y, g, h2), aux = di.value_gradient_and_hessian(_quadratic_aux, backend, x, has_aux=True)
    close((y, g), (_X4 @ _A44 @ _X4, (_A44 + _A44.T) @ _X4), backend)
    close(h2, _A44 + _A44.T, backend, order=2)
    close_aux(aux, _X4, backend)
    hv, aux = di.hvp(_quadratic_aux, backend, x, v, has_aux=True)
    close(hv, (_A44 + _A44.T) @ np.arange(4.0), backend, order=2)
    close_aux(aux, _X4, backend)


# upstream: APITest.test_hessian_aux, through diffiface's explicit second-order pairs
@needs_jax
@pytest.mark.parametrize("outer, inner", [("forward", "reverse"), ("reverse", "forward")])
def test_hessian_aux_second_order_pairs(outer, inner):
    b = di.second_order(di.AutoJax(mode=outer), di.AutoJax(mode=inner))
    h_want, aux_want = once("hessian_aux", _hessian_aux_ref)
    h, aux = di.hessian(_quadratic_aux, b, _X4, has_aux=True)
    close(h, h_want, B)
    close_aux(aux, aux_want, B)
    hv, aux = di.hvp(_quadratic_aux, b, _X4, np.arange(4.0), has_aux=True)
    close(hv, np.asarray(h_want) @ np.arange(4.0), B)
    close_aux(aux, aux_want, B)


def _pair(t):
    return (t[0], t[1])


def _swap_args(x, y):
    return (x, y)


def _swap_args_second(y, x):
    return (x, y)


def _first_two(t):
    return t[:2]


def _dict_x_xy(x, y):
    return {"x": x, "xy": namespace(x).outer(x, y)}


# upstream: APITest.test_jacobian_on_pytrees (argnums as a pytree x or a Constant; tuple
# and dict outputs nested as jax.jacobian nests them), compared with jacfwd and jacrev
@needs_jax
@pytest.mark.parametrize("backend", FORWARD_REVERSE)
def test_jacobian_on_pytrees(backend):
    a = lambda v: arr(backend, v)  # noqa: E731
    x, y = _PYTREE_XY
    calls = [
        lambda: di.jacobian(_swap_args, backend, a(0.0), di.Constant(a(1.0))),
        lambda: di.jacobian(_swap_args_second, backend, a(1.0), di.Constant(a(0.0))),
        lambda: di.jacobian(_pair, backend, (a(0.0), a(1.0))),
        lambda: di.jacobian(_first_two, backend, (a(1.0), a(2.0), a(3.0))),
        lambda: di.jacobian(_dict_x_xy, backend, a(x), di.Constant(a(y))),
        # both arguments: the pytree x (x, y), the Jacobian nested output-first
        lambda: di.jacobian(_dict_of_pair, backend, (a(x), a(y))),
    ]
    expected = [  # upstream's values
        (1.0, 0.0),
        (0.0, 1.0),
        ((1.0, 0.0), (0.0, 1.0)),
        ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
        {"x": np.eye(2), "xy": np.kron(np.eye(2), y[:, None]).reshape(2, 3, 2)},
        None,
    ]
    for call, refs, value in zip(calls, _pytree_jacobian_refs(), expected, strict=True):
        got = call()
        for want in refs:  # jacfwd's and jacrev's
            close(got, want, backend)
        if value is not None:
            close(got, value, backend)


_PYTREE_XY = (rand(2, seed=1), rand(3, seed=2))


@functools.cache
def _pytree_jacobian_refs():
    """jax.jacfwd's and jax.jacrev's answers to APITest.test_jacobian_on_pytrees' cases."""
    x, y = _PYTREE_XY
    pair = lambda x, y: (x, y)  # noqa: E731
    xy = lambda x, y: {"x": x, "xy": jnp.outer(x, y)}  # noqa: E731
    cases = [
        (pair, 0, (0.0, 1.0)),
        (pair, 1, (0.0, 1.0)),
        (pair, (0, 1), (0.0, 1.0)),
        (lambda x: x[:2], 0, ((1.0, 2.0, 3.0),)),
        (xy, 0, (x, y)),
        (xy, (0, 1), (x, y)),
    ]

    def all_cases():  # one compilation for the twelve
        return [
            tuple(jacfun(f, argnums)(*args) for jacfun in (jax.jacfwd, jax.jacrev))
            for f, argnums, args in cases
        ]

    return jax.jit(all_cases)()


def _hessian_on_pytrees_refs():
    vector = jax.hessian(lambda x: jnp.array(x) ** 2)((1.0, 2.0))
    scalar = jax.hessian(lambda x: (jnp.array(x) ** 2 * jnp.array([1.0, 3.0])).sum())((1.0, 2.0))
    return vector, scalar


def _stack_squared(t):
    return namespace(t[0]).stack(t) ** 2


def _weighted_stack_squared(t):
    m = namespace(t[0])
    return (m.stack(t) ** 2 * native_like(t[0], np.array([1.0, 3.0]))).sum()


# upstream: APITest.test_hessian_on_pytrees (di.hessian takes one array: the pytree
# "Hessian" is the jacobian of a pytree-output jacobian / gradient, nested like JAX's)
@needs_jax
def test_hessian_on_pytrees(backend):
    a = lambda v: arr(backend, v)  # noqa: E731
    t = (a(1.0), a(2.0))
    want, want_scalar = once("hessian_pytrees", jax.jit(_hessian_on_pytrees_refs))
    expected = (
        (np.array([2.0, 0.0]), np.array([0.0, 0.0])),
        (np.array([0.0, 0.0]), np.array([0.0, 2.0])),
    )
    got = di.jacobian(lambda x: di.jacobian(_stack_squared, backend, x), backend, t)
    close(got, want, backend, order=2)
    close(got, expected, backend, order=2)
    # a scalar f: the jacobian of its pytree gradient
    got = di.jacobian(lambda x: di.gradient(_weighted_stack_squared, backend, x), backend, t)
    close(got, want_scalar, backend, order=2)
    close(got, ((2.0, 0.0), (0.0, 6.0)), backend, order=2)
    with pytest.raises(di.DiffifaceTypeError, match="single array for hessian"):
        di.hessian(_weighted_stack_squared, backend, t)


def _dict_of_pair(t):
    x, y = t
    return {"x": x, "xy": namespace(x).outer(x, y)}


# upstream: APITest.test_jacobian_on_pytrees with jax.jvp / jax.vjp of the dict output
# (jvp returns a pytree like f(x), vjp takes a cotangent like f(x)); APITest.test_vjp_fun_jit
# / test_linearize_fun_jit for the value variants
@needs_jax
def test_jvp_vjp_on_pytree_outputs(backend):
    x, y = rand(2, seed=11), rand(3, seed=12)
    v = (np.array([0.5, -1.0]), np.array([1.0, 2.0, 3.0]))
    w = {"x": np.array([1.0, -2.0]), "xy": np.arange(6.0).reshape(2, 3)}

    def refs():  # f itself, on JAX arrays
        want_y, want_t = jax.jvp(_dict_of_pair, (jax_np((x, y)),), (jax_np(v),))
        want_y2, pullback = jax.vjp(_dict_of_pair, jax_np((x, y)))
        return want_y, want_t, want_y2, pullback(jax_np(w))[0]

    want_y, want_t, want_y2, want_g = once("pytree_jvp_vjp", jax.jit(refs))
    p = (arr(backend, x), arr(backend, y))
    vb = optree.tree_map(lambda a: arr(backend, a), v)
    wb = optree.tree_map(lambda a: arr(backend, a), w)
    t = di.jvp(_dict_of_pair, backend, p, vb)
    assert isinstance(t, dict)
    close(t, want_t, backend)
    yy, t = di.value_and_jvp(_dict_of_pair, backend, p, vb)
    close(yy, want_y, backend)
    close(t, want_t, backend)
    g = di.vjp(_dict_of_pair, backend, p, wb)
    assert isinstance(g, tuple)
    close(g, want_g, backend)
    yy, g = di.value_and_vjp(_dict_of_pair, backend, p, wb)
    close(yy, want_y2, backend)
    close(g, want_g, backend)
    # prepared, the layout of f(x) is kept by the preparation
    prep = di.prepare_vjp(_dict_of_pair, backend, p, wb)
    close(di.vjp(_dict_of_pair, backend, p, wb, prep=prep), want_g, backend)
    prep = di.prepare_jvp(_dict_of_pair, backend, p, vb)
    close(di.jvp(_dict_of_pair, backend, p, vb, prep=prep), want_t, backend)


def _x_and_xx(x):
    return x, (x, x)


def _x_and_xx_aux(x):
    return (x, (x, x)), x


# upstream: APITest.test_vjp_mismatched_arguments / test_vjp_bad_cotangent_shape, and
# TestGradTransform.test_vjp_pytree_error: a cotangent unlike f(x) is a clear error
def test_vjp_cotangent_structure_errors(backend):
    x = arr(backend, [1.0, 2.0])
    if HAVE["jax"]:
        _, pullback = jax.vjp(_x_and_xx, jnp.ones(2))
        with pytest.raises((TypeError, ValueError)):
            pullback(((jnp.ones(2), (jnp.ones(2), jnp.ones(2))),))
    if HAVE["torch"]:
        _, fn = torch.func.vjp(_x_and_xx, torch.ones(2))
        with pytest.raises(RuntimeError, match="Expected pytree structure"):
            fn(((torch.ones(2), (torch.ones(2), torch.ones(2))),))
    bad = {
        "nested_once_more": ((x, (x, x)),),
        "list_for_tuple": [x, [x, x]],
        "too_few": (x, (x,)),
        "one_array": x,
    }
    for name, w in bad.items():
        with pytest.raises(di.DiffifaceValueError, match="structure") as err:
            di.vjp(_x_and_xx, backend, x, w)
        assert "w must have the structure of f(x)" in str(err.value), name
    with pytest.raises(di.DiffifaceValueError, match="structure"):
        di.value_and_vjp(_x_and_xx, backend, x, (x, (x, x[:1])))  # a leaf's shape
    # with an aux, the cotangent is like the output alone
    with pytest.raises(di.DiffifaceValueError, match="structure"):
        di.vjp(_x_and_xx_aux, backend, x, ((x, (x, x)), x), has_aux=True)
    g, aux = di.vjp(_x_and_xx_aux, backend, x, (x, (x, x)), has_aux=True)
    close(g, 3 * np.array([1.0, 2.0]), backend)
    close_aux(aux, np.array([1.0, 2.0]), backend)


# ---- every operator with has_aux, against JAX's own transforms ---------------------
_X3 = np.array([0.3, -0.7, 1.1])
_V3 = np.array([0.5, 1.0, -2.0])
_W3 = np.array([1.0, -1.0, 0.5])
_S = 0.7
_X23 = np.array([[0.3, -0.7, 1.1], [0.9, 0.2, -0.4]])


def _f_s(x):  # R^3 -> R
    m = namespace(x)
    return x[0] * m.sin(x).sum() + (x**3).sum(), {"identity": x, "p1": x + 1}


def _f_v(x):  # R^3 -> R^3
    return namespace(x).sin(x) * x[0], {"identity": x, "p1": x + 1}


def _f_1(x):  # R -> R
    return namespace(x).sin(x) * x**2, [x**2]


def _f_b(x):  # per sample R^3 -> R^3, a batch on axis 0
    return namespace(x).sin(x) * x**2, {"rows": x.sum(1)}


def _jax_core(x, v, w, s, xb):
    g, aux_s = jax.grad(_f_s, has_aux=True)(x)
    jac, aux_v = jax.jacobian(_f_v, has_aux=True)(x)
    _, t, _ = jax.jvp(_f_v, (x,), (v,), has_aux=True)
    _, pullback, _ = jax.vjp(_f_v, x, has_aux=True)
    (ct,) = pullback(w)
    _, hv, _ = jax.jvp(jax.grad(_f_s, has_aux=True), (x,), (v,), has_aux=True)
    h, _ = jax.hessian(_f_s, has_aux=True)(x)
    d, aux_1 = jax.jacfwd(_f_1, has_aux=True)(s)
    d2, _ = jax.hessian(_f_1, has_aux=True)(s)
    jb = jax.vmap(jax.jacobian(lambda r: _f_b(r[None])[0][0]))(xb)
    values = (_f_s(x)[0], _f_v(x)[0], _f_1(s)[0], *_f_b(xb))
    return (g, aux_s, jac, aux_v, t, ct, hv, h, d, aux_1, d2, jb), values


def _jax_refs():
    """point kind -> (its point, JAX's result parts, aux at the point); JAX's transforms
    jit-compiled (eager, each primitive compiles on its own: seconds)."""
    args = (jnp.asarray(a) for a in (_X3, _V3, _W3, _S, _X23))
    (g, aux_s, jac, aux_v, t, ct, hv, h, d, aux_1, d2, jb), values = jax.jit(_jax_core)(*args)
    y_s, y_v, y_1, y_b, aux_b = values
    return {
        "scalar_y": ("x", {"value": y_s, "gradient": g, "hvp": hv, "hessian": h}, aux_s),
        "vector": ("x", {"value": y_v, "jacobian": jac, "jvp": t, "vjp": ct}, aux_v),
        "scalar_x": ("s", {"value": y_1, "derivative": d, "second_derivative": d2}, aux_1),
        "batch": ("b", {"value": y_b, "batched_jacobian": jb}, aux_b),
    }


_JAX_REFS = {}
# the function of each point kind (an operator's kind comes from its declaration)
_F = {"scalar_y": _f_s, "vector": _f_v, "scalar_x": _f_1, "batch": _f_b}


# upstream: APITest.test_grad_and_aux_basic, test_jacfwd_and_aux_basic,
# test_jacrev_and_aux_basic, test_jvp_and_aux_basic, test_hessian_aux and
# test_grad_and_aux_no_tracers, carried to every diffiface operator and its prepare_
# (plain and prepared calls agree; aux carries no trace of the inner pass)
@needs_jax
@pytest.mark.parametrize("op", sorted(OPS))
def test_every_operator_has_aux_against_jax(backend, op):
    if not _JAX_REFS:
        _JAX_REFS.update(_jax_refs())
    kind = point_kind(op)
    point, jax_parts, want_aux = _JAX_REFS[kind]
    want = expected(op, jax_parts)
    f = _F[kind]
    x = arr(backend, {"x": _X3, "s": _S, "b": _X23}[point])
    args = tuple(arr(backend, t) for t in tangent_args(op, _V3, _W3))
    call = getattr(di, op)
    got, aux = call(f, backend, x, *args, has_aux=True)
    order = 2 if OPS[op].second else 1
    if isinstance(want, tuple):  # value variants: first orders at first-order tolerance
        assert isinstance(got, tuple) and len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            second = order == 2 and i == len(want) - 1
            close(a, b, backend, order=2 if second else 1)
    else:
        close(got, want, backend, order=order)
    close_aux(aux, want_aux, backend)
    assert type(aux) is type(want_aux)
    assert_no_inner_trace(backend, aux)
    if op != OPS[op].family:
        return  # (a value variant takes its base operator's preparation: checked there)
    prep = prepare_of(op)(f, backend, x, *args, has_aux=True)
    got2, aux2 = call(f, backend, x, *args, prep=prep, has_aux=True)
    close(got2, got, backend, order=order)
    close_aux(aux2, aux, backend)
    with pytest.raises(di.DiffifaceValueError, match="has_aux"):
        call(f, backend, x, *args, prep=prep)


# ============================================================================
# pytorch/pytorch test/functorch/test_eager_transforms.py
# ============================================================================

_XT = np.array([0.4, -1.3, 0.8])
_TT = np.array([1.5, 0.5, -0.3])


def _sin_sum_cos(t):
    m = namespace(t)
    return m.sin(t).sum(), m.cos(t)


def _sin_sum_pytree_aux(x):
    m = namespace(x)
    return m.sin(x).sum(), {"a": m.cos(x), "b": [m.tan(x)]}


def _sin_cos(t):
    m = namespace(t)
    return m.sin(t), m.cos(t)


def _sin_pytree_aux(x):
    m = namespace(x)
    return m.sin(x), {"a": m.cos(x), "b": [m.tan(x)]}


def _copy_cos(x):
    y = x * 1.0
    return y, namespace(x).cos(y)


def _copy_pytree_aux(x):
    y = x * 1.0
    m = namespace(x)
    return y, {"a": m.cos(y), "b": [m.tan(y)]}


# upstream: TestGradTransform.test_grad_aux_tensor, test_grad_aux_pytree
@needs_torch
@pytest.mark.parametrize("f", [_sin_sum_cos, _sin_sum_pytree_aux], ids=["tensor", "pytree"])
def test_grad_aux(backend, f):
    xt = torch_np(_XT)
    want, want_aux = torch.func.grad(f, has_aux=True)(xt)
    close_aux(want_aux, f(xt)[1], B)
    close(want, np.cos(_XT), B)
    if f is _sin_sum_cos:
        g, aux = di.gradient(f, backend, arr(backend, _XT), has_aux=True)
        close(g, want, backend)
    else:  # torch.func.grad_and_value's (g, (y, aux)) is diffiface's ((y, g), aux)
        want_g, (want_y, _) = torch.func.grad_and_value(f, has_aux=True)(xt)
        (y, g), aux = di.value_and_gradient(f, backend, arr(backend, _XT), has_aux=True)
        close((y, g), (want_y, want_g), backend)
    close_aux(aux, want_aux, backend)


# upstream: TestGradTransform.test_vjp_aux_tensor, test_vjp_aux_pytree
@needs_torch
@pytest.mark.parametrize("f", [_sin_cos, _sin_pytree_aux], ids=["tensor", "pytree"])
def test_vjp_aux(backend, f):
    xt, vt = torch_np(_XT), torch_np(_TT)
    out, vjp_fn, want_aux = torch.func.vjp(f, xt, has_aux=True)
    (want,) = vjp_fn(vt)
    close(want, _TT * np.cos(_XT), B)
    x, v = arr(backend, _XT), arr(backend, _TT)
    if f is _sin_cos:
        g, aux = di.vjp(f, backend, x, v, has_aux=True)
        close(g, want, backend)
    else:
        (y, g), aux = di.value_and_vjp(f, backend, x, v, has_aux=True)
        close((y, g), (out, want), backend)
    close_aux(aux, want_aux, backend)


# upstream: TestJvp.test_aux_tensor, TestJvp.test_aux_pytree
@needs_torch
@pytest.mark.parametrize("f", [_sin_cos, _sin_pytree_aux], ids=["tensor", "pytree"])
def test_jvp_aux(backend, f):
    out, want, want_aux = torch.func.jvp(f, (torch_np(_XT),), (torch_np(_TT),), has_aux=True)
    close(want, _TT * np.cos(_XT), B)
    x, v = arr(backend, _XT), arr(backend, _TT)
    if f is _sin_cos:
        t, aux = di.jvp(f, backend, x, v, has_aux=True)
        close(t, want, backend)
    else:
        (y, t), aux = di.value_and_jvp(f, backend, x, v, has_aux=True)
        close((y, t), (out, want), backend)
    close_aux(aux, want_aux, backend)


# upstream: TestJac.test_aux_tensor, TestJac.test_aux_pytree (jacrev and jacfwd)
@needs_torch
@pytest.mark.parametrize("f", [_copy_cos, _copy_pytree_aux], ids=["tensor", "pytree"])
@pytest.mark.parametrize("backend", JAC_BACKENDS)
def test_jac_aux(backend, f):
    ref = torch.func.jacrev if getattr(backend, "mode", None) == "reverse" else torch.func.jacfwd
    want, want_aux = ref(f, has_aux=True)(torch_np(_XT))
    close(want, np.eye(3), B)
    if f is _copy_cos:
        jac, aux = di.jacobian(f, backend, arr(backend, _XT), has_aux=True)
        close(jac, want, backend)
    else:
        (y, jac), aux = di.value_and_jacobian(f, backend, arr(backend, _XT), has_aux=True)
        close((y, jac), (_XT, want), backend)
    close_aux(aux, want_aux, backend)


def _aux_int(x):
    return x.sum(), 1


def _aux_float(x):
    return x.sum(), 1.0


def _aux_str(x):
    return x.sum(), "abc"


def _aux_list_str(x):
    return x.sum(), [x, "abc"]


def _non_array_aux_cases():
    cases = []
    for b in ALL_BACKENDS:
        backend = b.values[0]
        for name, f in [
            ("int", _aux_int),
            ("float", _aux_float),
            ("str", _aux_str),
            ("list_str", _aux_list_str),
        ]:
            cases.append(pytest.param(backend, f, id=f"{b.id}-{name}", marks=b.marks))
    return cases


# upstream: TestGradTransform.test_grad_aux_pytree, test_vjp_aux_pytree, TestJac.test_aux_pytree,
# TestJvp.test_aux_pytree (their non-tensor aux 1, 1.0, "abc" and [x, "abc"]): torch.func
# refuses them ("Expected tensors, got unsupported type"); jax.grad(has_aux=True) returns
# them unchanged, and so does diffiface: aux is returned as f computed it
@pytest.mark.parametrize("backend, f", _non_array_aux_cases())
def test_non_array_aux_is_returned_as_computed(backend, f):
    x = arr(backend, [1.0, 2.0])
    want = f(x)[1]
    if HAVE["jax"]:  # jax.grad(has_aux=True) returns them as they are
        jax_aux = jax.grad(f, has_aux=True)(jnp.ones(2))[1]
        if isinstance(want, list):
            assert isinstance(jax_aux, list) and jax_aux[1] == "abc"
        else:
            assert type(jax_aux) is type(want) and jax_aux == want
    if HAVE["torch"]:
        with pytest.raises(RuntimeError, match="Expected tensors, got unsupported type"):
            torch.func.grad(f, has_aux=True)(torch.ones(2, dtype=torch.float64))
    results = [
        di.gradient(f, backend, x, has_aux=True),
        di.vjp(f, backend, x, arr(backend, 1.0), has_aux=True),
        di.jacobian(f, backend, x, has_aux=True),
    ]
    for _, aux in results:
        if isinstance(want, list):
            assert isinstance(aux, list) and aux[1] == "abc"
            close_aux(aux[0], x, backend)
        else:
            assert aux == want
            assert not isinstance(aux, str) or aux is want


@needs_jax
def test_a_non_array_aux_under_vmap_is_a_clear_error():
    """jax.hessian(has_aux=True) refuses a str aux (jax.vmap's outputs are arrays); so
    does diffiface's hessian on AutoJax, with a clear error."""
    with pytest.raises(TypeError, match="not a valid JAX type"):
        jax.hessian(_aux_str, has_aux=True)(jnp.ones(2))
    with pytest.raises(di.DiffifaceTypeError, match="Keep only arrays in aux"):
        di.hessian(_aux_str, di.AutoJax(), jnp.ones(2), has_aux=True)


def _x_x_x(x):
    return x, (x, x)


# upstream: TestGradTransform.test_vjp_pytree_output
@needs_torch
def test_vjp_pytree_output(backend):
    x, (v1, v2, v3) = _XT[:1], (np.array([0.5]), np.array([-2.0]), np.array([3.0]))
    _, vjp_fn = torch.func.vjp(_x_x_x, torch_np(x))
    (want,) = vjp_fn((torch_np(v1), (torch_np(v2), torch_np(v3))))
    close(want, v1 + v2 + v3, B)
    a = lambda v: arr(backend, v)  # noqa: E731
    got = di.vjp(_x_x_x, backend, a(x), (a(v1), (a(v2), a(v3))))
    close(got, want, backend)


def _list_out(x):
    return [x, x.sum()]


def _dict_out(x):
    return {"x": x, "xsum": x.sum()}


def _composite_out(x):
    out = x.sum()
    return [(out, {"a": x, "out": [x, out]})]


_ANY_PYTREE = {"list": _list_out, "dict": _dict_out, "composite": _composite_out}


# upstream: TestGradTransform.test_vjp_outputs_can_any_pytree, TestJac.test_outputs_can_any_pytree,
# TestJvp.test_outputs_can_any_pytree (list, dict and nested outputs: the results have
# f(x)'s structure, and equal torch.func's)
@needs_torch
@pytest.mark.parametrize("kind", sorted(_ANY_PYTREE))
def test_outputs_can_be_any_pytree(backend, kind):
    f = _ANY_PYTREE[kind]
    x = rand(2, 3, seed=13)
    t = rand(2, 3, seed=14)
    xt, tt = torch_np(x), torch_np(t)
    w = f(tt)  # a cotangent like f(x): f at t
    out, vjp_fn = torch.func.vjp(f, xt)
    (want_vjp,) = vjp_fn(w)
    _, want_jvp = torch.func.jvp(f, (xt,), (tt,))
    want_jac = torch.func.jacrev(f)(xt)
    close(torch.func.jacfwd(f)(xt), want_jac, B)
    xb, tb = arr(backend, x), arr(backend, t)
    wb = f(tb)
    y, g = di.value_and_vjp(f, backend, xb, wb)
    close(y, out, backend)
    close(g, want_vjp, backend)
    y, jv = di.value_and_jvp(f, backend, xb, tb)
    close(y, out, backend)
    close(jv, want_jvp, backend)
    close(di.jacobian(f, backend, xb), want_jac, backend)


_NOT_ARRAY_OUTPUTS = {
    "None": None,
    "empty": (),
    "int": 1,
    "bool": True,
    "float": 12.2,
    "str": "abc",
}


# upstream: the error halves of TestGradTransform.test_vjp_outputs_can_any_pytree,
# TestJac.test_outputs_can_any_pytree and TestJvp.test_outputs_can_any_pytree: None, (),
# 1, True, 12.2, "abc" as f(x). torch.func refuses each; diffiface gives one of its own
# errors (finite differences, whose f may return a number, give zeros for a constant)
@pytest.mark.parametrize("out", sorted(_NOT_ARRAY_OUTPUTS))
def test_outputs_not_arrays(backend, out):
    value = _NOT_ARRAY_OUTPUTS[out]

    def f(x):
        return value

    x = arr(backend, [1.0, 2.0])
    if HAVE["torch"]:
        with pytest.raises(RuntimeError, match=r"(non-empty output|return only tensors)"):
            torch.func.jvp(f, (torch.ones(2),), (torch.ones(2),))
    calls = {
        "jvp": (lambda: di.jvp(f, backend, x, x), ()),
        "vjp": (lambda: di.vjp(f, backend, x, arr(backend, 1.0)), (2,)),
        "jacobian": (lambda: di.jacobian(f, backend, x), (2,)),
    }
    numeric = backend.framework == "finite_differences" and out in ("int", "float")
    for call, shape in calls.values():
        if numeric:  # f may return a number on finite differences: zeros, or a clear error
            zero_or_clear_error(call, shape)
        else:
            with pytest.raises(ERRORS):
                call()


def _two_of_two(t):
    x, y = t
    return 2 * x + 3 * y, 4 * x + 5 * y


def _two_of_x(x, y):
    return 2 * x + 3 * y, 4 * x + 5 * y


def _left_right(t):
    x, y = t
    return {"left": 2 * x + 3 * y, "right": 4 * x + 5 * y}


# upstream: TestJac.test_multiple_outputs_multiple_argnums, test_multiple_outputs_single_argnums,
# test_multiple_outputs_pytree (jacrev and jacfwd)
@needs_torch
@pytest.mark.parametrize("backend", JAC_BACKENDS)
def test_jac_multiple_outputs(backend):
    ref = torch.func.jacrev if getattr(backend, "mode", None) == "reverse" else torch.func.jacfwd
    x, y = rand(3, seed=15), rand(3, seed=16)
    xt, yt = torch_np(x), torch_np(y)
    p = (arr(backend, x), arr(backend, y))
    d = lambda c: np.diag(np.full(3, float(c)))  # noqa: E731

    want = ref(lambda x, y: _two_of_two((x, y)), argnums=(0, 1))(xt, yt)
    got = di.jacobian(_two_of_two, backend, p)
    assert isinstance(got, tuple) and isinstance(got[0], tuple)
    close(got, want, backend)
    close(got, ((d(2), d(3)), (d(4), d(5))), backend)

    want = ref(_two_of_x, argnums=0)(xt, yt)
    got = di.jacobian(_two_of_x, backend, p[0], di.Constant(p[1]))
    assert isinstance(got, tuple) and len(got) == 2
    close(got, want, backend)
    close(got, (d(2), d(4)), backend)

    want = ref(lambda x, y: _left_right((x, y)), argnums=(0, 1))(xt, yt)
    got = di.jacobian(_left_right, backend, p)
    assert isinstance(got, dict) and isinstance(got["left"], tuple)
    close(got, want, backend)
    close(got, {"left": (d(2), d(3)), "right": (d(4), d(5))}, backend)


def _abc(t):
    (a0, a1), b, c = t
    return a0 + a1 * 2, {"foo": b * 3 + c * 4}


def _a_b_with_c(t, c):
    (a0, a1), b = t
    return a0 + a1 * 2, {"foo": b * 3 + c * 4}


def _a_with_bc(a, bc):
    b, c = bc
    a0, a1 = a
    return a0 + a1 * 2, {"foo": b * 3 + c * 4}


def _dct(d):
    m = namespace(d["a"])
    return {"c": m.sin(d["a"]), "d": m.cos(d["b"])}


# upstream: TestJac.test_multiple_inputs_outputs_pytree, test_multiple_inputs_pytree,
# test_multiple_inputs_outputs_pytree_multidim (argnums as the pytree x; jacrev and jacfwd)
@needs_torch
@pytest.mark.parametrize("backend", JAC_BACKENDS)
def test_jac_multiple_inputs_outputs_pytree(backend):
    ref = torch.func.jacrev if getattr(backend, "mode", None) == "reverse" else torch.func.jacfwd
    x0 = np.array(0.6)
    a = lambda v: arr(backend, v)  # noqa: E731
    xt = torch_np(x0)

    def tf(a, b, c):
        a0, a1 = a
        return a0 + a1 * 2, {"foo": b * 3 + c * 4}

    one, two, zero, three = 1.0, 2.0, 0.0, 3.0
    want = ref(tf)((xt, xt), xt, xt)
    got = di.jacobian(_a_with_bc, backend, (a(x0), a(x0)), di.Constant((a(x0), a(x0))))
    close(got, want, backend)
    close(got, ((one, two), {"foo": (zero, zero)}), backend)

    want = ref(tf, argnums=(0, 1))((xt, xt), xt, xt)
    got = di.jacobian(_a_b_with_c, backend, ((a(x0), a(x0)), a(x0)), di.Constant(a(x0)))
    close(got, want, backend)
    close(got, (((one, two), zero), {"foo": ((zero, zero), three)}), backend)

    want = ref(tf, argnums=(0, 1, 2))((xt, xt), xt, xt)
    got = di.jacobian(_abc, backend, ((a(x0), a(x0)), a(x0), a(x0)))
    close(got, want, backend)

    x = rand(3, seed=17)
    want = ref(_dct)({"a": torch_np(x), "b": torch_np(x)})
    got = di.jacobian(_dct, backend, {"a": a(x), "b": a(x)})
    close(got, want, backend)
    z = np.zeros((3, 3))
    close(
        got,
        {"c": {"a": np.diag(np.cos(x)), "b": z}, "d": {"a": z, "b": -np.diag(np.sin(x))}},
        backend,
    )


def _multi_out(t):
    x, y = t
    return (x * x) @ y, x @ (x.sum(1) * y), y.sum()


def _unrelated_outs(t):
    x, y = t
    return x, y, x, y


def _zero_dim_out(t):
    x, y = t
    return x.sum(), y.sum(), x * y


def _zero_dim_in(x):
    return namespace(x).stack([x, x, x])


def _mixed_zero_dim(t):
    x, y = t
    return y.sum(), x * y


_AGAINST_REFERENCE = {
    "multi_input_multi_output": (_multi_out, (rand(5, 3, seed=18), rand(3, 5, seed=19))),
    "unrelated_outputs": (_unrelated_outs, (rand(2, seed=20), rand(3, seed=21))),
    "zero_dim_output": (_zero_dim_out, (rand(3, seed=22), rand(3, seed=23))),
    "zero_dim_input": (_zero_dim_in, np.array(0.7)),
    "mixed_zero_dim": (_mixed_zero_dim, (np.array(0.7), rand(1, seed=24))),
}


# upstream: TestJac.test_against_reference_multi_input_multi_output,
# test_against_reference_unrelated_outputs, test_against_reference_zero_dim (the reference:
# torch.autograd.functional.jacobian, nested outputs-first like jax.jacobian)
@needs_torch
@pytest.mark.parametrize("case", sorted(_AGAINST_REFERENCE))
def test_jac_against_reference(backend, case):
    f, x = _AGAINST_REFERENCE[case]
    if isinstance(x, tuple):
        want = torch.autograd.functional.jacobian(lambda *a: f(a), torch_np(x))
    else:
        want = torch.autograd.functional.jacobian(f, torch_np(x))
    got = di.jacobian(f, backend, optree.tree_map(lambda a: arr(backend, a), x))
    close(got, want, backend)


def _chunked(t):
    x, y = t
    return (namespace(x).sin(x), x + y), (x + 2, x.sum())


# upstream: TestJac.test_chunk_jacrev (a nested tuple output at a pytree x, in chunks)
@needs_torch
@pytest.mark.parametrize("backend", JAC_BACKENDS)
def test_chunk_jacobian(backend):
    x, y = rand(4, 2, seed=25), rand(1, 2, seed=26)
    want = torch.func.jacrev(lambda x, y: _chunked((x, y)), argnums=(0, 1))(
        torch_np(x), torch_np(y)
    )
    p = (arr(backend, x), arr(backend, y))
    for chunk_size in (3,) if backend.framework == "jax" else (1, 3):  # JAX: one compile
        got = di.jacobian(_chunked, backend, p, chunk_size=chunk_size)
        close(got, want, backend)
    with pytest.raises(di.DiffifaceValueError, match="chunk_size must be a positive int"):
        di.jacobian(_chunked, backend, p, chunk_size=0)


def _sin_and_cos(x):
    m = namespace(x)
    return m.sin(x), m.cos(x)


def _two_linear(t):
    x, y = t
    return 2 * x + 3 * y, 4 * x + 5 * y


# upstream: TestJvp.test_multiple_outputs, TestJvp.test_multiple_inputs_outputs
@needs_torch
def test_jvp_multiple_outputs(backend):
    x, t = rand(2, 3, seed=27), rand(2, 3, seed=28)
    want_y, want_t = torch.func.jvp(_sin_and_cos, (torch_np(x),), (torch_np(t),))
    close(want_t, (np.cos(x) * t, -np.sin(x) * t), B)
    y, jv = di.value_and_jvp(_sin_and_cos, backend, arr(backend, x), arr(backend, t))
    assert isinstance(jv, tuple)
    close((y, jv), (want_y, want_t), backend)

    y0, ty = rand(2, 3, seed=29), rand(2, 3, seed=30)
    want_y, want_t = torch.func.jvp(
        lambda a, b: _two_linear((a, b)), (torch_np(x), torch_np(y0)), (torch_np(t), torch_np(ty))
    )
    close(want_t, _two_linear((t, ty)), B)
    p = (arr(backend, x), arr(backend, y0))
    v = (arr(backend, t), arr(backend, ty))
    y, jv = di.value_and_jvp(_two_linear, backend, p, v)
    close((y, jv), (want_y, want_t), backend)


# upstream: TestGradTransform.test_unrelated_vjp_multiple_inputs_outputs (an output leaf
# unrelated to x gets no cotangent through)
@needs_torch
def test_unrelated_vjp_multiple_inputs_outputs(backend):
    yc = 2.0

    def f(t):
        w, x = t
        return w * 0 + yc, w * 0 + yc, x

    def tf(w, x):
        return torch.tensor(yc, dtype=torch.float64), torch.tensor(yc, dtype=torch.float64), x

    _, vjp_fn = torch.func.vjp(tf, torch_np(3.0), torch_np(4.0))
    want = vjp_fn((torch_np(1.0), torch_np(1.0), torch_np(1.0)))
    close(want, (0.0, 1.0), B)
    one = arr(backend, 1.0)
    got = di.vjp(f, backend, (arr(backend, 3.0), arr(backend, 4.0)), (one, one, one))
    close(got, want, backend)


def _per_sample_pytree(x):
    m = namespace(x)
    return {"s": m.sin(x), "c": (m.cos(x) * x,)}, {"norm": (x**2).sum(1)}


# upstream: TestJac.test_vmap_on_jac_simple (vmap(jacrev(f)) with a pytree output and an aux)
@needs_torch
def test_vmap_on_jac_pytree_output_and_aux(backend):
    x = rand(2, 3, seed=31)
    want = torch.func.vmap(torch.func.jacrev(lambda r: _per_sample_pytree(r[None])[0]))(torch_np(x))
    want = optree.tree_map(lambda a: a[:, 0], want)  # the per-sample Jacobians
    jac, aux = di.batched_jacobian(_per_sample_pytree, backend, arr(backend, x), has_aux=True)
    assert isinstance(jac, dict) and isinstance(jac["c"], tuple)
    close(jac, want, backend)
    close_aux(aux, {"norm": (x**2).sum(1)}, backend)
    close(jac["s"], np.stack([np.diag(np.cos(r)) for r in x]), backend)


def _hessian_aux_f(x):
    m = namespace(x)
    return (m.sin(x) * x[0]).sum(), {"x": x, "s": m.sin(x)}


# upstream: TestJac.test_hessian_simple / TestHessian (torch.func.hessian is
# jacfwd(jacrev(f)); has_aux through jacrev's and jacfwd's own has_aux)
@needs_torch
def test_hessian_aux_against_torch_func(backend):
    xt = torch_np(_XT)
    want, want_aux = torch.func.jacfwd(
        torch.func.jacrev(_hessian_aux_f, has_aux=True), has_aux=True
    )(xt)
    close(want, torch.func.hessian(lambda x: _hessian_aux_f(x)[0])(xt), B)
    h, aux = di.hessian(_hessian_aux_f, backend, arr(backend, _XT), has_aux=True)
    close(h, want, backend, order=2)
    close_aux(aux, want_aux, backend)
    (y, g, hv), aux = di.value_gradient_and_hvp(
        _hessian_aux_f, backend, arr(backend, _XT), arr(backend, _TT), has_aux=True
    )
    close(
        (y, g),
        (_hessian_aux_f(xt)[0], torch.func.grad(lambda x: _hessian_aux_f(x)[0])(xt)),
        backend,
    )
    close(hv, want @ torch_np(_TT), backend, order=2)
    close_aux(aux, want_aux, backend)


# ============================================================================
# has_aux under an outer pass: FixedParams (diffiface's nested rules)
# ============================================================================


def _loss_aux(x, p):
    m = namespace(x)
    out = (m.sin(x * p) ** 2).sum()
    return out, {"pre": x * p}


# upstream: APITest.test_grad_and_aux_nested, with the inner call on a FixedParams whose
# parameters the outer pass differentiates: aux still follows the outer trace
@pytest.mark.parametrize("backend", AD_BACKENDS)
@pytest.mark.parametrize("strategy", ["auto", "reverse_over_reverse"])
def test_fixed_params_aux_follows_outer_pass(backend, strategy):
    x, p0 = _XT, 1.7
    # d/dp [sum(g) + sum(aux["pre"])] with g = ∇ₓ sum(sin(x p)^2) = p sin(2 x p)
    want = float((np.sin(2 * x * p0) + 2 * x * p0 * np.cos(2 * x * p0)).sum() + x.sum())

    xb = arr(backend, x)

    def outer(p):
        fp = di.FixedParams(_loss_aux, p, strategy=strategy)
        g, aux = di.gradient(fp, backend, xb, has_aux=True)
        return g.sum() + aux["pre"].sum()

    if backend.framework == "jax":
        got = float(jax.grad(outer)(p0))
    elif backend.framework == "torch":
        p = torch.tensor(p0, dtype=torch.float64, requires_grad=True)
        (got,) = torch.autograd.grad(outer(p), p)
        got = float(got)
    elif backend.framework == "mlx":
        import mlx.core as mx

        got = float(mx.grad(outer)(mx.array(p0, dtype=mx.float64)))
    else:
        import autograd

        got = float(autograd.grad(outer)(p0))
    # (MLX: its float64 bound, absolute too: the sum cancels to 0.18 from terms near 1)
    assert got == pytest.approx(want, rel=rounding(backend, 1e-10), abs=rounding(backend, 0.0))


# diffiface's own rule (no upstream counterpart): forward-over-reverse replaces the inner
# call by its derivatives only, so has_aux under an outer pass is a clear error
@pytest.mark.parametrize("backend", AD_BACKENDS)
def test_fixed_params_forward_over_reverse_with_aux_is_an_error(backend):
    xb = arr(backend, _XT)

    def outer(p):
        fp = di.FixedParams(_loss_aux, p, strategy="forward_over_reverse")
        return di.gradient(fp, backend, xb, has_aux=True)[0].sum()

    # with no outer pass the call is a plain one
    g, aux = di.gradient(
        di.FixedParams(_loss_aux, 1.7, strategy="forward_over_reverse"), backend, xb, has_aux=True
    )
    close(g, 1.7 * np.sin(2 * _XT * 1.7), backend)
    close_aux(aux, {"pre": _XT * 1.7}, backend)
    with pytest.raises(di.DiffifaceTypeError, match="has_aux=True: FixedParams"):
        if backend.framework == "jax":
            jax.grad(outer)(1.7)
        elif backend.framework == "torch":
            p = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
            torch.autograd.grad(outer(p), p)
        elif backend.framework == "mlx":  # (a known gap: no rule runs under mx.grad)
            import mlx.core as mx

            mx.grad(outer)(mx.array(1.7, dtype=mx.float64))
        else:
            import autograd

            autograd.grad(outer)(1.7)


_Point = collections.namedtuple("_Point", ["a", "b"])


def _namedtuple_out(x):
    m = namespace(x)
    return _Point(m.sin(x), x.sum()), _Point(x, x[0])


# upstream: APITest.test_jacobian_on_pytrees / TestJac.test_outputs_can_any_pytree with a
# namedtuple output and a namedtuple aux (the node type comes back)
@needs_jax
def test_namedtuple_output_and_aux(backend):
    def refs():  # f itself, on JAX arrays
        x, t = jnp.asarray(_XT), jnp.asarray(_TT)
        jac = jax.jacobian(_namedtuple_out, has_aux=True)(x)
        return jac, jax.jvp(lambda x: _namedtuple_out(x)[0], (x,), (t,))[1]

    (want, want_aux), want_t = once("namedtuple", jax.jit(refs))
    jac, aux = di.jacobian(_namedtuple_out, backend, arr(backend, _XT), has_aux=True)
    assert type(jac) is _Point and type(aux) is _Point
    close(jac, want, backend)
    close_aux(aux, want_aux, backend)
    t, aux = di.jvp(_namedtuple_out, backend, arr(backend, _XT), arr(backend, _TT), has_aux=True)
    assert type(t) is _Point
    close(t, want_t, backend)
