"""Faults answered the same way on every backend (issue 8, in part): threads (torch's
forward mode from many threads included), torch's grad modes, inference tensors,
repeatability."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di

X = np.linspace(-1.0, 1.0, 5)


def _f(x):
    return (x**3).sum()


def _square(x):
    return x**2


OPS = {  # module-level functions: a new lambda per call would recompile on JAX
    "gradient": lambda b, x: di.gradient(_f, b, x),
    "jacobian": lambda b, x: di.jacobian(_square, b, x),  # forward mode (5 -> 5)
    "jvp": lambda b, x: di.jvp(_square, b, x, x),
    "hvp": lambda b, x: di.hvp(_f, b, x, x),
    "hessian": lambda b, x: di.hessian(_f, b, x),
}
EXACT = {  # closed forms at X: f = sum(x^3), square = x^2
    "gradient": 3 * X**2,
    "jacobian": np.diag(2 * X),
    "jvp": 2 * X * X,
    "hvp": 6 * X * X,
    "hessian": np.diag(6 * X),
}


def _tol(backend):
    return 1e-4 if isinstance(backend, di.AutoFiniteDifferences) else 1e-12


def test_sixteen_threads_give_identical_results(backend):
    """16 threads x 100 rounds of five operators share the backend and its caches; the
    results equal the single-threaded ones bit for bit (torch's forward mode keeps a
    process-wide level, so diffiface runs its jvps one thread at a time)."""
    ref = {op: np.asarray(fn(backend, X)) for op, fn in OPS.items()}
    for op, exact in EXACT.items():
        np.testing.assert_allclose(ref[op], exact, rtol=_tol(backend), atol=_tol(backend))
    errors = []

    def work():
        try:
            for _ in range(100):
                for op, fn in OPS.items():
                    if not np.array_equal(np.asarray(fn(backend, X)), ref[op]):
                        errors.append(f"{op} differs")
        except Exception as exc:  # collected, then reported
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_repeated_calls_are_bitwise_identical(backend):
    for fn in OPS.values():
        a, b = np.asarray(fn(backend, X)), np.asarray(fn(backend, X))
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_torch_under_no_grad_and_inference_mode(mode):
    import torch

    with getattr(torch, mode)():
        x = torch.tensor(X)
        for op, fn in OPS.items():
            out = fn(di.AutoTorch(), x)
            assert not out.requires_grad, op
            np.testing.assert_allclose(out, EXACT[op], rtol=1e-12, atol=1e-12, err_msg=op)
    assert torch.is_grad_enabled()  # the caller's mode is untouched


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_torch_inference_tensor_used_outside_inference_mode():
    import torch

    with torch.inference_mode():
        x = torch.tensor(X)
    for op, fn in OPS.items():
        np.testing.assert_allclose(fn(di.AutoTorch(), x), EXACT[op], rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_torch_prepared_gradient_under_inference_mode_is_not_zero():
    """torch records no graph under inference_mode: gradients were silently zero."""
    import torch

    prep = di.prepare_gradient(_f, di.AutoTorch(), torch.tensor(X))
    with torch.inference_mode():
        g = di.gradient(_f, di.AutoTorch(), torch.tensor(X), prep=prep)
    np.testing.assert_allclose(g, 3 * X**2, rtol=1e-12)


def _threads(work, n=8):
    """Run ``work`` on n threads (bounded: each joins within 120 s); its errors."""
    errors = []

    def run():
        try:
            work()
        except Exception as exc:  # collected: the test reports every one
            errors.append(repr(exc)[:200])

    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_bridged_torch_forward_mode_from_many_threads():
    """Before the one forward-mode lock: 158 errors ("no level exists") and 76 wrong
    results in 8 threads x 30 calls of these two."""
    import torch

    so = di.second_order(di.AutoJax(mode="forward"), di.AutoTorch())
    x = torch.tensor([0.3, 1.2], dtype=torch.float64)
    v = torch.tensor([1.0, 0.0], dtype=torch.float64)
    f = lambda x: (torch.sin(x) * x).sum()  # noqa: E731
    xn = x.numpy()
    want_hv = (2 * np.cos(xn) - xn * np.sin(xn)) * v.numpy()
    W = torch.tensor([[0.5, -1.0]], dtype=torch.float64, requires_grad=True)

    def g(t, p):
        return (torch.sin(t @ p.T) ** 2).sum()

    def loss():
        t = torch.tensor([[0.3, -0.5]], dtype=torch.float64)
        fixed = di.FixedParams(g, W, strategy="forward_over_reverse")
        gr = di.gradient(fixed, di.AutoTorch(), t)
        return torch.autograd.grad((gr**2).sum(), W)[0]

    want_gw = loss().numpy()
    wrong = []

    def work():
        for _ in range(12):
            if not np.allclose(di.hvp(f, so, x, v).numpy(), want_hv, atol=1e-12):
                wrong.append("hvp")
            if not np.allclose(loss().numpy(), want_gw, atol=1e-12):
                wrong.append("FixedParams")

    assert _threads(work) == []
    assert wrong == []
