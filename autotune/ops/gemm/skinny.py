"""Skinny GEMM family (M <= 16, CUDA cores): parameters, constraints, launch geometry, source.

Both layouts of B (see kernels/gemm/gemm_skinny.cu). K x N (the transposed GEMV too): nt threads along
N, each `vec` columns wide (its load width), kw thread groups along K, `unroll` rows of B per thread
and step, A through the cache or staged in shared memory in chunks of `a_chunk` steps. N x K (B_NK,
C = A Wᵀ): the same names with the meanings that fit W's rows, contiguous along K: nt row groups of kw
lanes (lanes along K, one warp at most), `vec` elements of K per load, `unroll` rows of W per group
(loads that share each vector of A), A always through L1 (`a_chunk` pinned to 0). mt (rows of A per
thread), policy (W's load path), cluster and split (K splits) mean the same in both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autotune.core.limits import (
    MAX_REGISTERS_PER_THREAD,
    MAX_SHARED_BYTES_OPT_IN,
    MAX_THREADS_PER_BLOCK,
    REGISTERS_PER_SM,
)
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu import geometry
from autotune.gpu.geometry import Launch
from autotune.ops.gemm import shared as gemm_shared

NAME = "skinny"
KERNEL_FILE = "gemm/gemm_skinny.cu"  # under kernels/, beside this folder's mirror
DTYPES = ("float32", "float16", "bfloat16")

MAX_M = 16
MAX_SHARED_BYTES = MAX_SHARED_BYTES_OPT_IN - 1024  # the opt-in maximum less the kernel's static flag and slack
NT_CHOICES = (8, 16, 32, 64, 128)  # threads along N
_KWS = (1, 2, 4, 8, 16, 32)  # thread groups along K
_VECS = (1, 2, 4, 8)
_MTS = (1, 2, 4, 8, 16)
_UNROLLS = (1, 2, 4, 8)  # independent steps per thread; the next step is always in flight too
# A through the cache (0) or staged in shared memory in chunks of this many steps.
_A_CHUNKS = (0, 2, 8)
# Load paths for B (see load_stream in kernels/common/common.cuh): on the H200 the GEMV tuning never picked 0
# (read-only cache).
_POLICIES = (1, 2)
# What a second read of B costs against the first (bytes_streamed): the tiles of M of one column
# tile are neighbours in the grid, so the second read comes from L2 while the first streams from
# DRAM. Chosen by leave one shape out on the H200 float32 records (scripts/eval_cost_model.py):
# median |log(predicted/measured)| 0.057 / 0.048 / 0.036 / 0.044 / 0.076 / 0.210 at 0 / 0.05 / 0.1 /
# 0.15 / 0.25 / 1 (K x N), 0.030 / 0.029 at 0 / 0.1 (N x K).
REREAD_COST = 0.1
_SPLITS = tuple(2**i for i in range(10))  # 1 .. 512: the transposed GEMV with N = 256 needs hundreds


def _vec_choices(problem: Problem) -> tuple[int, ...]:
    """The two widest loads the rows allow (16 bytes at most; along N for K x N, along K for N x K),
    and scalar loads: those are slower, but the launcher needs them for arrays whose rows are not
    16-byte aligned."""
    item = ITEMSIZE[problem.dtype]
    row = problem.k if gemm_shared.b_is_n_by_k(problem) else problem.n
    fits = [v for v in _VECS if v * item <= 16 and (v == 1 or row % v == 0)]
    return tuple(sorted({1, *fits[-2:]}))


def _mt_choices(problem: Problem) -> tuple[int, ...]:
    """Rows of A per thread: M rounded up, or half of it (B then read twice, the second time from L2)."""
    top = gemm_shared.pow2_ceil(min(problem.m, MAX_M))
    return tuple(t for t in _MTS if top // 2 <= t <= top)


def _step(problem: Problem, c: Mapping[str, int]) -> int:
    """Elements of K a block reads per step: kw*unroll rows of B for K x N, kw*vec along W's rows for N x K."""
    return c["kw"] * (c["vec"] if gemm_shared.b_is_n_by_k(problem) else c["unroll"])


