"""Bridges between frameworks: differentiate_with, operators on another framework's
arrays, and second_order(outer, inner) of two frameworks.

References: the same math written in one framework (JAX, float64) and central finite
differences in float64. AD backends agree with it to 1e-10; a finite-differences inner
backend to 1e-6 at first order and 1e-4 at second order (differences of differences);
an MLX inner backend to 1e-6 (MLX's float64 sin and cos are float32-accurate: relative
errors up to 1.1e-7 measured on mlx 0.32.4).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest
from helpers import HAVE

import diffiface as di

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
anp = pytest.importorskip("autograd.numpy")
autograd = pytest.importorskip("autograd")
jnp = jax.numpy

X0 = np.linspace(0.1, 1.0, 4)
V0 = np.array([1.0, -0.5, 0.25, 2.0])
OPS = {"jax": jnp, "torch": torch, "autograd": anp, "fd": np}
BACKENDS = {
    "jax": di.AutoJax(),
    "torch": di.AutoTorch(),
    "autograd": di.AutoAutograd(),
    "fd": di.AutoFiniteDifferences(),
}


def _f(xp):
    return lambda x: xp.sin(x) * xp.sum(x**2)


def _loss(xp, inner):
    return lambda x: xp.sum(inner(x) ** 3)


REF_GRAD = np.asarray(jax.grad(_loss(jnp, _f(jnp)))(X0))
REF_HESS = np.asarray(jax.hessian(_loss(jnp, _f(jnp)))(X0))


if HAVE["mlx"]:
    import mlx.core as mx

    OPS["mlx"], BACKENDS["mlx"] = mx, di.AutoMLX()


def _tol(inner, order):
    if inner == "mlx":
        return 1e-6
    return {1: 1e-6, 2: 1e-4}[order] if inner == "fd" else 1e-10


def _pairs():
    out = []
    no_mlx = pytest.mark.skipif(not HAVE["mlx"], reason="mlx missing")
    for outer in ("jax", "torch", "autograd", "mlx"):
        for inner in ("jax", "torch", "autograd", "fd", "mlx"):
            if inner != outer:
                marks = no_mlx if "mlx" in (inner, outer) else ()
                out.append(pytest.param(outer, inner, id=f"{inner}-inside-{outer}", marks=marks))
    return out


def _mlx_derivatives(loss):
    """mx.grad, and the Hessian two ways: mx.jvp of mx.grad (forward over reverse) and
    mx.vjp of mx.grad (reverse over reverse), each vmapped over the basis."""
    x = mx.array(X0, dtype=mx.float64)
    grad = mx.grad(loss)
    eye = mx.eye(len(X0), dtype=mx.float64)
    fwd = mx.vmap(lambda v: mx.jvp(grad, [x], [v])[1][0])(eye)
    rev = mx.vmap(lambda w: mx.vjp(grad, [x], [w])[1][0])(eye)
    np.testing.assert_allclose(np.asarray(fwd), np.asarray(rev), rtol=1e-4, atol=1e-4)
    return np.asarray(grad(x)), np.asarray(fwd)


def _outer_derivatives(outer, loss):
    """(gradient, Hessian) by the outer framework's own transforms, as NumPy."""
    if outer == "jax":
        return np.asarray(jax.grad(loss)(X0)), np.asarray(jax.hessian(loss)(X0))
    if outer == "torch":
        x = torch.tensor(X0, requires_grad=True)
        (g,) = torch.autograd.grad(loss(x), x, create_graph=True)
        h = torch.func.hessian(loss)(torch.tensor(X0))
        return g.detach().numpy(), h.numpy()
    if outer == "mlx":
        return _mlx_derivatives(loss)
    return autograd.grad(loss)(X0), autograd.hessian(loss)(X0)


@pytest.mark.parametrize(("outer", "inner"), _pairs())
def test_first_and_second_order_across_every_ordered_pair(outer, inner):
    bridged = di.differentiate_with(_f(OPS[inner]), BACKENDS[inner])
    g, h = _outer_derivatives(outer, _loss(OPS[outer], bridged))
    np.testing.assert_allclose(g, REF_GRAD, rtol=_tol(inner, 1), atol=_tol(inner, 1))
    np.testing.assert_allclose(h, REF_HESS, rtol=_tol(inner, 2), atol=_tol(inner, 2))


