"""Real nvcc compiles for the CPU tests of the kernel families (no GPU needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autotune.build.compiler import CompileJob, CompilePool, CompileResult


def compile_all(jobs: Sequence[CompileJob], cache_dir: Path) -> list[CompileResult]:
    """Compile every job in a pool; assert each gave a cubin that holds its extern "C" kernel."""
    with CompilePool(cache_dir=cache_dir) as pool:
        results = [f.result() for f in [pool.submit(job) for job in jobs]]
    failures = [(r.job.name, r.message[-600:]) for r in results if not r.ok]
    assert not failures, failures[0]
    for result in results:
        assert result.cubin is not None and result.job.name.encode() in result.cubin.read_bytes()
    return results
