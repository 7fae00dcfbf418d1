"""A toy backend that gives only the primitives passes the consistency matrix.

``AutoToy`` is a framework diffiface has never heard of, named "toy", whose arrays are
JAX's (``Traits(arrays="jax")``). It wraps ``jax.jvp`` / ``jax.vjp`` (eager, no jit)
and nothing else: every other operator, second order included, and the FixedParams
rules and outer passes of the matrix, come from diffiface's fallbacks
(``core.backend``, ``core.fallbacks``). Adding it touches this file only: a backend
type, an implementation class with its traits, and ``register``.

Three variants: both primitives, only ``value_and_jvp`` (reverse mode from columns),
only ``value_and_pullback`` (forward mode from rows).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di
from diffiface import testing
from diffiface.core import outputs, registry
from diffiface.core.backend import BackendImpl, Traits
from diffiface.core.registry import register

pytestmark = pytest.mark.skipif(not HAVE["jax"], reason="the toy wraps JAX")


@dataclasses.dataclass(frozen=True)
class AutoToy(di.AbstractBackend):
    """Both primitives."""

    mode: str | None = None
    framework: ClassVar[str] = "toy"  # a name of its own; its arrays are JAX's (traits)


@dataclasses.dataclass(frozen=True)
class AutoToyJvp(AutoToy):
    """Only value_and_jvp."""


@dataclasses.dataclass(frozen=True)
class AutoToyVjp(AutoToy):
    """Only value_and_pullback."""


class _Arrays(BackendImpl):
    """The array helpers of the contract, on JAX arrays."""

    traits = Traits("toy", arrays="jax", native_kind="jax arrays", output_kind="a jax array")

    def is_native(self, leaf: Any) -> bool:
        import jax

        return isinstance(leaf, jax.Array | jax.core.Tracer)

    def is_traced(self, a: Any) -> bool:
        import jax

        return isinstance(a, jax.core.Tracer)

    def from_numpy(self, a: np.ndarray) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(a)

    def default_float(self, value: float) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(value, dtype=jnp.result_type(float))

    def ones_like(self, a: Any) -> Any:
        import jax.numpy as jnp

        return jnp.ones_like(a)

    def stack(self, arrays: list, axis: int) -> Any:
        import jax.numpy as jnp

        return jnp.stack(arrays, axis=axis)

    def concat(self, arrays: list, axis: int = 0) -> Any:
        import jax.numpy as jnp

        return jnp.concatenate(arrays, axis=axis)


# A transform that traces f is called through outputs.values: f's aux (has_aux=True)
# leaves it through the framework's own has_aux, never as a tracer (the contract).
def _jvp(self, prob, xs, vs, ctx):
    import jax

    fn = prob.flat()
    return outputs.values(jax.jvp, lambda *a: fn(a, *ctx), tuple(xs), tuple(vs))


def _pullback(self, prob, xs, ctx):
    import jax

    fn = prob.flat()
    y, pb = outputs.values(jax.vjp, lambda *a: fn(a, *ctx), *xs)
    return y, lambda w: pb(w)


@register(AutoToy)
class ToyImpl(_Arrays):
    value_and_jvp = _jvp
    value_and_pullback = _pullback


@register(AutoToyJvp)
class ToyJvpImpl(_Arrays):
    value_and_jvp = _jvp


@register(AutoToyVjp)
class ToyVjpImpl(_Arrays):
    value_and_pullback = _pullback


def _cases(backend, **kw):
    return [pytest.param(c, id=c.id) for c in testing.consistency_matrix(backends=[backend], **kw)]


# the toy with both primitives: the whole (pruned) matrix; the one-primitive toys: every
# operator plain and in an outer pass (the kinds and contexts are the shell's, shared)
CASES = _cases(AutoToy())
ONE = ("C", "0d")
CASES_ONE = _cases(AutoToyJvp(), kinds=ONE, contexts=("plain", "di_outer", "fw_outer"))
CASES_ONE += _cases(AutoToyVjp(), kinds=ONE, contexts=("plain", "di_outer", "fw_outer"))


@pytest.mark.parametrize("case", CASES)
def test_toy_passes_the_matrix(case):
    result = case.run()
    assert result.ok, result.message


@pytest.mark.parametrize("case", CASES_ONE)
def test_one_primitive_toys_pass_the_matrix(case):
    result = case.run()
    assert result.ok, result.message


def test_the_toy_matrix_covers_every_operator():
    for cases in (CASES, CASES_ONE):
        assert {c.values[0].op for c in cases} == set(testing.OPERATORS)


@dataclasses.dataclass(frozen=True)
class AutoToyNewArrays(AutoToy):
    """A framework whose arrays are its own, which diffiface has no bridge for."""

    framework: ClassVar[str] = "toy_arrays"


@register(AutoToyNewArrays)
class ToyNewArraysImpl(ToyImpl):
    traits = dataclasses.replace(ToyImpl.traits, framework="toy_arrays", arrays="toy_arrays")


def test_a_framework_without_a_bridge_is_a_clear_error():
    import jax.numpy as jnp

    g = di.differentiate_with(lambda x: (x**2).sum(), AutoToyNewArrays())
    with pytest.raises(di.DiffifaceTypeError, match="'toy_arrays' framework has no bridge"):
        g(jnp.ones(2))


def test_a_framework_without_a_global_detector_names_the_fixes():
    """Every built-in framework has a global sparsity detector; one registered without
    (its arrays are its own, it names no sparsity module) gets a clear error."""
    backend = di.AutoSparse(AutoToyNewArrays())
    with pytest.raises(di.DiffifaceTypeError) as err:
        di.jacobian(lambda x: x * 2, backend, np.ones(3))
    msg = str(err.value)
    assert msg.startswith(f"jacobian(f, {backend!r}, x): sparsity detection"), msg
    assert "toy_arrays does not" in msg and "sparsity_detector='local'" in msg, msg


def test_the_toy_has_a_name_of_its_own_and_jax_arrays():
    """Its name keys what is its own (nested rules, messages); its arrays decide
    conversion, bridges and the testing kit (``core.registry.arrays``)."""
    from diffiface.core import registry
    from diffiface.testing import _kit

    assert AutoToy.framework == "toy" and registry.arrays(AutoToy()) == "jax"
    assert _kit.of(AutoToy()) is _kit.kit("jax")
    assert registry.arrays(di.AutoFiniteDifferences()) == "numpy"


@pytest.mark.parametrize("pair", ["jax_over_toy", "toy_over_jax"])
def test_second_order_with_jax_crosses_no_bridge(pair):
    """The toy and AutoJax take the same arrays: second order of the two is one
    framework's, no bridge, and its hvp is the closed form."""
    import jax.numpy as jnp

    outer, inner = (
        (di.AutoJax(), AutoToy()) if pair == "jax_over_toy" else (AutoToy(), di.AutoJax())
    )
    b = di.second_order(outer, inner)
    assert not registry.crosses(b)
    x, v = jnp.array([0.3, -1.2, 2.0]), jnp.array([1.0, 0.5, -2.0])
    hv = di.hvp(lambda x: (jnp.sin(x) * x).sum(), b, x, v)
    want = (2 * np.cos(np.asarray(x)) - np.asarray(x) * np.sin(np.asarray(x))) * np.asarray(v)
    np.testing.assert_allclose(np.asarray(hv), want, rtol=1e-12)


