"""Hostile records files: every bad line is refused in one line naming file and line, and nothing is stored."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.core.target import target_capabilities, targeting
from autotune.ops import gemm, gemv
from autotune.ops.gemv import narrow
from autotune.store import Store, open_store
from tests import postgres
from tests.fakes import ok, record, run_cli

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 4096)
CONFIG = gemv.OP.default_config(SHAPE)
GEMM_CONFIG = gemm.OP.default_config(Problem("gemm", "float16", 1, 1, 2**31 - 1))
BIG_GEMM_CONFIG = gemm.OP.default_config(Problem("gemm", "float16", 8192, 8192, 8192))
GPU_LINE: dict[str, Any] = {"kind": "gpu", **{k: v for k, v in H200.to_dict().items() if k != "uuid"}}
INJECTED = '0\n#ifndef ONCE\nextern "C" __global__ void injected_kernel() {}\n#endif'


def trial(**changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "kind": "trial",
        "op": "gemv",
        "dtype": "float16",
        "m": 4096,
        "n": 4096,
        "k": 0,
        "trans": False,
        "config": dict(CONFIG),
        "time_us": 10.0,
        "times_us": [10.0],
        "rounds": 1,
        "gbs": 3000.0,
        "rel_error": 0.001,
        "source_hash": "abc",
        "nvcc": "13.0.88",
        "pycuda": "2025.1",
        "driver": "13.0",
        "cuda": "13.0",
        "created_at": "2025-01-02T03:04:05+00:00",
    }
    for name, value in changes.items():
        if value is DROP:
            del line[name]
        else:
            line[name] = value
    return line


DROP = object()


def config(**changes: Any) -> dict[str, Any]:
    return {**CONFIG, **changes}


BAD_TRIALS: dict[str, tuple[dict[str, Any], str]] = {
    "code in a config value": (trial(config=config(order=INJECTED)), "order must be an integer"),
    "include in a config value": (trial(config=config(block='#include "/etc/passwd"')), "block must be an integer"),
    "true for 1": (trial(config=config(order=True)), "order must be an integer, got True"),
    "128.0 for 128": (trial(config=config(block=128.0)), "block must be an integer, got 128.0"),
    "string digit": (trial(config=config(order="0")), "order must be an integer, got '0'"),
    "null value": (trial(config=config(order=None)), "order must be an integer"),
    "list value": (trial(config=config(order=[0])), "order must be an integer"),
    "value not offered": (trial(config=config(block=96)), "block=96 is not one of"),
    "unknown parameter": (trial(config=config(evil=1)), "unknown ['evil']"),
    "missing parameter": (trial(config={k: v for k, v in CONFIG.items() if k != "block"}), "missing ['block']"),
    "config breaks the constraint": (trial(config=config(lanes=1024, block=64)), "not valid for hgemv"),
    "config not an object": (trial(config=[1, 2]), "field 'config' must be a dict"),
    "unknown op": (trial(op="conv2d"), "unknown op 'conv2d'"),
    "unknown dtype": (trial(dtype="int4"), "unknown dtype 'int4'"),
    "dtype alias": (trial(dtype="fp16"), "unknown dtype 'fp16'"),
    "op not a string": (trial(op=1), "field 'op' must be a str"),
    "m zero": (trial(m=0), "M must be a positive integer"),
    "m negative": (trial(m=-4096), "M must be a positive integer"),
    "m huge": (trial(m=2**40), "too large"),
    "m float": (trial(m=4096.0), "field 'm' must be a int"),
    "m bool": (trial(m=True), "field 'm' must be a int"),
    "n string": (trial(n="4096"), "field 'n' must be a int"),
    "k for gemv": (trial(k=64), "field 'k' must be 0 for gemv"),
    "k negative": (trial(k=-1), "field 'k' must be an integer from 0 to"),
    "trans not bool": (trial(trans=1), "field 'trans' must be true or false"),
    "gemm without k": (trial(op="gemm", k=DROP), "K must be a positive integer"),
    "time zero": (trial(time_us=0), "field 'time_us' must be a time from 0.1 to 1e+09 microseconds"),
    "time negative": (trial(time_us=-1.0), "field 'time_us' must be a time from 0.1"),
    "time absurd": (trial(time_us=1e30), "field 'time_us' must be a time from 0.1"),
    # Positive and finite, but faster than any launch: the cost model's 1/t^2 underflowed to 0.
    "time subnormal": (trial(time_us=5e-324, times_us=[5e-324]), "field 'time_us' must be a time from 0.1"),
    "time tiny": (trial(time_us=1e-200, times_us=[1e-200]), "got 1e-200"),
    "time under a launch": (trial(time_us=0.09), "field 'time_us' must be a time from 0.1"),
    "sample tiny": (trial(times_us=[10.0, 1e-160]), "field 'times_us' must hold times from 0.1"),
    "sample huge": (trial(times_us=[2e9]), "field 'times_us' must hold times from 0.1"),
    "gbs absurd": (trial(gbs=1e300), "field 'gbs' must be a bandwidth from 0 to"),
    "gbs negative": (trial(gbs=-1.0), "field 'gbs' must be a bandwidth from 0 to"),
    "error negative": (trial(rel_error=-0.5), "field 'rel_error' must be a relative error from 0 to 1"),
    # A measured trial passed the float64 check: an output off by 7 times its size never does.
    "error of a failed output": (trial(rel_error=7.0), "field 'rel_error' must be a relative error from 0 to 1"),
    # Plausible times for some call, impossible for this one: 8 GiB read in 2 us, 1.1 PFLOP in 10 us.
    "faster than any memory": (
        trial(m=65536, n=65536, time_us=2.0, times_us=[2.0]),
        "a time of 2 us for hgemv 65536x65536 would be 4,295 TB/s, more than any memory moves (100)",
    ),
    "a sample faster than any memory": (trial(times_us=[10.0, 0.2]), "a time of 0.2 us for hgemv 4096x4096"),
    "faster than any GPU computes": (
        trial(op="gemm", m=8192, n=8192, k=8192, config=BIG_GEMM_CONFIG, time_us=10.0, times_us=[10.0]),
        "would be 110 PFLOP/s, more than any GPU computes (20)",
    ),
    "time string": (trial(time_us="fast"), "field 'time_us' must be a float"),
    "time missing": (trial(time_us=DROP), "missing field 'time_us'"),
    "samples of strings": (trial(times_us=["1"]), "field 'times_us' must hold times"),
    "sample of true": (trial(times_us=[True]), "field 'times_us' must hold times"),
    "too many samples": (trial(times_us=[10.0] * 10_001), "field 'times_us' holds more than 10000 samples"),
    "samples not a list": (trial(times_us=1.0), "field 'times_us' must be a list"),
    "gbs string": (trial(gbs="1"), "field 'gbs' must be a float"),
    "rounds zero": (trial(rounds=0), "field 'rounds' must be an integer from 1 to 1000000"),
    "rounds float": (trial(rounds=2.0), "field 'rounds' must be an integer from 1"),
    # PostgreSQL's INTEGER column refused these where SQLite stored them: both refuse them now.
    "rounds past an INTEGER": (trial(rounds=2**62), "field 'rounds' must be an integer from 1 to 1000000"),
    "k past an INTEGER": (trial(op="gemm", k=2**31), "field 'k' must be an integer from 0 to 2147483647"),
    "bad date": (trial(created_at="yesterday"), "field 'created_at': not an ISO date"),
    # Valid ISO text that is no datetime once moved to UTC: OverflowError, not ValueError.
    "date before year 1 in UTC": (trial(created_at="0001-01-01T00:00:00+05:00"), "is not between 1970-01-01"),
    "date after 9999 in UTC": (trial(created_at="9999-12-31T23:59:59-05:00"), "is not between 1970-01-01"),
    "date before CUDA": (trial(created_at="1969-12-31T23:59:59+00:00"), "is not between 1970-01-01 and 9999-01-01"),
    "date at the end of time": (trial(created_at="9999-06-01T00:00:00"), "is not between 1970-01-01 and 9999-01-01"),
    "source hash not text": (trial(source_hash=5), "field 'source_hash' must be a str"),
    "escape codes in a version": (trial(nvcc="13\x1b[2J"), "field 'nvcc' holds control characters"),
    "huge text": (trial(driver="x" * 1000), "field 'driver' is longer than 200 characters"),
    "unknown field": (trial(exec="rm -rf /"), "unknown field 'exec'"),
    "wrong kind": (trial(kind="gpu"), "expected kind 'trial'"),
}


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("name", BAD_TRIALS)
def test_a_bad_trial_line_is_refused_whole_in_one_line(store: Store, tmp_path: Path, name: str) -> None:
    line, words = BAD_TRIALS[name]
    records = write(tmp_path / "mine.jsonl", [GPU_LINE, trial(), line])
    with pytest.raises(AutotuneError) as caught:
        store.import_records(records)
    message = str(caught.value)
    assert message.startswith(f"{records} line 3: ") and words in message, message
    assert "\n" not in message and len(message) < 400
    assert store.gpus() == [] and store.problems() == []  # the good line 2 is not kept either


BAD_FILES: dict[str, tuple[list[Any], str]] = {
    "empty": ([], "is empty"),
    "gpu line missing": ([trial()], "line 1: expected kind 'gpu'"),
    "gpu name with escapes": ([{**GPU_LINE, "name": "H200\x1b]0;owned\x07"}], "line 1: field 'name' holds control"),
    "gpu count negative": ([{**GPU_LINE, "sm_count": -1}], "line 1: field 'sm_count' must be a count from 1 to 1024"),
    # PostgreSQL's INTEGER column refused this where SQLite stored it: both refuse it now.
    "gpu count past an INTEGER": ([{**GPU_LINE, "sm_count": 2**40}], "line 1: field 'sm_count' must be a count from 1"),
    "gpu count no GPU has": ([{**GPU_LINE, "sm_count": 1025}], "line 1: field 'sm_count' must be a count from 1"),
    "gpu memory past 2**48": ([{**GPU_LINE, "memory_bytes": 2**48 + 1}], "field 'memory_bytes' must be a count"),
    "gpu capability a word": ([{**GPU_LINE, "compute_capability": "abc"}], "line 1: field 'compute_capability'"),
    "gpu capability with a flag": ([{**GPU_LINE, "compute_capability": "9.0 -Xcompiler"}], "is not a CUDA one"),
    "gpu capability with a newline": ([{**GPU_LINE, "compute_capability": "9.0\n"}], "line 1: field 'compute_cap"),
    "gpu capability major only": ([{**GPU_LINE, "compute_capability": "9"}], "line 1: field 'compute_capability'"),
    "gpu count bool": ([{**GPU_LINE, "sm_count": True}], "line 1: field 'sm_count' must be a int"),
    "gpu uuid a number": ([{**GPU_LINE, "uuid": 7}], "line 1: field 'uuid' must be a str"),
    "gpu unknown field": ([{**GPU_LINE, "x": 1}], "line 1: unknown field 'x'"),
    "not JSON": ([GPU_LINE, "{oops"], "line 2: not JSON"),
    "NaN": ([GPU_LINE, json.dumps(trial()).replace("10.0,", "NaN,", 1)], "line 2: not JSON (NaN is not a number"),
    "an array": ([GPU_LINE, "[1, 2]"], "line 2: expected a JSON object"),
    "deep nesting": ([GPU_LINE, "[" * 100000], "line 2: not JSON"),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_a_bad_file_is_one_line(store: Store, tmp_path: Path, name: str) -> None:
    lines, words = BAD_FILES[name]
    records = write(tmp_path / "mine.jsonl", lines)
    with pytest.raises(AutotuneError) as caught:
        store.import_records(records)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
    assert store.gpus() == []


def test_a_file_not_utf8_is_one_line(store: Store, tmp_path: Path) -> None:
    records = tmp_path / "mine.jsonl"
    records.write_bytes(b"\xff\xfe" + json.dumps(GPU_LINE).encode())
    with pytest.raises(AutotuneError, match="is not UTF-8 text"):
        store.import_records(records)


@pytest.mark.parametrize("text", ["", "\n", " \n\n"])
def test_an_empty_file_is_said_so(store: Store, tmp_path: Path, text: str) -> None:
    records = tmp_path / "mine.jsonl"
    records.write_text(text)
    with pytest.raises(AutotuneError, match=r"mine\.jsonl is empty: expected a GPU line first"):
        store.import_records(records)


def test_a_good_file_imports(store: Store, tmp_path: Path) -> None:
    records = write(tmp_path / "mine.jsonl", [GPU_LINE, trial(), trial(config=config(block=256), k=DROP)])
    assert store.import_records(records) == 2
    best = store.best(H200.name, SHAPE, "abc")
    assert best is not None and best.config == CONFIG


def test_a_narrow_config_written_before_lean_imports_as_the_kernel_it_ran(store: Store, tmp_path: Path) -> None:
    """A transposed GEMV's narrow config from before `lean` joined the space runs LEAN 0: it imports so."""
    problem = Problem("gemv", "float16", 131072, 256, trans=True)
    ran = narrow.default_config(problem)
    assert ran["lean"] == 0
    older = {name: value for name, value in ran.items() if name not in ("lean", "bands")}
    records = write(tmp_path / "older.jsonl", [GPU_LINE, trial(m=131072, n=256, trans=True, config=older)])
    assert store.import_records(records) == 1
    best = store.best(H200.name, problem, "abc")
    assert best is not None and best.config == ran
    stray = trial(m=131072, n=256, trans=True, config={**older, "x": 1})
    unknown = write(tmp_path / "unknown.jsonl", [GPU_LINE, stray])
    with pytest.raises(AutotuneError, match="unknown"):
        store.import_records(unknown)


