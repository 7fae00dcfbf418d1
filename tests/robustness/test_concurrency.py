"""Faults answered the same way on every backend (issue 8, in part): threads (torch's
forward mode from many threads included), torch's grad modes, inference tensors,
repeatability."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from array_api_compat import array_namespace
from helpers import HAVE, native, to_numpy, tolerance

import diffiface as di
from diffiface.core.operator import OPS
from diffiface.testing._calls import expected, parts, point_kind, tangent_args

X = np.linspace(-1.0, 1.0, 5)


def _f(x):
    return (x**3).sum()


def _square(x):
    return x**2


# the base operator of every family that takes an array x (declared facts: not a
# scalar x, not a batch): gradient, jvp, vjp, jacobian, hvp, hessian
BASE = [op for op, d in OPS.items() if op == d.family and point_kind(op) in ("scalar_y", "vector")]
# closed forms at X: f = sum(x^3) for a scalar f, square = x^2 otherwise; tangents X
REFS = {
    "scalar_y": parts((X**3).sum(), 3 * X**2, np.diag(6 * X), v=X),
    "vector": parts(X**2, np.diag(2 * X), v=X, w=X),
}
EXACT = {op: expected(op, REFS[point_kind(op)]) for op in BASE}


def _call(op):
    """``op`` on a module-level function (a new lambda per call would recompile on JAX)."""
    f = _f if OPS[op].scalar else _square  # (jacobian: forward mode, 5 -> 5)
    return lambda b, x: getattr(di, op)(f, b, x, *tangent_args(op, x, x))


CALLS = {op: _call(op) for op in BASE}


def _tol(backend):
    return 1e-4 if isinstance(backend, di.AutoFiniteDifferences) else 1e-12


def test_sixteen_threads_give_identical_results(backend):
    """16 threads x 100 rounds of the base operators share the backend and its caches; the
    results equal the single-threaded ones bit for bit (torch's forward mode keeps a
    process-wide level, so diffiface runs its jvps one thread at a time)."""
    ref = {op: np.asarray(fn(backend, X)) for op, fn in CALLS.items()}
    for op, exact in EXACT.items():
        np.testing.assert_allclose(ref[op], exact, rtol=_tol(backend), atol=_tol(backend))
    errors = []

    def work():
        try:
            for _ in range(100):
                for op, fn in CALLS.items():
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
    for fn in CALLS.values():
        a, b = np.asarray(fn(backend, X)), np.asarray(fn(backend, X))
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_torch_under_no_grad_and_inference_mode(mode):
    import torch

    with getattr(torch, mode)():
        x = torch.tensor(X)
        for op, fn in CALLS.items():
            out = fn(di.AutoTorch(), x)
            assert not out.requires_grad, op
            np.testing.assert_allclose(out, EXACT[op], rtol=1e-12, atol=1e-12, err_msg=op)
    assert torch.is_grad_enabled()  # the caller's mode is untouched


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_torch_inference_tensor_used_outside_inference_mode():
    import torch

    with torch.inference_mode():
        x = torch.tensor(X)
    for op, fn in CALLS.items():
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


def _nested_autograd_cases():
    """case -> (diffiface nested in autograd or in itself, autograd's own nesting of the
    same), both functions of a float."""
    import autograd
    import autograd.numpy as anp
    from autograd.core import make_jvp

    ag, A = autograd.grad, di.AutoAutograd()
    xs = np.linspace(0.1, 1.0, 3)

    def model(x, p):
        return anp.sum(anp.sin(x * p) ** 2)

    def fixed(strategy):
        grad = lambda p: di.gradient(di.FixedParams(model, p, strategy=strategy), A, xs)  # noqa: E731
        return ag(lambda p: anp.sum(grad(p) ** 2))

    def with_aux(p0):
        def outer(p):
            (_, g), aux = di.value_and_gradient(
                lambda x: (anp.sum(x * p) ** 2, x * p), A, xs, has_aux=True
            )
            return anp.sum(g) + anp.sum(aux**2)

        return ag(outer)(p0)

    def own_aux(p0):
        g = lambda p: ag(lambda x: anp.sum(x * p) ** 2)(xs)  # noqa: E731
        return ag(lambda p: anp.sum(g(p)) + anp.sum((xs * p) ** 2))(p0)

    sin = lambda x, p: anp.sin(x * p)  # noqa: E731
    grad_sum = lambda p: anp.sum(di.gradient(lambda x: anp.sum(sin(x, p)), A, xs))  # noqa: E731
    own_grad_sum = ag(lambda p: anp.sum(ag(lambda x: anp.sum(sin(x, p)))(xs)))
    return {
        "derivative": (
            ag(lambda x: x * di.derivative(lambda y: x * y, A, 1.0)),
            ag(lambda x: x * ag(lambda y: x * y)(1.0)),
        ),
        "FixedParams reverse_over_reverse": (
            fixed("reverse_over_reverse"),
            ag(lambda p: anp.sum(ag(lambda x: model(x, p))(xs) ** 2)),
        ),
        "has_aux": (with_aux, own_aux),
        "hessian": (
            ag(lambda p: anp.sum(di.hessian(lambda x: anp.sum(sin(x, p)), A, xs))),
            ag(lambda p: anp.sum(autograd.hessian(lambda x: anp.sum(sin(x, p)))(xs))),
        ),
        "jvp": (
            ag(lambda p: anp.sum(di.jvp(lambda x: sin(x, p), A, xs, xs))),
            ag(lambda p: anp.sum(make_jvp(lambda x: sin(x, p), xs)(xs)[1])),
        ),
        "jacobian": (
            ag(lambda p: anp.sum(di.jacobian(lambda x: sin(x, p), A, xs))),
            ag(lambda p: anp.sum(autograd.jacobian(lambda x: sin(x, p))(xs))),
        ),
        "diffiface over diffiface": (lambda p: di.derivative(grad_sum, A, p), own_grad_sum),
        "inside autograd's make_jvp": (lambda p: make_jvp(grad_sum, p)(1.0)[1], own_grad_sum),
    }


@pytest.mark.skipif(not HAVE["autograd"], reason="autograd missing")
@pytest.mark.parametrize(
    "case",
    [
        "derivative",
        "FixedParams reverse_over_reverse",
        "has_aux",
        "hessian",
        "jvp",
        "jacobian",
        "diffiface over diffiface",
        "inside autograd's make_jvp",
    ],
)
def test_autograd_nesting_in_threads(case):
    """diffiface's traces took autograd's process-wide trace count, which other threads
    move: an inner trace numbered at or below the outer one (wrong results,
    AttributeErrors, a false DisconnectedWarning). A short switch interval makes the
    threads interleave inside every call. Reference: autograd's own nesting, computed on
    this thread before the others start."""
    import sys

    ours, own = _nested_autograd_cases()[case]
    points = [0.5 + 0.1 * i for i in range(8)]
    want = [own(p) for p in points]
    wrong = []

    def work():
        for _ in range(25):
            for p, w in zip(points, want, strict=True):
                if not np.allclose(ours(p), w, rtol=1e-12, atol=1e-12):
                    wrong.append(p)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        errors = _threads(work)  # warnings are errors under pytest: they count too
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert wrong == []


def _scaled_chain(scale):
    """A closure made anew per call: its code's sparse plan is kept, and each call runs
    it on its own f."""

    def f(x):
        xp = array_namespace(x)
        return scale * xp.sin(x[1:] * x[:-1])

    return f


def _dense(a):
    for name in ("todense", "to_dense", "toarray"):
        if hasattr(a, name):
            a = getattr(a, name)()
    return to_numpy(a)


def test_sparse_closures_of_one_code_from_many_threads(backend):
    """Unprepared sparse Jacobians of closures made anew of one code, from 8 threads: the
    code's kept plan ran the call's own f through one slot for every thread, and a
    thread ending its call emptied it under another ("'NoneType' object is not
    callable", torch, 7 of 8 threads). Each call now holds its f in its own thread."""
    x0 = np.linspace(0.1, 1.0, 60)
    c = 2.0 * np.cos(x0[1:] * x0[:-1])
    want = np.zeros((59, 60))
    want[np.arange(59), np.arange(59)] = c * x0[1:]
    want[np.arange(59), np.arange(1, 60)] = c * x0[:-1]
    sparse, x = di.AutoSparse(backend), native(backend, x0)
    tol = tolerance(backend, np.float64)[0]
    np.testing.assert_allclose(_dense(di.jacobian(_scaled_chain(2.0), sparse, x)), want, tol, tol)
    errors = []

    def work():
        try:
            for _ in range(30):
                got = _dense(di.jacobian(_scaled_chain(2.0), sparse, x))
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        except Exception as exc:  # (reported below, with the thread's failure)
            errors.append(repr(exc)[:300])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
