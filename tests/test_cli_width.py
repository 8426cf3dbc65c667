"""The `autotune` command read in an 80-column terminal, over the shipped records: no line of list,
show, best, warmup, doctor, gpus, queue or an error is wider, configs name every value and none is cut, and
`list` shows the config `best` answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import api, cli, ops
from tests.fakes import WIDTH, printed, run_cli
from tests.test_cli import _fresh_api  # noqa: F401  (a fixture, used by name)

pytestmark = pytest.mark.shipped_records


@pytest.fixture(autouse=True)
def _eighty_columns(_fresh_api: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 (the fixture)
    """test_cli's fresh API (no GPU, nothing cached by another test) in a terminal of 80 columns."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "shipped.db")


def words(lines: list[str]) -> list[str]:
    return " ".join(lines).split()


def test_list_names_every_config_value_and_wide_gives_a_line_a_problem(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str
) -> None:
    lines = printed(monkeypatch, capsys, "list", "--gpu", "h200", "--op", "hgemv", "--db", db)
    assert lines[0] == "NVIDIA H200" and lines[1].split() == [
        "op",
        "shape",
        "ok/trials",
        "best",
        "us",
        "GB/s",
        "best",
        "config",
    ]
    config = [word for word in words(lines[2:]) if "=" in word]
    assert config and all(key.isidentifier() and value.isdigit() for key, value in (w.split("=") for w in config))
    problems = sum(line.split()[0] in ("hgemv", "hgemvᵀ") for line in lines)
    assert len(config) > 2 * problems > 50  # lines of named values under each problem's row
    _, wide, _ = run_cli(monkeypatch, capsys, "list", "--gpu", "h200", "--op", "hgemv", "--wide", "--db", db)
    assert len(wide.splitlines()) == 1 + problems and max(map(len, wide.splitlines())) > WIDTH


@pytest.mark.slow  # every H200 hgemm of the shipped records asked of the store
@pytest.mark.vendor  # cuBLASLt's stored times take part, as they do outside the tests
def test_list_shows_the_config_best_answers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str
) -> None:
    """Where cuBLASLt's time ties ours within 2%, `best` answers ours, and so does `list` (it showed
    cuBLASLt algorithm 1 for H200 hgemm 1x4096x4096). Every H200 hgemm, in both layouts."""
    out = run_cli(monkeypatch, capsys, "list", "--gpu", "h200", "--op", "hgemm", "--json", "--db", db)[1]
    listed = json.loads(out)
    assert len(listed) > 50
    for entry in listed:
        choice = api.best("hgemm", entry["m"], entry["n"], entry["k"], trans=entry["trans"], gpu="NVIDIA H200", db=db)
        assert (entry["config"], entry["best_us"], entry["source"]) == (choice.config, choice.time_us, choice.source)
    picks = {(e["m"], e["n"], e["k"], e["trans"]): ops.library_for(e["config"]) is not None for e in listed}
    assert picks[1, 4096, 4096, False] is False  # the tie, which ours takes
    assert any(picks.values()) and not all(picks.values())  # both kinds of answer are compared


def test_show_prints_each_value_whole_without_an_empty_message_column(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str
) -> None:
    lines = printed(monkeypatch, capsys, "show", "--m", "4096", "--n", "8192", "--gpu", "h200", "--db", db)
    assert lines[0] == "hgemv 4096x8192 on NVIDIA H200" and "message" not in lines[1] and "…" not in "".join(lines)
    best = api.best("hgemv", 4096, 8192, gpu="NVIDIA H200", db=db)
    assert cli._config_text(best.config, best.problem) in " ".join(words(lines))  # the fastest, each value whole
    trials = sum(line.startswith("ok ") for line in lines)
    _, wide, _ = run_cli(
        monkeypatch, capsys, "show", "--m", "4096", "--n", "8192", "--gpu", "h200", "--wide", "--db", db
    )
    assert trials > 1 and len(wide.splitlines()) == 2 + trials  # the title, the headings, a line a trial


@pytest.mark.parametrize(
    "problem",
    [
        ["--m", "4096", "--n", "8192"],
        ["--m", "5001", "--n", "7003"],
        ["--op", "hgemm", "--m", "3", "--n", "5000", "--k", "3001"],
    ],
    ids=["measured", "estimate", "gemm-estimate"],
)
def test_best_fits_and_its_config_reads_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str, problem: list[str]
) -> None:
    lines = printed(monkeypatch, capsys, "best", *problem, "--gpu", "h200", "--db", db)
    answer = json.loads(run_cli(monkeypatch, capsys, "best", *problem, "--gpu", "h200", "--json", "--db", db)[1])
    start = next(i for i, line in enumerate(lines) if line.startswith("config: "))
    end = next((i for i, line in enumerate(lines) if i > start and not line.startswith(" ")), len(lines))
    named = dict(word.split("=") for word in words(lines[start:end])[1:])
    assert {key: int(value) for key, value in named.items()} == answer["config"]


