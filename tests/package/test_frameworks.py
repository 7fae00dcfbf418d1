"""Each framework lives in one package: outside ``diffiface/backends/``, no module imports
a framework or names one in a string (to compare against, to import, to look up in
sys.modules), except ``_backend_types.py``, which defines the ``Auto*`` types."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import diffiface

FRAMEWORKS = ("jax", "jaxlib", "torch", "autograd")
ROOT = Path(diffiface.__file__).parent
DEFINES_THE_TYPES = "_backend_types.py"
# what remains, each with its reason; the list only shrinks
ALLOWED: set = set()


def _names_a_framework(text: str) -> bool:
    return any(text == fw or text.startswith(fw + ".") for fw in FRAMEWORKS)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (prose: they may name a framework)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def framework_uses(source: str) -> list[str]:
    """The places in ``source`` that import a framework or name one in a string."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _names_a_framework(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module and _names_a_framework(node.module):
                found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in prose and _names_a_framework(node.value):
                found.append(f"{node.value!r} (line {node.lineno})")
    return found


def _offenders() -> dict[str, list[str]]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("backends/") or rel == DEFINES_THE_TYPES:
            continue
        uses = framework_uses(path.read_text())
        if uses:
            out[rel] = uses
    return out


def test_no_module_outside_the_backends_knows_a_framework():
    offenders = _offenders()
    new = {rel: uses for rel, uses in offenders.items() if rel not in ALLOWED}
    assert not new, f"framework knowledge outside diffiface/backends/: {new}"


def test_the_allowlist_holds_only_what_remains():
    stale = ALLOWED - set(_offenders())
    assert not stale, f"no longer names a framework: remove from ALLOWED: {sorted(stale)}"


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import jax.numpy as jnp", True),
        ("from torch import nn", True),
        ("import sys\nsys.modules.get('autograd')", True),
        ("if fw == 'torch': pass", True),
        ("m = 'jax.numpy'", True),
        ('def f():\n    """Uses jax when imported."""', False),
        ("from . import jax_helpers", False),
        ("name = 'jaxonomy'", False),
    ],
)
def test_the_scan_finds_imports_and_names(source, found):
    assert bool(framework_uses(source)) is found