def test_a_users_file_keeps_its_origin_when_the_shipped_file_of_its_name_changes(store: Store, tmp_path: Path) -> None:
    shipped = tmp_path / "records"
    shipped.mkdir()
    write(shipped / "nvidia-h200.jsonl", [GPU_LINE, trial(time_us=12.0)])
    assert store.import_shipped(shipped) == 1
    mine = tmp_path / "mine"
    mine.mkdir()
    users = write(mine / "nvidia-h200.jsonl", [GPU_LINE, trial(config=config(block=256), time_us=8.0)])
    assert store.import_records(users) == 1
    best = store.best(H200.name, SHAPE, "abc")
    assert best is not None and best.origin == f"imported:{users}"
    write(shipped / "nvidia-h200.jsonl", [GPU_LINE, trial(time_us=11.0)])  # the shipped file changes
    assert store.import_shipped(shipped) == 1
    pid = store.problem_id(SHAPE, H200.name, create=False)
    assert pid is not None
    assert sorted((t.time_us, t.origin) for t in store.trials(pid)) == [
        (8.0, f"imported:{users}"),
        (11.0, "shipped:nvidia-h200.jsonl"),
    ]


@pytest.mark.parametrize("value", [True, False, 128.0, "128", None, 1.5])
def test_space_check_wants_exact_integers(value: object) -> None:
    space = gemv.OP.space(SHAPE)
    why = space.check({**CONFIG, "block": value})
    assert why is not None and "block must be an integer" in why
    assert space.check({**CONFIG, "order": True}) is not None
    assert space.check(CONFIG) is None


