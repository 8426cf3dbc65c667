"""SIMT GEMM (float32 on CUDA cores, C = alpha*A*B + beta*C): parameters, constraints, geometry, source.

B is K x N or, for a `trans` problem (gemm_shared.b_is_n_by_k), N x K; both layouts have the same
space, the N x K one with a padded, transposed B tile in shared memory (see shared_bytes)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

from autotune.core.limits import (
    MAX_GRID_Y,
    MAX_REGISTERS_PER_THREAD,
    MAX_SHARED_BYTES_OPT_IN,
    MAX_THREADS_PER_SM,
    REGISTERS_PER_SM,
)
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.ops.gemm import shared as gemm_shared

NAME = "simt"
KERNEL_FILE = "gemm/gemm_simt.cu"  # under kernels/, beside this folder's mirror
DTYPES: tuple[str, ...] = ("float32",)
# Kernel arguments in PyCUDA's prepare() notation: A, B, C, M, N, K, lda, ldb, ldc, alpha, beta,
# workspace, counters.
ARG_TYPES = gemm_shared.ARG_TYPES

A_PAD = 4  # floats of padding per k-row of the transposed A tile (mirrors the kernel)
B_PAD_NK = 4  # the same for B's tile where B is N x K (stored transposed like A); K x N has none
FLOAT_BYTES = 4
# Registers a thread needs beside its accumulators, operand fragments and staged loads (indices, the
# k loop, two base pointers); ptxas rematerializes everything else rather than spill.
BASE_REGISTERS = 16
# Left free under the cap: ptxas needs some room to schedule, or it spills (seen at sm_90 with nvcc 13).
REGISTER_MARGIN = 8
# 8x16 thread tiles: ptxas keeps two k-steps of operands live and needs ~50 registers over the
# estimate; above this estimate a third of them spilled (4 to 124 bytes) when all were compiled.
WIDE_TILE_MAX_ESTIMATE = 180
MIN_THREADS = 64  # one-warp blocks leave the SM's four schedulers short of warps
MAX_TILE_THREADS = 512  # past this, blocks get too few registers per thread for useful tiles

_TILES = (32, 64, 128, 256)
_BKS = (8, 16, 32)
_WARP_TILES = (16, 32, 64, 128)
_THREAD_TILES = (4, 8, 16)
_VECS = (1, 2, 4)
# Blocks per SM ptxas must leave room for (the second __launch_bounds__ argument): 2 caps registers
# at 32768 / threads, which keeps two 256-thread blocks of 8x8 tiles resident instead of one.
_OCCUPANCY = (1, 2)


def _threads(c: Mapping[str, int]) -> int:
    return (c["bm"] // c["wm"]) * (c["bn"] // c["wn"]) * 32


def _staged_floats(c: Mapping[str, int]) -> int:
    """Floats of the next k-tile a thread holds in registers (A and B, rounded up to whole vectors)."""
    threads, vec = _threads(c), c["vec"]
    a_vectors = math.ceil(c["bm"] * c["bk"] // vec / threads)
    b_vectors = math.ceil(c["bk"] * c["bn"] // vec / threads)
    return (a_vectors + b_vectors) * vec


def estimated_registers(c: Mapping[str, int]) -> int:
    """Registers a thread cannot do without: accumulators, one k-step of operands, the staged k-tile."""
    return c["tm"] * c["tn"] + c["tm"] + c["tn"] + _staged_floats(c) + BASE_REGISTERS


def shared_bytes(c: Mapping[str, int], b_nk: bool = False) -> int:
    """STAGES * (BK * (BM + A_PAD) + BK * (BN + B_PAD)) * sizeof(float), B_PAD = 4 where B is N x K
    (`b_nk`) and 0 where it is K x N, as in kernels/gemm/gemm_simt.cu."""
    b_pad = B_PAD_NK if b_nk else 0
    return c["stages"] * (c["bk"] * (c["bm"] + A_PAD) + c["bk"] * (c["bn"] + b_pad)) * FLOAT_BYTES


def _tile_reason(c: Mapping[str, int]) -> str | None:
    if c["bm"] % c["wm"] or c["bn"] % c["wn"]:
        return f"warp tile {c['wm']}x{c['wn']} does not divide block tile {c['bm']}x{c['bn']}"
    if c["wm"] % c["tm"] or c["wn"] % c["tn"]:
        return f"thread tile {c['tm']}x{c['tn']} does not divide warp tile {c['wm']}x{c['wn']}"
    lanes = (c["wm"] // c["tm"]) * (c["wn"] // c["tn"])
    if lanes != 32:
        return f"warp tile {c['wm']}x{c['wn']} / thread tile {c['tm']}x{c['tn']} gives {lanes} lanes, not 32"
    if max(c["tm"], c["tn"]) == 16 and min(c["tm"], c["tn"]) != 8:
        return f"thread tile {c['tm']}x{c['tn']}: 16-wide tiles only pair with 8 (16x16 spills, 4x16 starves)"
    return None


def register_cap(c: Mapping[str, int]) -> int:
    """Registers per thread ptxas may use so that `occ` blocks fit one SM (allocated in groups of 8)."""
    return min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // (c["occ"] * _threads(c)) // 8 * 8)


def _resource_reason(c: Mapping[str, int], b_nk: bool) -> str | None:
    threads = _threads(c)
    if not MIN_THREADS <= threads <= MAX_TILE_THREADS:
        return f"{threads} threads per block, outside {MIN_THREADS}..{MAX_TILE_THREADS}"
    if c["occ"] * threads > MAX_THREADS_PER_SM:
        return f"{c['occ']} blocks of {threads} threads do not fit one SM"
    if c["occ"] > 1 and REGISTERS_PER_SM // (c["occ"] * threads) >= MAX_REGISTERS_PER_THREAD:
        return f"occ={c['occ']} caps nothing for {threads} threads (same kernel as occ=1)"
    if c["bk"] * c["bm"] < c["vec"] * threads and c["bk"] * c["bn"] < c["vec"] * threads:
        return f"tiles too small for {threads} threads: most would load nothing"
    registers = estimated_registers(c)
    if registers > register_cap(c) - REGISTER_MARGIN:
        return f"about {registers} registers per thread, over the {register_cap(c)} that occ={c['occ']} allows"
    if c["tm"] * c["tn"] > 64 and registers > WIDE_TILE_MAX_ESTIMATE:
        return f"thread tile {c['tm']}x{c['tn']} with {_staged_floats(c)} staged floats spills"
    if c["occ"] * shared_bytes(c, b_nk) > MAX_SHARED_BYTES_OPT_IN:
        smem = shared_bytes(c, b_nk)
        return f"{c['occ']} x {smem} bytes of shared memory, more than one SM's {MAX_SHARED_BYTES_OPT_IN}"
    return None


def constraint(c: Mapping[str, int], b_nk: bool = False) -> str | None:
    """Why a config cannot run (one line), or None, for B K x N or (`b_nk`) N x K. The other
    problem-dependent parts live in the vec choices."""
    return _tile_reason(c) or _resource_reason(c, b_nk)


def vec_choices(problem: Problem) -> tuple[int, ...]:
    """Vector widths whose loads and stores stay aligned, the same K % VEC == 0 and N % VEC == 0 for both
    layouts: rows of A (along K) need K % VEC and rows of C N % VEC; B's rows need N % VEC where B is
    K x N (loads along N) and K % VEC where it is N x K (loads along K)."""
    return tuple(v for v in _VECS if problem.k % v == 0 and problem.n % v == 0)


def space(problem: Problem) -> Space:
    return Space(
        params=(
            Param("bm", _TILES),
            Param("bn", _TILES),
            Param("bk", _BKS),
            Param("wm", _WARP_TILES),
            Param("wn", _WARP_TILES),
            Param("tm", _THREAD_TILES),
            Param("tn", _THREAD_TILES),
            Param("vec", vec_choices(problem)),
            Param("stages", (1, 2)),
            Param("occ", _OCCUPANCY),
        ),
        constraint=functools.partial(constraint, b_nk=gemm_shared.b_is_n_by_k(problem)),
    )


def default_config(problem: Problem) -> Config:
    """The classic 128x128x8 tile, 256 threads of 8x8 (warp tile 32x64), double buffered; 64x64 for
    small M or N, where 128-wide tiles would leave most of the block idle."""
    vec = max(vec_choices(problem))
    if min(problem.m, problem.n) <= 64:
        return {"bm": 64, "bn": 64, "bk": 8, "wm": 32, "wn": 32, "tm": 8, "tn": 4, "vec": vec, "stages": 2, "occ": 1}
    return {"bm": 128, "bn": 128, "bk": 8, "wm": 32, "wn": 64, "tm": 8, "tn": 8, "vec": vec, "stages": 2, "occ": 2}


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    return (
        f"gemm_simt_{problem.dtype}_b{c['bm']}x{c['bn']}x{c['bk']}_w{c['wm']}x{c['wn']}"
        f"_t{c['tm']}x{c['tn']}_v{c['vec']}_s{c['stages']}_o{c['occ']}{gemm_shared.layout_suffix(problem)}"
    )


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name), for B's
    layout of `problem`."""
    c = config
    body = "at_gemm_simt::gemm_simt_body"
    args = [c[k] for k in ("bm", "bn", "bk", "wm", "wn", "tm", "tn", "vec", "stages")]
    bounds = f"{_threads(c)}, {c['occ']}"  # at most this many threads, at least occ blocks per SM
    name = kernel_name(problem, c)
    b_nk = gemm_shared.b_is_n_by_k(problem)
    return gemm_shared.instance_source(KERNEL_FILE, name, problem.dtype, bounds, body, args, split_k=False, b_nk=b_nk)


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    """grid.x walks the N tiles, grid.y the M tiles (capped at 65535; the kernel strides past that)."""
    c = config
    tiles_n = math.ceil(problem.n / c["bn"])
    tiles_m = math.ceil(problem.m / c["bm"])
    return Launch(
        grid=(tiles_n, min(tiles_m, MAX_GRID_Y), 1),
        block=(_threads(c), 1, 1),
        shared_bytes=shared_bytes(c, gemm_shared.b_is_n_by_k(problem)),
        workspace_floats=0,
        counters=0,
    )


# The classic fast CUDA-core tilings (128x128 blocks of 8x8 thread tiles, and 8-warp 64x64 warp
# tiles): the tuner measures those valid for a problem first, so a short search starts from them.
_SEEDS = (
    dict(bm=128, bn=128, bk=8, wm=32, wn=64, tm=8, tn=8, stages=2, occ=2),
    dict(bm=128, bn=128, bk=8, wm=64, wn=32, tm=8, tn=8, stages=2, occ=2),
    dict(bm=128, bn=128, bk=16, wm=32, wn=64, tm=8, tn=8, stages=2, occ=1),
    dict(bm=128, bn=256, bk=8, wm=64, wn=64, tm=8, tn=16, stages=2, occ=1),
    dict(bm=256, bn=128, bk=8, wm=64, wn=64, tm=16, tn=8, stages=2, occ=1),
    dict(bm=256, bn=128, bk=8, wm=64, wn=32, tm=8, tn=8, stages=2, occ=1),
)


def seed_configs(problem: Problem) -> list[Config]:
    """Known-good configs valid for this problem (widest loads)."""
    vec = max(space(problem).choices()["vec"])
    candidates = [{**seed, "vec": vec} for seed in _SEEDS]
    return [c for c in candidates if space(problem).check(c) is None]
