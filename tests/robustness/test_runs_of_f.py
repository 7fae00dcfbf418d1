"""f runs as often as the framework's own transform runs it: a warm call of each
operator, prepared and unprepared, counted against the native call on the same
counting f (autograd's, torch.func's and MLX's transforms run f once per call; a warm
JAX call runs the compiled program, which runs no
Python). An extra run repeats f's side effects (BatchNorm statistics, counters)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import HAVE, native, xp

import diffiface as di

X = np.array([0.3, -0.7, 1.1])
SCALAR = ("hessian", "value_gradient_and_hessian", "gradient", "value_and_gradient", "hvp")
SCALAR_X = ("derivative", "second_derivative", "value_derivative_and_second_derivative")
OPS = (*SCALAR, *SCALAR_X, "jvp", "vjp", "jacobian", "value_and_jacobian")


def _natives(name: str) -> dict:
    """op -> the framework's own call ``call(f, x, t)``, for the eager frameworks."""
    if name == "autograd":
        import autograd

        return {
            "hessian": lambda f, x, t: autograd.hessian(f)(x),
            "value_gradient_and_hessian": lambda f, x, t: autograd.hessian(f)(x),
            "gradient": lambda f, x, t: autograd.grad(f)(x),
            "value_and_gradient": lambda f, x, t: autograd.value_and_grad(f)(x),
            "hvp": lambda f, x, t: autograd.hessian_vector_product(f)(x, t),
            "derivative": lambda f, x, t: autograd.grad(f)(x),
            "second_derivative": lambda f, x, t: autograd.grad(autograd.grad(f))(x),
            "value_derivative_and_second_derivative": lambda f, x, t: autograd.grad(
                autograd.grad(f)
            )(x),
            "jvp": lambda f, x, t: autograd.make_jvp(f)(x)(t),
            "vjp": lambda f, x, t: autograd.make_vjp(f)(x)[0](t),
            "jacobian": lambda f, x, t: autograd.jacobian(f)(x),
            "value_and_jacobian": lambda f, x, t: autograd.jacobian(f)(x),
        }
    if name == "mlx":
        return _mlx_natives()
    import torch.func as fn

    return {
        "hessian": lambda f, x, t: fn.hessian(f)(x),
        "value_gradient_and_hessian": lambda f, x, t: fn.hessian(f)(x),
        "gradient": lambda f, x, t: fn.grad(f)(x),
        "value_and_gradient": lambda f, x, t: fn.grad_and_value(f)(x),
        "hvp": lambda f, x, t: fn.jvp(fn.grad(f), (x,), (t,)),
        "derivative": lambda f, x, t: fn.grad(f)(x),
        "second_derivative": lambda f, x, t: fn.grad(fn.grad(f))(x),
        "value_derivative_and_second_derivative": lambda f, x, t: fn.grad(fn.grad(f))(x),
        "jvp": lambda f, x, t: fn.jvp(f, (x,), (t,)),
        "vjp": lambda f, x, t: fn.vjp(f, x)[1](t),
        "jacobian": lambda f, x, t: fn.jacrev(f)(x),
        "value_and_jacobian": lambda f, x, t: fn.jacrev(lambda x: (f(x),) * 2, has_aux=True)(x),
    }


