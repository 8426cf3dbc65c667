"""Real nvcc compiles for the CPU tests of the kernel families (no GPU needed)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

from autotune.build.compiler import CompileJob, CompilePool, CompileResult
from autotune.core.problem import Problem
from autotune.core.space import Config


def compile_all(jobs: Sequence[CompileJob], cache_dir: Path) -> list[CompileResult]:
    """Compile every job in a pool; assert each gave a cubin that holds its extern "C" kernel."""
    with CompilePool(cache_dir=cache_dir) as pool:
        results = [f.result() for f in [pool.submit(job) for job in jobs]]
    failures = [(r.job.name, r.message[-600:]) for r in results if not r.ok]
    assert not failures, failures[0]
    for result in results:
        assert result.cubin is not None and result.job.name.encode() in result.cubin.read_bytes()
    return results


def compile_in_space(family: ModuleType, instances: Iterable[tuple[Problem, Config]], cache_dir: Path) -> None:
    """Assert each (problem, config) is in the GEMM family's space, then compile them all for sm_90."""
    jobs = []
    for problem, config in instances:
        reason = family.space(problem).check(config)
        assert reason is None, (problem, config, reason)
        jobs.append(
            CompileJob(family.kernel_name(problem, config), family.kernel_source(problem, config), "sm_90", "test")
        )
    compile_all(jobs, cache_dir)