@pytest.mark.parametrize("inner", ["torch", "autograd", "fd"])
def test_jax_transforms_compose_over_a_bridged_call(inner):
    """jit, vmap, jvp, reverse-over-reverse and forward-over-reverse, also jitted."""
    loss = _loss(jnp, di.differentiate_with(_f(OPS[inner]), BACKENDS[inner]))
    tol1, tol2 = _tol(inner, 1), _tol(inner, 2)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(X0), REF_GRAD, rtol=tol1, atol=tol1)
    np.testing.assert_allclose(jax.jit(jax.hessian(loss))(X0), REF_HESS, rtol=tol2, atol=tol2)
    rr = jax.jacrev(jax.jacrev(loss))(X0)
    np.testing.assert_allclose(rr, REF_HESS, rtol=tol2, atol=tol2)
    _, t = jax.jvp(loss, (X0,), (V0,))
    np.testing.assert_allclose(t, REF_GRAD @ V0, rtol=tol1)
    batch = jax.vmap(jax.grad(loss))(jnp.stack([X0, X0]))
    np.testing.assert_allclose(batch, np.stack([REF_GRAD, REF_GRAD]), rtol=tol1, atol=tol1)


def test_torch_func_transforms_compose_over_a_bridged_jax_call():
    loss = _loss(torch, di.differentiate_with(_f(jnp), di.AutoJax()))
    x = torch.tensor(X0)
    np.testing.assert_allclose(torch.func.grad(loss)(x).numpy(), REF_GRAD, rtol=1e-10)
    rr = torch.func.jacrev(torch.func.jacrev(loss))(x)
    np.testing.assert_allclose(rr.numpy(), REF_HESS, rtol=1e-10, atol=1e-10)
    batch = torch.func.vmap(torch.func.grad(loss))(torch.stack([x, x]))
    np.testing.assert_allclose(batch.numpy(), np.stack([REF_GRAD, REF_GRAD]), rtol=1e-10)
    _, t = torch.func.jvp(loss, (x,), (torch.tensor(V0),))
    np.testing.assert_allclose(float(t), REF_GRAD @ V0, rtol=1e-10)


def test_bridged_call_against_central_differences():
    """An independent check of the JAX reference itself, in float64."""
    loss = _loss(torch, di.differentiate_with(_f(jnp), di.AutoJax()))
    h = 1e-6
    fd = [
        (float(loss(torch.tensor(X0 + h * e))) - float(loss(torch.tensor(X0 - h * e)))) / (2 * h)
        for e in np.eye(4)
    ]
    x = torch.tensor(X0, requires_grad=True)
    (g,) = torch.autograd.grad(loss(x), x)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6)


def test_dtype_kind_and_pytree_structure_are_kept():
    def model(p, x):
        return {"y": jnp.tanh(p["w"] * x), "s": (p["w"] ** 2).sum()}

    bridged = di.differentiate_with(model, di.AutoJax())
    p = {"w": torch.ones(3, dtype=torch.float32)}
    out = bridged(p, torch.arange(3, dtype=torch.float32))
    assert set(out) == {"y", "s"}
    assert out["y"].dtype == torch.float32 and isinstance(out["s"], torch.Tensor)
    np.testing.assert_allclose(out["y"].numpy(), np.tanh(np.arange(3.0)), rtol=1e-6)


@pytest.mark.parametrize("structured", [False, True])
def test_array_arguments_seen_before_keep_shapes_values_and_output_structure(structured):
    """The second call with the same argument types takes the path without pytree
    flattening; new shapes and an output pytree still come out right, with gradients."""

    def f(x, y):
        out = jnp.sin(x) * y.sum()
        return {"out": out, "sum": out.sum()} if structured else out

    bridged = di.differentiate_with(f, di.AutoJax())
    for n in (3, 3, 5):
        x = torch.linspace(0.1, 1.0, n, dtype=torch.float32, requires_grad=True)
        y = torch.arange(n, dtype=torch.float32)
        got = bridged(x, y)
        out = got["out"] if structured else got
        want = torch.sin(x) * y.sum()
        torch.testing.assert_close(out, want)
        (g,) = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(g, torch.cos(x) * y.sum())
        if structured:
            assert set(got) == {"out", "sum"}
    assert len(bridged._arrays) == 1  # one entry for (Tensor, Tensor)


