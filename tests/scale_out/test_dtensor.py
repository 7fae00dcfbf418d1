"""torch DTensor over a gloo process group of 2 ranks on 127.0.0.1 (a subprocess that
spawns them, bounded by a timeout): the operators keep the sharding and equal the
unsharded results; forward mode, which DTensor lacks, turns into the reverse
formulation, and an explicit forward request is a clear error."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest
from helpers import HAVE

pytestmark = pytest.mark.skipif(not HAVE["torch"], reason="needs torch")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


CASES = (
    "first_order",
    "second_order_and_more",
    "gradient_penalty",
    "forward_request",
    "placements",
    "batched_jacobian",
)


@pytest.mark.parametrize("case", CASES)
def test_operators_on_a_dtensor_over_two_gloo_ranks(case):
    """Each case in its own fresh process group (no state carried over from another)."""
    script = pathlib.Path(__file__).with_name("_dtensor_ranks.py")
    root = str(script.parents[2])  # this checkout's diffiface, not an installed one
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, str(script), _free_port(), case],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ranks ok" in done.stdout
