"""FixedParams(strategy="auto"): the nested strategy measured once per code and
signature (shared by closures made per call, between threads), f run no more often
than the strategies run it, shown in the preparation's repr, and used by every outer
pass; "min_memory" measured on JAX, from the framework's table elsewhere. Outer
gradients are checked against the framework's own nesting written natively (rtol
1e-10 in float64) or closed forms."""

from __future__ import annotations

import functools
import threading
import warnings

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
    """The measurements started (the real ``measure``, counted), none stored before."""
    choose.forget()
    calls = []
    real = choose.measure

    def spy(*args):
        got = real(*args)
        calls.append(got)
        return got

    monkeypatch.setattr(choose, "measure", spy)
    yield calls
    choose.forget()


def chosen(got):
    """The Choice of a measurement (a Trial once it has decided)."""
    return got.choice if isinstance(got, choose.Trial) else got


def jax_f(x, w):
    import jax.numpy as jnp

    return jnp.sum(jnp.sin(x * w) ** 2)


def torch_f(x, w):
    import torch

    return torch.sum(torch.sin(x * w) ** 2)


def autograd_f(x, w):
    import autograd.numpy as anp

    return anp.sum(anp.sin(x * w) ** 2)


def torch_step(f, x, w):
    """One training step of the seeds' form: outer gradient of sum(∇ₓ f²)."""
    import torch

    g = di.gradient(di.FixedParams(f, w), di.AutoTorch(), x)
    return torch.autograd.grad(torch.sum(g**2), (x, w))


def torch_native(f, x, w):
    import torch

    (g,) = torch.autograd.grad(f(x, w), x, create_graph=True)
    return torch.autograd.grad(torch.sum(g**2), (x, w))


def torch_xw():
    import torch

    return torch.tensor(X0, requires_grad=True), torch.tensor(W0, requires_grad=True)


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
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    want = jax.grad(native, argnums=(0, 1))(x, w)
    assert len(measured) == 1  # same f, same shapes: the stored choice
    assert di.nested_rule_counts() == {("jax", "gradient", choice.strategy): 1}
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)

    jax.jit(jax.grad(loss))(jnp.ones(3), jnp.ones(3))  # another signature: measured again
    assert len(measured) == 2
    di.nested_rule_counts(reset=True)
    jax.grad(loss)(x, w)  # eager: the framework's own nesting, unmeasured
    assert di.nested_rule_counts() == {("jax", "gradient", choose.ROR): 1}


@needs("torch")
def test_torch_auto_times_the_first_real_calls_and_matches_native_nesting(measured):
    x, w = torch_xw()
    prep = di.prepare_gradient(di.FixedParams(torch_f, w.detach()), di.AutoTorch(), x.detach())
    assert len(measured) == 1 and "nested: auto (timing the first calls" in repr(prep)
    want = torch_native(torch_f, x, w)
    di.nested_rule_counts(reset=True)
    for _ in range(2 * choose.REPEATS + 3):
        got = torch_step(torch_f, x, w)
        for a, b in zip(got, want, strict=True):
            torch_close(a, b)
    choice = chosen(measured[0])
    assert len(measured) == 1 and set(choice.measured) == {choose.ROR, choose.FOR}
    counts = di.nested_rule_counts()
    assert counts[("torch", "gradient", choose.FOR)] == choose.REPEATS + (
        3 if choice.strategy == choose.FOR else 0
    )
    assert f"nested: {choice.strategy} (measured: " in repr(prep)


def torch_close(a, b):
    import torch

    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


@needs("torch")
def test_a_closure_made_per_call_is_measured_once(measured):
    x, w = torch_xw()
    want = torch_native(torch_f, x, w)
    for _ in range(20):  # the seeds' form: the inner function made inside the loss
        got = torch_step(lambda s, q: torch_f(s, q), x, w)
        for a, b in zip(got, want, strict=True):
            torch_close(a, b)
    assert len(measured) == 1
    assert chosen(measured[0]) is not None  # decided within the first calls
    torch_step(lambda s, q: torch_f(s, q) * 2, x, w)  # other code: measured anew
    assert len(measured) == 2
    x3, w3 = (a[:3].detach().requires_grad_() for a in (x, w))
    torch_step(lambda s, q: torch_f(s, q), x3, w3)  # another signature: measured anew
    assert len(measured) == 3


if HAVE["torch"]:
    import torch

    class Energy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 3)

        def forward(self, x):
            return torch.tanh(self.lin(x)).sum()


