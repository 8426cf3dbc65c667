"""The tall family of the transposed GEMV (kernels/gemv/gemv_t_tall.cu): tall matrices of 1 to MAX_N
columns, a dot product at one, read as one flat array.

A thread reads chunks of `rows` whole rows (rows x n elements, in the widest loads their bytes allow)
and the `rows` elements of x beside them, `unroll` chunks asked for at once, the last step under a
predicate instead of a remainder loop; the grid gives each thread about `depth` chunks (a launch
parameter: one compiled kernel serves every depth), at most one wave of blocks. The blocks' sums are
added in a fixed order by the last block to finish; or, with `cluster` > 1 (sm_90+), the grid is one
thread-block cluster of that many blocks, which add their sums in distributed shared memory (no
workspace, fence or arrival counter; `depth` is then pinned). Launched with programmatic dependent launch;
`prefetch` 1 asks L2 for each thread's first chunk before the wait for the grid before. Problem sizes
are the GEMV's: m rows of A (the reduction), n columns (y's length). A kernel is compiled for its n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.core.limits import MAX_THREADS_PER_SM
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch, cluster_choices
from autotune.ops.gemm import shared as gemm_shared

NAME = "tall"
KERNEL_FILE = "gemv/gemv_t_tall.cu"  # under kernels/, beside this folder's mirror
WAITS_FOR_PRIOR_GRID = True  # its kernels wait in griddepcontrol: launched with programmatic dependent launch

# Up to 8 columns: a row is then at most 32 bytes, and a chunk of a few rows fills 16-byte loads. From
# 16 on narrow's strips fill their loads; the 9 to 15 between stay with the skinny GEMM, as they were.
MAX_N = 8

_BLOCKS = (128, 256, 512, 1024)
_ROWS = (1, 2, 4, 8, 16)
_UNROLLS = (1, 2, 4, 8)
_DEPTHS = (1, 2, 4, 8, 16, 32, 64)
# Bytes of A and x a thread has in flight at once (its registers hold them): 64 registers' worth.
MOST_BYTES_IN_FLIGHT = 256
REGISTER_BASE = 24  # indices, pointers and the reduction's, beside the loads and the n sums


def serves(problem: Problem) -> bool:
    """Whether a transposed GEMV (m rows, n columns) is narrow enough for this family."""
    return problem.n <= MAX_N


def chunk_bytes(problem: Problem, c: Mapping[str, int]) -> int:
    """Bytes of A and x one chunk of rows loads."""
    return c["rows"] * (problem.n + 1) * ITEMSIZE[problem.dtype]


def registers(problem: Problem, c: Mapping[str, int]) -> float:
    """Registers per thread, estimated: the chunks in flight, the n sums and a base."""
    return REGISTER_BASE + chunk_bytes(problem, c) * c["unroll"] / 4 + problem.n


registers_per_thread = registers  # the name the transposed GEMV asks its families for (Op.registers)


def _reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if not serves(problem):
        return f"the tall family serves transposed GEMVs of n <= {MAX_N}, not {problem}"
    if c["rows"] > 1 and c["rows"] // 2 >= problem.m:
        return f"rows={c['rows']}: half as many rows a chunk already cover m={problem.m}"
    if c["cluster"] > 1 and c["depth"] != _DEPTHS[0]:
        return f"cluster={c['cluster']}: the grid is one cluster, depth stays {_DEPTHS[0]}"
    in_flight = chunk_bytes(problem, c) * c["unroll"]
    if in_flight > MOST_BYTES_IN_FLIGHT:
        return f"rows={c['rows']} unroll={c['unroll']}: {in_flight} bytes in flight, over {MOST_BYTES_IN_FLIGHT}"
    return None


# The parameters before `cluster` joined them: such rows are of another kernel source (stale), and are
# read as the grid they ran.
_BEFORE_CLUSTER = frozenset({"block", "rows", "unroll", "prefetch", "depth"})


def with_cluster(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config written before `cluster` joined the space, with the grid it ran (no cluster)."""
    return {**config, "cluster": 1} if set(config) == _BEFORE_CLUSTER else dict(config)


