"""No hidden transfers: a call on device arrays moves nothing between the host and the
device, and every array diffiface makes lands on x's device.

These run on the CPU too, where each check has a stand-in:
- JAX: a warm call of every operator under ``jax.transfer_guard("disallow")``. On the
  CPU the guard sees host-to-device transfers (an array diffiface makes from NumPy or
  a Python number on every call); on a GPU it sees device-to-host reads too.
- JAX on two devices (a subprocess with two simulated CPU devices): x on the second,
  every result there, no transfer between them (``_jax_two_devices.py``).
- torch: a warm prepared call reads no value back (``.item()``, ``bool``, ``.cpu()``,
  ...: a synchronisation on a GPU), seen by a ``TorchFunctionMode``; on CUDA,
  ``torch.cuda.set_sync_debug_mode("error")`` and the profiler's copies too.
- torch: with the default device set to "meta", a tensor diffiface makes without
  naming x's device is a meta tensor, and the call fails: every result of CPU x stays
  on the CPU (on a GPU, such a tensor would be made on the CPU, next to CUDA x).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest
from device_cases import cases, check, cuda_torch, devices_of, jax_name, jax_on, ready, torch_on
from helpers import HAVE

import diffiface as di

NO_JAX = pytest.mark.skipif(not HAVE["jax"], reason="needs jax")
NO_TORCH = pytest.mark.skipif(not HAVE["torch"], reason="needs torch")


def _ids(pairs):
    return [pytest.param(s, op, id=f"{s.name}-{op}") for s, op in pairs]


# float64 only here: float32 runs the same code (the GPU tests run both)
def _jax_cases():
    return cases(di.AutoJax(), ("float64",)) if HAVE["jax"] else []


def _torch_cases(dtypes=("float64",)):
    return cases(di.AutoTorch(), dtypes) if HAVE["torch"] else []


@NO_JAX
@pytest.mark.parametrize(("s", "op"), _ids(_jax_cases()))
def test_a_warm_jax_call_transfers_nothing(s, op):
    import jax

    device = jax.devices()[0]
    for prepared in (True, False):
        call = ready(di.AutoJax(), s, op, jax_on(device), prepared)
        call()
        call()
        with jax.transfer_guard("disallow"):
            out = call()
        assert not check(di.AutoJax(), s, op, out, jax_name(device)), prepared


@NO_JAX
def test_jax_on_the_second_of_two_devices():
    script = pathlib.Path(__file__).with_name("_jax_two_devices.py")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "two devices ok" in done.stdout


def _torch_reads():
    import torch

    t = torch.Tensor
    return {
        t.item, t.__bool__, t.tolist, t.numpy, t.__float__, t.__int__, t.__index__, t.cpu,
        t.__array__, t.nonzero, torch.nonzero,
    }  # fmt: skip


def _watching():
    from torch.overrides import TorchFunctionMode

    reads = _torch_reads()

    class Watch(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in reads:
                self.seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    return Watch()


def test_the_read_watch_sees_reads():
    if not HAVE["torch"]:
        pytest.skip("needs torch")
    import torch

    with _watching() as watch:
        float(torch.ones(2).sum())
        bool(torch.ones(1) > 0)
    assert watch.seen == ["__float__", "__bool__"]


@pytest.fixture
def meta_default():
    import torch

    torch.set_default_device("meta")
    yield
    torch.set_default_device(None)


def _cpu(a):
    import torch

    return torch.tensor(np.asarray(a), device="cpu")


@NO_TORCH
@pytest.mark.parametrize(("s", "op"), _ids(_torch_cases()))
def test_torch_calls_make_tensors_on_x_device_and_read_nothing_back(s, op, meta_default):
    """Under the "meta" default device, prepared and unprepared; the prepared call's
    later calls read no value (the first calls of a prepared Hessian choose its
    formulation)."""
    for prepared in (True, False):
        call = ready(di.AutoTorch(), s, op, _cpu, prepared)
        for _ in range(8):
            with _watching() as watch:
                out = call()
            assert not prepared or watch.seen == [], watch.seen
        assert not check(di.AutoTorch(), s, op, out, "cpu"), prepared


@NO_TORCH
@pytest.mark.parametrize("op", ["gradient", "jacobian", "hessian", "hvp", "jvp", "vjp"])
def test_torch_results_for_an_empty_x_are_on_x_device(op, meta_default):
    x = _cpu(np.zeros(0))
    t = (_cpu(np.zeros(0)),) if op in ("hvp", "jvp", "vjp") else ()
    scalar = op in ("gradient", "hessian", "hvp")
    out = getattr(di, op)(
        (lambda x: (x**2).sum() + 1) if scalar else (lambda x: 2 * x), di.AutoTorch(), x, *t
    )
    assert devices_of(out) == {"cpu"}
    assert out.numel() == 0


@NO_TORCH
@pytest.mark.parametrize("backend", ["dense", "sparse"])
def test_sparse_and_fixed_params_on_torch_follow_x(backend):
    import torch

    x = _cpu(np.linspace(0.5, 1.5, 6))
    b = di.AutoTorch() if backend == "dense" else di.AutoSparse(di.AutoTorch())

    def f(x):
        return (x[1:] * x[:-1]).sum() + (x**3).sum()

    p = {"w": _cpu(np.ones(6)).requires_grad_()}
    inner = di.FixedParams(lambda x, p: (p["w"] * x**2).sum(), p)
    with torch.device("meta"):
        h = di.hessian(f, b, x)
        loss = (di.gradient(inner, di.AutoTorch(), x) ** 2).sum()
        (gw,) = torch.autograd.grad(loss, p["w"])
    assert h.device.type == "cpu" and gw.device.type == "cpu"
    ref = np.diag(6 * x.numpy()) + np.eye(6, k=1) + np.eye(6, k=-1)
    np.testing.assert_allclose(h.to_dense().numpy(), ref, rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), 8 * x.numpy() ** 2, rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not (HAVE["torch"] and cuda_torch()), reason="needs torch with CUDA")
@pytest.mark.parametrize(("s", "op"), _ids(_torch_cases(("float32", "float64"))))
def test_a_prepared_cuda_call_neither_synchronises_nor_copies_to_the_host(s, op):
    import torch
    from torch.profiler import ProfilerActivity, profile

    call = ready(di.AutoTorch(), s, op, torch_on("cuda"), prepared=True)
    for _ in range(8):
        out = call()
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # torch's notes on its prototype sync mode and profiler
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            try:
                torch.cuda.set_sync_debug_mode("error")  # a synchronising call raises
                out = call()
            finally:
                torch.cuda.set_sync_debug_mode(0)
    to_host = [e.name for e in prof.events() if "DtoH" in e.name]
    assert to_host == [], to_host
    assert not check(di.AutoTorch(), s, op, out, "cuda:0")
