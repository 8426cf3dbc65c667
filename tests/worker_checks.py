"""What the GPU tests of an op's kernels share: configs compiled for this GPU and each measured by a
real worker, which checks its output against float64 on fresh random data (NaN-poisoned first)."""

from __future__ import annotations

from collections.abc import Iterable

from autotune import ops
from autotune.build.compiler import CompileJob, CompilePool
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.measure.worker.client import Worker
from autotune.ops import source_hash


def measure_configs(problem: Problem, configs: Iterable[Config], seed: int) -> list[tuple[Config, str, str]]:
    """(config, status, message) of each config, compiled in parallel and measured in order."""
    op = ops.for_problem(problem)
    results = []
    with Worker() as worker, CompilePool() as pool:
        gpu = worker.hello()
        worker.setup(problem, seed=seed)
        jobs = [
            (
                c,
                pool.submit(
                    CompileJob(
                        op.kernel_name(problem, c),
                        op.kernel_source(problem, c),
                        op.compile_arch(problem, gpu.arch, c),
                        source_hash(problem),
                    )
                ),
            )
            for c in configs
        ]
        for config, future in jobs:
            compiled = future.result()
            assert compiled.cubin is not None, compiled.message
            outcome = worker.measure(compiled.cubin, compiled.job.name, config)
            results.append((config, outcome.status.value, outcome.message))
    return results