def space(problem: Problem) -> Space:
    return Space(
        params=(
            Param("block", _BLOCKS),
            Param("rows", _ROWS),
            Param("unroll", _UNROLLS),
            Param("prefetch", (0, 1), categorical=True),
            Param("depth", _DEPTHS, compiled=False),
            Param("cluster", cluster_choices()),
        ),
        constraint=lambda c: _reason(problem, c),
    )


def _tiling(problem: Problem, block: int, unroll: int, depth: int) -> Config:
    """A tiling whose chunks fill 16-byte loads of A where the rows allow it (the fewest rows that do,
    8 at most), with as many chunks in flight up to `unroll` as the registers allow, prefetching."""
    itemsize, n = ITEMSIZE[problem.dtype], problem.n
    rows = next((r for r in _ROWS if r * n * itemsize % 16 == 0 and r * itemsize >= 4), 8)
    rows = min(rows, max(r for r in _ROWS if r == 1 or r // 2 < problem.m))
    config = {"block": block, "rows": rows, "unroll": unroll, "prefetch": 1, "depth": depth, "cluster": 1}
    while _reason(problem, config) is not None and config["unroll"] > 1:
        config["unroll"] //= 2
    return config


def default_config(problem: Problem) -> Config:
    """256 threads, 16-byte chunks, 4 in flight, about 8 a thread, prefetching."""
    return _tiling(problem, 256, 4, 8)


# Seed tilings (block, unroll, depth): one or two steps a thread, where a shape of a few kilobytes is
# the launch's and the last block's sum; deeper where the rows fill the GPU many times over.
_SEEDS = ((256, 4, 4), (512, 4, 4), (256, 2, 2), (1024, 4, 4), (256, 4, 16), (512, 8, 8), (1024, 2, 16), (128, 4, 64))


# Cluster seed tilings (block, unroll, cluster): the whole matrix in one cluster of 8 or 4 blocks.
_CLUSTER_SEEDS = ((1024, 4, 8), (512, 4, 8), (1024, 4, 4))


def seed_configs(problem: Problem) -> list[Config]:
    check = space(problem).check
    tilings = [_tiling(problem, *seed) for seed in _SEEDS]
    tilings += [
        {**_tiling(problem, block, unroll, _DEPTHS[0]), "cluster": size} for block, unroll, size in _CLUSTER_SEEDS
    ]
    seeds: list[Config] = []
    for config in tilings:
        if check(config) is None and config not in seeds:
            seeds.append(config)
    return seeds


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    cluster = f"_c{c['cluster']}" if c["cluster"] > 1 else ""
    tiling = f"b{c['block']}_r{c['rows']}_u{c['unroll']}_p{c['prefetch']}{cluster}"
    return f"gemv_t_tall_{problem.dtype}_n{problem.n}_{tiling}"


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance taking the GEMM arguments (the transposed GEMV's)."""
    c = config
    args = [problem.n, c["block"], c["rows"], c["unroll"], c["prefetch"]] + ([c["cluster"]] if c["cluster"] > 1 else [])
    return gemm_shared.instance_source(
        KERNEL_FILE,
        kernel_name(problem, c),
        problem.dtype,
        str(c["block"]),
        "at_tall::tall_body",
        args,
        cluster=c["cluster"],
    )


def blocks(problem: Problem, config: Mapping[str, int], sm_count: int) -> int:
    """About `depth` chunks a thread, at most one wave of blocks (a grid-stride loop takes the rest)."""
    chunks = max(1, problem.m // config["rows"])
    wanted = math.ceil(chunks / (config["block"] * config["depth"]))
    return max(1, min(wanted, sm_count * (MAX_THREADS_PER_SM // config["block"])))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    if config["cluster"] > 1:  # one cluster along y, its sums added in distributed shared memory
        return Launch(
            grid=(1, config["cluster"], 1),
            block=(config["block"], 1, 1),
            shared_bytes=0,
            workspace_floats=0,
            counters=0,
        )
    grid = blocks(problem, config, sm_count)
    return Launch(
        grid=(grid, 1, 1),
        block=(config["block"], 1, 1),
        shared_bytes=0,  # static: the warps' and the last block's sums
        workspace_floats=grid * problem.n if grid > 1 else 0,
        counters=1 if grid > 1 else 0,
    )
