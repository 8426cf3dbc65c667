"""The `cublas` family: cuBLASLt's algorithms for a GEMV or GEMM, timed by the worker like our configs,
stored as trials (config {"cublas_algo": rank}, source hash "cublasLt-<version>") and launched by the
launch path on the caller's stream where the selection policy picks them (autotune/select/choose.py).

- mapping.py: a row-major problem of ours as one column-major cuBLASLt matmul (pure);
- binding.py: the library through ctypes (found, loaded on first use, its heuristic and matmul);
- plan.py: one algorithm ready to run on one device, as a LaunchPlan is.

The library is loaded only when a plan or a count of candidates is asked for, so registering the
family costs nothing on a machine without it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from autotune.core.problem import Problem
from autotune.ops.cublas import mapping
from autotune.ops.library import Library, LibraryPlan

if TYPE_CHECKING:
    from autotune.gpu.device import Device

ENABLE_VARIABLE = "AUTOTUNE_VENDOR"


class Cublas(Library):
    """cuBLASLt's algorithms for our GEMV and GEMM problems, ranked by its heuristic (at most 8)."""

    name = mapping.FAMILY
    label = "cuBLASLt"
    config_key = mapping.CONFIG_KEY
    source_prefix = mapping.SOURCE_PREFIX
    max_candidates = mapping.MAX_ALGOS

    def serves(self, problem: Problem) -> bool:
        return problem.op in mapping.OPS

    def enabled(self) -> bool:
        """AUTOTUNE_VENDOR=0 keeps cuBLASLt out of sweeps and selection alike (our kernels only, as the
        test suite runs them)."""
        return os.environ.get(ENABLE_VARIABLE, "1").strip() != "0"

    def fingerprint(self) -> str | None:
        """This machine's cuBLASLt as a trial's source hash ("cublasLt-<version>"), None where it has none."""
        from autotune.ops.cublas import binding

        return binding.fingerprint() if binding.available() else None

    def candidates(self, device: Device, problem: Problem) -> int:
        from autotune.ops.cublas.plan import CublasPlan

        return CublasPlan.candidates(device, problem)

    def plan(
        self,
        device: Device,
        problem: Problem,
        config: Mapping[str, int],
        aligned: bool,
        leading: tuple[int, ...] | None,
        order: tuple[int, ...],
    ) -> LibraryPlan:
        from autotune.ops.cublas.plan import CublasPlan

        return CublasPlan(device, problem, self.rank_of(config), aligned, leading, order)


FAMILY = Cublas()
