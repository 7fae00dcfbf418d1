"""The sparse benchmark (benchmarks/sparse.py, `make bench-sparse`) runs every section on
tiny sizes and writes docs/sparse_results.md's tables with their structure: the
columns, one row per case, numbers where numbers belong. No timing is asserted; the
benchmark checks each sparse result against the dense one (or the framework's own
products) itself."""

from __future__ import annotations

import importlib.util
import os
import re
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

pytest.importorskip("jax")
pytest.importorskip("torch")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import sparse_colors  # noqa: E402
import sparse_detection  # noqa: E402
import sparse_evals  # noqa: E402
import sparse_scaling  # noqa: E402

# benchmarks/sparse.py under a name of its own: "sparse" is tests/sparse's name too
_spec = importlib.util.spec_from_file_location("bench_sparse", os.path.join(BENCH, "sparse.py"))
bench_sparse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_sparse)


def _number(cell) -> float:
    return float(str(cell))


def _tables(md: str) -> dict:
    """heading -> (header, rows) of every markdown table under a '## ' heading."""
    out = {}
    for part in md.split("\n## ")[1:]:
        title, body = part.split("\n", 1)
        lines = [ln for ln in body.splitlines() if ln.startswith("|")]
        cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
        out[title] = (cells[0], cells[2:])
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    md = tmp_path_factory.mktemp("sparse") / "results.md"
    tables = bench_sparse.main("tiny", md=str(md))
    return tables, md.read_text()


def test_the_page_has_every_section(run):
    _, md = run
    found = _tables(md)
    assert set(found) == {
        "Checks",
        "Colors against SparseMatrixColorings.jl and ColPack",
        "Against asdex from 2e3 to 1e5 unknowns",
        "Detection and coloring against asdex",
        "Finite differences: evaluations of f",
    }
    assert "sparse_growth.png" in md
    for source in sparse_colors.SOURCES:
        assert f"**{source}**" in md
    header, rows = found["Checks"]
    assert header == ["problem", "configuration", "value", "unit", "target"]
    assert any("nonzeros missed" in r[1] and r[2] == "0" for r in rows)


def test_the_color_table_lists_every_order_and_kind(run):
    tables, _ = run
    t = tables["colors"]
    orders = sparse_colors.orders()
    assert t["header"][7 : 7 + len(orders)] == [f"diffiface {o}" for o in orders]
    want = sum(len(sparse_colors.kinds_of(sym)) for _, _, sym, _ in sparse_colors.matrices("tiny"))
    assert len(t["rows"]) == want
    at = {h: i for i, h in enumerate(t["header"])}
    for r in t["rows"]:
        counts = [int(r[7 + i]) for i in range(len(orders)) if r[7 + i] != "—"]
        assert int(r[at["diffiface best"]]) == min(counts)
        assert r[at["kind"]] in sparse_colors.kinds_of(True) + sparse_colors.kinds_of(False)
        assert re.fullmatch(r"(\d+|—) / (\d+|—)", r[at["SMC (N / LF)"]])
    # the tiny matrices are not in the reference file: nothing to compare
    assert {r[at["≤ SMC and ColPack"]] for r in t["rows"]} == {"—"}


def test_the_known_counts_of_structured_matrices_hold():
    """By construction: a band with b diagonals each side takes 2b + 1 column colors in
    natural order, an arrowhead 2 star colors, a tridiagonal Hessian 3."""
    tiny = {name: (p, known) for name, p, _, known in sparse_colors.matrices("tiny")}
    for name, (p, known) in tiny.items():
        if name.startswith(("banded", "arrowhead")):
            for kind, (colors, _) in known.items():
                if kind in ("column", "star"):
                    assert sparse_colors.color_one(p, kind, "natural")[0] == colors, name


def test_the_scaling_table_has_a_row_per_problem_and_framework(run):
    tables, _ = run
    t = tables["scaling"]
    assert t["header"] == sparse_scaling.HEADER
    assert [(r[0], r[2]) for r in t["rows"]] == [
        (p, fw) for p in sparse_scaling.PROBLEMS for fw in ("jax", "torch")
    ]
    for r in t["rows"]:
        for cell in r[4:8]:  # prepared, unprepared, their ratio, preparation
            assert _number(cell) > 0
        asdex = r[8:]
        if r[2] == "torch" or not sparse_scaling.HAVE_ASDEX:
            assert asdex == ["—"] * 4
        else:
            assert all(_number(c) > 0 for c in asdex)


def test_the_detection_table_times_detection_and_coloring_apart(run):
    tables, md = run
    t = tables["detection"]
    assert t["header"] == sparse_detection.HEADER
    frameworks = [r[2] for r in t["rows"] if r[0] == "banded Jacobian"]
    assert frameworks[:2] == ["jax", "torch"]
    for r in t["rows"]:
        assert _number(r[3]) > 0 and _number(r[4]) > 0  # detection, coloring
        asdex = r[5:]
        if r[2] != "jax" or not sparse_detection.HAVE_ASDEX:
            assert asdex == ["—"] * 4
        else:
            assert all(_number(c) > 0 for c in asdex)
    assert "## Detection and coloring against asdex" in md


def test_the_evaluation_table_counts_calls_of_f(run):
    tables, _ = run
    t = tables["evals"]
    assert t["header"] == sparse_evals.HEADER
    assert [r[0] for r in t["rows"]] == list(sparse_evals.PROBLEMS)
    for r in t["rows"]:
        colors, per_call = int(r[3]), int(r[5])
        assert colors >= 1 and per_call >= colors  # at least one evaluation per color
        assert _number(r[7]) == pytest.approx(per_call / colors, rel=1e-2)
        assert int(r[8]) >= int(r[1])  # a dense call: at least one per unknown


def test_counting_counts():
    g = sparse_evals.Counting(lambda x: 2 * x)
    out, calls = g.during(lambda: [g(1), g(2)])
    assert out == [2, 4] and calls == 2 and g.calls == 2
