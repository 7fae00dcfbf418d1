"""Run by test_dtensor.py as two processes, one per gloo rank on 127.0.0.1
(``_dtensor_ranks.py RANK PORTS CASES``, comma-separated, one port per case): for each
case, each rank checks the operators on a DTensor sharded over both against the same call
on a plain tensor. Each case runs alone in a fresh process: a rank imports torch and
diffiface once, then forks a child per case (nothing run before the fork, so no state
carries over from one case to another) and prints ``CASE: ok`` or ``CASE: failed``."""

from __future__ import annotations

import datetime
import os
import sys
import time
import traceback

import torch
import torch._dynamo  # a first distribute_tensor imports it (seconds): once, before the forks
import torch.distributed as dist
import torch.distributed.tensor

import diffiface  # noqa: F401


def _close(a, b) -> None:
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def run(rank: int, world: int, port: str, case: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    # a rank whose partner failed gives up after a minute instead of gloo's 30
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        import diffiface as di

        mesh = init_device_mesh("cpu", (world,))
        plain = torch.linspace(0.1, 1.0, 8, dtype=torch.float64)
        x = distribute_tensor(plain, mesh, [Shard(0)])

        def f(x):
            return (torch.sin(x) ** 2).sum()

        def g(x):
            return torch.sin(x) * 2

        CASES[case](di, di.AutoTorch(), mesh, x, plain, f, g)
        dist.barrier()  # no rank tears the group down while another still talks to it
    finally:
        dist.destroy_process_group()


def _first_order(di, b, mesh, x, plain, f, g) -> None:
    for op, fn, args in [
        ("gradient", f, ()),
        ("vjp", g, (x,)),
        ("jvp", g, (x,)),  # no forward mode on a DTensor: the reverse formulation
        ("jacobian", g, ()),
        ("hvp", f, (x,)),
    ]:
        got = getattr(di, op)(fn, b, x, *args)
        plain_args = tuple(a.full_tensor() for a in args)
        want = getattr(di, op)(fn, b, plain, *plain_args)
        assert got.placements[0].is_shard(), (op, got.placements)
        _close(got.full_tensor(), want)


def _forward_request(di, b, mesh, x, plain, f, g) -> None:
    """An explicit forward jacobian (or batched_jacobian) of a DTensor is a clear error,
    for an elementwise f and for one with a reduction alike."""
    from torch.distributed.tensor import Shard, distribute_tensor

    xb = distribute_tensor(plain.reshape(4, 2), mesh, [Shard(0)])
    forward = di.AutoTorch(mode="forward")
    for op, fn, point in [
        (di.jacobian, g, x),
        (di.jacobian, lambda x: torch.sin(x).sum(0, keepdim=True), x),
        (di.batched_jacobian, g, xb),
    ]:
        try:
            op(fn, forward, point)
        except di.DiffifaceTypeError as exc:
            assert "forward mode" in str(exc) and "mode='reverse'" in str(exc), str(exc)
            assert "DTensor has no forward-mode AD" in str(exc), str(exc)
        else:
            raise AssertionError(f"a forward {op.__name__} of a DTensor did not raise")


def _placements(di, b, mesh, x, plain, f, g) -> None:
    """The placements docs/scale-out.md states: a jacobian keeps x's sharding on its
    input axis (Shard(1) for a 1-d x), for an elementwise f and a reduction alike; a
    result shaped like f(x) follows f(x)'s placements (a reduction: Partial(sum))."""
    from torch.distributed.tensor import Shard

    def h(x):
        return torch.sin(x).sum(0, keepdim=True)

    for fn in (g, h):
        got = di.jacobian(fn, b, x)
        assert tuple(got.placements) == (Shard(1),), got.placements
        _close(got.full_tensor(), di.jacobian(fn, b, plain))
    y = h(x)
    got = di.jvp(h, b, x, x)
    assert tuple(got.placements) == tuple(y.placements), (got.placements, y.placements)
    assert got.placements[0].is_partial(), got.placements
    _close(got.full_tensor(), di.jvp(h, b, plain, plain))


def _batched_jacobian(di, b, mesh, x, plain, f, g) -> None:
    """A batched_jacobian first in its process (its basis placed like f(x))."""
    from torch.distributed.tensor import Shard, distribute_tensor

    xb = distribute_tensor(plain.reshape(4, 2), mesh, [Shard(0)])
    got = di.batched_jacobian(g, b, xb)
    assert tuple(got.placements) == (Shard(0),), got.placements
    _close(got.full_tensor(), di.batched_jacobian(g, b, plain.reshape(4, 2)))


def _full(a):
    if isinstance(a, tuple | list):
        return [_full(t) for t in a]
    return a.full_tensor() if hasattr(a, "full_tensor") else a


def _same(got, want) -> None:
    got, want = _full(got), _full(want)
    if isinstance(got, list):
        for a, b in zip(got, want, strict=True):
            _same(a, b)
    else:
        _close(got, want)


def _second_order_and_more(di, b, mesh, x, plain, f, g) -> None:
    """Hessians (the batched double backward's basis placed like x), Tangents, prepared
    calls, batched_jacobian and derivative on DTensors."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    _same(di.hessian(f, b, x), di.hessian(f, b, plain))
    _same(di.value_gradient_and_hessian(f, b, x), di.value_gradient_and_hessian(f, b, plain))
    vs, ps = di.Tangents(x * 1.0, x * 2.0), di.Tangents(plain * 1.0, plain * 2.0)
    for op, fn in (("jvp", g), ("vjp", g), ("hvp", f)):
        _same(list(getattr(di, op)(fn, b, x, vs)), list(getattr(di, op)(fn, b, plain, ps)))
    prep = di.prepare_gradient(f, b, x)
    _same(di.gradient(f, b, x, prep=prep), di.gradient(f, b, plain))
    replicated = distribute_tensor(plain, mesh, [Replicate()])  # other placements, same prep
    got = di.gradient(f, b, replicated, prep=prep)
    assert got.placements[0].is_replicate(), got.placements
    _same(got, di.gradient(f, b, plain))
    prep = di.prepare_hvp(f, b, x, x)
    _same(di.hvp(f, b, x, x, prep=prep), di.hvp(f, b, plain, plain))
    xb = distribute_tensor(plain.reshape(4, 2), mesh, [Shard(0)])
    _same(di.batched_jacobian(g, b, xb), di.batched_jacobian(g, b, plain.reshape(4, 2)))
    s = distribute_tensor(torch.tensor(0.5, dtype=torch.float64), mesh, [Replicate()])
    _same(
        di.derivative(lambda s: x * s, b, s), di.derivative(lambda s: plain * s, b, s.full_tensor())
    )
    _same(
        di.second_derivative(lambda s: x * s**3, b, s),
        di.second_derivative(lambda s: plain * s**3, b, s.full_tensor()),
    )


def _gradient_penalty(di, b, mesh, x, plain, f, g) -> None:
    """d/dW of |grad_x model(x, W)|^2 with FixedParams over sharded weights, by torch's
    own backward; forward over reverse is a clear error on a DTensor (no forward mode)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    w_plain = torch.linspace(-1, 1, 16, dtype=torch.float64).reshape(8, 2)
    w = distribute_tensor(w_plain, mesh, [Shard(0)])

    def model(x, w):
        return torch.tanh(x @ w).sum()

    def penalty(x, w, strategy):
        w = w.detach().requires_grad_()
        gx = di.gradient(di.FixedParams(model, w, strategy=strategy), b, x)
        return torch.autograd.grad((gx**2).sum(), w)[0]

    want = penalty(plain, w_plain, "reverse_over_reverse")
    for strategy in ("auto", "reverse_over_reverse"):
        got = penalty(x, w, strategy)
        assert got.placements[0].is_shard(), got.placements
        _close(got.full_tensor(), want)
    try:
        penalty(x, w, "forward_over_reverse")
    except di.DiffifaceTypeError as exc:
        assert "DTensor has no forward-mode AD" in str(exc), str(exc)
    else:
        raise AssertionError("forward over reverse on a DTensor did not raise")


CASES = {
    "first_order": _first_order,
    "second_order_and_more": _second_order_and_more,
    "gradient_penalty": _gradient_penalty,
    "forward_request": _forward_request,
    "placements": _placements,
    "batched_jacobian": _batched_jacobian,
}


def _in_a_child(rank: int, port: str, case: str) -> bool:
    """Runs one case in a forked child; False when it fails or outlives 90 s."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            run(rank, 2, port, case)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False


if __name__ == "__main__":
    rank, ports, cases = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3].split(",")
    for port, case in zip(ports, cases, strict=True):
        ok = _in_a_child(rank, port, case)
        print(f"{case}: {'ok' if ok else 'failed'}", flush=True)
