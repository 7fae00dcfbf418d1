"""The shell's fixed cost per call (issue 29): a common call (no aux, no chunk_size, a
plan of the plain kind or none) runs the plan and skips the general steps; a call with
aux pushes its sink inline; a runner's one-array match reads JAX's aval before shape and
dtype. Counted in Python calls inside diffiface, never timed; and every check the
general steps make still happens. Each derivative against its closed form."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import python_calls

import diffiface as di

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

X = np.array([0.5, -1.2, 2.0, 0.3])
V = np.array([0.3, 1.1, -0.7, 0.9])
TOL = {"rtol": 1e-12, "atol": 1e-14}
BACKENDS = {"jax": di.AutoJax(), "torch": di.AutoTorch()}


def s_jax(x):  # sum(sin(x) x)
    return jnp.sum(jnp.sin(x) * x)


def s_torch(x):
    return (torch.sin(x) * x).sum()


def s_aux(x):  # (sum(sin(x) x), 2 x[0])
    return (torch.sin(x) * x).sum(), 2 * x[0]


def e_aux(x):  # (sin(x) x, 2 x[0])
    return torch.sin(x) * x, 2 * x[0]


def s_jax_aux(x):
    return jnp.sum(jnp.sin(x) * x), 2 * x[0]


def _ds(a):  # d/da of sum(sin(a) a), elementwise: also the diagonal Jacobian of sin(a) a
    return np.sin(a) + a * np.cos(a)


def _d2s(a):  # the Hessian's diagonal of sum(sin(a) a)
    return 2 * np.cos(a) - a * np.sin(a)


def _np(a):
    return np.asarray(a.detach() if hasattr(a, "detach") else a)


# (backend, op, f, closed form, most calls prepared, most calls unprepared); before
# (ad5f1e2): jax gradient 4 / 6, torch gradient 9 / 11; with aux: torch gradient 27 / 29,
# vjp 29 / 31, jvp 24 / 26, hvp 36 / 35, jax gradient 15 / 17
CASES = {
    "jax gradient": ("jax", "gradient", s_jax, lambda: _ds(X), 3, 5),
    "torch gradient": ("torch", "gradient", s_torch, lambda: _ds(X), 8, 10),
    "jax gradient has_aux": ("jax", "gradient", s_jax_aux, lambda: _ds(X), 6, 8),
    "torch gradient has_aux": ("torch", "gradient", s_aux, lambda: _ds(X), 18, 20),
    "torch vjp has_aux": ("torch", "vjp", e_aux, lambda: _ds(X) * V, 20, 22),
    "torch jvp has_aux": ("torch", "jvp", e_aux, lambda: _ds(X) * V, 15, 17),
    "torch hvp has_aux": ("torch", "hvp", s_aux, lambda: _d2s(X) * V, 25, 26),
}


def _args(fw: str, op: str) -> tuple:
    arr = jnp.asarray if fw == "jax" else torch.tensor
    return (arr(X),) if op == "gradient" else (arr(X), arr(V))


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_warm_common_call_makes_few_python_calls(case, prepared):
    fw, op, f, want, most_prepared, most_unprepared = CASES[case]
    b, args, aux = BACKENDS[fw], _args(fw, op), "has_aux" in case
    prep = getattr(di, f"prepare_{op}")(f, b, *args, has_aux=aux) if prepared else None
    call = lambda: getattr(di, op)(f, b, *args, prep=prep, has_aux=aux)  # noqa: E731
    got = call()
    if aux:
        got, a = got
        np.testing.assert_allclose(_np(a), 2 * X[0], **TOL)
    np.testing.assert_allclose(_np(got), want(), **TOL)
    assert python_calls(call) <= (most_prepared if prepared else most_unprepared)


@pytest.mark.parametrize("fw", ["jax", "torch"])
def test_the_steps_a_common_call_skips_still_check_the_others(fw):
    """A call with has_aux, chunk_size or another kind of prep runs the general steps:
    each of their errors, on a warm plan."""
    b, (x,) = BACKENDS[fw], _args(fw, "gradient")
    f = s_jax if fw == "jax" else s_torch
    fa = s_jax_aux if fw == "jax" else s_aux
    prep, prep_aux = di.prepare_gradient(f, b, x), di.prepare_gradient(fa, b, x, has_aux=True)
    for _ in range(2):  # (warm)
        di.gradient(f, b, x, prep=prep)
        di.gradient(fa, b, x, prep=prep_aux, has_aux=True)
    with pytest.raises(ValueError, match="differs from the preparation's"):
        di.gradient(fa, b, x, prep=prep_aux)
    with pytest.raises(ValueError, match="differs from the preparation's"):
        di.gradient(f, b, x, prep=prep, has_aux=True)
    with pytest.raises(TypeError, match="has_aux must be True or False"):
        di.gradient(fa, b, x, has_aux="yes")
    with pytest.raises(TypeError, match="prep must come from"):
        di.gradient(f, b, x, prep=object())
    with pytest.raises(ValueError, match="chunk_size"):
        di.jacobian(f, b, x, chunk_size=0)
    np.testing.assert_allclose(_np(di.gradient(f, b, x, prep=prep)), _ds(X), **TOL)


@pytest.mark.parametrize("fw", ["jax", "torch"])
@pytest.mark.parametrize("where", ["config", "options"])
def test_a_check_switched_on_reaches_a_warm_planned_call(fw, where, monkeypatch):
    """check_finite set on ``di.config`` (kept as a flag the shell reads) or in an
    ``options`` block is seen by the next call of a warm plan; switched off, the plan
    runs again."""
    b, (x,) = BACKENDS[fw], _args(fw, "gradient")
    f = s_jax if fw == "jax" else s_torch
    prep = di.prepare_gradient(f, b, x)
    bad = jnp.asarray(X).at[1].set(np.nan) if fw == "jax" else torch.tensor(X)
    if fw == "torch":
        bad[1] = float("nan")
    for call in (lambda: di.gradient(f, b, bad, prep=prep), lambda: di.gradient(f, b, bad)):
        call()  # (warm: NaN propagates)
        call()
        if where == "config":
            monkeypatch.setattr(di.config, "check_finite", True)
            with pytest.raises(ValueError, match="x holds nan at index"):
                call()
            monkeypatch.setattr(di.config, "check_finite", False)
        else:
            with di.options(check_finite=True), pytest.raises(ValueError, match="holds nan"):
                call()
        assert np.isnan(_np(call())[1])
    few = python_calls(lambda: di.gradient(f, b, x, prep=prep))
    assert few <= (3 if fw == "jax" else 8)
    np.testing.assert_allclose(_np(di.gradient(f, b, x, prep=prep)), _ds(X), **TOL)


def test_jax_a_weakly_typed_x_on_a_strongly_typed_plan():
    """The avals differ (weak_type), shape and dtype do not: the match reads them after
    the aval and the plan's runner answers, as before the aval was read first."""
    b = di.AutoJax()
    strong = jnp.asarray(0.7, dtype=jnp.float64)
    weak = jnp.asarray(0.7)
    assert weak.weak_type and not strong.weak_type and weak.aval != strong.aval
    prep = di.prepare_gradient(s_jax, b, strong)
    want = np.sin(0.7) + 0.7 * np.cos(0.7)
    np.testing.assert_allclose(np.asarray(di.gradient(s_jax, b, weak, prep=prep)), want, **TOL)
    assert python_calls(lambda: di.gradient(s_jax, b, weak, prep=prep)) <= 3
    with pytest.raises(ValueError, match="do not match the preparation"):
        di.gradient(s_jax, b, jnp.ones(2), prep=prep)