@needs("torch")
def test_torch_first_call_checks_run_once_per_code_not_per_closure(measured):
    """The scalar-conversion check (a torch function mode over every operation of f)
    runs on the first call of f's code: a closure made per call pays it once."""
    from diffiface.backends.torch import graph

    x, w = torch_xw()
    entered = []
    real = graph.Watch.__enter__
    graph.Watch.__enter__ = lambda self: entered.append(1) or real(self)
    try:
        for _ in range(5):
            for a, b in zip(
                torch_step(lambda s, q: torch_f(s, q) + 1.0, x, w),
                torch_native(torch_f, x, w),
                strict=True,
            ):
                torch_close(a, b)
    finally:
        graph.Watch.__enter__ = real
    assert len(entered) == 1


class Scaled:
    def __init__(self, k):
        self.k = k

    def loss(self, x, w):
        return self.k * torch_f(x, w)


@needs("torch")
@pytest.mark.parametrize("kind", ["partial", "bound method", "lambda in a loop", "module"])
def test_every_kind_of_function_made_per_call_shares_one_measurement(kind, measured):
    import torch

    x, w = torch_xw()
    for k in range(12):
        if kind == "partial":
            f = functools.partial(lambda s, q, k: k * torch_f(s, q), k=float(k + 1))
        elif kind == "bound method":
            f = Scaled(float(k + 1)).loss
        elif kind == "lambda in a loop":
            f = [lambda s, q, k=k: (k + 1) * torch_f(s, q) for k in range(2)][k % 2]
        else:
            torch.manual_seed(k)
            model = Energy().double()  # a module re-created each step
            params = dict(model.named_parameters())
            g = di.gradient(di.FixedParams(model), di.AutoTorch(), x.reshape(1, 6))
            got = torch.autograd.grad(torch.sum(g**2), (x, *params.values()))

            def native(x, model=model, params=params):
                (gn,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
                return torch.autograd.grad(torch.sum(gn**2), (x, *params.values()))

            for a, b in zip(got, native(x.reshape(1, 6)), strict=True):
                torch_close(a.reshape(b.shape), b)
            continue
        got = torch_step(f, x, w)
        for a, b in zip(got, torch_native(f, x, w), strict=True):
            torch_close(a, b)
    assert len(measured) == 1


@needs("torch")
def test_a_function_that_cannot_share_its_measurement_warns_once(measured):
    import torch

    class Dist:
        __call__ = torch.dist  # C code: no Python code to share a measurement by

    x, w = torch_xw()
    want = torch_native(torch.dist, x, w)
    with pytest.warns(di.RecompileWarning, match="no Python code of its own") as record:
        for _ in range(choose.NEW_OBJECTS + 3):
            g = di.gradient(di.FixedParams(Dist(), w), di.AutoTorch(), x)
            got = torch.autograd.grad(torch.sum(g**2), (x, w))
            for a, b in zip(got, want, strict=True):
                torch_close(a, b)
    assert len(record) == 1
    assert len(measured) == choose.NEW_OBJECTS + 3


@needs("torch")
def test_auto_runs_f_only_as_often_as_the_strategies_it_runs(measured):
    import torch

    torch.manual_seed(0)
    bn = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double().train()
    x = torch.randn(8, 3, dtype=torch.float64, requires_grad=True)
    g = di.gradient(di.FixedParams(lambda x, p: (bn(x) ** 2).sum(), {}), di.AutoTorch(), x)
    torch.autograd.grad(g.sum(), x)
    assert int(bn[1].num_batches_tracked) == 1  # one call of f, as a plain call makes

    runs = []

    def f(x, w):
        runs.append(1)
        return torch_f(x, w)

    x, w = torch_xw()
    di.nested_rule_counts(reset=True)
    for _ in range(10):
        torch_step(f, x, w)
    counts = di.nested_rule_counts()
    # reverse over reverse calls f once; forward over reverse once, and again in the
    # outer pass (the full gradient's JVP)
    ran = counts.get(("torch", "gradient", choose.ROR), 0)
    ran += 2 * counts.get(("torch", "gradient", choose.FOR), 0)
    assert len(runs) == ran and sum(counts.values()) == 10


@needs("torch")
def test_a_one_off_exception_in_f_reaches_the_caller_and_decides_nothing(measured):
    x, w = torch_xw()
    failures = [RuntimeError("a one-off failure")]

    def f(x, w):
        if failures:
            raise failures.pop()
        return torch_f(x, w)

    with pytest.raises(RuntimeError, match="a one-off failure"):
        torch_step(f, x, w)
    want = torch_native(torch_f, x, w)
    for _ in range(2 * choose.REPEATS + 1):
        for a, b in zip(torch_step(f, x, w), want, strict=True):
            torch_close(a, b)
    assert set(chosen(measured[0]).measured) == {choose.ROR, choose.FOR}  # both measured


@needs("jax")
def test_jax_a_one_off_exception_in_f_reaches_the_caller_and_decides_nothing(measured):
    import jax
    import jax.numpy as jnp

    failures = [ValueError("a one-off failure")]

    def f(x, w):
        if failures:
            raise failures.pop()
        return jax_f(x, w)

    def loss(x, w):
        return jnp.sum(di.gradient(di.FixedParams(f, w), di.AutoJax(), x) ** 2)

    x, w = jnp.asarray(X0), jnp.asarray(W0)
    with pytest.raises(ValueError, match="a one-off failure"):
        jax.jit(jax.grad(loss))(x, w)
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    want = jax.grad(lambda x, w: jnp.sum(jax.grad(jax_f)(x, w) ** 2), argnums=(0, 1))(x, w)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)
    assert [set(m.measured) for m in measured] == [{choose.ROR, choose.FOR}]


