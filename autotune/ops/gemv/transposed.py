"""The transposed GEMV, y = alpha*Aᵀx + beta*y with A m x n row-major: a GEMM of one row.

yᵀ = xᵀ A is C (1 x n) = A' (1 x m) · B (m x n), so the skinny GEMM family serves it: every
thread streams whole 16-byte pieces of A's rows, which the usual GEMV kernels cannot do when they
reduce along columns. Tall, narrow shapes (strips.serves: 131072 x 256, 65536 x 1024) go to the
strips family instead, whose teams read whole rows of a strip. Both families' kernels take
(x, A, y, 1, n, m, m, lda, n) in the GEMM argument order: A is the GEMM's B, so a view of some of a
matrix's columns (lda > n) runs in place. A problem is tuned within one family, as GEMM's are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Space
from autotune.gpu.geometry import Launch
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import skinny as gemm_skinny
from autotune.ops.gemv import strips


def as_gemm(problem: Problem) -> Problem:
    """The one-row GEMM this transposed GEMV is."""
    return Problem("gemm", problem.dtype, 1, problem.n, problem.m)


class _OneRowGemm:
    """gemm's skinny family asked about the one-row GEMM a transposed GEMV is: the functions the
    strips module has, each translating the GEMV problem (`as_gemm`) first."""

    NAME = gemm_skinny.NAME
    KERNEL_FILE = gemm_skinny.KERNEL_FILE
    WAITS_FOR_PRIOR_GRID = False  # a GEMM kernel: launched plainly

    @staticmethod
    def default_config(problem: Problem) -> Config:
        return dict(gemm_skinny.default_config(as_gemm(problem)))

    @staticmethod
    def seed_configs(problem: Problem) -> list[Config]:
        return [dict(c) for c in gemm_skinny.seed_configs(as_gemm(problem))]

    @staticmethod
    def space(problem: Problem) -> Space:
        return gemm_skinny.space(as_gemm(problem))

    @staticmethod
    def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
        return gemm_skinny.kernel_name(as_gemm(problem), config)

    @staticmethod
    def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
        return gemm_skinny.kernel_source(as_gemm(problem), config)

    @staticmethod
    def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        return gemm_skinny.launch(as_gemm(problem), config, sm_count)

    @staticmethod
    def registers_per_thread(problem: Problem, config: Mapping[str, int]) -> float:
        return gemm_skinny.registers(as_gemm(problem), config)


def family_of(problem: Problem) -> Any:
    """The family that serves a transposed GEMV: strips where A is tall and narrow, else skinny."""
    return strips if strips.serves(problem) else _OneRowGemm


class GemvTransposed(Op):
    name = "gemv"
    transposable = True
    arg_types = gemm_shared.ARG_TYPES
    shapes_file = Path(__file__).with_name("shapes.txt")  # the GEMV's

    def kernel_file(self, problem: Problem) -> str:
        return str(family_of(problem).KERNEL_FILE)

    def waits_for_prior_grid(self, problem: Problem) -> bool:
        """Its family's: a family whose kernels wait in griddepcontrol runs with PDL, the others plainly."""
        return bool(family_of(problem).WAITS_FOR_PRIOR_GRID)

    def default_config(self, problem: Problem) -> Config:
        return dict(family_of(problem).default_config(problem))

    def seed_configs(self, problem: Problem) -> list[Config]:
        return [dict(c) for c in family_of(problem).seed_configs(problem)]

    def space(self, problem: Problem) -> Space:
        result: Space = family_of(problem).space(problem)
        return result

    def family(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(family_of(problem).NAME)

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(family_of(problem).kernel_name(problem, config))

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        return str(family_of(problem).kernel_source(problem, config))

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        result: Launch = family_of(problem).launch(problem, config, sm_count)
        return result

    def registers(self, problem: Problem, config: Mapping[str, int]) -> float:
        return float(family_of(problem).registers_per_thread(problem, config))

    def operands(self, problem: Problem) -> Operands:
        # x is the one-row A' of the GEMM, A its B.
        return Operands(
            inputs=(problem.m, problem.m * problem.n), output=problem.n, sizes=self.strided_sizes(problem, (problem.n,))
        )

    def input_order(self, problem: Problem) -> tuple[int, ...]:
        """x (the call's second input) is the one-row A of the GEMM, A its B."""
        return (1, 0)

    def strided_sizes(self, problem: Problem, leading: tuple[int, ...]) -> tuple[int, ...]:
        """The GEMM's sizes with A's row stride (leading = (lda,)) as B's."""
        (lda,) = leading
        if lda < problem.n:
            raise AutotuneError(f"lda={lda} is below N={problem.n}: rows of A would overlap")
        return (1, problem.n, problem.m, problem.m, lda, problem.n)

    def device_reference(self, problem: Problem) -> DeviceReference:
        return gemm_shared.device_reference(as_gemm(problem))

    def position(self, problem: Problem, index: int) -> str:
        return f"y[{index}]"

    def bytes_moved(self, problem: Problem) -> int:
        """A, x read once, y written once."""
        return (problem.m * problem.n + problem.n + problem.m) * ITEMSIZE[problem.dtype]

    def flops(self, problem: Problem) -> int:
        return 2 * problem.m * problem.n


TRANSPOSED = GemvTransposed()
