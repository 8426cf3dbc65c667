"""Skinny GEMM family on tensor cores (M <= 16, float16/bfloat16): parameters, constraints, launch
geometry, source. The kernel (kernels/gemm/gemm_skinny_tc.cu) streams B once, like the CUDA-core `skinny`
family, but multiplies with mma.sync, so its time stays flat as M grows from 2 to 16. B streams
either straight into registers (`stages` = 0) or, on Hopper, through `stages` shared-memory stages
filled by the TMA (one thread's bulk tensor copies instead of every thread's loads).

B is K x N, or for a `trans` problem N x K (an nn.Linear weight, gemm_shared.b_is_n_by_k): then its
vector loads run along K, so `vec` must divide K instead of N, a 16-byte load (`vec` 8) gives a
warp's slice 32 rows of K instead of 16 (each lane holds 8 k of a row: two mma steps), and the TMA
needs only K's rows to be 16-byte multiples."""

from __future__ import annotations

import math
from collections.abc import Mapping

from autotune.core.limits import (
    MAX_REGISTERS_PER_THREAD,
    MAX_SHARED_BYTES_OPT_IN,
    MAX_THREADS_PER_BLOCK,
    REGISTERS_PER_SM,
)
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu import geometry
from autotune.gpu.geometry import Launch
from autotune.gpu.tma import Box, OperandMaps
from autotune.ops.gemm import shared as gemm_shared

NAME = "skinny_tc"
KERNEL_FILE = "gemm/gemm_skinny_tc.cu"  # under kernels/, beside this folder's mirror
ARG_TYPES = gemm_shared.ARG_TYPES  # A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, workspace, counters
DTYPES = ("float16", "bfloat16")

MAX_M = 16  # one mma tile of rows
WARP_COLS = 64  # columns of B a warp covers: 8 lane groups x 8 columns
MMA_K = 16  # rows of B per mma
MAX_SHARED_BYTES = MAX_SHARED_BYTES_OPT_IN - 1024  # the opt-in maximum less the kernel's static flag and slack
_WNS = (1, 2, 4)  # warps along N
_KWS = (1, 2, 4, 8, 16)  # warps along K
_VECS = (1, 2, 4, 8)  # elements per load of B (8: 16 bytes)
_UNROLLS = (1, 2, 4)  # slices of K (see slice_rows) per warp and step
_POLICIES = (1, 2)  # load paths for B (see load_stream in kernels/common/common.cuh)
_SPLITS = tuple(2**i for i in range(9))  # 1 .. 256
# TMA stages (0: B streams into registers instead). A stage holds 64 rows of K: A's 16 x 64 box and
# one 64 x 64 box of B per warp along N, 128-byte swizzled.
_STAGES = (2, 3, 4, 6, 8)
TMA_ROWS = 64
TMA_ALIGN_PAD = 1024  # the kernel rounds its stages up to 1024 bytes (the swizzle's period)
TMA_MAX_KW = 4  # the warps along K share a stage's four k16 steps


def _b_row_length(problem: Problem) -> int:
    """Elements of a row of B, along which its vector loads run: N (K x N) or K (N x K)."""
    return problem.k if gemm_shared.b_is_n_by_k(problem) else problem.n


def _stage_choices(problem: Problem) -> tuple[int, ...]:
    """(0,) and, where the TMA can serve the problem, the stage counts: Hopper (or no GPU here, when
    answers are for the H100/H200 records) and rows of A and B that are multiples of 16 bytes (K
    and, for K x N, N; an N x K B's rows are K long)."""
    tma_rows = problem.k % 8 == 0 and _b_row_length(problem) % 8 == 0
    return (0, *_STAGES) if tma_rows and geometry.clusters_run_here() else (0,)


def _vec_choices(problem: Problem) -> tuple[int, ...]:
    """The two widest loads B's rows (N, or K for N x K) allow, and scalar loads: those are slower,
    but the launcher needs them for arrays whose rows are not 16-byte aligned."""
    fits = [v for v in _VECS if v == 1 or _b_row_length(problem) % v == 0]
    return tuple(sorted({1, *fits[-2:]}))


def slice_rows(problem: Problem, c: Mapping[str, int]) -> int:
    """Rows of K a warp's slice covers in the register mainloop: one mma step (16), except for an
    N x K B loaded 16 bytes at a time, where each lane holds 8 k of a row: two steps (32)."""
    return 2 * MMA_K if gemm_shared.b_is_n_by_k(problem) and c["vec"] == 8 else MMA_K


