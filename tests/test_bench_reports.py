"""How benchmark scripts write their reports (autotune/bench/harness.py): a run under way writes beside
the report, so that a run cut short never replaces an earlier whole report with part of one; a bad
--out is refused before any work; what a script refuses is one line, not a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.bench import harness
from autotune.core.errors import AutotuneError


def test_a_run_cut_short_leaves_the_earlier_report_and_a_whole_one_replaces_it(tmp_path: Path) -> None:
    report = tmp_path / "gemv_nvidia-h200.json"
    harness.write_json(report, {"rows": list(range(60))})
    harness.write_progress(report, {"rows": [0, 1]})  # two shapes measured, then the run is cut short
    assert json.loads(report.read_text())["rows"] == list(range(60))
    partial = tmp_path / "gemv_nvidia-h200.partial.json"
    assert harness.partial_path(report) == partial and json.loads(partial.read_text())["rows"] == [0, 1]
    harness.write_report(report, {"rows": [0, 1, 2]})  # a whole run
    assert json.loads(report.read_text())["rows"] == [0, 1, 2] and not partial.exists()


def test_an_out_of_the_wrong_kind_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "report.json"
    a_file.write_text("{}")
    for check, path, said in ((harness.out_folder, a_file, "is a file"), (harness.out_file, tmp_path, "is a folder")):
        with pytest.raises(SystemExit) as stopped:
            check(path)
        assert stopped.value.code == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"error: --out {path} {said}" + _rest(said)]
    assert harness.out_folder(tmp_path) == tmp_path and harness.out_file(a_file) == a_file


def _rest(said: str) -> str:
    return ": give the folder the report goes in" if said == "is a file" else ": give the report's file"


def test_a_script_s_refusal_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    def refuses() -> int:
        raise AutotuneError("torch sees no CUDA GPU: this benchmark runs on one")

    with pytest.raises(SystemExit) as stopped:
        harness.run_script(refuses, "bench_x")
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "bench_x: torch sees no CUDA GPU: this benchmark runs on one\n"
    with pytest.raises(SystemExit) as stopped:
        harness.run_script(lambda: 0, "bench_x")
    assert stopped.value.code == 0


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
REPORT_READERS = ("plot_decode", "plot_gemm", "plot_gemv", "plot_model", "plot_tuning", "results_table")
TORCH_SCRIPTS = ("bench_linear", "bench_linear_grad", "bench_model", "bench_tune_model", "profile_vs_cublas")


def _script(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / f"{name}.py"), *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize("name", REPORT_READERS)
def test_a_report_reader_refuses_a_missing_or_foreign_file_in_one_line(name: str, tmp_path: Path) -> None:
    """A plot or table script given a file that is missing or another script's report: one line, exit 2
    (it had been a FileNotFoundError or KeyError traceback, and `--help` was read as a file name)."""
    foreign = tmp_path / "other.json"
    foreign.write_text(json.dumps({"rows": [{"m": 1}], "seeds": 3}))
    assert _script(name, "--help").returncode == 0
    # Without matplotlib (the test extra has none) a plot script may say so first, once the file is read.
    foreign_said = [f"is not a report {name} reads"]
    if name.startswith("plot_") and importlib.util.find_spec("matplotlib") is None:
        foreign_said.append("drawing needs matplotlib")
    for path, said in ((tmp_path / "none.json", ["cannot read"]), (foreign, foreign_said)):
        done = _script(name, str(path))
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{name}: ") and any(s in lines[0] for s in said), done.stderr


@pytest.mark.parametrize("name", TORCH_SCRIPTS)
def test_a_torch_benchmark_without_torch_says_so_in_one_line(name: str, tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()  # a torch that cannot be imported, whether or not this machine has one
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SCRIPTS.parent)])}
    done = _script(name, "--help", env=env)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"{name}: needs torch with CUDA (pip install torch), and a GPU to run on"
    ]
