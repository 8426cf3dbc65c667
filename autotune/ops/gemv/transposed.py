"""The transposed GEMV, y = alpha*Aᵀx + beta*y with A m x n row-major: a GEMM of one row.

yᵀ = xᵀ A is C (1 x n) = A' (1 x m) · B (m x n): every thread streams whole 16-byte pieces of A's
rows, which the usual GEMV kernels cannot do when they reduce along columns. The narrow family serves
every shape of at least 16 columns (narrow.serves): teams of up to a warp read rows of strips of 16
to 256 columns, or teams of up to a block whole rows cut into a few bands (`bands`), launched with
programmatic dependent launch. Tall matrices of 1 to 8 columns (262144 x 8, a dot product at one) go to
the tall family (tall.serves), which reads them as one flat array; 9 to 15 columns to the skinny GEMM
family, as the one-row GEMM they are. The strips family (wide strips, tall A) is reachable
by name (FAMILY_VARIABLE) for comparisons. Every family's kernels take (x, A, y, 1, n, m, m, lda, n)
in the GEMM argument order: A is the GEMM's B, so a view of some of a matrix's columns (lda > n) runs
in place. A problem is tuned within one family, as GEMM's are.
"""

from __future__ import annotations

import os
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
from autotune.ops.gemv import narrow, strips, tall

# Names a family for the transposed GEMVs it serves ("strips", "skinny"), in place of narrow: the
# families narrow replaced stay measurable side by side. The tuning worker inherits it, and its
# records carry that family's source hash.
FAMILY_VARIABLE = "AUTOTUNE_GEMV_T_FAMILY"


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
    """The family that serves a transposed GEMV: tall up to 8 columns, narrow from 16 on, else skinny;
    or the family FAMILY_VARIABLE names, where it serves the shape."""
    named = os.environ.get(FAMILY_VARIABLE)
    if named:
        chosen = _named(named)
        if chosen is _OneRowGemm or chosen.serves(problem):
            return chosen
    if tall.serves(problem):
        return tall
    return narrow if narrow.serves(problem) else _OneRowGemm


def _named(name: str) -> Any:
    families: dict[str, Any] = {f.NAME: f for f in (narrow, strips, tall, _OneRowGemm)}
    if name not in families:
        raise AutotuneError(f"{FAMILY_VARIABLE}={name[:40]!r}: choose {', '.join(families)} (or unset it)")
    return families[name]


class GemvTransposed(Op):
    name = "gemv"
    transposable = True
    arg_types = gemm_shared.ARG_TYPES
    shapes_file = Path(__file__).with_name("shapes.txt")  # the GEMV's

    def kernel_file(self, problem: Problem) -> str:
        return str(family_of(problem).KERNEL_FILE)

    def stored_config(self, problem: Problem, config: Mapping[str, Any]) -> dict[str, Any]:
        """A narrow config from before `lean` or `bands` (migration 0010 moves database rows from before
        `lean` the same way; rows from before `bands` are stale: narrow.with_lean says why); a tall
        config from before `cluster`, as the kernel it ran (no cluster; its rows are stale too)."""
        family = family_of(problem)
        if family is narrow:
            return narrow.with_lean(config)
        return tall.with_cluster(config) if family is tall else dict(config)

    def carried_over(self, problem: Problem, config: Mapping[str, int]) -> dict[str, int]:
        """A narrow trial measured before the wide bands joined the family, as the space names it now
        (scripts/rehash_records.py --file-was)."""
        return self.stored_config(problem, config)

    def loads_as_aligned(self, problem: Problem) -> bool:
        """The tall family's kernels read whole chunks only where the matrix is contiguous and aligned."""
        return family_of(problem) is tall

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