def test_warmup_fits(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str) -> None:
    """The widest row the shipped records hold: a GEMM with B stored N x K, its kernel's long name."""
    shape = ("--m", "4096", "--n", "4096", "--k", "14336", "--trans")
    lines = printed(monkeypatch, capsys, "warmup", "--gpu", "h200", "--op", "sgemm", *shape, "--db", db)
    assert "2 kernels: 2 shipped" in " ".join(lines) and sum(line.startswith("    gemm_") for line in lines) == 2
    assert sum(line.split()[1:3] == ["sgemmᵀ", "4096x4096x14336"] for line in lines) == 2


def test_doctor_fits_and_breaks_a_path_between_folders(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "a_folder_that_pushes_the_path_past_the_edge"
    folder.mkdir()
    lines = printed(monkeypatch, capsys, "doctor", "--db", str(folder / "autotune.db"))
    for name in folder.parts[1:]:  # every folder's name whole on one line
        assert any(f"{name}/" in line for line in lines), name
    assert any(line.startswith("ok  database") for line in lines)


def test_an_error_wraps_at_spaces_on_a_terminal_and_stays_one_line_in_a_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str
) -> None:
    args = ("best", "--m", "64", "--n", "64", "--gpu", "RTX 4090", "--db", db)
    code, _, logged = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and len(logged.splitlines()) == 1 and len(logged) > WIDTH
    terminal = cli._Console(stderr=True, highlight=False, soft_wrap=True, force_terminal=True)
    monkeypatch.setattr(cli, "err", terminal)
    code, _, shown = run_cli(monkeypatch, capsys, *args)
    first, *rest = shown.splitlines()
    assert code == 2 and first.startswith("error: unknown GPU 'RTX 4090'") and rest
    assert all(len(line) <= WIDTH for line in shown.splitlines()) and all(line.startswith("  ") for line in rest)
    assert words(shown.splitlines()) == logged.split()  # the same words, none cut


def test_gpus_fits_and_names_every_stored_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str
) -> None:
    lines = printed(monkeypatch, capsys, "gpus", "--db", db)
    text = " ".join(words(lines))
    for name in ("H200", "H100"):  # a name wraps inside its cell, never past the edge
        assert name in text


def test_queue_fits(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: str) -> None:
    shape = ("--op", "bgemm", "--m", "4096", "--n", "14336", "--k", "4096", "--trans")
    code, _, err = run_cli(monkeypatch, capsys, "queue", "--add", "--gpu", "NVIDIA H100 80GB HBM3", *shape, "--db", db)
    assert code == 0 and "queued 1 problem " in err
    lines = printed(monkeypatch, capsys, "queue", "--db", db)
    assert lines[0].split()[:4] == ["gpu", "op", "shape", "state"] and "4096x14336x4096" in " ".join(lines)


def test_the_sweep_table_fits_and_names_every_config_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `autotune sweep --op hgemv` prints at its end, for problems with a long config, a cuBLASLt
    time, failed trials and a study that ran out of time."""
    from autotune.core.problem import Problem
    from autotune.ops import in_space_order
    from autotune.tune.search import StudyResult
    from autotune.tune.tuner import ProblemReport, SweepReport
    from tests.test_cli import H200

    config = dict(
        block=128, lanes=128, vec=8, unroll=8, rows=2, x_smem=0, policy=1, cluster=1, split=1, persist=0, prefetch=3
    )
    config["order"] = 1
    shapes = [(4096, 8192), (128256, 4096), (256, 131072)]
    problems = [Problem("gemv", "float16", m, n) for m, n in shapes]
    results = [
        StudyResult(
            config, 15.53, 32, 3, {"ok": 35}, "no 1% improvement in 32 trials", vendor_us=21.1, unmeasured_first=7
        ),
        StudyResult(config, 230.06, 60, 4, {"ok": 62, "invalid": 2}, "timeout"),
        StudyResult(None, None, 0, 0, {}, "setup failed: no GPU 3"),
    ]
    rows = [ProblemReport(p, r, 7.2) for p, r in zip(problems, results, strict=True)]
    report = SweepReport(H200, "sqlite:///tmp/x.db", rows)
    capsys.readouterr()
    cli._print_sweep(report)
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= WIDTH, "\n".join(lines)
    assert lines[0].startswith("NVIDIA H200") and lines[1].split()[:4] == ["op", "shape", "best", "us"]
    text = " ".join(lines)
    for m, n in shapes:
        assert f"{m}x{n}" in text  # no shape cut
    assert "21.10" in text and "32+3" in text and "60+4, 2 failed" in text
    named = [word for word in text.split() if "=" in word]
    assert named == [f"{k}={v}" for k, v in in_space_order(problems[0], config).items()] * 2  # whole, in order
    assert "stopped: timeout" in text and "stopped: setup failed: no GPU 3" in text
    assert "stopped: no 1%" not in text  # the usual end is not repeated on every row
    # but a patience stop that left part of the warm start unmeasured says what a longer one adds
    assert "stopped before 7 of the configs queued first" in text and "--patience" in text
    assert text.count("configs queued first") == 1