def test_no_copy_on_the_cpu_path():
    from diffiface.backends.autograd.bridge import to_numpy
    from diffiface.backends.jax.bridge import Kit as JaxKit
    from diffiface.backends.torch.bridge import to_torch

    t = torch.ones(1000)
    assert JaxKit.to_inner(t).ctypes.data == t.data_ptr()  # a view jit takes as it is
    a = jnp.ones(1000)
    assert to_torch(a).data_ptr() == a.unsafe_buffer_pointer()
    assert to_numpy(a).ctypes.data == a.unsafe_buffer_pointer()
    assert to_numpy(t).ctypes.data == t.data_ptr()


def test_repeated_calls_reuse_one_node_and_one_compilation():
    bridged = di.differentiate_with(lambda x: jnp.sin(x), di.AutoJax())
    for _ in range(3):
        bridged(torch.ones(3))
    assert len(bridged._nodes) == 1
    (node,) = bridged._nodes.values()
    assert node.fn._cache_size() == 1


@pytest.mark.parametrize("inner", ["torch", "autograd"])
def test_jax_transposes_a_batched_jvp_of_a_bridged_call(inner):
    """The general transpose of a node (here vmap of a jvp, which is not the plain jvp):
    the transpose of v -> J v is w -> Jᵀ w, checked against the all-JAX Jacobian."""
    b = di.differentiate_with(_f(OPS[inner]), BACKENDS[inner])
    lin = jax.vmap(lambda v: jax.jvp(b, (X0,), (v,))[1])
    ws = jnp.stack([V0, 2 * V0])
    (got,) = jax.linear_transpose(lin, ws)(ws)
    jac = jax.jacobian(_f(jnp))(X0)
    np.testing.assert_allclose(got, ws @ jac, rtol=1e-10)  # rows Jᵀ w


def test_unused_outputs_and_inputs_without_grad_under_torch():
    def two(x, c):
        return jnp.sin(x) * c, jnp.cos(x)

    b = di.differentiate_with(two, di.AutoJax())
    x = torch.tensor(X0, requires_grad=True)
    c = torch.tensor(3.0, dtype=torch.float64)  # no grad wanted
    s, _ = b(x, c)  # the second output is not used: its cotangent is None
    (g,) = torch.autograd.grad(s.sum(), x)
    np.testing.assert_allclose(g.numpy(), 3 * np.cos(X0), rtol=1e-12)


def test_python_scalars_are_constants_and_the_node_table_is_bounded(monkeypatch):
    from diffiface.bridge import node as _bridge

    monkeypatch.setattr(_bridge, "MAX_NODES", 8)  # the same eviction, 13 calls instead of 69
    b = di.differentiate_with(lambda x, k: jnp.sum(k * x**2), di.AutoJax())
    x = torch.tensor(X0, requires_grad=True)
    for k in range(_bridge.MAX_NODES + 5):
        (g,) = torch.autograd.grad(b(x, float(k)), x)
        np.testing.assert_allclose(g.numpy(), 2 * k * X0, rtol=1e-12)
    assert len(b._nodes) == _bridge.MAX_NODES


def test_dtypes_and_devices_as_leaves_are_not_arrays():
    b = di.differentiate_with(lambda x, dtype: x.to(dtype) * 2, di.AutoTorch())
    out = b(jnp.asarray(X0), torch.float64)
    np.testing.assert_allclose(np.asarray(out), 2 * X0)


# ---- operators on another framework's arrays, and nested rules across frameworks --------------


def _model(xp):
    def model(x, p):
        return xp.sum(xp.tanh(p["W"] @ x + p["b"]) ** 2)

    return model


RNG = np.random.default_rng(0)
W, B, XS = RNG.normal(size=(5, 3)), RNG.normal(size=5), RNG.normal(size=3)


def _nested_loss(model, backend):
    def loss(x, p):
        g = di.gradient(di.FixedParams(model, p), backend, x)
        return (g**2).sum()

    return loss


def _reference_nested():
    loss = _nested_loss(_model(jnp), di.AutoJax())
    p = {"W": jnp.asarray(W), "b": jnp.asarray(B)}
    return jax.grad(loss, argnums=(0, 1))(jnp.asarray(XS), p)


