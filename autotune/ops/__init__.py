"""One module per operation; each is pure Python (no GPU): space, constraints, geometry, source.

Every op module answers, for the problems it serves: kernel_file, default_config, space,
kernel_name, kernel_source, launch, compile_arch (nvcc's -arch on a given GPU), bytes_moved, flops,
and ARG_TYPES (the kernel's arguments in PyCUDA's prepare() notation). `for_problem` picks the
module: GEMV in the usual layout, the transposed GEMV, or GEMM (which in turn picks one of its
kernel families by dtype and shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from autotune.build.compiler import CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import file_hash
from autotune.core.problem import Problem
from autotune.ops import gemm, gemv

_OPS: dict[str, ModuleType] = {gemv.NAME: gemv, gemm.NAME: gemm}


def get(op: str) -> ModuleType:
    try:
        return _OPS[op]
    except KeyError:
        raise AutotuneError(f"unknown op {op!r}: choose one of {', '.join(_OPS)}") from None


def for_problem(problem: Problem) -> ModuleType:
    """The op module that tunes and launches this problem."""
    if problem.op == "gemv" and problem.trans:
        from autotune.ops import gemv_t  # it imports the GEMM families, which GEMV alone never needs

        return gemv_t
    return get(problem.op)


def source_hash(problem: Problem) -> str:
    """Hash of the kernel source file that serves this problem: a measurement of an older source is stale."""
    return file_hash(for_problem(problem).kernel_file(problem))


def compile_job(problem: Problem, config: Mapping[str, int], gpu_arch: str, op: Any = None) -> CompileJob:
    """The nvcc job that builds this config's kernel for a GPU of `gpu_arch` (e.g. "sm_90"), keyed by
    the kernel source file's hash so that a cubin of an older source is never reused. `op` is the
    problem's own op module unless given (the launcher runs unaligned arrays in another family)."""
    op = op or for_problem(problem)
    return CompileJob(
        op.kernel_name(problem, config),
        op.kernel_source(problem, config),
        op.compile_arch(problem, gpu_arch),
        file_hash(op.kernel_file(problem)),
    )


def in_space_order(problem: Problem, config: Mapping[str, int]) -> dict[str, int]:
    """The config with its parameters in the order of the problem's space (records and the database
    keep them sorted by name); parameters the space does not know come last."""
    order = list(for_problem(problem).space(problem).names)
    return {k: config[k] for k in sorted(config, key=lambda k: order.index(k) if k in order else len(order))}