def test_the_toy_is_reached_by_its_registration_alone():
    """Registration is the only link: the backend type names no package, no table lists
    it, and its implementation is the class registered here."""
    from diffiface.core.registry import implementation

    assert AutoToy.package is None
    assert type(implementation(AutoToyJvp())) is ToyJvpImpl


TOYS = [AutoToy(), AutoToyJvp(), AutoToyVjp()]
TOY_IDS = ["both", "jvp", "vjp"]


@pytest.mark.parametrize("toy", TOYS, ids=TOY_IDS)
def test_complex_gradient_follows_the_convention(toy):
    """A real f of complex z: df/dRe z + i df/dIm z, as AutoJax and AutoTorch give."""
    import jax.numpy as jnp

    def f(z):
        return jnp.real(z * jnp.conj(z)).sum() + jnp.imag(z).sum() * 3.0

    z = jnp.array([1.0 + 2.0j, -0.5 + 0.25j])
    want = di.gradient(f, di.AutoJax(), z)
    np.testing.assert_allclose(np.asarray(want), 2 * np.asarray(z) + 3j, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(di.gradient(f, toy, z)), np.asarray(want), rtol=1e-12)


@pytest.mark.parametrize("toy", TOYS, ids=TOY_IDS)
@pytest.mark.parametrize("outer", [None, "forward", "reverse"])
def test_second_order_keeps_each_leafs_dtype(toy, outer):
    import jax.numpy as jnp

    def f(x):
        return (jnp.sin(x["a"]).sum() * x["b"] ** 2).sum()

    x = {"a": jnp.array([0.3, 0.7], dtype=jnp.float32), "b": jnp.array([1.5])}
    v = {"a": jnp.array([1.0, -1.0], dtype=jnp.float32), "b": jnp.array([0.5])}
    b = toy if outer is None else di.second_order(type(toy)(mode=outer), toy)
    g, hv = di.gradient_and_hvp(f, b, x, v)
    g_ref, hv_ref = di.gradient_and_hvp(f, di.AutoJax(), x, v)
    for k in x:
        assert g[k].dtype == x[k].dtype and hv[k].dtype == x[k].dtype, k
        np.testing.assert_allclose(np.asarray(g[k]), np.asarray(g_ref[k]), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(hv[k]), np.asarray(hv_ref[k]), rtol=1e-6)


@pytest.mark.parametrize("toy", TOYS, ids=TOY_IDS)
@pytest.mark.parametrize("outer", [None, "reverse"])
def test_empty_x_gives_empty_derivatives(toy, outer):
    import jax.numpy as jnp

    def f(x):
        return (x**2).sum() + 1.0

    x = jnp.zeros((0,))
    b = toy if outer is None else di.second_order(type(toy)(mode=outer), toy)
    assert di.gradient(f, toy, x).shape == (0,)
    assert di.jacobian(lambda x: x * 2.0, toy, x).shape == (0, 0)
    assert di.hvp(f, b, x, x).shape == (0,)
    y, g, h = di.value_gradient_and_hessian(f, b, x)
    assert float(y) == 1.0 and g.shape == (0,) and h.shape == (0, 0)
