"""Complex x with a real f: one convention on every backend, the gradient of f as a
function of (Re z, Im z) written as df/dRe + i df/dIm (torch's; jax and autograd
give its conjugate, which diffiface conjugates back). Complex outputs to gradient
and Hessians are errors naming vjp; complex x to other operators are errors naming
gradient."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import native, to_numpy

import diffiface as di

Z = np.array([3 + 4j, -0.5 + 0.25j])


def _ns(backend):
    name = type(backend).__name__
    if name == "AutoJax":
        import jax.numpy as jnp

        return jnp.real, jnp.imag, jnp.conj, jnp.sum
    if name == "AutoTorch":
        import torch

        return torch.real, torch.imag, torch.conj, torch.sum
    if name == "AutoAutograd":
        import autograd.numpy as anp

        return anp.real, anp.imag, anp.conj, anp.sum
    if name == "AutoMLX":
        import mlx.core as mx

        return mx.real, mx.imag, mx.conj, mx.sum
    return np.real, np.imag, np.conj, np.sum


def _tol(backend):
    """MLX has no complex128: its complex x is complex64 (float32 parts)."""
    if isinstance(backend, di.AutoMLX):
        return 2e-6
    return 1e-6 if isinstance(backend, di.AutoFiniteDifferences) else 1e-12


def _complex(backend):
    return np.complex64 if isinstance(backend, di.AutoMLX) else np.complex128


def test_abs_squared_gives_two_z_on_every_backend(backend):
    re, _, conj, total = _ns(backend)
    z = native(backend, Z)
    g = to_numpy(di.gradient(lambda z: total(re(z * conj(z))), backend, z))
    assert g.dtype == _complex(backend)
    np.testing.assert_allclose(g, 2 * Z, rtol=_tol(backend))  # 6+8j at 3+4j
    np.testing.assert_allclose(g[0], 6 + 8j, rtol=_tol(backend))


def test_convention_on_a_non_symmetric_function(backend):
    re, im, conj, total = _ns(backend)
    x, y = Z.real, Z.imag
    want = (2 * x * y + 4 * x * (x**2 + y**2)) + 1j * (x**2 + 4 * y * (x**2 + y**2))

    def f(z):
        r2 = re(z * conj(z))
        return total(re(z) ** 2 * im(z) + r2**2)

    value, g = di.value_and_gradient(f, backend, native(backend, Z))
    np.testing.assert_allclose(to_numpy(g), want, rtol=_tol(backend))
    want_value = (x**2 * y + (x**2 + y**2) ** 2).sum()
    np.testing.assert_allclose(float(to_numpy(value)), want_value, rtol=_tol(backend))


def test_mixed_real_and_complex_leaves(backend):
    re, _, conj, total = _ns(backend)
    x = {"z": native(backend, Z), "s": native(backend, np.array([2.0]))}
    g = di.gradient(lambda d: total(re(d["z"] * conj(d["z"])) * d["s"][0]), backend, x)
    np.testing.assert_allclose(to_numpy(g["z"]), 4 * Z, rtol=_tol(backend))
    np.testing.assert_allclose(to_numpy(g["s"]), [np.sum(np.abs(Z) ** 2)], rtol=_tol(backend))
    assert to_numpy(g["s"]).dtype == np.float64


def test_complex_output_to_gradient_is_an_error_naming_the_way_out(backend):
    """The hint names a path that works (vjp and jvp refuse complex x)."""
    z = native(backend, Z)
    with pytest.raises(ValueError, match=r"complex scalar.*real and imaginary parts.*jvp") as err:
        di.gradient(lambda z: (z * z).sum(), backend, z)
    assert repr(backend) in str(err.value)
    with pytest.raises((TypeError, ValueError), match="gradient"):
        di.hessian(lambda z: (z * z).sum(), backend, z)


@pytest.mark.parametrize("op", ["jacobian", "hessian", "jvp"])
def test_complex_x_elsewhere_is_an_error_naming_gradient(backend, op):
    z = native(backend, Z)
    call = {
        "jacobian": lambda f: di.jacobian(f, backend, z),
        "hessian": lambda f: di.hessian(f, backend, z),
        "jvp": lambda f: di.jvp(f, backend, z, z),
    }[op]
    with pytest.raises(
        TypeError, match=r"x must be.*complex(128|64).*gradient and value_and_gradient"
    ):
        call(lambda z: z * 2)
