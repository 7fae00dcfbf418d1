"""The docs cannot rot: every python block runs, every public name is on the API page,
and the support matrix matches the code."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest
from helpers import HAVE

import diffiface as di
from diffiface import _support, testing
from diffiface._gaps import gaps_table

ROOT = pathlib.Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = {
    "jax": "jax",
    "torch": "torch",
    "autograd": "autograd",
    "AutoJax": "jax",
    "equinox": "equinox",
    "flax": "flax",
    "AutoMLX": "mlx",
    "array_api_compat": "array_api_compat",
    "keras": "keras",
}


def _have(module: str) -> bool:
    return HAVE[module] if module in HAVE else importlib.util.find_spec(module) is not None


def blocks(page: pathlib.Path) -> list:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs(page):
    """The blocks of a page run in order in one namespace (a page is one session)."""
    code = blocks(page)
    missing = {m for word, m in NEEDS.items() if any(word in b for b in code) and not _have(m)}
    if missing:
        pytest.skip(f"needs {', '.join(sorted(missing))}")
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(code):
        # dont_inherit: a block runs as a user runs it, not under this module's __future__
        exec(compile(block, f"{page.name} block {i + 1}", "exec", dont_inherit=True), namespace)


def test_every_public_name_is_on_the_api_page():
    api = (ROOT / "docs" / "api.md").read_text()
    shown = set(re.findall(r"^::: (diffiface[\w.]*)$", api, re.M))
    wanted = {f"diffiface.{n}" for n in di.__all__}
    wanted |= {f"diffiface.testing.{n}" for n in testing.__all__}
    assert wanted - shown == set(), "add these to docs/api.md"
    assert shown - wanted == set(), "these are not public"


def test_the_support_page_matches_the_code():
    page = (ROOT / "docs" / "support.md").read_text()
    support = re.search(r"<!-- support:start -->\n(.*?)\n<!-- support:end -->", page, re.S)
    nested = re.search(r"<!-- nested:start -->\n(.*?)\n<!-- nested:end -->", page, re.S)
    if not all(HAVE.values()):
        pytest.skip("the page lists every framework")
    fix = "regenerate with: diffiface info --support"
    assert support.group(1) == _support.support_table(), fix
    assert nested.group(1) == _support.nested_table(), fix
    gaps = re.search(r"<!-- gaps:start -->\n(.*?)\n<!-- gaps:end -->", page, re.S)
    assert gaps.group(1) == gaps_table(), fix


def test_the_nav_lists_every_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        assert page.name in nav, page.name
