"""Errors that name the real cause: a tensor on the wrong device, an unknown GPU the same way in every
command, `--gpu` rather than Python's keyword, counts in the right number."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune import api, cli
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.store import open_store
from autotune.store.database import open_database
from tests.fakes import ok, record, run_cli

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
H100 = GpuInfo("NVIDIA H100 80GB HBM3", "GPU-2222", "9.0", 132, 50 * 2**20, 80 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)
FAST = {**gemv.DEFAULT_CONFIG, "block": 256, "vec": 8}


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class _Device:
    def __init__(self, kind: str) -> None:
        self.type = kind

    def __str__(self) -> str:
        return self.type


class HostTensor:
    """As much of a torch tensor in host memory as the launch path reads before refusing it."""

    is_cuda = False

    def __init__(self, shape: tuple[int, ...], dtype: str = "float16", device: str = "cpu") -> None:
        self.shape, self.dtype, self.device = shape, _Dtype(dtype), _Device(device)

    def stride(self) -> tuple[int, ...]:
        return (self.shape[1], 1) if len(self.shape) == 2 else (1,)

    def get_device(self) -> int:
        return -1

    def data_ptr(self) -> int:
        return 4096


HostTensor.__module__ = "torch"  # described as a torch tensor


CALLS: dict[str, Any] = {
    "gemv": lambda: autotune.gemv(HostTensor((64, 128)), HostTensor((128,))),
    "gemm": lambda: autotune.gemm(HostTensor((64, 128)), HostTensor((128, 32))),
    "linear": lambda: autotune.linear(HostTensor((1, 128)), HostTensor((64, 128))),
    "warmup": lambda: autotune.warmup(gemv=[(HostTensor((64, 128)), HostTensor((128,)))]),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_cpu_tensor_of_a_good_dtype_is_told_its_device(call: str) -> None:
    with pytest.raises(AutotuneError) as error:
        CALLS[call]()
    message = str(error.value)
    assert "on the CPU" in message and ".cuda()" in message
    assert "float16" not in message  # the dtype is fine: the message must not send the user there


def test_a_tensor_wrong_in_device_and_dtype_is_told_both() -> None:
    with pytest.raises(AutotuneError, match=r"A is a tensor on the CPU and of dtype torch\.float64") as error:
        autotune.gemv(HostTensor((64, 128), "float64"), HostTensor((128,), "float64"))
    assert "float32, float16 or bfloat16" in str(error.value)


def test_a_tensor_on_another_device_names_it() -> None:
    with pytest.raises(AutotuneError, match=r"A is a tensor on device 'meta'"):
        autotune.gemv(HostTensor((64, 128), device="meta"), HostTensor((128,)))


# --- the command line ------------------------------------------------------------------------------


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database of hgemv 4096x8192 on the H200 and the H100, on a machine without a GPU."""
    monkeypatch.setattr(api, "local_gpu_name", lambda: None)
    api.new_session()
    path = str(tmp_path / "two.db")
    with open_store(path, import_shipped=False) as store:
        record(store, SHAPE, FAST, ok(5.0), H200)
        record(store, SHAPE, FAST, ok(9.0), H100)
    yield path
    api.new_session()


def one_error(result: tuple[int, str, str]) -> str:
    code, _, err = result
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["report", "-o", "r.html"],
        ["show", "--m", "4096", "--n", "8192"],
        ["export", "-o", "x.jsonl"],
        ["export", "-o", "x.csv", "--format", "csv"],
        ["export", "-o", "bundle", "--format", "bundle"],
    ],
)
def test_an_unknown_gpu_is_one_error_the_same_in_every_command(
    two_gpus: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error(run_cli(monkeypatch, capsys, *args, "--gpu", "rtx", "--db", two_gpus))
    assert line == f"error: unknown GPU 'rtx': the database holds {H100.name}, {H200.name}"
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("two.db")] == []  # nothing written