@pytest.mark.parametrize("strategy", ["auto", "forward_over_reverse"])
def test_jax_inner_gradient_of_fixed_params_inside_a_torch_loss(strategy):
    def loss(x, p):
        g = di.gradient(di.FixedParams(_model(jnp), p, strategy), di.AutoJax(), x)
        return (g**2).sum()

    x = torch.tensor(XS, requires_grad=True)
    p = {"W": torch.tensor(W, requires_grad=True), "b": torch.tensor(B, requires_grad=True)}
    di.nested_rule_counts(reset=True)
    gx, gw, gb = torch.autograd.grad(loss(x, p), [x, p["W"], p["b"]])
    rx, rp = _reference_nested()
    np.testing.assert_allclose(gx.numpy(), rx, rtol=1e-10)
    np.testing.assert_allclose(gw.numpy(), rp["W"], rtol=1e-10)
    np.testing.assert_allclose(gb.numpy(), rp["b"], rtol=1e-10)
    counts = di.nested_rule_counts()
    want = "forward_over_reverse" if strategy != "auto" else "reverse_over_reverse"
    assert counts.get(("jax", "gradient", want), 0) >= 1  # JAX ran the rule inside


def test_torch_inner_gradient_of_fixed_params_inside_a_jax_loss():
    loss = _nested_loss(_model(torch), di.AutoTorch())
    p = {"W": jnp.asarray(W), "b": jnp.asarray(B)}
    gx, gp = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(XS), p)
    rx, rp = _reference_nested()
    np.testing.assert_allclose(gx, rx, rtol=1e-10)
    np.testing.assert_allclose(gp["W"], rp["W"], rtol=1e-10)


def test_operators_on_another_frameworks_arrays_return_that_framework():
    x = torch.tensor(XS)
    jv = di.jvp(lambda t: jnp.sin(t), di.AutoJax(), x, torch.ones(3, dtype=torch.float64))
    assert isinstance(jv, torch.Tensor)
    np.testing.assert_allclose(jv.numpy(), np.cos(XS), rtol=1e-12)
    h = di.hessian(lambda t: (t**3).sum(), di.AutoTorch(), jnp.asarray(XS))
    assert isinstance(h, jax.Array)
    np.testing.assert_allclose(h, np.diag(6 * XS), rtol=1e-12)


def test_operators_crossing_for_many_functions_keep_a_bounded_cache(monkeypatch):
    """A crossing operator's graph holds its f (its derivatives run after the call
    returns, when a lambda made inside a loss is gone); the cache holds it weakly (its
    entries die with the functions) and is bounded while they live."""
    from diffiface.bridge import operators as _bridge_ops

    monkeypatch.setattr(_bridge_ops._CACHE, "_functions", 4)  # the same eviction, sooner
    fs = []
    for k in range(_bridge_ops._CACHE._functions + 8):
        fs.append(lambda t, k=k: k * (t**2).sum())
        x = torch.tensor(XS, requires_grad=True)
        g = di.gradient(fs[-1], di.AutoJax(), x)
        (h,) = torch.autograd.grad(g.sum(), x)
        np.testing.assert_allclose(h.numpy(), 2.0 * k, rtol=1e-12)
    assert len(_bridge_ops._CACHE) == _bridge_ops._CACHE._functions
    del fs, g  # g's graph holds the last f
    gc.collect()
    assert len(_bridge_ops._CACHE) == 0


def test_prepare_with_another_frameworks_arrays_is_an_error():
    with pytest.raises(di.DiffifaceValueError, match=r"prepare_gradient.*without prep="):
        di.prepare_gradient(lambda t: (t**2).sum(), di.AutoJax(), torch.ones(3))


def test_prep_with_another_frameworks_arrays_is_an_error():
    prep = di.prepare_gradient(lambda t: (t**2).sum(), di.AutoJax(), jnp.ones(3))
    with pytest.raises(di.DiffifaceValueError, match="without prep"):
        di.gradient(lambda t: (t**2).sum(), di.AutoJax(), torch.ones(3), prep=prep)


def test_tangents_across_frameworks_is_an_error_that_says_what_to_do():
    with pytest.raises(di.DiffifaceValueError, match="pass one tangent per call"):
        di.jvp(jnp.sin, di.AutoJax(), torch.ones(2), di.Tangents(torch.ones(2), torch.ones(2)))


# ---- second_order(outer, inner) of two frameworks ----------------------------------------------


