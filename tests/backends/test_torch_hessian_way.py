"""A prepared torch Hessian picks torch.func.hessian or the batched double backward by
timing its first real calls (each runs f once), never by extra runs of f in
prepare_hessian: f's side effects (counters, BatchNorm statistics) happen once per
call. Each Hessian against the closed form."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE, counted

import diffiface as di

pytestmark = pytest.mark.skipif(not HAVE["torch"], reason="torch missing")


def _f(x):
    import torch

    return (torch.sin(x) * x).sum()


def _want(x):
    x = x.numpy()
    return np.diag(2 * np.cos(x) - x * np.sin(x))  # d2/dx2 of sin(x) x


def test_prepare_and_every_call_run_f_once():
    import torch

    x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    f, runs = counted(_f)
    prep = di.prepare_hessian(f, di.AutoTorch(), x)
    assert runs[0] == 1  # (the one run that sizes and warms up the plan)
    for _ in range(10):  # the trial's calls, then the chosen way's
        runs[0] = 0
        h = di.hessian(f, di.AutoTorch(), x, prep=prep)
        assert runs[0] == 1
        np.testing.assert_allclose(h.numpy(), _want(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("faster", ["func", "batched"])
def test_the_trial_keeps_the_faster_way(monkeypatch, faster):
    from diffiface.backends.torch import hessian_way

    clock = [0.0]
    monkeypatch.setattr(hessian_way.time, "perf_counter", lambda: clock[0])
    ran = []

    def way(name):
        def run():
            ran.append(name)
            clock[0] += 1.0 if name == faster else 2.0
            return name

        return run

    import torch

    fns: dict = {}
    x = torch.ones(2)
    for _ in range(6):
        hessian_way.run(fns, True, way("func"), way("batched"), x)
    assert ran == ["batched", "func"] * 3  # each way in turn, one run per call
    assert fns[hessian_way.KEY] == faster
    assert hessian_way.run(fns, True, way("func"), way("batched"), x) == faster


def test_the_trial_waits_for_times_not_yet_known(monkeypatch):
    """On a GPU a call's time is known once its kernels are done: until then the calls
    after the trial run the batched way, and nothing waits."""
    from diffiface.backends.torch import hessian_way

    done = [False]

    class Pending:
        def __init__(self):
            self.t = None

        def stop(self):
            self.t = 1.0 if ran[-1] == "func" else 2.0  # func is faster
            return self

        def seconds(self):
            return self.t if done[0] else None

    monkeypatch.setattr(hessian_way, "_Wall", Pending)
    ran = []

    def way(name):
        return lambda: ran.append(name) or name

    import torch

    fns: dict = {}
    x = torch.ones(2)
    for _ in range(8):
        hessian_way.run(fns, True, way("func"), way("batched"), x)
    assert ran == ["batched", "func"] * 3 + ["batched", "batched"]
    assert isinstance(fns[hessian_way.KEY], hessian_way.Trial)
    done[0] = True
    hessian_way.run(fns, True, way("func"), way("batched"), x)
    assert fns[hessian_way.KEY] == "func"


def test_an_unprepared_call_and_an_f_torch_func_cannot_run_take_the_batched_way():
    from diffiface.backends.torch import hessian_way

    def fails():
        raise RuntimeError("does not have vmap support")

    import torch

    fns: dict = {}
    x = torch.ones(2)
    assert hessian_way.run(fns, False, fails, lambda: "batched", x) == "batched"
    assert hessian_way.KEY not in fns
    for _ in range(3):
        assert hessian_way.run(fns, True, fails, lambda: "batched", x) == "batched"
    assert fns[hessian_way.KEY] == hessian_way.BATCHED
