"""The fast paths of the preparation issue: implicit runners for unprepared calls,
direct runners for prepared ones (single arrays, NumPy, pytrees with Constant
contexts), torch's Hessian choice and the square-Jacobian direction. Each test
proves the path it claims was taken (cache counters, or the general path made to
fail) and checks the result against closed forms."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import diffiface as di
from diffiface.core import unprepared as _implicit

X = np.array([0.3, -0.7, 1.1, 0.2])
V = np.array([1.0, 0.5, -2.0, 0.25])


def _sin_grad(x):
    return np.cos(x)


# ----------------------------------------------------------------- implicit
def test_unprepared_jax_calls_skip_the_general_path():
    jax = pytest.importorskip("jax")
    from diffiface.backends.jax.impl import CACHE

    def f(x):
        return jax.numpy.sin(x).sum()

    x, b = jax.numpy.asarray(X), di.AutoJax()
    di.gradient(f, b, x)
    hits = CACHE.hits
    for _ in range(20):
        g = di.gradient(f, b, x)
    assert CACHE.hits == hits  # the general path would look the cache up each time
    assert _implicit.entries(f) == 1
    np.testing.assert_allclose(g, _sin_grad(X), rtol=1e-12)
    # another shape takes the general path (correct), then becomes the entry
    np.testing.assert_allclose(di.gradient(f, b, x[:2]), _sin_grad(X[:2]), rtol=1e-12)
    np.testing.assert_allclose(di.gradient(f, b, x), _sin_grad(X), rtol=1e-12)
    # other backends' settings are other entries' business
    J = di.jacobian(jax.numpy.sin, di.AutoJax(mode="forward"), x)
    np.testing.assert_allclose(J, np.diag(np.cos(X)), rtol=1e-12)
    J = di.jacobian(jax.numpy.sin, di.AutoJax(mode="reverse"), x)
    np.testing.assert_allclose(J, np.diag(np.cos(X)), rtol=1e-12)


def test_implicit_entries_die_with_their_function():
    jax = pytest.importorskip("jax")

    def f(x):
        return (x**3).sum()

    di.value_and_gradient(f, di.AutoJax(), jax.numpy.asarray(X))
    di.hessian(f, di.AutoJax(), jax.numpy.asarray(X))
    assert _implicit.entries(f) == 2
    gc.collect()
    before = len(_implicit.TABLE)
    del f
    gc.collect()
    assert len(_implicit.TABLE) == before - 1


def test_implicit_numpy_in_numpy_out():
    jax = pytest.importorskip("jax")
    from diffiface.backends.jax.impl import CACHE

    def f(x):
        return jax.numpy.sin(x).sum()

    b = di.AutoJax()
    di.gradient(f, b, X)
    di.value_and_gradient(f, b, X)
    hits = CACHE.hits
    y, _ = di.value_and_gradient(f, b, X)
    g = di.gradient(f, b, X)
    np.testing.assert_allclose(y, np.sin(X).sum(), rtol=1e-12)
    assert CACHE.hits == hits
    assert type(g) is np.ndarray and g.dtype == np.float64
    np.testing.assert_allclose(g, _sin_grad(X), rtol=1e-12)
    with jax.enable_x64(False):  # the entry must not truncate float64 silently
        with pytest.raises(ValueError, match="jax_enable_x64"):
            di.gradient(f, b, X)
    x32 = X.astype(np.float32)
    assert di.gradient(f, b, x32).dtype == np.float32


def test_numpy_complex128_entry_without_x64_is_an_error_not_a_truncation():
    jax = pytest.importorskip("jax")

    def f(z):
        return (jax.numpy.abs(z) ** 2).sum()

    z = np.array([3.0 + 4.0j])
    g = di.gradient(f, di.AutoJax(), z)  # enters the implicit runner
    np.testing.assert_allclose(g, [6.0 + 8.0j], rtol=1e-12)  # |z|² -> 2z
    with jax.enable_x64(False), pytest.raises(ValueError, match="jax_enable_x64"):
        di.gradient(f, di.AutoJax(), z)


def test_implicit_path_under_an_outer_transform():
    jax = pytest.importorskip("jax")

    def f(x):
        return (jax.numpy.sin(x) * x).sum()

    x = jax.numpy.asarray(X)
    di.gradient(f, di.AutoJax(), x)  # an entry for concrete arrays
    outer = jax.jit(jax.grad(lambda x: di.gradient(f, di.AutoJax(), x).sum()))
    want = -np.sin(X) * X + 2 * np.cos(X)
    np.testing.assert_allclose(outer(x), want, rtol=1e-12)


# ------------------------------------------------------------ torch direct
def _fail(*args, **kwargs):
    raise AssertionError("the general path ran")


def _torch_general_path_fails(monkeypatch):
    """From here on only direct runners can answer a prepared torch call."""
    from diffiface.backends.torch.impl import TorchImpl

    for name in ("value_and_pullback", "value_and_gradient", "value_and_jvp", "gradient_and_hvp"):
        monkeypatch.setattr(TorchImpl, name, _fail)


def test_torch_prepared_runners(monkeypatch):
    torch = pytest.importorskip("torch")
    b = di.AutoTorch()
    x, v = torch.tensor(X), torch.tensor(V)
    loss = lambda x: (torch.sin(x) * x**2).sum()  # noqa: E731
    field = lambda x: torch.sin(x) * x[0]  # noqa: E731
    g_want = np.cos(X) * X**2 + 2 * X * np.sin(X)
    h_diag = -np.sin(X) * X**2 + 4 * X * np.cos(X) + 2 * np.sin(X)
    J = np.diag(np.cos(X) * X[0])
    J[:, 0] += np.sin(X)

    p_g, p_vjp = di.prepare_gradient(loss, b, x), di.prepare_vjp(field, b, x, v)
    p_jvp, p_hvp = di.prepare_jvp(field, b, x, v), di.prepare_hvp(loss, b, x, v)
    _torch_general_path_fails(monkeypatch)
    np.testing.assert_allclose(di.gradient(loss, b, x, prep=p_g), g_want, rtol=1e-12)
    y, g = di.value_and_gradient(loss, b, x, prep=p_g)
    assert not y.requires_grad and not g.requires_grad
    np.testing.assert_allclose(y.item(), (np.sin(X) * X**2).sum(), rtol=1e-12)
    np.testing.assert_allclose(di.vjp(field, b, x, v, prep=p_vjp), V @ J, rtol=1e-12)
    np.testing.assert_allclose(di.jvp(field, b, x, v, prep=p_jvp), J @ V, rtol=1e-12)
    np.testing.assert_allclose(di.hvp(loss, b, x, v, prep=p_hvp), h_diag * V, rtol=1e-12)
    g, hv = di.gradient_and_hvp(loss, b, x, v, prep=p_hvp)
    np.testing.assert_allclose(g, g_want, rtol=1e-12)
    np.testing.assert_allclose(hv, h_diag * V, rtol=1e-12)


def test_torch_prepared_runners_hand_over():
    """What a direct runner does not handle, the general path does, correctly."""
    torch = pytest.importorskip("torch")
    b = di.AutoTorch()
    x = torch.tensor(X)
    w = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    f = lambda x: (w * torch.sin(x)).sum()  # noqa: E731
    prep = di.prepare_gradient(f, b, x)
    g = di.gradient(f, b, x, prep=prep)  # a closure an outer pass differentiates
    (dw,) = torch.autograd.grad(g.sum(), w)
    np.testing.assert_allclose(dw.item(), np.cos(X).sum(), rtol=1e-12)
    with torch.no_grad():
        np.testing.assert_allclose(di.gradient(f, b, x, prep=prep), 2 * np.cos(X), rtol=1e-12)
    const = lambda x: torch.tensor(3.0, dtype=torch.float64)  # noqa: E731
    with pytest.warns(di.DisconnectedWarning):
        prep = di.prepare_gradient(const, b, x)
    with pytest.warns(di.DisconnectedWarning):  # the general path warns every call
        g = di.gradient(const, b, x, prep=prep)
    assert torch.equal(g, torch.zeros(4, dtype=torch.float64))
    square = lambda x: (x**2).sum()  # noqa: E731
    prep = di.prepare_gradient(square, b, x)
    with pytest.raises(di.MismatchError):  # another function
        di.gradient(lambda x: (x**2).sum(), b, x, prep=prep)
    scalar = [True]
    g = lambda x: (x**2).sum() if scalar[0] else x**2  # noqa: E731
    prep = di.prepare_gradient(g, b, x)
    scalar[0] = False
    with pytest.raises(ValueError, match="scalar"):  # the general path explains
        di.gradient(g, b, x, prep=prep)


# ----------------------------------------------------- pytrees with contexts
def _mlp_case(ns, asarray):
    p = {"w": asarray(np.array([[0.5, -1.0], [0.3, 0.8]])), "b": asarray(np.array([0.1, -0.2]))}
    batch = (asarray(np.array([[1.0, 2.0], [-1.0, 0.5]])), asarray(np.array([0.3, -0.4])))

    def loss(p, batch):
        x, y = batch
        return ((ns.tanh(x @ p["w"] + p["b"]).sum(1) - y) ** 2).sum()

    return p, batch, loss


def _mlp_reference(p, batch):
    w, b = np.asarray(p["w"]), np.asarray(p["b"])
    x, y = (np.asarray(a) for a in batch)
    h = np.tanh(x @ w + b)
    r = h.sum(1) - y
    dz = (2 * r)[:, None] * (1 - h**2)
    return {"w": x.T @ dz, "b": dz.sum(0)}


def test_prepared_pytree_with_constant_jax(monkeypatch):
    jax = pytest.importorskip("jax")
    from diffiface.backends.jax.impl import JaxImpl

    p, batch, loss = _mlp_case(jax.numpy, jax.numpy.asarray)
    b = di.AutoJax()
    prep = di.prepare_gradient(loss, b, p, di.Constant(batch))
    monkeypatch.setattr(JaxImpl, "gradient", _fail)
    monkeypatch.setattr(JaxImpl, "value_and_gradient", _fail)
    batch2 = tuple(a * 0.5 for a in batch)
    g = di.gradient(loss, b, p, di.Constant(batch2), prep=prep)
    want = _mlp_reference(p, batch2)
    assert set(g) == {"w", "b"}
    for k in g:
        np.testing.assert_allclose(g[k], want[k], rtol=1e-10)
    monkeypatch.undo()
    _, g = di.value_and_gradient(loss, b, p, di.Constant(batch2), prep=prep)  # the sibling
    np.testing.assert_allclose(g["w"], want["w"], rtol=1e-10)
    with pytest.raises(di.MismatchError, match="numpy float64"):  # the kind is prepared too
        di.gradient(loss, b, p, di.Constant(tuple(np.asarray(a) for a in batch2)), prep=prep)
    with pytest.raises(di.MismatchError, match="contexts"):
        di.gradient(loss, b, p, di.Constant((batch2[0][:1], batch2[1][:1])), prep=prep)
    with pytest.raises(di.MismatchError, match=r"x +MISMATCH.*float32"):
        di.gradient(loss, b, {**p, "b": p["b"].astype("float32")}, di.Constant(batch), prep=prep)


def test_prepared_pytree_with_constant_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    p, batch, loss = _mlp_case(torch, torch.tensor)
    b = di.AutoTorch()
    prep = di.prepare_gradient(loss, b, p, di.Constant(batch))
    _torch_general_path_fails(monkeypatch)
    batch2 = tuple(a * 0.5 for a in batch)
    g = di.gradient(loss, b, p, di.Constant(batch2), prep=prep)
    want = _mlp_reference(p, batch2)
    for k in g:
        assert not g[k].requires_grad
        np.testing.assert_allclose(g[k], want[k], rtol=1e-10)
    xb = batch2[0].clone().requires_grad_()  # a Constant an outer pass differentiates
    g = di.gradient(loss, b, p, di.Constant((xb, batch2[1])), prep=prep)
    assert g["w"].requires_grad  # attached, so the outer pass sees through
    np.testing.assert_allclose(g["w"].detach(), want["w"], rtol=1e-10)


# ------------------------------------------------------- direction choices
def test_torch_hessian_formulation_is_chosen_on_the_first_calls():
    """Preparation's run and the next five calls time each way in turn (see
    tests/backends/test_torch_hessian_way.py); then the way chosen is the way taken."""
    torch = pytest.importorskip("torch")
    b, x = di.AutoTorch(), torch.tensor(X)
    f = lambda x: (torch.sin(x) * x**2).sum()  # noqa: E731
    want = np.diag(-np.sin(X) * X**2 + 4 * X * np.cos(X) + 2 * np.sin(X))
    prep = di.prepare_hessian(f, b, x)
    prob = prep._probs["hessian"]
    assert prob.fns["hessian way"] not in ("func", "batched")  # still timing
    for _ in range(5):
        np.testing.assert_allclose(di.hessian(f, b, x, prep=prep), want, rtol=1e-12)
    assert prob.fns["hessian way"] in ("func", "batched")
    real_hessian = torch.func.hessian
    for way in ("func", "batched"):
        prob.fns["hessian way"] = way
        calls = []
        torch.func.hessian = lambda *a, calls=calls, **k: calls.append(1) or real_hessian(*a, **k)
        try:
            np.testing.assert_allclose(di.hessian(f, b, x, prep=prep), want, rtol=1e-12)
        finally:
            torch.func.hessian = real_hessian
        assert bool(calls) == (way == "func"), way  # the way set is the way taken
    np.testing.assert_allclose(di.hessian(f, b, x), want, rtol=1e-12)


def test_square_jacobians_go_reverse(monkeypatch):
    torch = pytest.importorskip("torch")
    x = torch.tensor(X)
    f = lambda x: torch.sin(x) * x.sum()  # noqa: E731
    want = np.diag(np.cos(X) * X.sum()) + np.sin(X)[:, None]

    def forward(*args, **kwargs):
        raise AssertionError("forward mode ran")

    monkeypatch.setattr(torch.func, "jacfwd", forward)
    np.testing.assert_allclose(di.jacobian(f, di.AutoTorch(), x), want, rtol=1e-12)
    with pytest.raises(AssertionError, match="forward mode ran"):  # one more output
        di.jacobian(lambda x: torch.cat([f(x), x[:1]]), di.AutoTorch(), x)


def test_jax_prepared_vjp_goes_to_the_compiled_function(monkeypatch):
    jax = pytest.importorskip("jax")
    from diffiface.backends.jax.impl import JaxImpl

    b, x, w = di.AutoJax(), jax.numpy.asarray(X), jax.numpy.asarray(V[:2])
    f = lambda x: jax.numpy.sin(x[:2]) * x[2]  # noqa: E731
    prep = di.prepare_vjp(f, b, x, w)
    monkeypatch.setattr(JaxImpl, "value_and_vjp", _fail)
    want = np.zeros(4)
    want[:2] = V[:2] * np.cos(X[:2]) * X[2]
    want[2] = (V[:2] * np.sin(X[:2])).sum()
    np.testing.assert_allclose(di.vjp(f, b, x, w, prep=prep), want, rtol=1e-12)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="w"):  # a cotangent unlike f(x): explained
        di.vjp(f, b, x, jax.numpy.asarray(V[:3]), prep=prep)


def test_unprepared_jax_pytree_calls_skip_the_general_path():
    jax = pytest.importorskip("jax")
    from diffiface.backends.jax.impl import CACHE

    p, batch, loss = _mlp_case(jax.numpy, jax.numpy.asarray)
    b = di.AutoJax()
    di.gradient(loss, b, p, di.Constant(batch))
    hits = CACHE.hits
    batch2 = tuple(a * 0.5 for a in batch)
    g = di.gradient(loss, b, p, di.Constant(batch2))
    assert CACHE.hits == hits  # answered by the implicit runner
    want = _mlp_reference(p, batch2)
    for k in g:
        np.testing.assert_allclose(g[k], want[k], rtol=1e-10)
    # another context shape, or NumPy context leaves: the general path, same numbers
    half = (batch2[0][:1], batch2[1][:1])
    np.testing.assert_allclose(
        di.gradient(loss, b, p, di.Constant(half))["w"], _mlp_reference(p, half)["w"], rtol=1e-10
    )
    numpy_batch = tuple(np.asarray(a) for a in batch2)
    np.testing.assert_allclose(
        di.gradient(loss, b, p, di.Constant(numpy_batch))["w"], want["w"], rtol=1e-10
    )
    assert CACHE.hits > hits
    gc.collect()
    before = len(_implicit.TABLE)
    del loss
    gc.collect()
    assert len(_implicit.TABLE) == before - 1


@pytest.mark.parametrize("shape", [(4, 2), (2, 4)], ids=["reverse", "forward"])
def test_torch_prepared_jacobian_runner(monkeypatch, shape):
    torch = pytest.importorskip("torch")
    from diffiface.backends.torch.impl import TorchImpl

    n, m = shape
    A = np.arange(1.0, n * m + 1).reshape(m, n) / 10
    At, b = torch.tensor(A), di.AutoTorch()
    x = torch.tensor(X[:n])
    f = lambda x: torch.tanh(At @ x)  # noqa: E731
    prep = di.prepare_jacobian(f, b, x)
    monkeypatch.setattr(TorchImpl, "_jacobian", _fail)
    want = (1 - np.tanh(A @ X[:n]) ** 2)[:, None] * A
    np.testing.assert_allclose(di.jacobian(f, b, x, prep=prep), want, rtol=1e-12)
    monkeypatch.undo()
    g = lambda x: torch.tanh(At @ x.mul_(1.0))  # noqa: E731  (writes to its input)
    before = x.clone()
    if n > m:  # reverse: torch refuses the in-place op on its leaf, and diffiface says so
        with pytest.raises(ValueError, match="changes its input in place"):
            di.prepare_jacobian(g, b, x)
    else:  # forward: f writes to a copy
        prep = di.prepare_jacobian(g, b, x)
        np.testing.assert_allclose(di.jacobian(g, b, x, prep=prep), want, rtol=1e-12)
    assert torch.equal(x, before)


def test_review_of_the_fast_paths():
    """Found in review: a chunked call must not leave a runner for plain calls; strict
    must hold for an f JAX compiled before; an outer non-leaf x must not be changed."""
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    jnp = jax.numpy
    x = jnp.asarray([0.3, -0.7, 1.1])

    def f(x):
        return jnp.sin(x) * x.sum()

    want = np.diag(np.cos(x) * float(x.sum())) + np.sin(np.asarray(x))[:, None]
    np.testing.assert_allclose(di.jacobian(f, di.AutoJax(), x, chunk_size=2), want, rtol=1e-12)
    np.testing.assert_allclose(di.jacobian(f, di.AutoJax(), x), want, rtol=1e-12)
    np.testing.assert_allclose(di.jacobian(f, di.AutoJax(), x), want, rtol=1e-12)

    def const(x):
        return jnp.asarray(2.0) * 1.0

    with pytest.warns(di.DisconnectedWarning):
        di.gradient(const, di.AutoJax(), x)
    with di.options(strict=True), pytest.raises(ValueError, match="does not depend on x"):
        di.gradient(const, di.AutoJax(), x)

    p = torch.ones(3, dtype=torch.float64, requires_grad=True)
    xt = p * 2  # a non-leaf an outer pass differentiates
    g = di.gradient(lambda v: v.mul_(2).sum(), di.AutoTorch(), xt)  # f gets a copy
    np.testing.assert_array_equal(g.detach().numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(xt.detach().numpy(), [2.0, 2.0, 2.0])
