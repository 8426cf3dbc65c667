"""Test doubles for orchestration tests: a compile pool that compiles nothing and a cost model."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from autotune.build.compiler import CompileJob, CompileResult


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