@pytest.mark.parametrize(
    "outer", [di.AutoJax(mode="forward"), di.AutoJax(mode="reverse"), di.AutoAutograd()]
)
def test_second_order_with_an_outer_of_another_framework(outer):
    b = di.second_order(outer, di.AutoTorch())
    f = _loss(torch, _f(torch))
    hv = di.hvp(f, b, torch.tensor(X0), torch.tensor(V0))
    assert isinstance(hv, torch.Tensor)
    np.testing.assert_allclose(hv.numpy(), REF_HESS @ V0, rtol=1e-10)
    np.testing.assert_allclose(di.hessian(f, b, torch.tensor(X0)).numpy(), REF_HESS, rtol=1e-10)
    g, hv2 = di.gradient_and_hvp(f, b, X0, V0)  # NumPy in, NumPy out
    assert isinstance(hv2, np.ndarray)
    np.testing.assert_allclose(g, REF_GRAD, rtol=1e-10)
    np.testing.assert_allclose(hv2, REF_HESS @ V0, rtol=1e-10)
    y, g2, h = di.value_gradient_and_hessian(f, b, torch.tensor(X0))
    np.testing.assert_allclose(float(y), float(f(torch.tensor(X0))), rtol=1e-12)
    np.testing.assert_allclose(g2.numpy(), REF_GRAD, rtol=1e-10)
    np.testing.assert_allclose(h.numpy(), REF_HESS, rtol=1e-10)


def test_second_derivative_with_torch_over_jax():
    b = di.second_order(di.AutoTorch(), di.AutoJax())
    d2 = di.second_derivative(lambda t: jnp.sin(t) * t, b, np.array(0.5))
    np.testing.assert_allclose(d2, -np.sin(0.5) * 0.5 + 2 * np.cos(0.5), rtol=1e-12)


# ---- errors -------------------------------------------------------------------------------------


def test_arrays_on_different_devices_are_an_error():
    bridged = di.differentiate_with(lambda a, b: a + b, di.AutoJax())
    with pytest.raises(di.DiffifaceValueError, match=r"cpu, meta.*tensor\.to\(device\)"):
        bridged(torch.ones(2), torch.ones(2, device="meta"))


def test_arrays_of_two_frameworks_in_one_call_are_an_error():
    bridged = di.differentiate_with(lambda a, b: a + b, di.AutoAutograd())
    with pytest.raises(di.DiffifaceTypeError, match="arrays of one framework"):
        bridged(torch.ones(2), jnp.ones(2))


def test_float64_into_jax_without_x64_is_an_error():
    bridged = di.differentiate_with(jnp.sin, di.AutoJax())
    with jax.enable_x64(False), pytest.raises(di.DiffifaceValueError, match="jax_enable_x64"):
        bridged(torch.ones(2, dtype=torch.float64))


def test_differentiate_with_checks_its_arguments():
    with pytest.raises(di.DiffifaceTypeError, match="first-order backend"):
        di.differentiate_with(jnp.sin, di.second_order(di.AutoJax(), di.AutoJax()))
    with pytest.raises(di.DiffifaceTypeError, match="f must be callable"):
        di.differentiate_with(3, di.AutoJax())


@pytest.mark.skipif(not HAVE["torch"], reason="torch missing")
def test_a_bridged_call_whose_framework_is_missing_names_the_extra():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, diffiface as di\n"
        "import autograd.numpy as anp, autograd\n"
        "b = di.differentiate_with(lambda x: x * 2, di.AutoTorch())\n"
        "try:\n"
        "    autograd.grad(lambda x: anp.sum(b(x)))(np.ones(2))\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "FrameworkMissingError" in out.stdout and 'pip install "diffiface[torch]"' in out.stdout


# ---- the seeds' PINN-style loss: a JAX model trained by a torch optimizer ----------------------


def _pinn_loss(model, backend, x, p):
    """Fit u(x) = model(x, p) to u' = cos x via an inner gradient, plus u(0) = 0."""
    du = torch.stack([di.gradient(di.FixedParams(model, p), backend, xi) for xi in x])
    u0 = di.differentiate_with(model, backend)(torch.zeros((), dtype=x.dtype), p)
    return ((du - torch.cos(x)) ** 2).mean() + u0**2


def _train(model, backend, steps=15):
    torch.manual_seed(0)
    p = {
        "w": torch.randn(8, dtype=torch.float64, requires_grad=True),
        "a": torch.randn(8, dtype=torch.float64, requires_grad=True),
    }
    opt = torch.optim.Adam(p.values(), lr=0.05)
    x = torch.linspace(-1, 1, 6, dtype=torch.float64)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = _pinn_loss(model, backend, x, p)
        loss.backward()
        opt.step()
        losses.append(loss.item() if not loss.requires_grad else float(loss.detach()))
    return losses


