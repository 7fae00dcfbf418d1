"""FixedParams(strategy="auto"): the nested strategy measured once per function and
signature, shown in the preparation's repr, and used by every outer pass; "min_memory"
from the framework's table, not measured. Outer gradients are checked against the
framework's own nesting written natively (rtol 1e-10 in float64)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di
from diffiface.nested import choose

pytestmark = pytest.mark.measures

X0 = np.linspace(-1.0, 1.0, 6)
W0 = np.linspace(0.5, 1.5, 6)


def needs(name):
    return pytest.mark.skipif(not HAVE[name], reason=f"{name} missing")


@pytest.fixture
def measured(monkeypatch):
    """The measurements made (the real ``measure``, counted)."""
    calls = []
    real = choose.measure

    def spy(*args):
        got = real(*args)
        calls.append(got)
        return got

    monkeypatch.setattr(choose, "measure", spy)
    return calls


def jax_f(x, w):
    import jax.numpy as jnp

    return jnp.sum(jnp.sin(x * w) ** 2)


def torch_f(x, w):
    import torch

    return torch.sum(torch.sin(x * w) ** 2)


@needs("jax")
def test_jax_auto_measures_once_and_the_outer_pass_uses_the_choice(measured):
    import jax
    import jax.numpy as jnp

    x, w = jnp.asarray(X0), jnp.asarray(W0)
    backend = di.AutoJax()
    fp = di.FixedParams(jax_f, w)
    prep = di.prepare_gradient(fp, backend, x)
    assert len(measured) == 1
    choice = measured[0]
    assert choice.strategy in (choose.ROR, choose.FOR)
    assert set(choice.measured) == {choose.ROR, choose.FOR}  # both ran
    assert f"nested: {choice.strategy} (measured: " in repr(prep)

    def loss(x, w):
        g = di.gradient(di.FixedParams(jax_f, w), backend, x)
        return jnp.sum(g**2)

    def native(x, w):
        return jnp.sum(jax.grad(jax_f)(x, w) ** 2)

    di.nested_rule_counts(reset=True)
    got = jax.grad(loss, argnums=(0, 1))(x, w)
    want = jax.grad(native, argnums=(0, 1))(x, w)
    assert len(measured) == 1  # same f, same shapes: the stored choice
    assert di.nested_rule_counts() == {("jax", "gradient", choice.strategy): 1}
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)

    jax.grad(loss)(jnp.ones(3), jnp.ones(3))  # another signature: measured again
    assert len(measured) == 2


@needs("torch")
def test_torch_auto_measures_once_and_matches_native_nesting(measured):
    import torch

    x = torch.tensor(X0, requires_grad=True)
    w = torch.tensor(W0, requires_grad=True)
    backend = di.AutoTorch()
    prep = di.prepare_gradient(di.FixedParams(torch_f, w.detach()), backend, x.detach())
    assert len(measured) == 1
    assert f"nested: {measured[0].strategy} (measured: " in repr(prep)

    di.nested_rule_counts(reset=True)
    for _ in range(2):
        g = di.gradient(di.FixedParams(torch_f, w), backend, x)
        got = torch.autograd.grad(torch.sum(g**2), (x, w))
    assert len(measured) == 1
    assert di.nested_rule_counts() == {("torch", "gradient", measured[0].strategy): 2}
    (gn,) = torch.autograd.grad(torch_f(x, w), x, create_graph=True)
    want = torch.autograd.grad(torch.sum(gn**2), (x, w))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=0)


@needs("torch")
def test_torch_auto_keeps_native_nesting_where_forward_mode_fails(measured):
    import torch

    class Square(torch.autograd.Function):  # no forward-mode rule: jvp raises
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g

    def f(x, w):
        return torch.sum(Square.apply(x * w))

    x = torch.tensor(X0, requires_grad=True)
    w = torch.tensor(W0, requires_grad=True)
    g = di.gradient(di.FixedParams(f, w), di.AutoTorch(), x)
    got = torch.autograd.grad(torch.sum(g**2), (x, w))
    assert measured[0].strategy == choose.ROR
    assert set(measured[0].measured) == {choose.ROR}  # forward over reverse raised
    # d/dx sum((2 x w^2)^2) = 8 x w^4; d/dw = 16 x^2 w^3
    xd, wd = x.detach(), w.detach()
    torch.testing.assert_close(got[0], 8 * xd * wd**4, rtol=1e-12, atol=0)
    torch.testing.assert_close(got[1], 16 * xd**2 * wd**3, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ["jax", "torch", "autograd"])
def test_min_memory_keeps_the_strategy_that_allocates_less(name, measured):
    if not HAVE[name]:
        pytest.skip(f"{name} missing")
    backend = {"jax": di.AutoJax, "torch": di.AutoTorch, "autograd": di.AutoAutograd}[name]()
    if name == "jax":
        import jax.numpy as jnp

        x, w, f = jnp.asarray(X0), jnp.asarray(W0), jax_f
    elif name == "torch":
        import torch

        x, w, f = torch.tensor(X0), torch.tensor(W0), torch_f
    else:
        import autograd.numpy as anp

        x, w = X0.copy(), W0.copy()

        def f(x, w):
            return anp.sum(anp.sin(x * w) ** 2)

    prep = di.prepare_gradient(di.FixedParams(f, w, strategy="min_memory"), backend, x)
    assert measured == []  # no timing
    choice = prep.nested
    assert set(choice.measured) == {choose.ROR, choose.FOR}  # peak bytes of each
    assert all(v >= 0 for v in choice.measured.values())
    assert choice.strategy == min(
        choice.measured, key=lambda s: (choice.measured[s], s != choose.ROR)
    )
    assert repr(prep).endswith(f"; nested: {choice}>") and " MiB" in repr(prep)


@needs("torch")
def test_min_memory_falls_back_to_the_table_where_memory_cannot_be_measured(monkeypatch):
    import torch

    from diffiface.core.registry import implementation

    impl = implementation(di.AutoTorch())
    monkeypatch.setattr(type(impl), "peak_bytes", lambda self, fn, args: None)

    def f(x, w):
        return torch.sum(torch.cos(x * w))

    fp = di.FixedParams(f, torch.tensor(W0), strategy="min_memory")
    prep = di.prepare_gradient(fp, di.AutoTorch(), torch.tensor(X0))
    assert prep.nested == choose.Choice(choose.LESS_MEMORY["torch"], {})


@needs("jax")
def test_auto_with_aux_is_native_nesting_without_measuring(measured):
    import jax.numpy as jnp

    def f(x, w):
        return jax_f(x, w), jnp.sum(x)

    x, w = jnp.asarray(X0), jnp.asarray(W0)
    prep = di.prepare_gradient(di.FixedParams(f, w), di.AutoJax(), x, has_aux=True)
    assert measured == []
    assert repr(prep).endswith(f"; nested: {choose.ROR}>")


def power(x, w, k):
    return (x * w).sum() ** k


@needs("jax")
def test_measuring_many_functions_warns_of_no_recompilation(measured):
    import functools
    import warnings

    import jax.numpy as jnp

    x, w = jnp.asarray(X0), jnp.asarray(W0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for k in range(1, 7):  # measurement makes its inner function anew per f and strategy
            f = functools.partial(power, k=k)
            di.prepare_gradient(di.FixedParams(f, w), di.AutoJax(), x)
    assert len(measured) == 6
