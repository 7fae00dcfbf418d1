"""torch DTensor over a gloo process group of 2 ranks on 127.0.0.1 (two subprocesses,
bounded by a timeout): the operators keep the sharding and equal the unsharded results;
forward mode, which DTensor lacks, turns into the reverse formulation, and an explicit
forward request is a clear error."""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys

import pytest
from helpers import HAVE

pytestmark = pytest.mark.skipif(not HAVE["torch"], reason="needs torch")

CASES = (
    "batched_jacobian",  # first: a batched_jacobian as the first call of its process
    "first_order",
    "second_order_and_more",
    "gradient_penalty",
    "forward_request",
    "placements",
)


def _free_ports(n: int) -> list[str]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [str(s.getsockname()[1]) for s in socks]


def test_operators_on_a_dtensor_over_two_gloo_ranks():
    """Each case in its own fresh process and process group (no state carried over from
    another): each rank forks a child per case after importing torch and diffiface."""
    script = pathlib.Path(__file__).with_name("_dtensor_ranks.py")
    root = str(script.parents[2])  # this checkout's diffiface, not an installed one
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    ports = ",".join(_free_ports(len(CASES)))
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), ports, ",".join(CASES)],
            env={**os.environ, "PYTHONPATH": path},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [rank.communicate(timeout=300) for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    stderr = "\n".join(err[-3000:] for _, err in outputs)
    for rank, (out, _) in enumerate(outputs):
        assert out.split() == [w for c in CASES for w in (f"{c}:", "ok")], (rank, out, stderr)
