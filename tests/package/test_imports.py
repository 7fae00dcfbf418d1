"""Imports: importing diffiface loads no framework and opens no network connection; a
framework is imported on first use; a missing one names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "backend", "extra"),
    [("jax", "AutoJax", "jax"), ("autograd", "AutoAutograd", "autograd")],
)
def test_missing_framework_names_the_extra(module, backend, extra):
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "import numpy as np, diffiface as di\n"
        "try:\n"
        f"    di.gradient(lambda x: x.sum(), di.{backend}(), np.ones(2))\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"FrameworkMissingError {backend}() needs {module}" in out.stdout
    assert f'pip install "diffiface[{extra}]"' in out.stdout


def test_import_opens_no_network_connection():
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('network')\n"
        "socket.socket = refuse; socket.create_connection = refuse\n"
        "import numpy as np, diffiface as di\n"
        "print(di.gradient(lambda x: (x**2).sum(), di.AutoFiniteDifferences(), np.ones(2)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[2. 2.]" in out.stdout


def test_import_loads_no_framework():
    code = (
        "import sys, diffiface as di\n"
        "di.AutoJax(); di.AutoTorch(); di.AutoAutograd()\n"
        "print([m for m in ('jax', 'torch', 'autograd') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_framework_imported_on_first_use():
    code = (
        "import sys, numpy as np, diffiface as di\n"
        "di.gradient(lambda x: (x**2).sum(), di.AutoAutograd(), np.ones(2))\n"
        "print(sorted(m for m in ('jax', 'torch', 'autograd') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['autograd']"
