"""diffiface on a GPU: every operator, Tangents, second order, FixedParams under an
outer pass, AutoSparse and a crossing between torch and JAX, on CUDA tensors and JAX
GPU arrays. Each result equals the closed form and the same call on the CPU, and keeps
x's device and dtype. Skipped where there is no GPU; ``make gpu-check`` runs them on
one (docs/benchmarks.md, "On a GPU")."""

from __future__ import annotations

import os

import numpy as np
import pytest
from device_cases import (
    cases,
    check,
    cuda_torch,
    devices_of,
    gpu_jax,
    jax_name,
    jax_on,
    ready,
    torch_on,
)
from helpers import HAVE

import diffiface as di
from diffiface.core.operator import OPS


def _cpu_jax():
    import jax

    return jax.devices("cpu")[0]


# DIFFIFACE_GPU_TESTS_ON_CPU=1 runs these tests with the CPU standing in for the GPU (a
# check of the tests themselves on a machine without one)
ON_CPU = os.environ.get("DIFFIFACE_GPU_TESTS_ON_CPU") == "1"
TORCH_CUDA = HAVE["torch"] and (ON_CPU or cuda_torch())
JAX_GPU = (gpu_jax() or (_cpu_jax() if ON_CPU else None)) if HAVE["jax"] else None
TORCH_DEV = "cpu" if ON_CPU else "cuda"
GPU_NAME = {"torch": "cpu" if ON_CPU else "cuda:0", "jax": JAX_GPU and jax_name(JAX_GPU)}
NO_TORCH = pytest.mark.skipif(not TORCH_CUDA, reason="needs torch with CUDA")
NO_JAX = pytest.mark.skipif(JAX_GPU is None, reason="needs JAX with a GPU")
pytestmark = pytest.mark.gpu
FRAMEWORKS = [pytest.param("torch", marks=NO_TORCH), pytest.param("jax", marks=NO_JAX)]


def _places(fw: str):
    """(backend, the GPU place, its device name, the CPU place)."""
    if fw == "torch":
        return di.AutoTorch(), torch_on(TORCH_DEV), GPU_NAME["torch"], torch_on("cpu")
    import jax

    return di.AutoJax(), jax_on(JAX_GPU), GPU_NAME["jax"], jax_on(jax.devices("cpu")[0])


def _close(a, b, rtol):
    from diffiface.testing._scenario import flat_result

    a, b = flat_result(a), flat_result(b)
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    assert a.shape == b.shape and np.max(np.abs(a - b), initial=0.0) <= rtol * scale


@pytest.mark.parametrize("prepared", [True, False], ids=["prep", "unprep"])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_operator_on_the_gpu_equals_the_cpu(fw, op, prepared):
    backend, gpu, device, cpu = _places(fw)
    failures = []
    for s, _ in [c for c in cases(backend) if c[1] == op]:
        on_gpu = ready(backend, s, op, gpu, prepared)
        out = on_gpu()
        out = on_gpu()  # warm: the plan's own runner
        failures += [f"{s.name}: {p}" for p in check(backend, s, op, out, device)]
        ref = ready(backend, s, op, cpu, prepared)()
        try:
            _close(out, ref, 1e-4 if s.dtype == np.float32 else 1e-10)
        except AssertionError:
            failures.append(f"{s.name}: differs from the same call on the CPU")
    assert not failures, failures


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_tangents_on_the_gpu(fw):
    backend, gpu, device, cpu = _places(fw)

    def f(x):
        return (x**2).sum() * x

    def g(x):
        return (x**3).sum()

    x0 = np.linspace(-1.0, 1.0, 6)
    V = np.stack([np.roll(np.eye(6)[0], i) + 0.5 for i in range(3)])
    for place, where in ((gpu, device), (cpu, None)):
        x, vs = place(x0), [place(v) for v in V]
        for op, fn in (("jvp", f), ("vjp", f), ("hvp", g)):
            for t in (di.Tangents(*vs), di.Tangents.stacked(place(V))):
                out = getattr(di, op)(fn, backend, x, t)
                if where is not None:
                    assert devices_of(out) == {where}, (op, devices_of(out))
                want = {"jvp": lambda v: 2 * (x0 @ v) * x0 + (x0**2).sum() * v}
                want["vjp"] = want["jvp"]  # the Jacobian is symmetric
                want["hvp"] = lambda v: 6 * x0 * v
                for i, v in enumerate(V):
                    _close(out[i], want[op](v), 1e-12)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_second_order_on_the_gpu(fw):
    backend, gpu, device, _ = _places(fw)
    x0 = np.linspace(-1.0, 1.0, 5)
    x, v = gpu(x0), gpu(np.ones(5))

    def f(x):
        return (x**4).sum() + (x[:-1] * x[1:]).sum()

    hess = np.diag(12 * x0**2) + np.eye(5, k=1) + np.eye(5, k=-1)
    for second in (di.second_order(backend, backend), di.second_order(type(backend)(), backend)):
        for op, want in (("hessian", hess), ("hvp", hess @ np.ones(5))):
            args = (v,) if op == "hvp" else ()
            out = getattr(di, op)(f, second, x, *args)
            _close(out, want, 1e-12)
            assert devices_of(out) == {device}, (second, op)


