"""The diffiface command: check, bench, info (in-process, and once as a subprocess);
``diffiface bench`` writes where ``--out`` says and never overwrites without ``--force``."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from diffiface import _cli, testing


def test_python_dash_m_diffiface_info_lists_backends_and_x64():
    out = subprocess.run(
        [sys.executable, "-m", "diffiface", "info"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("diffiface ")
    for name in ("jax", "torch", "autograd", "fd"):
        assert any(line.startswith(name) for line in out.splitlines())
    assert "x64" in out or "jax       not installed" in out


@pytest.mark.parametrize("name", list(_cli.BACKENDS))
def test_info_and_check_take_every_registered_framework(name, capsys):
    """The command's backends come from the registry (MLX included), by their
    command-line name; each installed one is listed by info and checked by check."""
    _, module = _cli.BACKENDS[name]
    if module is not None:
        pytest.importorskip(module)
    assert _cli.main(["info"]) == 0
    assert any(line.startswith(f"{name} ") for line in capsys.readouterr().out.splitlines())
    code = _cli.main(
        ["check", "--backends", name, "--operators", "gradient", "--dtypes", "float32"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "0 failing" in out
    assert out.count("ok ") >= 4  # the default scenarios' gradients, each against its closed form


def test_check_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "rows.json"
    code = _cli.main(
        [
            "check",
            "--backends",
            "fd",
            "--operators",
            "gradient,hvp",
            "--dtypes",
            "float64",
            "--json",
            str(path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "FiniteDifferences" in out and "0 failing" in out
    rows = json.loads(path.read_text())
    assert {r["operator"] for r in rows} == {"gradient", "hvp"}
    assert all(r["status"] in ("pass", "skip") for r in rows)


def test_check_exits_non_zero_on_a_failure(monkeypatch, capsys):
    s = testing.default_scenarios(("float64",))[2]
    wrong = testing.Scenario(s.name, s.family, s.f, s.x, y=s.y, jac=s.jac + 1, hess=s.hess)
    monkeypatch.setattr(testing, "default_scenarios", lambda dtypes: [wrong])
    code = _cli.main(["check", "--backends", "fd", "--operators", "gradient"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"FAIL: FiniteDifferences {s.name} gradient" in out


def test_bench_writes_json(tmp_path, capsys):
    code = _cli.main(
        [
            "bench",
            "--backends",
            "fd",
            "--operators",
            "gradient",
            "--repeat",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert rows and all(r["backend"] == "FiniteDifferences" for r in rows)
    assert np.all([r["ratio"] == 1.0 for r in rows])


def test_unknown_names_are_errors():
    with pytest.raises(SystemExit, match="unknown backend"):
        _cli.main(["check", "--backends", "tensorflow"])
    with pytest.raises(SystemExit, match="unknown operator"):
        _cli.main(["check", "--backends", "fd", "--operators", "grad"])


BENCH = ["bench", "--backends", "fd", "--operators", "gradient", "--repeat", "1"]


def test_bench_refuses_to_overwrite_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.json").write_text("mine")
    with pytest.raises(SystemExit, match=r"bench\.json already exists; pass --force"):
        _cli.main(BENCH)
    assert (tmp_path / "bench.json").read_text() == "mine"  # before: overwritten
    (tmp_path / "bench.png").write_text("mine too")
    with pytest.raises(SystemExit, match=r"bench\.json and .*bench\.png already exist"):
        _cli.main(BENCH)
    assert (tmp_path / "bench.png").read_text() == "mine too"
    assert _cli.main([*BENCH, "--force"]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert rows and {r["operator"] for r in rows} == {"gradient"}


def test_bench_writes_to_out_and_not_to_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _cli.main([*BENCH, "--out", "results/run1"]) == 0
    assert (tmp_path / "results" / "run1" / "bench.json").is_file()
    assert not (tmp_path / "bench.json").exists()
    assert "results/run1/bench.json" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"already exists?"):  # bench.png too with matplotlib
        _cli.main([*BENCH, "--out", "results/run1"])
    assert _cli.main(BENCH) == 0  # the default: the current folder
    assert (tmp_path / "bench.json").is_file()
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit, match="--out afile is a file"):
        _cli.main([*BENCH, "--out", "afile"])