def _step(problem: Problem, c: Mapping[str, int]) -> int:
    """Rows of K a block reads per step (a TMA stage: 64)."""
    return TMA_ROWS if c["stages"] else slice_rows(problem, c) * c["kw"] * c["unroll"]


def _per_split(problem: Problem, c: Mapping[str, int]) -> int:
    """Rows of K per split, as the kernel computes them: a whole number of steps."""
    return gemm_shared.rows_per_split(problem.k, c["split"], _step(problem, c))


def columns(c: Mapping[str, int]) -> int:
    """Columns of C per block."""
    return WARP_COLS * c["wn"]


def threads(c: Mapping[str, int]) -> int:
    return 32 * c["wn"] * c["kw"]


def registers(c: Mapping[str, int], b_nk: bool = False) -> int:
    """Registers per thread (errs high; ptxas -v for sm_90 said 106, 158 and 223 for unroll 1, 2, 4 at
    vec 8): 32 accumulators, two steps of B (K x N: 4 rows of 8 elements per slice, 16 words, more
    when loaded in narrow pieces; N x K: 8 rows of 4 elements, or of 8 at vec 8, per slice) and of A
    (4 words per slice, 8 for N x K at vec 8) in flight, and about 48 for the rest."""
    if c["stages"]:
        return 80  # ptxas -v: 56 (32 accumulators, fragments of A and B, addresses)
    if b_nk:
        b_words, a_words = {1: 32, 8: 32}.get(c["vec"], 16), 8 if c["vec"] == 8 else 4
    else:
        b_words, a_words = {1: 32, 2: 20}.get(c["vec"], 16), 4
    return 48 + 32 + (1 + c["prefetch"]) * c["unroll"] * (b_words + a_words)


def registers_per_thread(problem: Problem, c: Mapping[str, int]) -> int:
    """registers() for `problem`'s layout of B: the name the Gemm op asks families for (Op.registers)."""
    return registers(c, gemm_shared.b_is_n_by_k(problem))


def stage_bytes(c: Mapping[str, int]) -> int:
    """One TMA stage: A's box of 16 rows x 64 and WN boxes of 64 x 64 of B (16-bit elements)."""
    return 16 * TMA_ROWS * 2 + c["wn"] * TMA_ROWS * WARP_COLS * 2


def shared_bytes(c: Mapping[str, int]) -> int:
    """Mirrors kernels/gemm/gemm_skinny_tc.cu: the KW warps' 16 x COLS float partial sums, and with a
    cluster another 16 x COLS for the sums the other blocks push in; with TMA they reuse the stages'
    memory (then the larger of the two)."""
    accumulators = (c["kw"] + (c["cluster"] > 1)) * 16 * columns(c) * 4
    if not c["stages"]:
        return accumulators
    return max(accumulators, TMA_ALIGN_PAD + c["stages"] * stage_bytes(c))


def _shape_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if problem.dtype not in DTYPES:
        return f"skinny_tc serves {'/'.join(DTYPES)}, not {problem.dtype}"
    if problem.m > MAX_M:
        return f"skinny_tc serves m <= {MAX_M}, not m={problem.m}"
    if threads(c) > MAX_THREADS_PER_BLOCK:
        return f"wn*kw={c['wn'] * c['kw']} warps: more than {MAX_THREADS_PER_BLOCK} threads"
    if c["wn"] > 1 and columns(c) // 2 >= problem.n:
        return f"wn={c['wn']}: half as many warps along N already cover n={problem.n}"
    if c["kw"] * c["unroll"] > 1 and _step(problem, c) > max(problem.k, slice_rows(problem, c)):
        return f"{slice_rows(problem, c)}*kw*unroll={_step(problem, c)} rows per step exceed k={problem.k}"
    return None


def _resource_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    cap = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // threads(c))
    need = registers(c, gemm_shared.b_is_n_by_k(problem))
    if need > cap:
        return f"about {need} registers per thread, more than the {cap} a block of {threads(c)} gets: spills"
    if shared_bytes(c) > MAX_SHARED_BYTES:
        return f"{shared_bytes(c)} bytes of shared memory, more than {MAX_SHARED_BYTES}"
    return None