@pytest.mark.skipif(not TORCH_CUDA, reason="needs torch with CUDA")
@pytest.mark.parametrize("strategy", ["auto", "forward_over_reverse", "reverse_over_reverse"])
def test_fixed_params_under_loss_backward_on_cuda(strategy):
    import torch

    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        model = model.double().to(device)
        x = torch.linspace(-1, 1, 12, dtype=torch.float64, device=device).reshape(4, 3)

        def u(x, params):
            return torch.func.functional_call(model, params, (x,)).sum()

        params = dict(model.named_parameters())
        inner = di.FixedParams(u, params, strategy=strategy)
        loss = (di.gradient(inner, di.AutoTorch(), x) ** 2).sum()
        loss.backward()
        return loss, {k: p.grad for k, p in params.items()}

    loss, grads = run(TORCH_DEV)
    ref_loss, ref_grads = run("cpu")
    assert loss.device.type == TORCH_DEV
    _close(loss, ref_loss, 1e-12)
    for k, g in grads.items():  # None where the loss does not depend on it, as in torch
        assert (g is None) == (ref_grads[k] is None), k
        if g is not None:
            assert g.device.type == TORCH_DEV, k
            _close(g, ref_grads[k], 1e-10)


@pytest.mark.skipif(JAX_GPU is None, reason="needs JAX with a GPU")
@pytest.mark.parametrize("strategy", ["auto", "forward_over_reverse", "reverse_over_reverse"])
def test_fixed_params_under_jax_grad_on_the_gpu(strategy):
    import jax
    import jax.numpy as jnp

    def u(x, p):
        return jnp.sum(jnp.tanh(x @ p["w"]) * p["c"])

    def loss(x, p):
        inner = di.FixedParams(u, p, strategy=strategy)
        return jnp.sum(di.gradient(inner, di.AutoJax(), x) ** 2)

    rng = np.random.default_rng(0)
    x0, w0, c0 = rng.normal(size=(4, 3)), rng.normal(size=(3, 5)), rng.normal(size=5)
    results = {}
    for name, dev in (("gpu", JAX_GPU), ("cpu", jax.devices("cpu")[0])):
        put = jax_on(dev)
        results[name] = jax.grad(loss, argnums=(0, 1))(put(x0), {"w": put(w0), "c": put(c0)})
    assert devices_of(results["gpu"]) == {GPU_NAME["jax"]}

    def native(x, p):
        return jnp.sum(jax.grad(u)(x, p) ** 2)

    ref = jax.grad(native, argnums=(0, 1))(jnp.asarray(x0), {"w": jnp.asarray(w0), "c": c0})
    _close(results["gpu"], results["cpu"], 1e-10)
    _close(results["gpu"], ref, 1e-10)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_sparse_jacobian_and_hessian_stay_on_the_gpu(fw):
    backend, gpu, device, _ = _places(fw)
    n = 8
    x0 = np.linspace(0.5, 1.5, n)

    def g(x):
        return x[1:] ** 2 - x[:-1]

    def f(x):
        return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    J = np.zeros((n - 1, n))
    J[np.arange(n - 1), np.arange(1, n)] = 2 * x0[1:]
    J[np.arange(n - 1), np.arange(n - 1)] = -1
    H = np.asarray(di.hessian(f, di.AutoJax() if HAVE["jax"] else backend, x0))
    sparse = di.AutoSparse(backend)
    jac, hess = di.jacobian(g, sparse, gpu(x0)), di.hessian(f, sparse, gpu(x0))
    if fw == "torch":
        import torch

        assert jac.layout == torch.sparse_csr and hess.layout == torch.sparse_csr
        assert jac.device.type == TORCH_DEV and hess.device.type == TORCH_DEV
    else:
        from jax.experimental import sparse as jsparse

        assert isinstance(jac, jsparse.BCOO) and isinstance(hess, jsparse.BCOO)
        assert devices_of(jac.data) == {device} and devices_of(hess.data) == {device}
    _close(jac, J, 1e-12)
    _close(hess, H, 1e-8)