@pytest.mark.parametrize("capability", ["abc", "9.0 -Xcompiler", "9", "9.0.1", " 9.0", "9.0\n", "٩.0", ""])
def test_a_compute_capability_cuda_would_not_write_steers_nothing(capability: str) -> None:
    with pytest.raises(AutotuneError, match="is not a CUDA one"), targeting(capability):
        pass


@pytest.mark.parametrize("capability", ["8.0", "9.0", "10.0", "12.1"])
def test_every_compute_capability_cuda_writes_is_one(capability: str) -> None:
    with targeting(capability):
        assert target_capabilities() == (capability,)


def test_a_gpu_row_written_straight_in_with_a_bad_capability_is_passed_over(
    store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its major number was an int() and its text an nvcc architecture; the records check refuses such
    a GPU line, and a row that did not come through it is skipped like any foreign row: the GPU's
    capability is then its description's (db/gpus.json), and `best` answers."""
    record(store, SHAPE, CONFIG, ok(10.0), dataclasses.replace(H200, compute_capability="9.0 -Xcompiler"))
    assert store.gpus() == []
    args = ("best", "--db", str(db_path), "--gpu", "NVIDIA H200", "--op", "hgemv", "--m", "4096", "--n", "4096")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert (code, err) == (0, "") and "-Xcompiler" not in out
    assert "10.00 us" in out  # the trial itself is sound: measured, on the described sm_90 space


@pytest.mark.stress
def test_the_largest_values_a_records_file_may_hold_are_stored_by_postgresql_too(tmp_path: Path) -> None:
    """Each integer field is bounded below its column's type: PostgreSQL's INTEGER refused an sm_count
    of 2**40 and rounds of 2**62 that SQLite kept, naming no line. A real server, so under stress."""
    largest_gpu = {**GPU_LINE, "sm_count": 1024, "l2_bytes": 2**48, "memory_bytes": 2**48}
    largest = trial(
        op="gemm", m=1, n=1, k=2**31 - 1, config=GEMM_CONFIG, rounds=10**6, time_us=1e9 - 1, times_us=[1e9 - 1]
    )
    records = write(tmp_path / "largest.jsonl", [largest_gpu, largest])
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # pytest's tmp_path is closed to the server's user
    try:
        with postgres.server(folder) as server, open_store(server.new_database(), import_shipped=False) as pg:
            assert pg.import_records(records) == 1
            [stored] = pg.gpus()
            assert (stored.sm_count, stored.memory_bytes) == (1024, 2**48)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