def _split_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    return gemm_shared.split_k_reason(problem, c["split"], _step(problem, c), column_tiles(problem, c), c["cluster"])


def _tma_pinned(problem: Problem) -> dict[str, int]:
    """The register-streaming parameters, which do not apply with TMA stages: TMA configs hold them at
    these values, so that no two configs build the same kernel."""
    return {"vec": _vec_choices(problem)[-1], "unroll": 1, "policy": 1, "prefetch": 0}


def _tma_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    """Why a TMA config (stages > 0) is not one to build."""
    if not c["stages"]:
        return None
    for name, value in _tma_pinned(problem).items():
        if c[name] != value:
            return f"{name} does not apply with TMA stages: it stays {value}"
    if c["kw"] > TMA_MAX_KW:
        return f"kw={c['kw']}: with TMA at most {TMA_MAX_KW} warps along K share a stage's four k16 steps"
    if c["split"] != c["cluster"]:
        return f"split={c['split']} with TMA needs cluster={c['split']}: the workspace holds the tensor maps"
    tiles = math.ceil(_per_split(problem, c) / TMA_ROWS)
    if c["stages"] > max(2, tiles):
        return f"{c['stages']} stages for {tiles} tiles of {TMA_ROWS} rows a split"
    return None


def space(problem: Problem) -> Space:
    def constraint(c: Mapping[str, int]) -> str | None:
        return (
            _shape_reason(problem, c)
            or _tma_reason(problem, c)
            or _resource_reason(problem, c)
            or _split_reason(problem, c)
        )

    return Space(
        params=(
            Param("wn", _WNS),
            Param("kw", _KWS),
            Param("vec", _vec_choices(problem)),
            Param("unroll", _UNROLLS),
            Param("policy", _POLICIES),
            Param("prefetch", (0, 1)),
            Param("cluster", geometry.cluster_choices()),
            Param("split", _SPLITS, compiled=False),
            Param("stages", _stage_choices(problem)),
        ),
        constraint=constraint,
    )


def default_config(problem: Problem) -> Config:
    """Valid for every m <= 16, n, k >= 1 and both layouts of B: one warp along N, up to four along
    K (no more slices than K has rows), no split."""
    vec = _vec_choices(problem)[-1]
    slices = problem.k // slice_rows(problem, {"vec": vec})
    kw = 1 << (min(4, max(1, slices)).bit_length() - 1)
    return {
        "wn": 1,
        "kw": kw,
        "vec": vec,
        "unroll": 1,
        "policy": 1,
        "prefetch": 1,
        "cluster": 1,
        "split": 1,
        "stages": 0,
    }


# Seed tilings (wn, kw, unroll, narrower, prefetch): `narrower` loads 8 bytes instead of 16, which
# the H200 sweeps preferred on most goal shapes; without prefetch, 8 warps a block fit twice an SM.
# These were tuned for K x N; for N x K a 16-byte load gives a slice twice the rows (slice_rows), so
# there its unroll is halved (at least 1) to keep about the same bytes of B in flight per thread.
_SEEDS = (
    (1, 4, 2, False, 1),
    (1, 8, 1, False, 1),
    (1, 8, 1, True, 1),
    (1, 4, 4, True, 1),
    (2, 4, 2, False, 1),
    (1, 8, 1, True, 0),
    (1, 8, 2, True, 0),
    (1, 16, 1, True, 0),
    (1, 4, 1, False, 1),  # 16x4096x4096 with 8 splits in a cluster: 14.5 us (try_configs, H200)
)


# TMA seed tilings (wn, kw, stages): 64 to 256 columns a block, 3 to 6 stages of 64 rows (with
# 8, fewer blocks fit an SM and the H200 ran 16x4096x4096 in 21 us instead of 15.6).
_TMA_SEEDS = ((1, 4, 4), (2, 2, 4), (4, 1, 4), (2, 1, 6), (4, 1, 6), (2, 2, 3))
# Fewest blocks a TMA seed runs without a split: each keeps whole stages in flight, so fewer than
# two an SM can stream B (cuBLAS runs 96 at 16x4096^2 and 112 at 14336^2). On the H200, 2x14336^2
# with (2, 2, 4) took 98.7 us unsplit (112 blocks) against 104.6 in clusters of 2, and 99.9 for the
# shipped 64-column tiling, in one scripts/try_configs.py run; the seeds had offered only the split.
TMA_SEED_LEAST_BLOCKS = 96


