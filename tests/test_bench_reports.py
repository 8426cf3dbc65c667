"""How benchmark scripts write their reports (autotune/bench/harness.py): a run under way writes beside
the report, so that a run cut short never replaces an earlier whole report with part of one; a bad
--out is refused before any work; what a script refuses is one line, not a traceback."""

from __future__ import annotations

import json
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