@needs("jax")
def test_jax_a_closure_made_per_call_is_measured_once_on_one_trace_of_f(measured):
    import jax
    import jax.numpy as jnp

    runs = []

    def loss(x, w):
        def g(s, q):  # made anew on every call, as the seeds write it
            runs.append(1)
            return jax_f(s, q)

        return jnp.sum(di.gradient(di.FixedParams(g, w), di.AutoJax(), x) ** 2)

    x, w = jnp.asarray(X0), jnp.asarray(W0)
    want = jax.grad(lambda x, w: jnp.sum(jax.grad(jax_f)(x, w) ** 2), argnums=(0, 1))(x, w)
    for _ in range(4):
        got = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)  # a new jit: traced each time
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)
    assert len(measured) == 1
    # the measurement traces f once; each outer trace runs f as the strategy does
    di.nested_rule_counts(reset=True)
    per_trace = len(runs)
    jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    assert per_trace - 1 == 4 * (len(runs) - per_trace)


@needs("jax")
def test_jax_eager_outer_pass_runs_a_closure_made_per_call_as_native_nesting(measured):
    import jax
    import jax.numpy as jnp

    runs = []

    def loss(x, w):
        def g(s, q):  # made anew on every call
            runs.append(1)
            return jax_f(s, q)

        return jnp.sum(di.gradient(di.FixedParams(g, w), di.AutoJax(), x) ** 2)

    x, w = jnp.asarray(X0), jnp.asarray(W0)
    want = jax.grad(lambda x, w: jnp.sum(jax.grad(jax_f)(x, w) ** 2), argnums=(0, 1))(x, w)
    di.nested_rule_counts(reset=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)  # nothing compiled per call
        for _ in range(8):
            got = jax.grad(loss, argnums=(0, 1))(x, w)  # eager: f runs once per call
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)
    assert len(runs) == 8 and measured == []
    assert di.nested_rule_counts() == {("jax", "gradient", choose.ROR): 8}


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_racing_first_uses_measure_once_and_keep_one_choice(name, measured):
    if not HAVE[name]:
        pytest.skip(f"{name} missing")
    threads, rounds = 8, 2 * choose.REPEATS + 2
    barrier = threading.Barrier(threads, timeout=120)
    errors, got = [], []

    if name == "jax":
        import jax
        import jax.numpy as jnp

        x, w = jnp.asarray(X0), jnp.asarray(W0)

        def step():
            def loss(x, w):
                fp = di.FixedParams(lambda s, q: jax_f(s, q), w)
                return jnp.sum(di.gradient(fp, di.AutoJax(), x) ** 2)

            return jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)  # traced anew each time

        want = jax.grad(lambda x, w: jnp.sum(jax.grad(jax_f)(x, w) ** 2), argnums=(0, 1))(x, w)
    else:
        x, w = torch_xw()
        want = torch_native(torch_f, x, w)

        def step():
            return torch_step(lambda s, q: torch_f(s, q), x, w)

    def work():
        try:
            barrier.wait()
            for _ in range(rounds):
                got.append(step())
        except Exception as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in pool)
    assert not errors
    assert len(measured) == 1
    assert chosen(measured[0]) is not None
    for result in got:
        for a, b in zip(result, want, strict=True):
            np.testing.assert_allclose(
                np.asarray(a.detach() if name == "torch" else a),
                np.asarray(b.detach() if name == "torch" else b),
                rtol=1e-10,
            )