def test_best_names_the_stored_gpus_the_same_way(
    two_gpus: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_error(
        run_cli(monkeypatch, capsys, "best", "--m", "64", "--n", "64", "--gpu", "RTX 4090", "--db", two_gpus)
    )
    assert line.startswith(f"error: unknown GPU 'RTX 4090': the database holds {H100.name}, {H200.name}; described")


def test_show_without_a_gpu_shows_every_stored_gpu_as_best_does(
    two_gpus: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "show", "--m", "4096", "--n", "8192", "--db", two_gpus)
    assert code == 0 and err == ""
    assert f"on {H100.name}" in out and f"on {H200.name}" in out and "5.00" in out and "9.00" in out


def test_without_a_gpu_or_a_database_the_error_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(api, "local_gpu_name", lambda: None)
    api.new_session()
    line = one_error(run_cli(monkeypatch, capsys, "show", "--m", "64", "--n", "64", "--db", str(tmp_path / "e.db")))
    assert "--gpu" in line and "gpu=" not in line


def test_counts_take_their_noun_in_the_right_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api.new_session()
    db = str(tmp_path / "q.db")
    args = ("queue", "--add", "--gpu", "h200", "--db", db)
    _, _, err = run_cli(monkeypatch, capsys, *args, "--m", "5000", "--n", "7001")
    assert err.strip() == "queued 1 problem for h200"
    (tmp_path / "two").write_text("64 64\n128 128\n")
    _, _, err = run_cli(monkeypatch, capsys, *args, "--shapes", str(tmp_path / "two"))
    assert err.strip() == "queued 2 problems for h200"
    assert [cli.counted(n, "entry", "entries") for n in (0, 1, 2)] == ["0 entries", "1 entry", "2 entries"]


def test_a_missing_postgres_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    with pytest.raises(AutotuneError) as error:
        open_database("postgresql+psycopg://autotune@127.0.0.1:1/tuning")
    assert "pip install 'autotune-kernels[postgres]'" in str(error.value)


def test_no_shipped_creates_nothing_before_the_input_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api.new_session()
    target = tmp_path / "sweep.db"
    sweep = ("sweep", "--m", "0", "--n", "64", "--trials", "2", "--no-shipped", "--db", str(target))
    assert run_cli(monkeypatch, capsys, *sweep)[0] == 2
    queue = ("queue", "--add", "--gpu", "h200", "--m", "0", "--n", "64", "--no-shipped", "--db", str(target))
    assert run_cli(monkeypatch, capsys, *queue)[0] == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("columns", ["0", "²"])
def test_a_terminal_width_that_is_no_count_does_not_silence_or_break_the_command(columns: str, tmp_path: Path) -> None:
    """rich reads COLUMNS when the consoles are made, at import: COLUMNS=0 printed every line empty,
    error messages and --json too, and COLUMNS=² (a digit int() refuses) was a traceback."""
    env = {**os.environ, "COLUMNS": columns, "LINES": columns, "AUTOTUNE_DB": str(tmp_path / "t.db")}
    run = [sys.executable, "-m", "autotune"]
    refused = subprocess.run([*run, "best", "--m", "-1", "--n", "5"], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and refused.stderr.strip() == "error: M must be a positive integer, got -1"
    listed = subprocess.run([*run, "list"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr and listed.stdout.strip()


def test_a_gpu_that_is_not_a_name_is_one_line() -> None:
    for gpu in (5, ["h200"]):
        with pytest.raises(AutotuneError, match="--gpu must name a GPU"):
            api.best("hgemv", 4096, 8192, gpu=gpu)  # type: ignore[arg-type]


def test_a_shapes_file_line_of_a_megabyte_is_cut_in_the_error() -> None:
    from autotune.core.problem import parse_shapes

    with pytest.raises(AutotuneError) as error:
        parse_shapes("1024 1024\n" + "x" * 10**6 + "\n", "shapes.txt", ("M", "N"))
    message = str(error.value)
    assert message.startswith("shapes.txt line 2: expected two integers 'M N', got 'xxx") and len(message) < 200
