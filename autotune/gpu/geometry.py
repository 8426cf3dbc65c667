"""Launch geometry every op module returns, and the whole of one kernel launch but its addresses (KernelCall):
what the worker and the library need to launch a kernel."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.target import target_capabilities
from autotune.gpu.tma import OperandMaps


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int  # dynamic shared memory; the launcher opts the kernel in to it first
    workspace_floats: int  # split-K partial sums (0 without split)
    counters: int  # split-K arrival counters, zero between launches (0 without split)
    # TMA kernels: the tensor maps of A and B they read from the buffer passed as `workspace`, which
    # the launcher writes for the arrays of each call (None: the kernel reads its arrays directly)
    operand_maps: OperandMaps | None = None
    # Thread-block clusters given at launch (x, y, z blocks, each dividing the grid's): for families
    # whose kernels carry no __cluster_dims__, so that one cubin runs any cluster shape. The shipped
    # families compile theirs in (cluster_declaration) and keep None: their cubins stay as measured.
    cluster_dims: tuple[int, int, int] | None = None


def clusters_run_here() -> bool:
    """Whether the GPUs answers are for (autotune/core/target.py: the GPU asked about, else this
    machine's) all have thread-block clusters (compute capability 9.0 and up); with none known,
    answers are for the GPUs the shipped records come from (H100/H200)."""
    return all(int(cc.split(".")[0]) >= 9 for cc in target_capabilities())


# Blocks per cluster the streaming families (GEMV, skinny GEMM) may use: the portable sizes (a
# cluster of up to 8 blocks runs on every sm_90 GPU); 1 means split-K through a workspace in global
# memory.
CLUSTER_SIZES = (1, 2, 4, 8)


def cluster_choices() -> tuple[int, ...]:
    return CLUSTER_SIZES if clusters_run_here() else (1,)


def cluster_declaration(cluster: int) -> str:
    """The attribute that makes a launch without a cluster attribute run an instance in clusters of
    `cluster` blocks along the grid's y, the K splits; "" for 1. The shipped families compile their
    clusters in (their cubins stay as measured); a new family may set Launch.cluster_dims instead."""
    return f"__cluster_dims__(1, {cluster}, 1) " if cluster > 1 else ""


@dataclass(frozen=True)
class KernelCall:
    """What one kernel launch takes besides its addresses: the geometry, the integer arguments, the
    argument types, and which call input each of the kernel's input arrays is (`order`: the
    transposed GEMV's kernels take x before A)."""

    geom: Launch
    sizes: tuple[int, ...]
    arg_types: str
    order: tuple[int, ...]
    programmatic: bool
