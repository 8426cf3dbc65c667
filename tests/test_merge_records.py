"""scripts/merge_records.py: a GPU run's export adds its new problems to the shipped records, each
trial in the file of its kind, and leaves the problems already shipped as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import merge_records  # noqa: E402

SHIPPED = REPO / "db" / "records"


def _first(path: Path, **want: Any) -> dict[str, Any]:
    """The first trial line of a shipped file with these values."""
    for raw in path.read_text().splitlines()[1:]:
        line = json.loads(raw)
        if all(line.get(key) == value for key, value in want.items()):
            return line
    raise AssertionError(f"no line with {want} in {path}")


def _write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def run(tmp_path: Path) -> dict[str, Any]:
    gpu = json.loads((SHIPPED / "nvidia-h200.jsonl").read_text().splitlines()[0])
    gemv = _first(SHIPPED / "nvidia-h200.jsonl", dtype="float16")
    trans = _first(SHIPPED / "nvidia-h200-gemv-trans.jsonl", dtype="float32")
    vendor = _first(SHIPPED / "nvidia-h200-cublas.jsonl", op="gemm", trans=True)
    records = tmp_path / "records"
    records.mkdir()
    _write(records / "nvidia-h200.jsonl", [gpu, gemv])  # the GEMV is shipped already
    export = tmp_path / "export.jsonl"
    _write(export, [gpu, {**gemv, "time_us": 0.5}, trans, vendor])
    return {"records": records, "export": export, "gemv": gemv, "trans": trans, "vendor": vendor}


def test_new_problems_go_to_the_file_of_their_kind(run: dict[str, Any]) -> None:
    added = merge_records.merge(run["export"], run["records"]).added
    assert dict(added) == {"nvidia-h200-gemv-trans.jsonl": 1, "nvidia-h200-cublas.jsonl": 1}
    shipped = [json.loads(raw) for raw in (run["records"] / "nvidia-h200.jsonl").read_text().splitlines()]
    assert shipped[1]["time_us"] == run["gemv"]["time_us"]  # a shipped problem keeps its rows
    cublas = (run["records"] / "nvidia-h200-cublas.jsonl").read_text().splitlines()
    assert json.loads(cublas[0])["kind"] == "gpu" and json.loads(cublas[1]) == run["vendor"]


def test_our_trials_join_a_problem_shipped_with_cublas_trials_alone(run: dict[str, Any]) -> None:
    vendor = run["vendor"]
    same = {key: vendor[key] for key in ("m", "n", "k", "dtype")}
    ours = _first(SHIPPED / "nvidia-h200-gemm-nt.jsonl", **same)
    gpu = json.loads(run["export"].read_text().splitlines()[0])
    _write(run["records"] / "nvidia-h200-cublas.jsonl", [gpu, vendor])
    _write(run["export"], [gpu, vendor, ours])
    assert dict(merge_records.merge(run["export"], run["records"]).added) == {"nvidia-h200-gemm-nt.jsonl": 1}


def test_a_problem_given_cublas_rows_alone_is_named(run: dict[str, Any]) -> None:
    vendor = run["vendor"]
    key = " ".join(map(str, merge_records.problem_key(vendor)))
    assert merge_records.merge(run["export"], run["records"], write=False).vendor_only == [key]
    ours = _first(SHIPPED / "nvidia-h200-gemm-nt.jsonl", **{k: vendor[k] for k in ("m", "n", "k", "dtype")})
    gpu = json.loads(run["export"].read_text().splitlines()[0])
    _write(run["export"], [gpu, vendor, ours])  # a config of ours measured too: nothing to name
    assert merge_records.merge(run["export"], run["records"], write=False).vendor_only == []


def test_only_the_problems_a_sweep_log_finished(run: dict[str, Any], tmp_path: Path) -> None:
    trans = run["trans"]
    log = tmp_path / "sweep.log"
    log.write_text(
        f"12:00:01 GPU 0 INFO autotune.tune.tuner: sgemv {trans['m']}x{trans['n']} (transposed): "
        "best 5.00 us after 3.1 s (40 measured, budget reached)\n"
    )
    only = merge_records.finished_problems(log.read_text())
    added = merge_records.merge(run["export"], run["records"], only=only).added
    assert dict(added) == {"nvidia-h200-gemv-trans.jsonl": 1}


def test_a_one_gpu_sweep_log_finishes_the_problems_whose_bar_is_full(run: dict[str, Any], tmp_path: Path) -> None:
    trans, gemv = run["trans"], run["gemv"]
    log = tmp_path / "sweep.log"
    log.write_text(
        f"[1/2] sgemv {trans['m']}x{trans['n']} (transposed) ━━━━━━━━━━━━━━━━ 24/24 best 5.00 us  0:00:01\n"
        f"[2/2] hgemv {gemv['m']}x{gemv['n']}              ━━━━              8/24 best 4.00 us  0:00:00\n"
    )
    only = merge_records.finished_problems(log.read_text())
    assert only == {("gemv", "float32", trans["m"], trans["n"], None, True)}  # the bar cut short is left out
    added = merge_records.merge(run["export"], run["records"], only=only).added
    assert dict(added) == {"nvidia-h200-gemv-trans.jsonl": 1}


def test_a_stale_problem_is_replaced_and_a_current_one_kept(run: dict[str, Any]) -> None:
    gpu, gemv = json.loads(run["export"].read_text().splitlines()[0]), run["gemv"]
    resized = {**gemv, "m": gemv["m"] + 1}  # another shipped problem, its rows of today's source
    _write(run["records"] / "nvidia-h200.jsonl", [gpu, gemv, resized])
    edited = {
        **gemv,
        "source_hash": "0123456789abcdef",
        "time_us": gemv["time_us"] * 0.9,
    }  # re-tuned after a kernel edit
    _write(run["export"], [gpu, edited, {**resized, "time_us": gemv["time_us"] * 0.8}])
    assert dict(merge_records.merge(run["export"], run["records"]).added) == {}  # without the option
    merged = merge_records.merge(run["export"], run["records"], replace_stale=True)
    assert dict(merged.added) == dict(merged.replaced) == {"nvidia-h200.jsonl": 1}
    lines = [json.loads(raw) for raw in (run["records"] / "nvidia-h200.jsonl").read_text().splitlines()]
    assert lines == [gpu, resized, edited]


def test_a_damaged_export_writes_nothing(run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    # The vendor's line, whose file comes last, is the bad one: the GEMV file before it stays as it was.
    lines = run["export"].read_text().splitlines()
    bad = json.loads(lines[3])
    bad["config"] = {"no_such_parameter": 1}
    run["export"].write_text("\n".join([*lines[:3], json.dumps(bad)]) + "\n")
    before = sorted(p.name for p in run["records"].iterdir())
    assert merge_records.main([str(run["export"]), "--records", str(run["records"])]) == 1
    assert "merge_records:" in capsys.readouterr().err
    assert sorted(p.name for p in run["records"].iterdir()) == before


def test_int4_variants_of_one_shape_are_two_problems_in_their_own_file(tmp_path: Path) -> None:
    gpu = json.loads((SHIPPED / "nvidia-h200.jsonl").read_text().splitlines()[0])
    g128 = _first(SHIPPED / "nvidia-h200-qgemm.jsonl", variant="g128")
    g128a = {**g128, "variant": "g128a", "time_us": g128["time_us"] + 1}
    records = tmp_path / "records"
    records.mkdir()
    _write(records / "nvidia-h200-qgemm.jsonl", [gpu, g128])  # g128 is shipped, g128a is new
    export = tmp_path / "export.jsonl"
    _write(export, [gpu, {**g128, "time_us": 0.5}, g128a])
    assert dict(merge_records.merge(export, records).added) == {"nvidia-h200-qgemm.jsonl": 1}
    shipped = [json.loads(raw) for raw in (records / "nvidia-h200-qgemm.jsonl").read_text().splitlines()[1:]]
    assert [(t["variant"], t["time_us"]) for t in shipped] == [("g128", g128["time_us"]), ("g128a", g128a["time_us"])]


def test_a_faster_trial_of_the_same_source_joins_a_shipped_problem(run: dict[str, Any]) -> None:
    gpu, gemv = json.loads(run["export"].read_text().splitlines()[0]), run["gemv"]
    slower = {**gemv, "time_us": gemv["time_us"] * 2}
    other_source = {**gemv, "time_us": 0.1, "source_hash": "0123456789abcdef"}
    faster = {**gemv, "time_us": gemv["time_us"] / 2}
    _write(run["export"], [gpu, slower, other_source])
    merged = merge_records.merge(run["export"], run["records"], faster=True)
    assert dict(merged.added) == {} and merged.faster == []  # slower, or another kernel source: nothing
    _write(run["export"], [gpu, slower, faster, gemv])
    merged = merge_records.merge(run["export"], run["records"], faster=True)
    assert dict(merged.added) == {"nvidia-h200.jsonl": 2} and len(merged.faster) == 1
    lines = [json.loads(raw) for raw in (run["records"] / "nvidia-h200.jsonl").read_text().splitlines()]
    assert lines == [gpu, gemv, slower, faster]  # the export's rows of it, the shipped row once


def test_an_op_other_than_gemv_and_gemm_ships_in_a_file_named_after_it(tmp_path: Path) -> None:
    """A new op's trials (the int4 dequantization's) go to <slug>-<op>.jsonl, made where missing."""
    gpu = json.loads((SHIPPED / "nvidia-h200.jsonl").read_text().splitlines()[0])
    trial = _first(SHIPPED / "nvidia-h200-qdequant.jsonl", variant="g128")
    records = tmp_path / "records"
    records.mkdir()
    export = tmp_path / "export.jsonl"
    _write(export, [gpu, trial])
    assert dict(merge_records.merge(export, records).added) == {"nvidia-h200-qdequant.jsonl": 1}
    assert sorted(p.name for p in records.iterdir()) == ["nvidia-h200-qdequant.jsonl"]
