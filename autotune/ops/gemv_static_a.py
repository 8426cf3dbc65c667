"""GEMV whose matrix A nothing writes while the call may start (model weights): gemv.py's kernels,
configs and geometry, each instance prefetching its first step of A into L1 before it waits for the
kernel before it (kernels/gemv_static_a.cu says why that needs the promise).

Not a tuned family of its own: it runs the config tuned for the plain GEMV of the same problem, and
is what `autotune.gemv(..., static_a=True)` launches and `scripts/bench_gemv.py` times beside it.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.dtypes import CUDA_TYPE
from autotune.ops import gemv
from autotune.ops.gemv import (  # noqa: F401  (the op interface, shared with the plain GEMV)
    ARG_TYPES,
    NAME,
    PROGRAMMATIC_LAUNCH,
    bytes_moved,
    compile_arch,
    default_config,
    family,
    flops,
    launch,
    reference,
    seed_configs,
    space,
)
from autotune.problem import Problem

KERNEL_FILE = "gemv_static_a.cu"


def kernel_file(problem: Problem) -> str:
    return KERNEL_FILE


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    return gemv.kernel_name(problem, config).replace("gemv_", "gemv_static_a_", 1)


def kernel_source(problem: Problem, config: Mapping[str, int], level: int = 1, depth: int | None = None) -> str:
    c = config
    t = CUDA_TYPE[problem.dtype]
    prefetch = (
        f"at_gemv::prefetch_first_step<{t}, {c['block']}, {c['lanes']}, {c['vec']}, {c['rows']}, "
        f"{level}, {c['unroll'] if depth is None else depth}>(A, M, N);"
    )
    return gemv.instance_source(problem, config, KERNEL_FILE, kernel_name(problem, config), prefetch)
