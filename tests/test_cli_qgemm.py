"""The `autotune` command on the int4 weight-only op (qgemm), as a user tries it on a machine without
a GPU: the op and its variants in the help, best, show, list, queue, export and report over a
database of fake qgemm trials, each answer naming its variant within 80 columns, and every mistake
a one-line error."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from autotune import display, ops
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.store import open_store
from tests.fakes import WIDTH, ok, printed, record, run_cli
from tests.test_cli import _fresh_api  # noqa: F401  (a fixture, used by name)

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = ["--m", "1", "--n", "4096", "--k", "4096"]
# The stored problems: float16 activations at g128 and g128a, bfloat16 at g64; one float16 GEMV beside.
VARIANTS = (("float16", "g128"), ("float16", "g128a"), ("bfloat16", "g64"))
QGEMM = ops.get("qgemm")


def _problem(dtype: str, variant: str) -> Problem:
    return ops.make_problem("qgemm", dtype, 1, 4096, 4096, variant=variant)


def _fast(problem: Problem) -> dict[str, int]:
    """The config stored fastest: the op's first seed (not its default, which is stored slower)."""
    return QGEMM.seed_configs(problem)[0]


@pytest.fixture(autouse=True)
def _eighty_columns(_fresh_api: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 (the fixture)
    monkeypatch.setenv("COLUMNS", str(WIDTH))


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A database holding three qgemm problems (two OK trials and a wrong result each) and a GEMV."""
    path = str(tmp_path / "int4.db")
    with open_store(path, import_shipped=False) as store:
        for dtype, variant in VARIANTS:
            problem = _problem(dtype, variant)
            default = QGEMM.default_config(problem)
            assert _fast(problem) != default
            record(store, problem, default, ok(30.0), H200)
            record(store, problem, _fast(problem), ok(20.0 if variant != "g128a" else 25.0), H200)
            wrong = Outcome(Status.WRONG_RESULT, message="out[0, 3] is 7.5, expected 1.25")
            record(store, problem, QGEMM.seed_configs(problem)[1], wrong, H200)
        record(store, Problem("gemv", "float16", 4096, 4096), gemv.DEFAULT_CONFIG, ok(25.0), H200)
    return path


def one_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one `error:` line (exit 2, no traceback) of a command that must fail."""
    code, out, err = run_cli(monkeypatch, capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in out + err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def config_text(config: dict[str, int], problem: Problem) -> str:
    return " ".join(display.config_items(config, problem))


def test_the_help_names_the_int4_op_and_each_ops_variants(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one line an option
    for command in ("best", "sweep", "show", "queue", "warmup"):
        help_text = " ".join(printed(monkeypatch, capsys, command, "--help")).split()
        joined = " ".join(help_text)
        names = {word.rstrip(",") for word in help_text}
        assert {"hqgemm", "bqgemm", "qgemm", "qdequant"} <= names, command
        assert f"qgemm: {', '.join(QGEMM.variants)} (default g128)" in joined, command


def test_best_answers_each_variant_in_a_line_that_fits(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The inputs a float16 int4 problem always has are left out of its name; the variant stays."""
    for variant in ("g128", "g128a"):
        lines = printed(monkeypatch, capsys, "best", "--op", "hqgemm", *SHAPE, "--variant", variant, "--db", db)
        problem = _problem("float16", variant)
        assert lines[0].startswith(f"hqgemm 1x4096x4096 {variant} on NVIDIA H200 [measured]: measured ")
        assert " ".join(lines[1:]).split() == ["config:", *config_text(_fast(problem), problem).split()]
    plain = printed(monkeypatch, capsys, "best", "--op", "hqgemm", *SHAPE, "--db", db)
    assert plain[0].startswith("hqgemm 1x4096x4096 g128 on NVIDIA H200 [measured]")
    answer = json.loads(
        "\n".join(
            printed(monkeypatch, capsys, "best", "--op", "bqgemm", *SHAPE, "--variant", "g64", "--json", "--db", db)
        )
    )
    assert answer[0]["op"] == "bqgemm" and answer[0]["variant"] == "g64" and answer[0]["source"] == "measured"
    assert answer[0]["inputs"] == ["bfloat16", "int4", "bfloat16", "uint8"]


def test_problem_text_keeps_input_dtypes_the_op_does_not_imply() -> None:
    assert display.problem_text(_problem("bfloat16", "g32a")) == "bqgemm 1x4096x4096 g32a"
    assert str(_problem("bfloat16", "g32a")) == "bqgemm 1x4096x4096 [bfloat16,int4,bfloat16,uint8] g32a"
    odd = Problem("gemv", "float16", 64, 128, inputs=("int8",))
    assert display.problem_text(odd) == str(odd) == "hgemv 64x128 [int8]"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--op", "hgemv", "--m", "1", "--n", "4096", "--variant", "g128"],
            ["gemv has no variants", "variant of qgemm"],
        ),
        (["--op", "hqgemm", *SHAPE, "--variant", "g16"], ["unknown variant 'g16' of qgemm", "g128a"]),
        (["--op", "hqgemm", "--m", "1", "--n", "4096"], ["QGEMM needs K (--k)"]),
        (["--op", "sqgemm", *SHAPE], ["float16 or bfloat16", "float32"]),
        (["--op", "hqgemm", "--m", "128", "--n", "4096", "--k", "4096"], ["M <= 64"]),
        (["--op", "hqgemm", "--m", "1", "--n", "4096", "--k", "4000"], ["K = 4000", "group size 128"]),
        (["--op", "hqgemm", *SHAPE, "--variant", "g64", "--k", "96"], ["K = 96", "group size 64"]),
        (["--op", "hqgemm", *SHAPE, "--inputs", "int4"], ["qgemm reads 4 input arrays"]),
        (["--op", "hqgemm", *SHAPE, "--trans"], ["--trans"]),
    ],
)
def test_a_wrong_int4_problem_is_one_error_line(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], words: list[str]
) -> None:
    line = one_error(monkeypatch, capsys, "best", *args, "--db", db)
    assert all(word in line for word in words), line


def test_sweep_without_a_gpu_is_one_error_line_and_its_problems_queue_as_asked(
    tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep cannot measure here: one error line, no database. What it would tune is what `queue
    --add` queues (the same problem list): the standard set, or one shape, in the variant asked."""
    target = tmp_path / "sweep.db"
    sweep = ["sweep", "--op", "hqgemm", "--variant", "g64", *SHAPE, "--trials", "2", "--db", str(target)]
    line = one_error(monkeypatch, capsys, *sweep)
    assert any(word in line for word in ("PyCUDA", "nvcc", "GPU")) and not target.exists(), line
    add = ["queue", "--add", "--gpu", H200.name, "--db", db]
    cli_out = run_cli(monkeypatch, capsys, *add, "--op", "hqgemm", "--variant", "g64")
    assert cli_out[0] == 0 and f"queued {len(ops.standard_shapes('qgemm'))} problems" in cli_out[2]
    assert run_cli(monkeypatch, capsys, *add, "--op", "bqgemm", *SHAPE, "--variant", "g128a")[0] == 0
    queued = json.loads("\n".join(printed(monkeypatch, capsys, "queue", "--json", "--db", db)))
    keys = {(row["op"], row["variant"], row["m"], row["n"], row["k"]) for row in queued}
    standard = {("hqgemm", "g64", m, n, k) for m, n, k in ops.standard_shapes("qgemm")}
    assert keys == standard | {("bqgemm", "g128a", 1, 4096, 4096)}
    table = printed(monkeypatch, capsys, "queue", "--db", db)
    assert any(line.split()[1:3] == ["bqgemm/g128a", "1x4096x4096"] for line in table)


def test_list_and_show_name_each_variant(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = printed(monkeypatch, capsys, "list", "--db", db)
    named = [line.split()[:3] for line in lines if "qgemm" in line]
    assert named == [
        ["bqgemm/g64", "1x4096x4096", "2/3"],
        ["hqgemm/g128", "1x4096x4096", "2/3"],
        ["hqgemm/g128a", "1x4096x4096", "2/3"],
    ]
    only = printed(monkeypatch, capsys, "list", "--op", "hqgemm", "--db", db)
    assert [line.split()[0] for line in only if "qgemm" in line] == ["hqgemm/g128", "hqgemm/g128a"]
    listed = json.loads("\n".join(printed(monkeypatch, capsys, "list", "--json", "--op", "qgemm", "--db", db)))
    assert [(row["op"], row["variant"], row["best_us"]) for row in listed] == [
        ("bqgemm", "g64", 20.0),
        ("hqgemm", "g128", 20.0),
        ("hqgemm", "g128a", 25.0),
    ]
    shown = printed(monkeypatch, capsys, "show", "--op", "hqgemm", *SHAPE, "--variant", "g128a", "--db", db)
    assert shown[0] == "hqgemm 1x4096x4096 g128a on NVIDIA H200"
    assert [line.split()[:2] for line in shown if line.split()[0] in ("ok", "wrong_result")] == [
        ["ok", "25.00"],
        ["ok", "30.00"],
        ["wrong_result", "-"],
    ]
    assert "message: out[0, 3] is 7.5, expected 1.25" in " ".join(shown)
    missing = printed(monkeypatch, capsys, "show", "--op", "hqgemm", *SHAPE, "--variant", "g32", "--db", db)
    assert missing == ["no trials stored for hqgemm 1x4096x4096 g32 on NVIDIA H200"]


def test_exports_tell_the_variants_apart_and_read_back(
    tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "best.csv"
    assert run_cli(monkeypatch, capsys, "export", "--format", "csv", "-o", str(table), "--db", db)[0] == 0
    rows = list(csv.DictReader(table.read_text().splitlines()))
    assert [(r["op"], r["variant"], r["inputs"]) for r in rows if "qgemm" in r["op"]] == [
        ("bqgemm", "g64", "bfloat16,int4,bfloat16,uint8"),
        ("hqgemm", "g128", "float16,int4,float16,uint8"),
        ("hqgemm", "g128a", "float16,int4,float16,uint8"),
    ]
    assert [(r["op"], r["variant"], r["inputs"]) for r in rows if r["op"] == "hgemv"] == [("hgemv", "", "")]

    records = tmp_path / "int4.jsonl"
    assert run_cli(monkeypatch, capsys, "export", "-o", str(records), "--top", "2", "--db", db)[0] == 0
    trials = [json.loads(line) for line in records.read_text().splitlines()[1:]]
    assert sorted((t["op"], t["variant"]) for t in trials if t["op"] == "qgemm") == sorted(
        [("qgemm", v) for _, v in VARIANTS] * 2
    )
    other = str(tmp_path / "other.db")
    assert run_cli(monkeypatch, capsys, "import", str(records), "--no-shipped", "--db", other)[0] == 0
    answer = json.loads(
        "\n".join(
            printed(
                monkeypatch, capsys, "best", "--op", "hqgemm", *SHAPE, "--variant", "g128a", "--json", "--db", other
            )
        )
    )
    assert (answer[0]["source"], answer[0]["time_us"], answer[0]["config"]) == (
        "measured",
        25.0,
        _fast(_problem("float16", "g128a")),
    )


def test_a_csv_of_problems_without_variants_keeps_its_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "gemv.db")
    with open_store(path, import_shipped=False) as store:
        record(store, Problem("gemv", "float16", 4096, 4096), gemv.DEFAULT_CONFIG, ok(25.0), H200)
    table = tmp_path / "gemv.csv"
    assert run_cli(monkeypatch, capsys, "export", "--format", "csv", "-o", str(table), "--db", path)[0] == 0
    header = table.read_text().splitlines()[0]
    assert header == "gpu,op,dtype,m,n,k,trans,rank,time_us,gbs,tflops,config,source_hash,driver,cuda"


def test_report_groups_shapes_by_variant(
    tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    assert run_cli(monkeypatch, capsys, "report", "-o", str(page), "--db", db)[0] == 0
    html = page.read_text()
    groups = [f"<h3>NVIDIA H200, {title}</h3>" for title in ("hgemv", "bqgemm/g64", "hqgemm/g128", "hqgemm/g128a")]
    assert all(group in html for group in groups)
    assert [html.index(group) for group in groups] == sorted(html.index(group) for group in groups)
    assert ">bqgemm 1x4096x4096 g64<" in html  # a failure's example problem, named as best names it


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["bench", "--op", "hqgemm", *SHAPE], ["bench times GEMV and GEMM", "hqgemm"]),
        (["export", "--format", "bundle", "-o", "b", "--gpu", "h200", "--op", "hqgemm"], ["GEMV and GEMM", "hqgemm"]),
        (["warmup", "--stored", "--op", "hqgemm", "--variant", "g64"], ["--stored", "--variant"]),
    ],
)
def test_what_does_not_take_the_int4_op_says_so_in_one_line(
    tmp_path: Path,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    words: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error(monkeypatch, capsys, *args, "--db", db)
    assert all(word in line for word in words), line
