"""GEMM (C = alpha*A*B + beta*C, all row-major): picks a kernel family per problem and delegates.

B is stored K x N, or N x K (K contiguous: C = A Wᵀ with W an nn.Linear's weight) for a problem with
`trans`; each layout is its own problem, tuned and stored apart. Every family serves both. The kernels
take the leading dimensions lda, ldb, ldc at run time, so views with gaps between rows run in place.

A problem is tuned within one family, chosen by dtype and shape. When A has at most 16 rows (batched
decode: B is streamed once, memory-bound) that is `skinny_tc` (tensor cores) for float16/bfloat16 with
M >= TC_MIN_M, else `skinny` (CUDA cores). Larger products go to `simt` for float32 (CUDA cores) and,
for float16/bfloat16, to `wgmma` (Hopper's warpgroup MMA, sm_90a) when K and N are multiples of 8
(16-byte rows) and this machine's GPUs are Hopper (or it has none), else to `mma` (mma.sync, any
tensor-core GPU, any shape). `ws` (persistent and warp-specialized: a TMA producer warpgroup, two
wgmma consumers; Hopper) is reachable by name (family_named, AUTOTUNE_GEMM_FAMILY): ws.py says why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem, parse_shapes
from autotune.core.space import Config, Space
from autotune.core.target import target_capabilities
from autotune.gpu.geometry import Launch
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.call import Bound
from autotune.ops.gemm import call
from autotune.ops.gemm import mma as gemm_mma
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import simt as gemm_simt
from autotune.ops.gemm import skinny as gemm_skinny
from autotune.ops.gemm import skinny_tc as gemm_skinny_tc
from autotune.ops.gemm import wgmma as gemm_wgmma
from autotune.ops.gemm import ws as gemm_ws

NAME = "gemm"
SKINNY_MAX_M = 16
# From this many rows on, half-precision skinny products run on tensor cores: the CUDA-core loop's
# FMAs grow with M while the tensor-core loop stays bound by streaming B. M = 1 stays on CUDA cores,
# where the transposed GEMV (a one-row GEMM) was tuned.
TC_MIN_M = 2
# Names the family for half-precision products of more than SKINNY_MAX_M rows where it can serve them
# (ws, wgmma or mma): a family in development is swept and benchmarked this way before the dispatcher
# picks it. The tuning worker inherits it, and its records carry that family's source hash.
FAMILY_VARIABLE = "AUTOTUNE_GEMM_FAMILY"
_CHOSEN_BY_NAME = ("ws", "wgmma", "mma")


LLM_SHAPES_FILE = Path(__file__).with_name("llm_shapes.txt")


def llm_nk_pairs() -> list[tuple[int, int]]:
    """The distinct (N, K) pairs of llm_shapes.txt (an LLM's projections, 'M N K' lines at several M),
    in the file's order."""
    shapes = parse_shapes(LLM_SHAPES_FILE.read_text(), str(LLM_SHAPES_FILE), ("M", "N", "K"))
    return list(dict.fromkeys((n, k) for _, n, k in shapes))


def family(problem: Problem) -> ModuleType:
    """The kernel family module that serves this problem."""
    if problem.m <= SKINNY_MAX_M:
        if problem.m >= TC_MIN_M and problem.dtype in gemm_skinny_tc.DTYPES:
            return gemm_skinny_tc
        return gemm_skinny
    if problem.dtype == "float32":
        return gemm_simt
    named = os.environ.get(FAMILY_VARIABLE)
    if named:
        chosen = _chosen(named)
        reason = getattr(chosen, "problem_reason", None)  # mma serves every shape
        hopper_only = getattr(chosen, "ARCH_SUFFIX", "") == "a"
        if (reason is None or reason(problem) is None) and (not hopper_only or wgmma_runs_here()):
            return chosen
    if gemm_wgmma.problem_reason(problem) is None and wgmma_runs_here():
        return gemm_wgmma
    return gemm_mma


def _chosen(name: str) -> ModuleType:
    if name not in _CHOSEN_BY_NAME:
        raise AutotuneError(f"{FAMILY_VARIABLE}={name[:40]!r}: choose {', '.join(_CHOSEN_BY_NAME)} (or unset it)")
    return family_named(name)


def wgmma_runs_here() -> bool:
    """Whether the GPUs answers are for (autotune/core/target.py) can run the wgmma family: all are
    compute capability 9.0 (sm_90a cubins run on nothing else); with none known, answers are for the
    GPUs the shipped records come from (H100/H200). Elsewhere (an A100, a Blackwell) mma serves."""
    return all(cc == "9.0" for cc in target_capabilities())


def family_named(name: str) -> ModuleType:
    """A kernel family by its NAME, whether or not `family` would pick it (tests, benchmarks, checks)."""
    modules = (gemm_skinny, gemm_skinny_tc, gemm_simt, gemm_mma, gemm_wgmma, gemm_ws)
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


class Gemm(Op):
    """C = alpha*A*B + beta*C, all row-major (B N x K for a `trans` problem), in the family `family`
    picks for each problem, or in one family throughout (`pinned`: tests, benchmarks, the stand-in
    for unaligned arrays)."""

    name = NAME
    transposable = True
    sizes = ("M", "N", "K")
    compute_bound = True
    arg_types = gemm_shared.ARG_TYPES
    shapes_file = Path(__file__).with_name("shapes.txt")
    input_names = ("A", "B")
    output_name = "C"
    torch_schema = "(Tensor A, Tensor B, float alpha=1.0) -> Tensor"

    def __init__(self, pinned: ModuleType | None = None) -> None:
        self._pinned = pinned

    def _family(self, problem: Problem) -> ModuleType:
        return self._pinned or family(problem)

    def bind(self, arrays: Sequence[DeviceArray], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
        return call.bind(arrays, out, options)

    def torch_fake(self, *args: Any) -> Any:
        return call.torch_fake(*args)

    def for_unaligned(self, problem: Problem) -> Op:
        """Families with a `vec` parameter fall back to scalar loads themselves; wgmma and ws copy whole
        16-byte chunks, so `mma` (with vec=1) stands in for them."""
        return Gemm(family_named("mma")) if self._family(problem).NAME in ("wgmma", "ws") else self

    def family(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(self._family(problem).NAME)

    def compile_arch(self, problem: Problem, arch: str, config: Mapping[str, int] | None = None) -> str:
        return family_compile_arch(self._family(problem), arch)

    def kernel_file(self, problem: Problem) -> str:
        return str(self._family(problem).KERNEL_FILE)

    def default_config(self, problem: Problem) -> Config:
        return dict(self._family(problem).default_config(problem))

    def seed_configs(self, problem: Problem) -> list[Config]:
        seeds = getattr(self._family(problem), "seed_configs", None)
        return [dict(c) for c in seeds(problem)] if seeds else []

    def space(self, problem: Problem) -> Space:
        result: Space = self._family(problem).space(problem)
        return result

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(self._family(problem).kernel_name(problem, config))

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(self._family(problem).kernel_source(problem, config))

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        result: Launch = self._family(problem).launch(problem, config, sm_count)
        return result

    def registers(self, problem: Problem, config: Mapping[str, int]) -> float | None:
        estimate = getattr(self._family(problem), "registers_per_thread", None)
        return float(estimate(problem, config)) if estimate else None

    def operands(self, problem: Problem) -> Operands:
        m, n, k = problem.m, problem.n, problem.k
        return Operands(inputs=(m * k, k * n), output=m * n, sizes=gemm_shared.contiguous_sizes(problem))

    def strided_sizes(self, problem: Problem, leading: tuple[int, ...]) -> tuple[int, ...]:
        """The kernels' sizes for operands with leading dimensions (lda, ldb, ldc)."""
        lda, ldb, ldc = leading
        m, n, k, *least = gemm_shared.contiguous_sizes(problem)
        for name, given, need in zip(("lda", "ldb", "ldc"), leading, least, strict=True):
            if given < need:
                raise AutotuneError(f"{name}={given} is below the row length {need}: rows would overlap")
        return (m, n, k, lda, ldb, ldc)

    def device_reference(self, problem: Problem) -> DeviceReference:
        return gemm_shared.device_reference(problem)

    def position(self, problem: Problem, index: int) -> str:
        row, col = divmod(index, problem.n)
        return f"C[{row}, {col}]"

    def bytes_moved(self, problem: Problem) -> int:
        """The fewest bytes a GEMM must move: A and B read once, C written once (beta = 0)."""
        m, n, k = problem.m, problem.n, problem.k
        return (m * k + k * n + m * n) * ITEMSIZE[problem.dtype]

    def tiling_for(self, tuned: Problem, problem: Problem, config: Mapping[str, int]) -> Config:
        family = self._family(problem)
        if family is not self._family(tuned) or not hasattr(family, "tiling_for"):
            return dict(config)
        result: Config = family.tiling_for(tuned, problem, config)
        return result

    def bytes_streamed(self, problem: Problem, config: Mapping[str, int]) -> int:
        streamed = getattr(self._family(problem), "bytes_streamed", None)
        return int(streamed(problem, config)) if streamed else self.bytes_moved(problem)

    def flops(self, problem: Problem) -> int:
        return 2 * problem.m * problem.n * problem.k


OP = Gemm()
