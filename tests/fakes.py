"""Test doubles for orchestration tests: a compile pool that compiles nothing, a cost model, and
finished trials written into a store as a sweep writes them."""

from __future__ import annotations

import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from autotune.build.compiler import CompileJob, CompileResult
from autotune.core.fingerprint import GpuInfo, Toolchain
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.ops import source_hash
from autotune.store import Provenance, Store


def modelled_time_us(config: dict[str, int]) -> float:
    """A smooth made-up cost with one best config, so searches have something to find."""
    return (
        10.0
        + abs(config["block"] - 256) / 64
        + abs(config["lanes"] - 32) / 16
        + (8 - config["vec"])
        + abs(config["unroll"] - 2)
        + (config["rows"] - 1) * 0.5
        + config["x_smem"] * 0.3
        + config["policy"] * 0.2
        + (config["split"] - 1) * 0.1
        + config["persist"] * 0.1
        + (config.get("cluster", 1) - 1) * 0.05
        + config.get("prefetch", 0) * 0.1
    )


class InstantPool:
    """CompilePool's interface; every job 'compiles' to a placeholder path, except names in `broken`."""

    def __init__(self, workers: int = 4, broken: frozenset[str] = frozenset()) -> None:
        self.workers = workers
        self.submitted: list[CompileJob] = []
        self._broken = broken

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        self.submitted.append(job)
        future: Future[CompileResult] = Future()
        ok = job.name not in self._broken
        future.set_result(
            CompileResult(job, Path("fake.cubin") if ok else None, "" if ok else "nvcc: error", 0.0, False)
        )
        return future

    def close(self) -> None:
        pass

    def __enter__(self) -> InstantPool:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


TOOLS = Toolchain(nvcc="13.0.88", pycuda="2025.1", autotune="0.1.0")


def ok(time_us: float) -> Outcome:
    """An OK outcome of one timing, its GB/s as if 1 kB moved."""
    return Outcome(Status.OK, time_us=time_us, times_us=[time_us], gbs=1000.0 / time_us)


def record(
    store: Store, problem: Problem, config: dict[str, int], outcome: Outcome, gpu: GpuInfo, src: str | None = None
) -> int:
    """Store one finished trial of `problem` on `gpu`, as a sweep does (kernel source: today's unless
    `src` names another); returns the problem's id."""
    gpu_id = store.upsert_gpu(gpu)
    pid = store.problem_id(problem, gpu.name)
    assert pid is not None
    trial = store.start_trial(Provenance(pid, gpu_id, src or source_hash(problem), TOOLS, gpu.driver, gpu.cuda), config)
    store.finish_trial(trial, outcome)
    return pid


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `autotune ARGS...` through cli.main(), as the console script does: its exit code, stdout
    and stderr (what was printed before is dropped)."""
    from autotune import cli

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["autotune", *args])
    code: Any = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return (code if isinstance(code, int) else 1), captured.out, captured.err


# The terminal width the CLI tests run at (COLUMNS): every line printed must fit it.
WIDTH = 80


def printed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    """stdout's lines of a command that must succeed, each checked to fit the terminal."""
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    lines = out.splitlines()
    assert lines and max(len(line) for line in lines) <= WIDTH, "\n".join(line for line in lines if len(line) > WIDTH)
    return lines