def test_a_thread_gets_its_own_aux():
    """The shell pushes a call's sink on its thread's stack: calls with aux in several
    threads each get the aux of their own x."""
    b = di.AutoTorch()
    prep = di.prepare_gradient(s_aux, b, torch.tensor(X), has_aux=True)
    errors, start = [], threading.Barrier(4)

    def work(k):
        x = torch.tensor(X + k)
        start.wait()
        for _ in range(50):
            for p in (prep, None):
                g, a = di.gradient(s_aux, b, x, prep=p, has_aux=True)
                if float(a) != 2 * (X[0] + k) or not np.allclose(_np(g), _ds(X + k), **TOL):
                    errors.append((k, float(a)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_another_config_object_switches_no_check_on():
    """Only ``di.config``'s settings reach the calls: a ``di.Config`` made with strict on
    leaves a warm plan running (and the gradient exact)."""
    b, x = BACKENDS["torch"], torch.tensor(X)
    prep = di.prepare_gradient(s_torch, b, x)
    own = di.Config(strict=True, check_finite=True)
    assert own.strict and not di.config.strict
    assert python_calls(lambda: di.gradient(s_torch, b, x, prep=prep)) <= 8
    np.testing.assert_allclose(_np(di.gradient(s_torch, b, x, prep=prep)), _ds(X), **TOL)