def _per_split(problem: Problem, c: Mapping[str, int]) -> int:
    """Rows of K per split, as the kernel computes them: a whole number of steps."""
    return gemm_shared.rows_per_split(problem.k, c["split"], _step(problem, c))


def _stage(c: Mapping[str, int]) -> int:
    """A elements each thread holds while staging a chunk (0 without staging; K x N only)."""
    return math.ceil(c["a_chunk"] * c["kw"] * c["unroll"] * c["mt"] / (c["nt"] * c["kw"]))


def registers(problem: Problem, c: Mapping[str, int]) -> float:
    """Registers per thread, fitted on ptxas -v for sm_90 (errs high): K x N over 120 random
    instances, N x K over 473 instances of up to 256 threads (11 above it, by 11 at most)."""
    words = max(1, c["vec"] * ITEMSIZE[problem.dtype] // 4)
    if gemm_shared.b_is_n_by_k(problem):
        # mt x unroll sums, two steps of W vectors (16-bit ones also as floats), A's MT vectors of a
        # step (ptxas loads them all first), a pointer per row of A and W.
        w, r = c["unroll"] * words, c["unroll"]
        floats = r * c["vec"] if ITEMSIZE[problem.dtype] < 4 else 0
        return c["mt"] * r + 2 * w + floats + c["mt"] * words + 2 * (c["mt"] + r) + 44
    a_regs = 0 if c["a_chunk"] else 2.3 * c["unroll"] * c["mt"]
    return 1.3 * c["mt"] * c["vec"] + c["unroll"] * words + a_regs + 4 * _stage(c) + 32


registers_per_thread = registers  # the name the Gemm op asks families for (Op.registers)


def shared_bytes(c: Mapping[str, int], b_nk: bool = False) -> int:
    """Dynamic shared memory; mirrors the formula in kernels/gemm/gemm_skinny.cu (one buffer, three
    uses for K x N; for N x K, `b_nk`, the split sums and the cluster's block sums only)."""
    if b_nk:
        block, outputs = c["nt"] * c["kw"], c["mt"] * c["nt"] * c["unroll"]
        parts = block * 4 if c["split"] > 1 and block > outputs else 0
        return max(parts, outputs * 4 if c["cluster"] > 1 else 0)
    block = c["nt"] * c["kw"]
    a_chunks = 2 * c["a_chunk"] * c["kw"] * c["unroll"] * c["mt"] * 4
    sets = block // max(c["nt"], 32)
    tree = (sets // 2) * c["mt"] * c["vec"] * c["nt"] * 4 if sets > 1 else 0
    outputs = c["mt"] * c["nt"] * c["vec"]
    parts = block * 4 if c["split"] > 1 and block > outputs else 0
    cluster_sums = outputs * 4 if c["cluster"] > 1 else 0
    return max(a_chunks, tree, parts, cluster_sums)


def _shape_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if problem.m > MAX_M:
        return f"skinny serves m <= {MAX_M}, not m={problem.m}"
    block = c["nt"] * c["kw"]
    if block % 32 or block > MAX_THREADS_PER_BLOCK:
        return f"nt*kw={block} threads: not whole warps or more than {MAX_THREADS_PER_BLOCK}"
    if gemm_shared.b_is_n_by_k(problem):
        return _nk_shape_reason(problem, c)
    if c["nt"] > 32 and c["nt"] // 2 * c["vec"] >= problem.n:
        return f"nt={c['nt']}: half as many column threads already cover n={problem.n}"
    if c["nt"] < 32 and 32 * c["vec"] <= problem.n:
        return f"nt={c['nt']}: groups narrower than a warp only pay off when a warp is wider than n"
    if _step(problem, c) > problem.k:
        return f"kw*unroll={_step(problem, c)} rows per step exceed k={problem.k}"
    return None


def _nk_shape_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    """N x K: nt groups of kw lanes, `unroll` rows of W per group, kw*vec elements of K per step."""
    if c["a_chunk"]:
        return "a_chunk: N x K reads A through L1 (a_chunk=0)"
    if c["unroll"] > 1 and c["unroll"] // 2 >= problem.n:
        return f"unroll={c['unroll']}: half as many rows per group already cover n={problem.n}"
    half = c["nt"] // 2
    if half >= NT_CHOICES[0] and half * c["kw"] >= 32 and half * c["unroll"] >= problem.n:
        return f"nt={c['nt']}: half as many row groups already cover n={problem.n}"
    if _step(problem, c) > problem.k:
        return f"kw*vec={_step(problem, c)} elements per step exceed k={problem.k}"
    return None


def _resource_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    block = c["nt"] * c["kw"]
    cap = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // block)
    regs = registers(problem, c)
    if regs > cap:
        return f"about {regs:.0f} registers per thread, more than the {cap} a block of {block} gets: spills"
    smem = shared_bytes(c, gemm_shared.b_is_n_by_k(problem))
    if smem > MAX_SHARED_BYTES:
        return f"{smem} bytes of shared memory, more than {MAX_SHARED_BYTES}"
    return None


def _split_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    m_tiles, n_tiles = tiles(problem, c)
    return gemm_shared.split_k_reason(problem, c["split"], _step(problem, c), m_tiles * n_tiles, c["cluster"])


def space(problem: Problem) -> Space:
    def constraint(c: Mapping[str, int]) -> str | None:
        return _shape_reason(problem, c) or _resource_reason(problem, c) or _split_reason(problem, c)

    return Space(
        params=(
            Param("nt", NT_CHOICES),
            Param("kw", _KWS),
            Param("vec", _vec_choices(problem)),
            Param("mt", _mt_choices(problem)),
            Param("unroll", _UNROLLS),
            Param("a_chunk", (0,) if gemm_shared.b_is_n_by_k(problem) else _A_CHUNKS),
            Param("policy", _POLICIES),
            Param("cluster", geometry.cluster_choices()),
            Param("split", _SPLITS, compiled=False),
        ),
        constraint=constraint,
    )


def default_config(problem: Problem) -> Config:
    """Valid for every m <= 16, n, k >= 1. K x N: one warp along N, a few groups along K, no split.
    N x K: see _nk_default."""
    if gemm_shared.b_is_n_by_k(problem):
        return _nk_default(problem)
    mt = _mt_choices(problem)[-1]
    unroll = 2 if problem.k >= 2 else 1
    kw = 1 << (min(4, problem.k // unroll).bit_length() - 1)
    return {
        "nt": 32,
        "kw": kw,
        "vec": _vec_choices(problem)[-1],
        "mt": mt,
        "unroll": unroll,
        "a_chunk": 2 if mt >= 4 else 0,
        "policy": 1,
        "cluster": 1,
        "split": 1,
    }


# N x K: rows of W per group (`unroll`; fewer where the registers run out), lanes per row of W.
_NK_UNROLL = 4
_NK_KW = 16


def _nk_tiling(problem: Problem, kw: int, unroll: int, vec: int, block: int = 256) -> tuple[int, int, int]:
    """(nt, kw, unroll) of an N x K tiling near `block` threads with `kw` lanes per row and `unroll`
    rows per group, narrowed where the problem is small: kw*vec within k, unroll and nt within n."""
    kw = max(1, min(kw, 1 << ((problem.k // vec).bit_length() - 1)))
    unroll = max(1, min(unroll, gemm_shared.pow2_ceil(problem.n)))
    nt = max(NT_CHOICES[0], min(NT_CHOICES[-1], block // kw))
    while nt // 2 >= NT_CHOICES[0] and nt // 2 * kw >= 32 and nt // 2 * unroll >= problem.n:
        nt //= 2
    while nt * kw < 32:
        nt *= 2
    return nt, kw, unroll


def _with_split(problem: Problem, config: Config) -> Config:
    """`config` with the largest K split that keeps its grid within one wave of SEED_BLOCKS / 2 blocks
    (one per SM of an H100/H200), or two of them where two blocks fit an SM's registers (global
    split-K, no cluster: every GPU runs it), and passes the space's constraint. (16 x 4096 x 4096 in
    float32, about 240 registers a thread: 39.6 us with 256 blocks, 33.0 with 128; H200.)"""
    check = space(problem).check
    m_tiles, n_tiles = tiles(problem, config)
    resident = REGISTERS_PER_SM // (registers(problem, config) * config["nt"] * config["kw"])
    most = gemm_shared.SEED_BLOCKS // 2 * min(2, max(1, int(resident)))
    valid = [s for s in _SPLITS if m_tiles * n_tiles * s <= most]
    valid = [s for s in valid if check({**config, "split": s}) is None]
    return {**config, "split": max(valid or [1])}


def _nk_default(problem: Problem) -> Config:
    """N x K: 256 threads as groups of _NK_KW lanes along K (the widest loads K allows), each group on
    _NK_UNROLL rows of W (fewer where the registers run out), K split as _with_split says. Of the
    tilings measured on the H200 (kw 8, 16, 32 by unroll 1 to 8) this one came closest to each shape's
    best: 6.5% slower on average over M 1..16 by N, K in 4096, 14336 (float32; float16 and bfloat16
    at M = 1)."""
    mt = _mt_choices(problem)[-1]
    vec = _vec_choices(problem)[-1]
    nt, kw, unroll = _nk_tiling(problem, _NK_KW, _NK_UNROLL, vec)
    config = {
        "nt": nt,
        "kw": kw,
        "vec": vec,
        "mt": mt,
        "unroll": unroll,
        "a_chunk": 0,
        "policy": 1,
        "cluster": 1,
        "split": 1,
    }
    while config["unroll"] > 1 and _resource_reason(problem, config):
        config["unroll"] //= 2
    return _with_split(problem, config)


# Seed tilings (nt, kw, unroll, a_chunk, policy, narrower), from the H200 sweeps of the transposed
# GEMV and M = 1; `narrower` takes the second-widest load (8 bytes for 16-bit types), which won the
# small and the tall, narrow transposed shapes.
_SEEDS = (
    (32, 8, 4, 0, 1, False),
    (32, 16, 4, 2, 1, False),
    (64, 8, 2, 0, 1, False),
    (32, 16, 2, 0, 1, False),
    (32, 4, 4, 0, 2, True),
    (32, 16, 2, 2, 1, True),
    (32, 16, 4, 2, 1, True),
    # Eight steps per thread (16 loads in flight): 1x4096x4096 14.1 -> 13.4 us, the transposed
    # float16 2048^2 7.9 -> 7.1 us (scripts/try_configs.py on the H200).
    (32, 8, 8, 0, 1, False),
    (32, 16, 8, 2, 1, False),
    (32, 8, 8, 2, 1, True),
)


# N x K seed tilings (kw, unroll, policy, narrower): kw lanes per row of W, `unroll` rows per group
# (halved while the registers run out), 256 threads.
_NK_SEEDS = (
    (32, 4, 1, False),
    (16, 4, 1, False),
    (8, 4, 1, False),
    (32, 2, 1, False),
    (16, 2, 1, False),
    (32, 8, 1, False),
    (16, 8, 1, False),
    (16, 1, 1, False),
    (16, 4, 2, False),
    (32, 4, 1, True),
)


def seed_configs(problem: Problem) -> list[Config]:
    """Tilings that keep about two blocks per SM of an H100/H200 busy, each also with its splits
    reduced in a cluster where they fit one; measured before the sampler's own picks. N x K: the
    _NK_SEEDS tilings, each at the largest unroll the registers allow."""
    check = space(problem).check
    vecs = _vec_choices(problem)
    tilings: list[tuple[Config, int]] = []
    if gemm_shared.b_is_n_by_k(problem):
        default = _nk_default(problem)
        for kw, unroll, policy, narrower in _NK_SEEDS:
            vec = gemm_shared.seed_vec(vecs, narrower)
            nt, kw, unroll = _nk_tiling(problem, kw, unroll, vec)
            base = dict(default, nt=nt, kw=kw, vec=vec, unroll=unroll, policy=policy, split=1)
            while base["unroll"] > 1 and _resource_reason(problem, base):
                base["unroll"] //= 2
            if check(base) is None and base not in [t for t, _ in tilings]:
                m_tiles, n_tiles = tiles(problem, base)
                tilings.append((base, m_tiles * n_tiles))
        return gemm_shared.skinny_seeds(tilings, _SPLITS, check)
    for nt, kw, unroll, a_chunk, policy, narrower in _SEEDS:
        vec = gemm_shared.seed_vec(vecs, narrower)
        base = dict(default_config(problem), nt=nt, kw=kw, vec=vec, unroll=unroll, a_chunk=a_chunk, policy=policy)
        if check(base) is None:
            m_tiles, n_tiles = tiles(problem, base)
            tilings.append((base, m_tiles * n_tiles))
    return gemm_shared.skinny_seeds(tilings, _SPLITS, check)


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    return (
        f"gemm_skinny_{problem.dtype}_n{c['nt']}_k{c['kw']}_v{c['vec']}_m{c['mt']}_u{c['unroll']}"
        f"_a{c['a_chunk']}_p{c['policy']}_c{c['cluster']}{gemm_shared.layout_suffix(problem)}"
    )


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name)."""
    c = config
    body = "at_skinny::skinny_body"
    args = [c[k] for k in ("nt", "kw", "vec", "mt", "unroll", "a_chunk", "policy", "cluster")]
    name, bounds = kernel_name(problem, c), str(c["nt"] * c["kw"])
    return gemm_shared.instance_source(
        KERNEL_FILE,
        name,
        problem.dtype,
        bounds,
        body,
        args,
        cluster=c["cluster"],
        b_nk=gemm_shared.b_is_n_by_k(problem),
    )


def tiles(problem: Problem, config: Mapping[str, int]) -> tuple[int, int]:
    """(tiles along M, tiles along N): the grid's x is their product, M tiles fastest. A tile is
    nt*vec columns of C for K x N, nt*unroll (rows of W) for N x K."""
    per = config["unroll"] if gemm_shared.b_is_n_by_k(problem) else config["vec"]
    return math.ceil(problem.m / config["mt"]), math.ceil(problem.n / (config["nt"] * per))


def tiling_for(tuned: Problem, problem: Problem, config: Mapping[str, int]) -> Config:
    """K x N: `config` with mt covering `problem`'s M in as many tiles as it covered `tuned`'s (the
    leaders of 4x4096x4096, mt=4, run on M = 5 as mt=8, not as two tiles that each read all of B).
    Leave one shape out over the H200's float32 K x N records: 2 -> 7 of 19 picks among the 3 fastest
    stored. N x K as it is: each thread then holds twice the sums and A rows a step, and the H200 ran
    float32 12x4099x1021 at 35.9 us with mt=16 against 16.8 us with two tiles of mt=8."""
    if "mt" not in config or gemm_shared.b_is_n_by_k(problem):
        return dict(config)
    m_tiles = math.ceil(tuned.m / config["mt"])
    mt = gemm_shared.pow2_ceil(min(math.ceil(problem.m / m_tiles), MAX_M))
    return {**config, "mt": mt}


def bytes_streamed(problem: Problem, config: Mapping[str, int]) -> int:
    """A and C once, B once per tile of M rows, each read after the first at REREAD_COST: with mt
    below M (the space offers M rounded up and half of it) each tile's blocks read all of B. On the
    H200 float32 5x4096x4096 (K x N) ran 31.4 us with 4x4096x4096's leader (mt=4: two tiles) and
    23.4 us with an mt=8 config; counting B once, the cost model had them within 1%."""
    m_tiles, _ = tiles(problem, config)
    b_bytes = problem.n * problem.k * ITEMSIZE[problem.dtype]
    rereads = (m_tiles - 1) * REREAD_COST
    return round((problem.m * problem.k + problem.m * problem.n) * ITEMSIZE[problem.dtype] + (1 + rereads) * b_bytes)


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    m_tiles, n_tiles = tiles(problem, config)
    split = config["split"]
    global_split = split > 1 and config["cluster"] == 1  # clusters reduce in shared memory
    return Launch(
        grid=(m_tiles * n_tiles, split, 1),
        block=(config["nt"] * config["kw"], 1, 1),
        shared_bytes=shared_bytes(config, gemm_shared.b_is_n_by_k(problem)),
        workspace_floats=split * problem.m * problem.n if global_split else 0,
        counters=m_tiles * n_tiles if global_split else 0,
    )
