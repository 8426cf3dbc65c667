"""GEMM (C = alpha*A*B + beta*C, all row-major): picks a kernel family per problem and delegates.

A problem is tuned within one family, chosen by dtype and shape. When A has at most 16 rows (batched
decode: B is streamed once, memory-bound) that is `skinny_tc` (tensor cores) for float16/bfloat16 with
M >= TC_MIN_M, else `skinny` (CUDA cores). Larger products go to `simt` for float32 (CUDA cores) and,
for float16/bfloat16, to `wgmma` (Hopper's warpgroup MMA, sm_90a) when K and N are multiples of 8
(16-byte rows) and this machine's GPUs are Hopper (or it has none), else to `mma` (mma.sync, any
tensor-core GPU, any shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType

from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Space
from autotune.ops.gemm import mma as gemm_mma
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import simt as gemm_simt
from autotune.ops.gemm import skinny as gemm_skinny
from autotune.ops.gemm import skinny_tc as gemm_skinny_tc
from autotune.ops.gemm import wgmma as gemm_wgmma
from autotune.ops.geometry import Launch

NAME = "gemm"
ARG_TYPES = gemm_shared.ARG_TYPES
SKINNY_MAX_M = 16
# From this many rows on, half-precision skinny products run on tensor cores: the CUDA-core loop's
# FMAs grow with M while the tensor-core loop stays bound by streaming B. M = 1 stays on CUDA cores,
# where the transposed GEMV (a one-row GEMM) was tuned.
TC_MIN_M = 2


def family(problem: Problem) -> ModuleType:
    """The kernel family module that serves this problem."""
    if problem.m <= SKINNY_MAX_M:
        if problem.m >= TC_MIN_M and problem.dtype in gemm_skinny_tc.DTYPES:
            return gemm_skinny_tc
        return gemm_skinny
    if problem.dtype == "float32":
        return gemm_simt
    if gemm_wgmma.problem_reason(problem) is None and wgmma_runs_here():
        return gemm_wgmma
    return gemm_mma


def wgmma_runs_here() -> bool:
    """Whether this machine can run the wgmma family: its GPUs are all compute capability 9.0
    (sm_90a cubins run on nothing else), or it has none, when answers are for the GPUs the shipped
    records come from (H100/H200). Elsewhere (an A100, a Blackwell) the mma family serves instead."""
    from autotune.core.fingerprint import local_compute_capabilities

    capabilities = local_compute_capabilities()
    return all(cc == "9.0" for cc in capabilities)


def unaligned_family(problem: Problem) -> ModuleType:
    """The family that runs this problem on arrays that are not 16-byte aligned. Families with a
    `vec` parameter fall back to scalar loads themselves; wgmma copies whole 16-byte chunks, so
    `mma` (with vec=1) stands in for it."""
    module = family(problem)
    return family_named("mma") if module.NAME == "wgmma" else module


class FamilyOp:
    """One GEMM family behind the op interface (what the launcher calls), for running a problem in a
    family other than the one `family` picks (see unaligned_family)."""

    ARG_TYPES = ARG_TYPES

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def kernel_file(self, problem: Problem) -> str:
        return str(self.module.KERNEL_FILE)

    def space(self, problem: Problem) -> Space:
        result: Space = self.module.space(problem)
        return result

    def default_config(self, problem: Problem) -> Config:
        return dict(self.module.default_config(problem))

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(self.module.kernel_name(problem, config))

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(self.module.kernel_source(problem, config))

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        result: Launch = self.module.launch(problem, config, sm_count)
        return result

    def compile_arch(self, problem: Problem, arch: str) -> str:
        return family_compile_arch(self.module, arch)


def family_named(name: str) -> ModuleType:
    """A kernel family by its NAME, whether or not `family` would pick it (tests, benchmarks, checks)."""
    modules = (gemm_skinny, gemm_skinny_tc, gemm_simt, gemm_mma, gemm_wgmma)
    families: dict[str, ModuleType] = {m.NAME: m for m in modules}
    try:
        return families[name]
    except KeyError:
        raise AutotuneError(f"unknown GEMM family {name!r}: choose one of {', '.join(families)}") from None


def family_compile_arch(module: ModuleType, arch: str) -> str:
    """nvcc's -arch for a family's kernels on a GPU of `arch` ("sm_90"). A family with an ARCH_SUFFIX
    ("a": architecture-specific instructions such as wgmma) builds for its one ARCH only, since such a
    cubin runs on no other compute capability."""
    suffix = str(getattr(module, "ARCH_SUFFIX", ""))
    if not suffix:
        return arch
    required = str(getattr(module, "ARCH", arch))
    if arch != required:
        raise AutotuneError(
            f"the {module.NAME} GEMM family needs a {required} GPU ({required}{suffix} instructions), not {arch}"
        )
    return required + suffix


def compile_arch(problem: Problem, arch: str) -> str:
    """nvcc's -arch for this problem's kernels on a GPU of `arch`."""
    return family_compile_arch(family(problem), arch)


def family_name(problem: Problem) -> str:
    return str(family(problem).NAME)


def kernel_file(problem: Problem) -> str:
    return str(family(problem).KERNEL_FILE)


def default_config(problem: Problem) -> Config:
    return dict(family(problem).default_config(problem))


def seed_configs(problem: Problem) -> list[Config]:
    """Configs the family knows to be good, measured before the sampler's own picks."""
    seeds = getattr(family(problem), "seed_configs", None)
    return [dict(c) for c in seeds(problem)] if seeds else []


def space(problem: Problem) -> Space:
    result: Space = family(problem).space(problem)
    return result


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    return str(family(problem).kernel_name(problem, config))


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    return str(family(problem).kernel_source(problem, config))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    result: Launch = family(problem).launch(problem, config, sm_count)
    return result


def bytes_moved(problem: Problem) -> int:
    """The fewest bytes a GEMM must move: A and B read once, C written once (beta = 0)."""
    m, n, k = problem.m, problem.n, problem.k
    return (m * k + k * n + m * n) * ITEMSIZE[problem.dtype]


def flops(problem: Problem) -> int:
    return 2 * problem.m * problem.n * problem.k
