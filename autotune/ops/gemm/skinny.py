"""Skinny GEMM family (M <= 16, CUDA cores): parameters, constraints, launch geometry, source."""

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
from autotune.ops import geometry
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.geometry import Launch

NAME = "skinny"
KERNEL_FILE = "gemm/gemm_skinny.cu"  # under kernels/, beside this folder's mirror
DTYPES = ("float32", "float16", "bfloat16")

MAX_M = 16
MAX_SHARED_BYTES = MAX_SHARED_BYTES_OPT_IN - 1024  # the opt-in maximum less the kernel's static flag and slack
_NTS = (8, 16, 32, 64, 128)  # threads along N
_KWS = (1, 2, 4, 8, 16, 32)  # thread groups along K
_VECS = (1, 2, 4, 8)
_MTS = (1, 2, 4, 8, 16)
_UNROLLS = (1, 2, 4, 8)  # independent steps per thread; the next step is always in flight too
# A through the cache (0) or staged in shared memory in chunks of this many steps.
_A_CHUNKS = (0, 2, 8)
# Load paths for B (see load_stream in kernels/common/common.cuh): on the H200 the GEMV tuning never picked 0
# (read-only cache).
_POLICIES = (1, 2)
_SPLITS = tuple(2**i for i in range(10))  # 1 .. 512: the transposed GEMV with N = 256 needs hundreds


def _vec_choices(problem: Problem) -> tuple[int, ...]:
    """The two widest loads N allows (16 bytes at most), and scalar loads: those are slower, but the
    launcher needs them for arrays whose rows are not 16-byte aligned."""
    item = ITEMSIZE[problem.dtype]
    fits = [v for v in _VECS if v * item <= 16 and (v == 1 or problem.n % v == 0)]
    return tuple(sorted({1, *fits[-2:]}))


def _mt_choices(problem: Problem) -> tuple[int, ...]:
    """Rows of A per thread: M rounded up, or half of it (B then read twice, the second time from L2)."""
    top = gemm_shared.pow2_ceil(min(problem.m, MAX_M))
    return tuple(t for t in _MTS if top // 2 <= t <= top)


def _step(c: Mapping[str, int]) -> int:
    return c["kw"] * c["unroll"]


def _per_split(problem: Problem, c: Mapping[str, int]) -> int:
    """Rows of K per split, as the kernel computes them: a whole number of steps."""
    return gemm_shared.rows_per_split(problem.k, c["split"], _step(c))


def _stage(c: Mapping[str, int]) -> int:
    """A elements each thread holds while staging a chunk (0 without staging)."""
    return math.ceil(c["a_chunk"] * _step(c) * c["mt"] / (c["nt"] * c["kw"]))


def registers(problem: Problem, c: Mapping[str, int]) -> float:
    """Registers per thread, fitted on ptxas -v for sm_90 over 120 random instances (errs high)."""
    words = max(1, c["vec"] * ITEMSIZE[problem.dtype] // 4)
    a_regs = 0 if c["a_chunk"] else 2.3 * c["unroll"] * c["mt"]
    return 1.3 * c["mt"] * c["vec"] + c["unroll"] * words + a_regs + 4 * _stage(c) + 32


def shared_bytes(c: Mapping[str, int]) -> int:
    """Dynamic shared memory; mirrors the formula in kernels/gemm/gemm_skinny.cu (one buffer, three uses)."""
    block = c["nt"] * c["kw"]
    a_chunks = 2 * c["a_chunk"] * _step(c) * c["mt"] * 4
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
    if c["nt"] > 32 and c["nt"] // 2 * c["vec"] >= problem.n:
        return f"nt={c['nt']}: half as many column threads already cover n={problem.n}"
    if c["nt"] < 32 and 32 * c["vec"] <= problem.n:
        return f"nt={c['nt']}: groups narrower than a warp only pay off when a warp is wider than n"
    if _step(c) > problem.k:
        return f"kw*unroll={_step(c)} rows per step exceed k={problem.k}"
    return None


def _resource_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    block = c["nt"] * c["kw"]
    cap = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // block)
    regs = registers(problem, c)
    if regs > cap:
        return f"about {regs:.0f} registers per thread, more than the {cap} a block of {block} gets: spills"
    if shared_bytes(c) > MAX_SHARED_BYTES:
        return f"{shared_bytes(c)} bytes of shared memory, more than {MAX_SHARED_BYTES}"
    return None


def _split_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    m_tiles, n_tiles = tiles(problem, c)
    return gemm_shared.split_k_reason(problem, c["split"], _step(c), m_tiles * n_tiles, c["cluster"])


def space(problem: Problem) -> Space:
    def constraint(c: Mapping[str, int]) -> str | None:
        return _shape_reason(problem, c) or _resource_reason(problem, c) or _split_reason(problem, c)

    return Space(
        params=(
            Param("nt", _NTS),
            Param("kw", _KWS),
            Param("vec", _vec_choices(problem)),
            Param("mt", _mt_choices(problem)),
            Param("unroll", _UNROLLS),
            Param("a_chunk", _A_CHUNKS),
            Param("policy", _POLICIES),
            Param("cluster", geometry.cluster_choices()),
            Param("split", _SPLITS, compiled=False),
        ),
        constraint=constraint,
    )


def default_config(problem: Problem) -> Config:
    """Valid for every m <= 16, n, k >= 1: one warp along N, a few groups along K, no split."""
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


def seed_configs(problem: Problem) -> list[Config]:
    """Tilings that keep about two blocks per SM of an H100/H200 busy, each also with its splits
    reduced in a cluster where they fit one; measured before the sampler's own picks."""
    check = space(problem).check
    vecs = _vec_choices(problem)
    tilings = []
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
        f"_a{c['a_chunk']}_p{c['policy']}_c{c['cluster']}"
    )


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name)."""
    c = config
    body = "at_skinny::skinny_body"
    args = [c[k] for k in ("nt", "kw", "vec", "mt", "unroll", "a_chunk", "policy", "cluster")]
    name, bounds = kernel_name(problem, c), str(c["nt"] * c["kw"])
    return gemm_shared.instance_source(KERNEL_FILE, name, problem.dtype, bounds, body, args, cluster=c["cluster"])


def tiles(problem: Problem, config: Mapping[str, int]) -> tuple[int, int]:
    """(tiles along M, tiles along N): the grid's x is their product, M tiles fastest."""
    return math.ceil(problem.m / config["mt"]), math.ceil(problem.n / (config["nt"] * config["vec"]))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    m_tiles, n_tiles = tiles(problem, config)
    split = config["split"]
    global_split = split > 1 and config["cluster"] == 1  # clusters reduce in shared memory
    return Launch(
        grid=(m_tiles * n_tiles, split, 1),
        block=(config["nt"] * config["kw"], 1, 1),
        shared_bytes=shared_bytes(config),
        workspace_floats=split * problem.m * problem.n if global_split else 0,
        counters=m_tiles * n_tiles if global_split else 0,
    )
