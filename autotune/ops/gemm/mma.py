"""Tensor-core GEMM family "mma" (mma.sync, cp.async pipeline, half/bfloat16): space, geometry, source.

B is K x N, or N x K for a trans=True problem (gemm_shared.b_is_n_by_k: the kernel's B_NK, named
..._nt). The family is also the scalar-load (vec = 1) stand-in for wgmma problems whose arrays or
leading dimensions are not 16-byte aligned, in both layouts."""

from __future__ import annotations

import math
from collections.abc import Mapping

from autotune.core.limits import REGISTERS_PER_SM
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.ops.gemm import shared as gemm_shared

NAME = "mma"
KERNEL_FILE = "gemm/gemm_mma.cu"  # under kernels/, beside this folder's mirror
DTYPES = ("float16", "bfloat16")
# Kernel arguments in PyCUDA's prepare() notation: A, B, C, M, N, K, lda, ldb, ldc, alpha, beta,
# workspace, counters.
ARG_TYPES = gemm_shared.ARG_TYPES

# Split-K pays for a second pass over C; it only helps while the output tiles leave SMs idle.
SPLIT_MAX_TILES = 256
_TILES = (64, 128, 256)
_WARP_TILES = (32, 64)
_BKS = (32, 64)
_STAGES = (2, 3, 4, 5)
_VECS = (8, 4, 2)  # widest first
_SWIZZLES = (1, 4, 8, 16)
_SPLITS = (1, 2, 4, 8)