def _mlx_natives() -> dict:
    """MLX's own calls: it has no hessian or jacobian, and ``mx.vjp`` takes the cotangent
    with the primals, so a user writes them as ``mx.vmap`` over the unit vectors (a
    reverse Jacobian takes its output's size, known here: f(x) is shaped like x); the
    value and derivatives of
    a scalar x come out of one ``mx.jvp`` of (f, its jvp)."""
    import mlx.core as mx

    def rows(f, x, like):
        eye = mx.eye(like.size, dtype=like.dtype)
        return mx.vmap(lambda w: mx.vjp(f, [x], [w])[1][0])(eye)

    def d2(f, x):
        one = mx.ones_like(x)
        return mx.jvp(lambda x: list(mx.jvp(f, [x], [one])[1]), [x], [one])

    hessian = lambda f, x, t: rows(mx.grad(f), x, x)  # noqa: E731
    jacobian = lambda f, x, t: rows(f, x, x)  # noqa: E731
    return {
        "hessian": hessian,
        "value_gradient_and_hessian": hessian,
        "gradient": lambda f, x, t: mx.grad(f)(x),
        "value_and_gradient": lambda f, x, t: mx.value_and_grad(f)(x),
        "hvp": lambda f, x, t: mx.vjp(mx.grad(f), [x], [t]),
        "derivative": lambda f, x, t: mx.grad(f)(x),
        "second_derivative": lambda f, x, t: d2(f, x),
        "value_derivative_and_second_derivative": lambda f, x, t: d2(f, x),
        "jvp": lambda f, x, t: mx.jvp(f, [x], [t]),
        "vjp": lambda f, x, t: mx.vjp(f, [x], [t]),
        "jacobian": jacobian,
        "value_and_jacobian": jacobian,
    }


def _case(backend, op: str):
    """(counting f, runs list, x, the call's extra arguments)."""
    ns, runs = xp(backend), [0]

    def f(x):
        runs[0] += 1
        return ns.sum(ns.sin(x) * x) if op in SCALAR or op in SCALAR_X else ns.sin(x) * x

    x = native(backend, np.array(0.4)) if op in SCALAR_X else native(backend, X)
    t = (x,) if op in ("jvp", "vjp", "hvp") else ()
    return f, runs, x, t


@pytest.mark.parametrize("op", OPS)
def test_a_warm_call_runs_f_as_the_framework_does(ad_backend, op):
    name = ad_backend.framework
    if name not in ("jax", "torch", "autograd", "mlx") or not HAVE[name]:
        pytest.skip(f"{name}: not one of the counted frameworks")
    f, runs, x, t = _case(ad_backend, op)
    if name == "jax":
        want = 0  # the compiled program runs no Python
    else:
        _natives(name)[op](f, x, x)
        want, runs[0] = runs[0], 0
    call = getattr(di, op)
    prepare = getattr(di, "prepare_" + op.split("_and_")[-1].replace("gradient_", ""))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", di.RecompileWarning)  # (f's code, one per case)
        call(f, ad_backend, x, *t)  # the first call may compile, size and learn
        runs[0] = 0
        call(f, ad_backend, x, *t)
        assert runs[0] == want, f"unprepared {op}: f ran {runs[0]} times, the native {want}"
        prep = prepare(f, ad_backend, x, *t)
        call(f, ad_backend, x, *t, prep=prep)
        runs[0] = 0
        call(f, ad_backend, x, *t, prep=prep)
        assert runs[0] == want, f"prepared {op}: f ran {runs[0]} times, the native {want}"


@pytest.mark.parametrize("op", ["jvp", "vjp", "gradient", "hessian", "second_derivative"])
def test_a_constant_f_runs_once_with_one_warning(ad_backend, op):
    """A constant f is warned about once, and runs once on the first call (autograd's
    forward mode took no constant output, and the call ran f again in reverse)."""
    ns = xp(ad_backend)
    runs = [0]

    def f(x):
        runs[0] += 1
        c = ns.ones_like(x) * 2.0
        return ns.sum(c) if op in ("gradient", "hessian", "second_derivative") else c

    x = native(ad_backend, np.array(0.4) if op == "second_derivative" else X)
    t = (x,) if op in ("jvp", "vjp") else ()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = getattr(di, op)(f, ad_backend, x, *t)
    assert runs[0] == 1
    assert sum(issubclass(w.category, di.DisconnectedWarning) for w in record) == 1
    np.testing.assert_array_equal(np.asarray(out, dtype=float), 0.0 * np.asarray(X if t else out))
