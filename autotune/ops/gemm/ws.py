"""Tensor-core GEMM family "ws" (Hopper: persistent, warp-specialized; a TMA producer warpgroup and two
wgmma consumer warpgroups, half/bfloat16): space, geometry, source. kernels/gemm/gemm_ws.cu says how
it runs.

Built for sm_90a only (ARCH_SUFFIX), as the wgmma family, whose layouts, descriptors and tensor maps
it shares. One block an SM walks its tiles, so the grid is min(tiles, SMs), in whole clusters where
`cluster` is 2 (two blocks on vertically adjacent tiles, B's stages multicast to both, the cluster
given at launch). `sk` 1 runs the tiles past the last whole wave but one as stream-K (their k-tiles
dealt out evenly to every block, a tile split between two blocks finished by one of them through
float partials in `counters`), so no wave is left partly idle. Not picked by gemm.family on its
own: swept on an H200 it runs 0.97-0.98x cuBLAS at 4096^3 where wgmma runs 0.90x, but switching
families means re-sweeping every shipped wgmma record, and the H100's cannot be re-timed
(docs/findings.md). gemm.family_named("ws") reaches it for tests, and AUTOTUNE_GEMM_FAMILY=ws for sweeps
and benchmarks (in a database without the shipped records, whose GEMM configs are wgmma's).
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch, cluster_choices
from autotune.gpu.tma import Box, OperandMaps
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import wgmma

NAME = "ws"
KERNEL_FILE = "gemm/gemm_ws.cu"  # under kernels/, beside this folder's mirror
DTYPES = wgmma.DTYPES
ARG_TYPES = gemm_shared.ARG_TYPES  # A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, workspace, counters
ARCH = wgmma.ARCH
ARCH_SUFFIX = wgmma.ARCH_SUFFIX

THREADS = 384  # a producer warpgroup and two consumers
CONSUMERS = 2
BK = 64  # k of a stage: 128-byte rows of A (and of an N x K B), the 128-byte swizzle
ALIGN_PAD = 1024  # the kernel rounds its shared base up to 1024 bytes
MBARRIER_BYTES = 1024  # the full and empty mbarriers, padded so that C's staging stays 1024-aligned
_TILES = (128, 256)
_STAGES = (2, 3, 4, 5, 6)
_GROUPS = (1, 4, 8, 16, 32, 64)
_CLUSTERS = (1, 2)  # blocks a cluster, along M: each loads 1 / cluster of B's stage for all of them
_SK = (0, 1)  # 1: the data-parallel + stream-K hybrid (cluster 1)
CONSUMER_FLAG_WORDS = 32  # stream-K flags (one a consumer of each block) are rounded up to this many words


def accumulators(config: Mapping[str, int]) -> int:
    """Float accumulators a consumer thread holds: its m64 slices (BM / 2 / 64) times BN / 2."""
    return config["bm"] // CONSUMERS // 64 * config["bn"] // 2


def shared_bytes(problem: Problem, config: Mapping[str, int]) -> int:
    """Mirrors gemm_ws.cu: STAGES * (BM + BN) * BK * sizeof(T) + 1024 + 1024 + BM * BN * sizeof(T)
    (the stages, alignment, mbarriers, and C staged for its stores)."""
    c, item = config, ITEMSIZE[problem.dtype]
    return c["stages"] * (c["bm"] + c["bn"]) * BK * item + ALIGN_PAD + MBARRIER_BYTES + c["bm"] * c["bn"] * item


def problem_reason(problem: Problem) -> str | None:
    """As the wgmma family's (16-byte rows of A and B: K, and N for a K x N B, multiples of 8), and M
    and N above 64: the tiles are 128 or 256 a side (smaller products are the skinny and wgmma families')."""
    reason = wgmma.problem_reason(problem, NAME)
    if reason is not None:
        return reason
    if min(problem.m, problem.n) <= 64:
        return f"the ws family's tiles are 128 or 256 a side: m and n above 64, got m={problem.m}, n={problem.n}"
    return None


def units_m(problem: Problem, config: Mapping[str, int]) -> int:
    """Rows of the units the blocks walk: `cluster` tile rows, one a block of a cluster."""
    return gemm_shared.tile_count(gemm_shared.tile_count(problem.m, config["bm"]), config["cluster"])


def space(problem: Problem) -> Space:
    def constraint(c: Mapping[str, int]) -> str | None:
        if (reason := problem_reason(problem)) is not None:
            return reason
        if c["sk"] and c["cluster"] > 1:
            return f"sk=1 splits tiles between blocks one by one, not in clusters (cluster={c['cluster']})"
        if c["cluster"] not in cluster_choices():
            return f"cluster={c['cluster']}: this GPU has no thread-block clusters"
        if c["cluster"] > 1 and gemm_shared.tile_count(problem.m, c["bm"]) < c["cluster"]:
            return f"cluster={c['cluster']} pairs tile rows, and m={problem.m} is one {c['bm']}-row tile"
        if accumulators(c) > wgmma.MAX_ACCUMULATORS:
            return f"{accumulators(c)} accumulators a thread (a {c['bm']}x{c['bn']} tile on two warpgroups) spill"
        if (reason := gemm_shared.output_tile_reason(problem, c, shared_bytes(problem, c))) is not None:
            return reason
        if c["stages"] > max(2, gemm_shared.tile_count(problem.k, BK)):
            return f"{c['stages']} stages for {gemm_shared.tile_count(problem.k, BK)} k-tiles"
        return gemm_shared.swizzle_reason(c["group"], units_m(problem, c))

    return Space(
        params=(
            Param("bm", _TILES),
            Param("bn", _TILES),
            Param("stages", _STAGES),
            Param("group", _GROUPS),
            Param("cluster", _CLUSTERS),
            Param("sk", _SK),
        ),
        constraint=constraint,
    )


def default_config(problem: Problem) -> Config:
    """Valid for every problem the family serves: 128 x 128 tiles, two stages, tiles in row order, no
    cluster, no stream-K."""
    return {"bm": 128, "bn": 128, "stages": 2, "group": 1, "cluster": 1, "sk": 0}


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    return (
        f"gemm_ws_{problem.dtype}_{c['bm']}x{c['bn']}_s{c['stages']}_g{c['group']}_c{c['cluster']}"
        f"{'_sk' if c['sk'] else ''}{gemm_shared.layout_suffix(problem)}"
    )


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name). SK is
    given only where it is 1: an sk=0 instance is the same source as before stream-K was a parameter."""
    c = config
    args = [c[k] for k in ("bm", "bn", "stages", "group", "cluster")] + ([1] if c["sk"] else [])
    return gemm_shared.instance_source(
        KERNEL_FILE,
        kernel_name(problem, c),
        problem.dtype,
        f"{THREADS}, 1",
        "at_ws::gemm_ws_body",
        args,
        b_nk=gemm_shared.b_is_n_by_k(problem),
    )


def operand_maps(problem: Problem, config: Mapping[str, int]) -> OperandMaps:
    """A's boxes of BM rows of BK, B's of BN / cluster rows of BK (N x K: a block of a cluster loads its
    share of the stage) or one 64-column atom of BK k-rows (K x N): the wgmma family's TMA boxes."""
    c = config
    a = Box(c["bm"], BK, 2 * BK)
    if gemm_shared.b_is_n_by_k(problem):
        return OperandMaps(a=a, b=Box(c["bn"] // c["cluster"], BK, 2 * BK), b_nk=True)
    return OperandMaps(a=a, b=Box(BK, wgmma.B_ATOM_COLUMNS, 128))


def stream_k_words(config: Mapping[str, int], blocks: int) -> int:
    """4-byte words of `counters` a stream-K launch of `blocks` blocks uses (gemm_ws.cu): a flag for each
    consumer of each block, rounded up to 32 words, then a partial tile of floats a block."""
    flags = -(-CONSUMERS * blocks // CONSUMER_FLAG_WORDS) * CONSUMER_FLAG_WORDS
    return flags + blocks * config["bm"] * config["bn"]


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    """One block an SM, a cluster walking units (`cluster` tiles) cluster index, + clusters, ...; the
    tensor maps in the workspace; with sk=1 the stream-K flags and partial tiles in the counters (all
    zero between launches, as every kernel's counters are: a stream's scratch is shared)."""
    c = config
    units = units_m(problem, c) * gemm_shared.tile_count(problem.n, c["bn"])
    clusters = min(units, max(1, sm_count // c["cluster"]))
    return Launch(
        grid=(clusters * c["cluster"], 1, 1),
        block=(THREADS, 1, 1),
        shared_bytes=shared_bytes(problem, c),
        workspace_floats=0,
        counters=stream_k_words(c, clusters) if c["sk"] else 0,
        operand_maps=operand_maps(problem, c),
        cluster_dims=(c["cluster"], 1, 1) if c["cluster"] > 1 else None,
    )


# The sweeps' bests on the H200 (docs/findings.md): 128 x 256 tiles with 3 stages, alone and in clusters
# of two (on par), 128 x 128 with 5-6 stages where N is 3584-4608, and the tall tile. `group`: 32 tile
# rows at a time (a whole column of tiles at M = 4096) ran 128 x 256 tiles 0-4% faster than groups of 16
# on the M = 4096 prefill set and 3-12% faster than groups of 8; 128 x 128 tiles ran best in groups of 16
# (experiments/ws_tile_order.py). A problem with fewer tile rows gets the widest group it has. No
# stream-K seed: sk=1 twins of these seeds lost to them in every sweep (4096^3, 8192^3 and four prefill
# shapes, docs/findings.md), so they would only take trials from the sweeps.
_SEEDS = (
    dict(bm=128, bn=256, stages=3, group=32, cluster=1, sk=0),
    dict(bm=128, bn=256, stages=3, group=16, cluster=2, sk=0),
    dict(bm=128, bn=128, stages=6, group=16, cluster=1, sk=0),
    dict(bm=128, bn=128, stages=5, group=16, cluster=1, sk=0),
    dict(bm=256, bn=128, stages=3, group=16, cluster=1, sk=0),
)


def _fitted_group(problem: Problem, config: Mapping[str, int]) -> int:
    """`config`'s group, or the widest of `_GROUPS` below it where the problem has fewer tile rows (units)."""
    rows = units_m(problem, config)
    return max(g for g in _GROUPS if g <= config["group"] and gemm_shared.swizzle_reason(g, rows) is None)


def seed_configs(problem: Problem) -> list[Config]:
    seeds = [{**seed, "group": _fitted_group(problem, seed)} for seed in _SEEDS]
    return [seed for seed in seeds if space(problem).check(seed) is None]