def test_pinn_with_a_jax_inner_model_trains_like_the_all_torch_version():
    def jax_model(x, p):
        return jnp.sum(p["a"] * jnp.tanh(p["w"] * x))

    def torch_model(x, p):
        return torch.sum(p["a"] * torch.tanh(p["w"] * x))

    bridged = _train(jax_model, di.AutoJax())
    native = _train(torch_model, di.AutoTorch())
    np.testing.assert_allclose(bridged, native, rtol=1e-9)
    assert bridged[-1] < 0.5 * bridged[0]


X = np.array([0.5, -1.2, 2.0])


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_a_bridged_functions_plain_table_is_bounded():
    import jax.numpy as jnp
    import torch

    from diffiface.bridge import node as _bridge

    layer = di.differentiate_with(
        lambda d: sum(torch.sin(v).sum() for v in d.values()), di.AutoTorch()
    )
    for i in range(_bridge.MAX_NODES + 20):
        d = {f"k{i}": jnp.asarray(X)}
        np.testing.assert_allclose(float(layer(d)), np.sin(X).sum(), rtol=1e-12)
    assert len(layer._plain) <= _bridge.MAX_NODES


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_bridges_take_python_floats():
    import jax
    import torch

    layer = di.differentiate_with(lambda x: torch.sin(x) * 2, di.AutoTorch())
    assert float(jax.grad(layer)(1.0)) == pytest.approx(2 * np.cos(1.0), rel=1e-12)
    numpy_layer = di.differentiate_with(lambda x: np.sin(x) * 2, di.AutoFiniteDifferences())
    assert float(jax.grad(numpy_layer)(1.0)) == pytest.approx(2 * np.cos(1.0), rel=1e-8)

    def inner_fd(p):
        fixed = di.FixedParams(lambda t, p: (p * np.sin(t)).sum(), p)
        return di.gradient(fixed, di.AutoFiniteDifferences(), 0.5)

    assert float(jax.grad(inner_fd)(1.0)) == pytest.approx(np.cos(0.5), rel=1e-6)

    def inner_torch(p):
        fixed = di.FixedParams(lambda t, p: (p * torch.sin(t)).sum(), p)
        return di.gradient(fixed, di.AutoTorch(), 0.5)

    # a Python float x takes torch's default dtype (float32)
    assert float(jax.grad(inner_torch)(1.0)) == pytest.approx(np.cos(0.5), rel=1e-6)


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="jax and torch needed")
def test_a_bridged_closure_dies_with_its_graph():
    """An operator on another framework's arrays: its graph holds f (a derivative runs
    after the call returns), and once the graph is gone nothing does."""

    import jax.numpy as jnp
    import torch

    def call():
        big = torch.ones(1000, dtype=torch.float64)
        g = di.gradient(lambda x: (torch.sin(x) * big[:3]).sum(), di.AutoTorch(), jnp.asarray(X))
        np.testing.assert_allclose(np.asarray(g), np.cos(X), rtol=1e-12)
        return weakref.ref(big)

    alive = call()
    gc.collect()
    assert alive() is None

    def attached(x):  # a torch graph whose backward runs the lambda's JAX derivative
        big = torch.ones(1000, dtype=torch.float64)
        g = di.gradient(lambda t: (jnp.sin(t) * big.numpy()[:3]).sum(), di.AutoJax(), x)
        return g, weakref.ref(big)

    x = torch.tensor(X, requires_grad=True)
    g, alive = attached(x)
    gc.collect()
    assert alive() is not None  # the graph of g needs f
    (h,) = torch.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), -np.sin(X), rtol=1e-12)
    del g, h
    gc.collect()
    assert alive() is None