@pytest.mark.skipif(not (TORCH_CUDA and JAX_GPU is not None), reason="needs both on a GPU")
def test_a_crossing_between_cuda_torch_and_jax_gpu_copies_nothing():
    """A JAX function inside torch's backward and a torch function inside jax.grad, on
    the GPU: the arrays cross by DLPack (the same device pointer both ways)."""
    import jax
    import jax.numpy as jnp
    import torch

    from diffiface.backends.jax.bridge import to_jax
    from diffiface.backends.torch.bridge import to_torch

    # the two conversions every crossing makes, forward and backward: no copy
    t = torch.linspace(-1, 1, 1000, device=TORCH_DEV, dtype=torch.float64)
    assert _pointer(to_jax(t)) == t.data_ptr()  # (a NumPy view on the CPU)
    a = jax.device_put(jnp.linspace(-1, 1, 1000), JAX_GPU)
    assert to_torch(a).data_ptr() == a.unsafe_buffer_pointer()
    assert to_torch(a).device.type == TORCH_DEV

    seen = {}

    def jf(x):
        return jnp.sin(x) * x

    layer = di.differentiate_with(jf, di.AutoJax())
    x = torch.linspace(-1, 1, 1000, device=TORCH_DEV, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    assert y.device.type == TORCH_DEV
    (g,) = torch.autograd.grad(y.sum(), x)
    x0 = x.detach().cpu().numpy()
    _close(g, np.cos(x0) * x0 + np.sin(x0), 1e-12)
    assert g.device.type == TORCH_DEV

    def tf(t):
        try:
            seen.setdefault("torch_in", t.data_ptr())
        except RuntimeError:  # a tensor of torch.func's transforms has no storage of its own
            pass
        return torch.tanh(t) ** 2

    tlayer = di.differentiate_with(tf, di.AutoTorch())
    xj = jax.device_put(jnp.linspace(-1, 1, 1000), JAX_GPU)
    out = tlayer(xj)
    assert seen["torch_in"] == xj.unsafe_buffer_pointer(), "the torch function got a copy"
    assert devices_of(out) == {GPU_NAME["jax"]}
    gj = jax.grad(lambda x: jnp.sum(tlayer(x)))(xj)
    t = np.tanh(np.asarray(xj))
    _close(gj, 2 * t * (1 - t**2), 1e-12)
    assert devices_of(gj) == {GPU_NAME["jax"]}


def _pointer(a):
    return a.ctypes.data if isinstance(a, np.ndarray) else a.unsafe_buffer_pointer()
