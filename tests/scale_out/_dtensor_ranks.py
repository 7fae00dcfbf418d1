"""Run by test_dtensor.py in a subprocess: two gloo ranks on 127.0.0.1, each checks the
operators on a DTensor sharded over both against the same call on a plain tensor."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _close(a, b) -> None:
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def run(rank: int, world: int, port: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    dist.init_process_group("gloo", rank=rank, world_size=world)
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

        b = di.AutoTorch()
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
        try:
            di.jacobian(g, di.AutoTorch(mode="forward"), x)
        except di.DiffifaceTypeError as exc:
            assert "forward mode" in str(exc) and "mode='reverse'" in str(exc), str(exc)
        else:
            raise AssertionError("a forward jacobian of a DTensor did not raise")
        if rank == 0:
            print("ranks ok", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, sys.argv[1]), nprocs=2, join=True)