def seed_configs(problem: Problem) -> list[Config]:
    """Tilings that keep about two blocks' worth of loads in flight per SM of an H100/H200 (~264
    blocks), each also with its splits reduced in a cluster where they fit one; measured before the
    sampler's own picks."""
    vecs = _vec_choices(problem)
    tilings = []
    for wn, kw, unroll, narrower, prefetch in _SEEDS:
        vec = gemm_shared.seed_vec(vecs, narrower)
        rows = slice_rows(problem, {"vec": vec}) // MMA_K
        base = {"wn": wn, "kw": kw, "vec": vec, "unroll": max(1, unroll // rows), "policy": 1, "prefetch": prefetch}
        base.update(cluster=1, split=1, stages=0)
        tilings.append((base, column_tiles(problem, base)))
    return gemm_shared.skinny_seeds(tilings, _SPLITS, space(problem).check) + _tma_seeds(problem)


def _tma_seeds(problem: Problem) -> list[Config]:
    """Each TMA tiling with its K split over the largest cluster that keeps the grid within
    gemm_shared.SEED_BLOCKS, and over twice that (TMA configs reduce their splits in a cluster only), and
    unsplit where its column tiles alone are TMA_SEED_LEAST_BLOCKS or more."""
    if len(_stage_choices(problem)) == 1:
        return []
    check = space(problem).check
    seeds: list[Config] = []
    for wn, kw, stages in _TMA_SEEDS:
        base = {"wn": wn, "kw": kw, **_tma_pinned(problem), "stages": stages}
        tiles = column_tiles(problem, base)
        fitting = [size for size in geometry.cluster_choices() if tiles * size <= gemm_shared.SEED_BLOCKS] or [1]
        sizes = {max(fitting), 2 * max(fitting)} | ({1} if tiles >= TMA_SEED_LEAST_BLOCKS else set())
        for size in sorted(sizes):
            config = {**base, "cluster": size, "split": size}
            if check(config) is None and config not in seeds:
                seeds.append(config)
    return seeds


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    return (
        f"gemm_skinny_tc_{problem.dtype}_n{c['wn']}_k{c['kw']}_v{c['vec']}_u{c['unroll']}_p{c['policy']}"
        f"_f{c['prefetch']}_c{c['cluster']}_s{c['stages']}{gemm_shared.layout_suffix(problem)}"
    )


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name)."""
    c = config
    body = "at_skinny_tc::skinny_tc_body"
    args = [c[k] for k in ("wn", "kw", "vec", "unroll", "policy", "cluster", "prefetch", "stages")]
    name, bounds = kernel_name(problem, c), str(threads(c))
    b_nk = gemm_shared.b_is_n_by_k(problem)
    return gemm_shared.instance_source(
        KERNEL_FILE, name, problem.dtype, bounds, body, args, cluster=c["cluster"], b_nk=b_nk
    )


def column_tiles(problem: Problem, config: Mapping[str, int]) -> int:
    """Blocks along N: the grid's x."""
    return math.ceil(problem.n / columns(config))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    split = config["split"]
    tiles = column_tiles(problem, config)
    global_split = split > 1 and config["cluster"] == 1  # clusters reduce in shared memory
    return Launch(
        grid=(tiles, split, 1),
        block=(threads(config), 1, 1),
        shared_bytes=shared_bytes(config),
        workspace_floats=split * problem.m * problem.n if global_split else 0,
        counters=tiles if global_split else 0,
        operand_maps=operand_maps(config, gemm_shared.b_is_n_by_k(problem)),
    )


def operand_maps(config: Mapping[str, int], b_nk: bool = False) -> OperandMaps | None:
    """TMA configs' boxes: 16 rows of A (rows past M read as zeros) and one warp's 64 columns of B, 64
    rows of K each (for an N x K B, `b_nk`: its 64 rows, 64 elements of K each), 128-byte swizzled as
    the kernel's ldmatrix addressing expects."""
    if not config["stages"]:
        return None
    b = Box(WARP_COLS, TMA_ROWS, 128) if b_nk else Box(TMA_ROWS, WARP_COLS, 128)
    return OperandMaps(a=Box(16, TMA_ROWS, 128), b=b, b_nk=b_nk)