def threads(config: Mapping[str, int]) -> int:
    return (config["bm"] // config["wm"]) * (config["bn"] // config["wn"]) * 32


def shared_bytes(problem: Problem, config: Mapping[str, int]) -> int:
    """Mirrors gemm_mma.cu: SHARED_BYTES = STAGES * (BM * BK + BK * BN) * sizeof(T)."""
    c = config
    return c["stages"] * (c["bm"] * c["bk"] + c["bk"] * c["bn"]) * ITEMSIZE[problem.dtype]


def _registers(config: Mapping[str, int]) -> int:
    # Per thread: the float accumulators, two sets of A and B fragments (double buffering) and
    # about 48 for addresses and loop state. Past 255 a thread spills; past 64 Ki a block cannot launch.
    wm, wn = config["wm"], config["wn"]
    return wm * wn // 32 + 2 * (wm // 16 * 4 + wn // 8 * 2) + 48


def vec_reason(problem: Problem, vec: int) -> str | None:
    """Why copies of `vec` elements do not fit the rows of A and B (of contiguous operands), or None.
    The copies run along A's rows (K long) and B's: K long for N x K, N long for K x N; C is stored
    in pairs wherever its rows allow, whatever vec."""
    if vec == 1:
        return None
    if gemm_shared.b_is_n_by_k(problem):
        return f"vec={vec} needs k divisible by {vec}" if problem.k % vec else None
    if problem.k % vec or problem.n % vec:
        return f"vec={vec} needs k and n divisible by {vec}"
    return None


def widest_vec(problem: Problem) -> int:
    """The widest copy (elements) every row of A and B allows (vec_reason): K, and for K x N also N,
    must be multiples of it."""
    return next((v for v in _VECS if vec_reason(problem, v) is None), 1)


def _tile_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    warps = threads(c) // 32
    if c["bm"] % c["wm"] or c["bn"] % c["wn"] or not 2 <= warps <= 16:
        return f"{warps} warps of {c['wm']}x{c['wn']} in a {c['bm']}x{c['bn']} tile (need 2..16)"
    if threads(c) * _registers(c) > REGISTERS_PER_SM:
        return f"{threads(c)} threads with {c['wm']}x{c['wn']} warp tiles exceed the register file"
    if reason := gemm_shared.output_tile_reason(problem, c, shared_bytes(problem, c)):
        return reason
    if c["bk"] > max(32, gemm_shared.pow2_ceil(problem.k)):
        return f"bk={c['bk']} is deeper than k={problem.k} needs"
    return None


def _schedule_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    k_tiles = gemm_shared.tile_count(problem.k, c["bk"])
    if c["stages"] > max(2, k_tiles + 1):
        return f"{c['stages']} stages for {k_tiles} k-tiles"
    if vec := vec_reason(problem, c["vec"]):
        return vec
    tiles_m = gemm_shared.tile_count(problem.m, c["bm"])
    if swizzle := gemm_shared.swizzle_reason(c["swizzle"], tiles_m):
        return swizzle
    split = c["split"]
    if split > 1:
        if tiles_m * gemm_shared.tile_count(problem.n, c["bn"]) >= SPLIT_MAX_TILES:
            return f"split-K with {SPLIT_MAX_TILES}+ output tiles"
        if (split - 1) * math.ceil(k_tiles / split) >= k_tiles:
            return f"split={split} leaves a split without k-tiles ({k_tiles} in all)"
    return None


def space(problem: Problem) -> Space:
    widest = widest_vec(problem)
    vecs = (1,) if widest == 1 else (1, widest)  # a narrower copy than allowed is never faster

    def constraint(c: Mapping[str, int]) -> str | None:
        return _tile_reason(problem, c) or _schedule_reason(problem, c)

    return Space(
        params=(
            Param("bm", _TILES),
            Param("bn", _TILES),
            Param("bk", _BKS),
            Param("wm", _WARP_TILES),
            Param("wn", _WARP_TILES),
            Param("stages", _STAGES),
            Param("vec", vecs),
            Param("swizzle", _SWIZZLES),
            Param("split", _SPLITS, compiled=False),
        ),
        constraint=constraint,
    )


def default_config(problem: Problem) -> Config:
    """Valid for every shape and both layouts of B: 2-byte loads (no alignment assumed), tiles no
    larger than the output."""
    bm = 128 if problem.m > 64 else 64
    bn = 128 if problem.n > 64 else 64
    return {
        "bm": bm,
        "bn": bn,
        "bk": 32,
        "wm": 64 if bm == 128 else 32,
        "wn": 32,
        "stages": min(3, gemm_shared.tile_count(problem.k, 32) + 1),
        "vec": 1,
        "swizzle": 1,
        "split": 1,
    }


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    return (
        f"gemm_mma_{problem.dtype}_{c['bm']}x{c['bn']}x{c['bk']}_w{c['wm']}x{c['wn']}"
        f"_s{c['stages']}_v{c['vec']}_z{c['swizzle']}{gemm_shared.layout_suffix(problem)}"
    )


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name),
    B_NK where the problem stores B N x K."""
    c = config
    body = "at_gemm_mma::gemm_mma_body"
    args = [c[k] for k in ("bm", "bn", "bk", "wm", "wn", "stages", "vec", "swizzle")]
    name = kernel_name(problem, c)
    b_nk = gemm_shared.b_is_n_by_k(problem)
    return gemm_shared.instance_source(KERNEL_FILE, name, problem.dtype, str(threads(c)), body, args, b_nk=b_nk)


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    """One block per output tile on grid x (the kernel remaps it), split-K slices on grid z."""
    c = config
    tiles = gemm_shared.tile_count(problem.m, c["bm"]) * gemm_shared.tile_count(problem.n, c["bn"])
    split = c["split"]
    return Launch(
        grid=(tiles, 1, split),
        block=(threads(c), 1, 1),
        shared_bytes=shared_bytes(problem, c),
        workspace_floats=split * problem.m * problem.n if split > 1 else 0,
        counters=tiles if split > 1 else 0,
    )


# Tiles known to suit Hopper-class tensor cores at large shapes (8 warps of 64x64, deep pipelines):
# the tuner measures those valid for a problem first, so a short search starts from them.
_SEEDS = (
    dict(bm=128, bn=256, bk=32, wm=64, wn=64, stages=4, swizzle=8),
    dict(bm=256, bn=128, bk=32, wm=64, wn=64, stages=4, swizzle=8),
    dict(bm=128, bn=256, bk=64, wm=64, wn=64, stages=3, swizzle=16),
    dict(bm=256, bn=128, bk=64, wm=64, wn=64, stages=3, swizzle=16),
    dict(bm=128, bn=128, bk=32, wm=64, wn=64, stages=4, swizzle=8),
    dict(bm=128, bn=128, bk=64, wm=64, wn=64, stages=3, swizzle=8),
)


def seed_configs(problem: Problem) -> list[Config]:
    """Known-good configs valid for this problem (widest loads, no split)."""
    vec = widest_vec(problem)
    candidates = [{**seed, "vec": vec, "split": 1} for seed in _SEEDS]
    return [c for c in candidates if space(problem).check(c) is None]
