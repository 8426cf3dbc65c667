"""The transposed GEMV, y = alpha*Aᵀx + beta*y with A m x n row-major: a GEMM of one row.

yᵀ = xᵀ A is C (1 x n) = A' (1 x m) · B (m x n), so the skinny GEMM family serves it: every
thread streams whole 16-byte pieces of A's rows, which the usual GEMV kernels cannot do when they
reduce along columns. Launches pass (x, A, y, 1, n, m) in the GEMM argument order.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.core.problem import Problem
from autotune.core.space import Config, Space
from autotune.ops import gemm, gemv
from autotune.ops.gemm import skinny as gemm_skinny
from autotune.ops.geometry import Launch

NAME = "gemv"
ARG_TYPES = gemm.ARG_TYPES


def as_gemm(problem: Problem) -> Problem:
    """The one-row GEMM this transposed GEMV is."""
    return Problem("gemm", problem.dtype, 1, problem.n, problem.m)


def compile_arch(problem: Problem, arch: str) -> str:
    """nvcc's -arch for this problem's kernels on a GPU of `arch`: the GPU's own."""
    return arch


def kernel_file(problem: Problem) -> str:
    return gemm_skinny.KERNEL_FILE


def default_config(problem: Problem) -> Config:
    return dict(gemm_skinny.default_config(as_gemm(problem)))


def seed_configs(problem: Problem) -> list[Config]:
    return [dict(c) for c in gemm_skinny.seed_configs(as_gemm(problem))]


def space(problem: Problem) -> Space:
    return gemm_skinny.space(as_gemm(problem))


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    return gemm_skinny.kernel_name(as_gemm(problem), config)


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    return gemm_skinny.kernel_source(as_gemm(problem), config)


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    return gemm_skinny.launch(as_gemm(problem), config, sm_count)


def bytes_moved(problem: Problem) -> int:
    return gemv.bytes_moved(problem)


def flops(problem: Problem) -> int:
    return gemv.flops(problem)
