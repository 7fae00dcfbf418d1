"""JAX arrays sharded over a mesh of 8 simulated CPU devices: the XLA flag must be set
before jax is imported, so the checks run in a subprocess (tests/scale_out/_jax_mesh.py)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from helpers import HAVE

pytestmark = pytest.mark.skipif(not HAVE["jax"], reason="needs jax")


def test_operators_on_arrays_sharded_over_eight_devices():
    script = pathlib.Path(__file__).with_name("_jax_mesh.py")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mesh ok" in done.stdout
