"""One module per operation; each is pure Python (no GPU): space, constraints, geometry, source.

Every op module answers, for the problems it serves: kernel_file, default_config, space,
kernel_name, kernel_source, launch, compile_arch (nvcc's -arch on a given GPU), bytes_moved, flops,
and ARG_TYPES (the kernel's arguments in PyCUDA's prepare() notation). `for_problem` picks the
module: GEMV in the usual layout, the transposed GEMV, or GEMM (which in turn picks one of its
kernel families by dtype and shape).
"""

from __future__ import annotations

from types import ModuleType

from autotune.errors import AutotuneError
from autotune.ops import gemm, gemv
from autotune.problem import Problem

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