def test_foreign_array_kind_crosses_a_bridge():
    """torch tensors into AutoJax: the call runs in JAX and gives tensors back."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("jax")
    g = di.gradient(lambda x: (x**2).sum(), di.AutoJax(), torch.ones(2))
    assert isinstance(g, torch.Tensor)
    torch.testing.assert_close(g, torch.full((2,), 2.0))


@pytest.mark.skipif(not (HAVE["jax"] and HAVE["torch"]), reason="needs jax and torch")
def test_torch_batched_backward_over_a_bridged_call():
    """torch's batched backward (is_grads_batched: Tangents vjp and hvp, chunked and
    batched Jacobians, the plain Hessian) has no batching rule for a bridged call: it runs
    one backward per direction there, with the same results (closed forms)."""
    import jax.numpy as jnp
    import torch

    cube = di.differentiate_with(lambda x: jnp.sin(x) ** 3, di.AutoJax())
    x = torch.tensor([0.3, 0.5, 0.9], dtype=torch.float64)
    d1 = 3 * torch.sin(x) ** 2 * torch.cos(x)
    d2 = 6 * torch.sin(x) * torch.cos(x) ** 2 - 3 * torch.sin(x) ** 3
    b = di.AutoTorch(mode="reverse")
    w1, w2 = torch.ones(3, dtype=torch.float64), torch.arange(3.0, dtype=torch.float64)
    got = di.vjp(cube, b, x, di.Tangents(w1, w2))
    torch.testing.assert_close(got[0], d1 * w1)
    torch.testing.assert_close(got[1], d1 * w2)
    torch.testing.assert_close(di.jacobian(cube, b, x, chunk_size=2), torch.diag(d1))
    torch.testing.assert_close(di.batched_jacobian(cube, b, x[:, None])[:, 0, 0], d1)
    total = lambda x: cube(x).sum()  # noqa: E731
    torch.testing.assert_close(di.hessian(total, di.AutoTorch(), x), torch.diag(d2))
    hv = di.hvp(total, di.AutoTorch(), x, di.Tangents(w1, w2))
    torch.testing.assert_close(hv[1], d2 * w2)
    over = di.second_order(di.AutoTorch(mode="reverse"), di.AutoJax())
    f = lambda x: jnp.sum(jnp.sin(x) ** 3)  # noqa: E731
    torch.testing.assert_close(di.hessian(f, over, x, chunk_size=2), torch.diag(d2))


def test_strided_and_broadcast_arrays_reach_jit_dense():
    """jit copies a broadcast or strided NumPy array about 10x slower than NumPy does:
    such arrays (sum's cotangent in torch, a slice) cross made dense, C- and F-order
    ones as they are; results unchanged."""
    from diffiface.backends.jax.running import dense

    c = np.ones((4, 3))
    f = np.asfortranarray(c)
    assert dense(c) is c and dense(f) is f
    for a in (np.broadcast_to(1.0, (5,)), np.arange(10.0)[::2], c[:, ::2]):
        d = dense(a)
        assert d.flags.c_contiguous and np.array_equal(d, a)
        assert jax.device_put(d).unsafe_buffer_pointer() == d.ctypes.data  # no second copy

    bridged = di.differentiate_with(lambda x: jnp.sin(x) * 2.0, di.AutoJax())
    x = torch.linspace(0.0, 1.0, 7, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(bridged(x).sum(), x)  # the cotangent is an expanded one
    torch.testing.assert_close(g, 2.0 * torch.cos(x.detach()), rtol=1e-12, atol=0)
    xs = torch.linspace(0.0, 1.0, 14, dtype=torch.float64)[::2]  # a strided view
    torch.testing.assert_close(bridged(xs), 2.0 * torch.sin(xs), rtol=1e-12, atol=0)
    xn = np.linspace(0.0, 1.0, 14)[::2]
    got = di.gradient(lambda x: jnp.sum(jnp.sin(x)), di.AutoJax(), xn)
    np.testing.assert_allclose(got, np.cos(xn), rtol=1e-12)


def test_a_crossing_no_pass_sees_skips_the_autograd_function_and_one_that_is_seen_keeps_it():
    import torch.autograd.forward_ad as fwAD

    bridged = di.differentiate_with(lambda x: jnp.sin(x) * 2.0, di.AutoJax())
    x = torch.linspace(0.0, 1.0, 5, dtype=torch.float64)
    plain = bridged(x)
    assert plain.grad_fn is None and not plain.requires_grad
    torch.testing.assert_close(plain, 2.0 * torch.sin(x), rtol=1e-12, atol=0)
    xg = x.clone().requires_grad_()
    with torch.no_grad():
        assert bridged(xg).grad_fn is None
    assert bridged(xg).grad_fn is not None  # seen by torch's graph: the Function records it
    v = torch.ones(5, dtype=torch.float64)
    with fwAD.dual_level():  # forward mode without requires_grad: still the Function
        tangent = fwAD.unpack_dual(bridged(fwAD.make_dual(x, v))).tangent
    torch.testing.assert_close(tangent, 2.0 * torch.cos(x), rtol=1e-12, atol=0)


def test_a_torch_backward_over_jax_reuses_the_forward_residuals_unless_differentiated_again():
    bridged = di.differentiate_with(lambda x, w: jnp.tanh(x @ w), di.AutoJax())
    x = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64).reshape(3, 2).requires_grad_()
    w = torch.linspace(0.5, 1.5, 4, dtype=torch.float64).reshape(2, 2).requires_grad_()
    gx, gw = torch.autograd.grad(bridged(x, w).sum(), (x, w))
    ref = torch.tanh(x @ w).sum()
    want = torch.autograd.grad(ref, (x, w), create_graph=True)
    torch.testing.assert_close(gx, want[0], rtol=1e-12, atol=0)
    torch.testing.assert_close(gw, want[1], rtol=1e-12, atol=0)
    (node,) = bridged._nodes.values()
    assert "vjp_forward" in node._derived and "vjp" not in node._derived  # no recomputation
    # create_graph=True: the backward is a bridged call again, differentiable a second time
    (g,) = torch.autograd.grad(bridged(x, w).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(h, torch.autograd.grad(want[0].sum(), x)[0], rtol=1e-12, atol=0)
    assert "vjp" in node._derived


def _sq_sin(xp, k):
    """sum(sin(k x)^2), whose gradient is k sin(2 k x)."""
    return lambda x: (xp.sin(k * x) ** 2).sum()


def _torch_double_backward(b):
    x = torch.tensor(X0, requires_grad=True)
    (g,) = torch.autograd.grad(b(x), x, create_graph=True)
    g.sum().backward()  # differentiated again: the vjp node
    return g.detach().numpy()


def _torch_backward(b):
    x = torch.tensor(X0, requires_grad=True)
    (b(x) * 2).backward()  # the saved residuals' pullback
    return x.grad.numpy() / 2


RELEASE = {  # (inner, outer) -> how the outer differentiates a bridged f
    ("jax", "torch backward"): _torch_backward,
    ("jax", "torch double backward"): _torch_double_backward,
    ("jax", "autograd.grad"): lambda b: autograd.grad(b)(X0),
    ("torch", "jax.grad"): lambda b: np.asarray(jax.grad(b)(jnp.asarray(X0))),
    ("torch", "jax.jit(jax.grad)"): lambda b: np.asarray(jax.jit(jax.grad(b))(jnp.asarray(X0))),
    ("autograd", "jax.grad"): lambda b: np.asarray(jax.grad(b)(jnp.asarray(X0))),
}


def _live_executables():
    from jax.extend.backend import get_backend

    return len(get_backend().live_executables())


def _alive(refs):
    """The referents still alive after gc; XLA's runtime drops a host callback's last
    references on its own thread, so that is waited for (2 s at most)."""
    import time

    for _ in range(40):
        gc.collect()
        if all(r() is None for r in refs):
            break
        time.sleep(0.05)
    return [r for r in refs if r() is not None]


@pytest.mark.parametrize(("inner", "outer"), list(RELEASE), ids=[f"{i} in {o}" for i, o in RELEASE])
def test_a_bridged_function_and_its_compilations_die_with_it(inner, outer):
    """Bridged functions made anew (a lambda per loss) were kept: by one global jit of
    the pullback (a compiled executable each, about 1.5 MiB), by autograd's global table
    of primitives (one per node) and by JAX's cache of abstract evaluations (keyed on
    the node). Now nothing holds a dead function or its compilations."""
    run = RELEASE[(inner, outer)]

    def one(k):
        f = _sq_sin(OPS[inner], k)
        g = run(di.differentiate_with(f, BACKENDS[inner]))
        np.testing.assert_allclose(g, k * np.sin(2 * k * X0), rtol=1e-10)
        return weakref.ref(f)

    one(0.5)  # the first call compiles JAX's own helpers
    gc.collect()
    before = _live_executables()
    refs = [one(1.0 + 0.1 * k) for k in range(12)]
    assert _alive(refs) == []
    assert _live_executables() == before


def test_crossing_operators_and_their_compilations_die_with_f():
    """An operator on another framework's arrays kept its last 32 functions (their
    closures and compilations) until di.clear_caches(); now its cache holds them weakly
    and only each call's graph holds its f."""

    def one(k):
        f = _sq_sin(jnp, k)
        x = torch.tensor(X0, requires_grad=True)
        (di.gradient(f, di.AutoJax(), x).sum() * 2).backward()
        np.testing.assert_allclose(x.grad.numpy() / 2, 2 * k**2 * np.cos(2 * k * X0), rtol=1e-10)
        return weakref.ref(f)

    one(0.5)
    gc.collect()
    before = _live_executables()
    refs = [one(1.0 + 0.1 * k) for k in range(12)]
    assert _alive(refs) == []
    assert _live_executables() == before