@needs("autograd")
@pytest.mark.parametrize("forward_mode", [True, False])
def test_autograd_closure_made_per_call_measures_once_on_real_calls(forward_mode, measured):
    import autograd
    import autograd.numpy as anp
    from autograd.extend import defvjp, primitive

    @primitive
    def sin(a):  # without a forward-mode rule: forward over reverse fails in the outer pass
        return np.sin(a)

    defvjp(sin, lambda ans, a: lambda g: g * anp.cos(a))
    runs = []

    def loss(xw):
        x, w = xw

        def g(s, q):  # made anew on every call
            runs.append(1)
            return anp.sum((anp.sin(s * q) if forward_mode else sin(s * q)) ** 2)

        return anp.sum(di.gradient(di.FixedParams(g, w), di.AutoAutograd(), x) ** 2)

    x, w = X0.copy(), W0.copy()
    want = autograd.grad(lambda xw: anp.sum(autograd.grad(autograd_f)(*xw) ** 2))((x, w))
    di.nested_rule_counts(reset=True)
    for _ in range(10):
        got = autograd.grad(loss)((x, w))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10)
    counts = di.nested_rule_counts()
    assert len(measured) == 1 and sum(counts.values()) == 10
    choice = chosen(measured[0])
    if forward_mode:  # both timed; forward over reverse runs f again in the outer pass
        assert set(choice.measured) == {choose.ROR, choose.FOR}
        ror = counts.get(("autograd", "gradient", choose.ROR), 0)
        assert len(runs) == ror + 2 * counts.get(("autograd", "gradient", choose.FOR), 0)
    else:  # its one try fell back to reverse over reverse, which is kept
        assert choice == choose.Choice(choose.ROR, choice.measured)
        assert set(choice.measured) == {choose.ROR}
        assert counts == {
            ("autograd", "gradient", choose.ROR): 9,
            ("autograd", "gradient", choose.FOR): 1,
        }


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

    x, w = torch_xw()
    di.nested_rule_counts(reset=True)
    for _ in range(4):  # the second call tries forward over reverse: it falls back
        got = torch_step(f, x, w)
        # d/dx sum((2 x w^2)^2) = 8 x w^4; d/dw = 16 x^2 w^3
        xd, wd = x.detach(), w.detach()
        torch.testing.assert_close(got[0], 8 * xd * wd**4, rtol=1e-12, atol=0)
        torch.testing.assert_close(got[1], 16 * xd**2 * wd**3, rtol=1e-12, atol=0)
    choice = chosen(measured[0])
    assert choice.strategy == choose.ROR
    assert set(choice.measured) == {choose.ROR}  # forward over reverse failed
    assert di.nested_rule_counts() == {
        ("torch", "gradient", choose.ROR): 3,
        ("torch", "gradient", choose.FOR): 1,
    }


@pytest.mark.parametrize("name", ["jax", "torch", "autograd"])
def test_min_memory_measures_where_f_need_not_run_again_else_the_table(name, measured):
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
        x, w, f = X0.copy(), W0.copy(), autograd_f

    prep = di.prepare_gradient(di.FixedParams(f, w, strategy="min_memory"), backend, x)
    choice = prep.nested
    if name != "jax":  # its passes cannot be measured without running f: the framework's
        less = {"autograd": choose.FOR, "torch": choose.ROR}[name]  # (benchmarks/nested.py)
        assert choice == choose.Choice(less, {})
        return
    assert set(choice.measured) == {choose.ROR, choose.FOR}  # peak bytes of each
    assert all(v >= 0 for v in choice.measured.values())
    assert choice.strategy == min(
        choice.measured, key=lambda s: (choice.measured[s], s != choose.ROR)
    )
    assert repr(prep).endswith(f"; nested: {choice}>") and " MiB" in repr(prep)


@needs("torch")
def test_torch_min_memory_prints_nothing(capfd, measured):
    import torch

    for n in (6, 4):  # two signatures: two choices
        x, w = (a[:n].detach().requires_grad_() for a in torch_xw())
        g = di.gradient(di.FixedParams(torch_f, w, strategy="min_memory"), di.AutoTorch(), x)
        got = torch.autograd.grad(torch.sum(g**2), (x, w))
        for a, b in zip(got, torch_native(torch_f, x, w), strict=True):
            torch_close(a, b)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@needs("jax")
def test_min_memory_falls_back_to_the_frameworks_choice_when_unmeasured(monkeypatch, measured):
    import jax.numpy as jnp

    from diffiface.core.registry import implementation

    impl = implementation(di.AutoJax())
    monkeypatch.setattr(type(impl), "peak_bytes", lambda self, fn, args: None)
    fp = di.FixedParams(lambda x, w: jnp.sum(jnp.cos(x * w)), jnp.asarray(W0), "min_memory")
    prep = di.prepare_gradient(fp, di.AutoJax(), jnp.asarray(X0))
    assert prep.nested == choose.Choice(choose.FOR, {})  # JAX's (benchmarks/nested.py)


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
    import jax.numpy as jnp

    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for n in range(2, 8):  # measurement makes its inner functions anew per measurement
            x, w = jnp.linspace(0.1, 1.0, n), jnp.linspace(1.0, 2.0, n)
            f = functools.partial(power, k=2)
            di.prepare_gradient(di.FixedParams(f, w), di.AutoJax(), x)
    assert len(measured) == 6
