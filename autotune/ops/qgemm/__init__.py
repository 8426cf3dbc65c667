"""Weight-only int4 GEMV and skinny GEMM (out = alpha * x @ dequant(W)^T + beta * out, W in nn.Linear's
N x K layout, docs/lowbit.md's canonical format): parameters, constraints, launch geometry, source,
operands and the float64 reference, for M <= 64 (kernels/qgemm/qgemm.cu). A problem's variant names the
group and symmetry ("g128", "g128a"); its inputs are (x's dtype, int4, x's dtype, uint8).

Kernels share one space where each is faster on some shapes, and the tuner measures them all: where M = 1
and x is float16, the tensor-core kernel (rpw = 0) and a CUDA-core GEMV (kernels/qgemm/qgemm_simt.cu,
rpw > 0 rows a warp); past 16 rows of x on Hopper, the mma.sync kernel (wgmma = 0) and a wgmma kernel
(kernels/qgemm/qgemm_wgmma.cu, wgmma = 1; sm_90a). Elsewhere every config runs qgemm.cu."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.core.arrays import DeviceArray
from autotune.core.dtypes import CUDA_TYPE, UNIT_ROUNDOFF
from autotune.core.limits import MAX_SHARED_BYTES_OPT_IN
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.core.target import target_capabilities
from autotune.gpu.geometry import Launch, cluster_choices, cluster_declaration
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.call import Bound
from autotune.ops.qgemm import call
from autotune.ops.qgemm.format import GROUPS, variant_name

NAME = "qgemm"
KERNEL_FILE = "qgemm/qgemm.cu"  # under kernels/, the mirror of this folder
SIMT_FILE = "qgemm/qgemm_simt.cu"  # the CUDA-core GEMV (M = 1, float16); it includes KERNEL_FILE
REFERENCE_FILE = "qgemm/reference.cu"
WGMMA_FILE = "qgemm/qgemm_wgmma.cu"  # the wgmma kernel (16 < M <= 64, sm_90a); it includes KERNEL_FILE
MAX_M = 64  # larger batches dequantize and run a float16 GEMM (autotune.linear)
PIECE = 32  # codes a 16-byte load holds (qgemm.cu: PIECE)
QUAD = 4  # pieces a quad of lanes reads a step (qgemm.cu: QUAD)
PIECE_BYTES = 80  # a piece's x pairs in shared memory and its gap (qgemm.cu: PIECE_BYTES)
MAX_SHARED_BYTES = MAX_SHARED_BYTES_OPT_IN - 1024  # less slack for the kernel's own
MAX_STATIC_SHARED_BYTES = 32 * 1024  # the cluster's partial sums (static: 48 KiB at most)
VARIANTS = tuple(variant_name(g, sym) for sym in (True, False) for g in GROUPS)
_MTS = (1, 2, 4, 8)  # tiles of 8 rows of x (an MMA's N)
_BLOCKS = (64, 128, 256, 512)
_TILES = (1, 2)  # tiles of 16 rows of W a warp
_UNROLLS = (1, 2, 4)
_PERSIST = (0, 1, 2, 4, 8)
# Blocks an SM must hold at once (__launch_bounds__'s second argument): ptxas keeps a thread within
# 64K / (block x min_blocks) registers, spilling if it must. One block of 512 threads at 94 registers
# left the SM 16 warps, too few to keep its loads in flight (ncu: 44% of DRAM bandwidth).
_MIN_BLOCKS = (1, 2, 3, 4, 8)
MAX_THREADS_HINTED = 1024  # block x min_blocks: 64 registers a thread, the fewest the loop runs in
# Stages of registers (qgemm.cu: RING): 2 asks for one while it multiplies the other; 3 and 4 rotate,
# asking for the stage RING - 1 ahead before each one multiplies (experiments/int4_ring.cu).
_RINGS = (2, 3, 4)
# Registers a thread holds for its loads in flight (8 per tile and step, in `ring` stages) and its sums
# (4 per tile of W and of x): past these ptxas spills.
MAX_LOADS_IN_FLIGHT = 8  # ring x tiles x unroll
MAX_SUMS = 8  # tiles x mt
# The CUDA-core GEMV: rows a warp (0: the tensor-core kernel), each lane holding `unroll` 16-byte
# pieces of each in flight; past 16 such loads a thread (64 registers) ptxas spills.
_RPWS = (0, 1, 2, 4, 8)
SIMT_MAX_LOADS = 16  # rpw x unroll
# Products the CUDA-core GEMV sums in each half of a pair before it widens the pair to float
# (qgemm_simt.cu: CHAIN). 4 took 2.5-8% off its four H200 shapes at 1.2x its error, 1.6x F.linear's
# (docs/lowbit.md); 2, the first value, is the kernel configs stored without the parameter ran.
_CHAINS = (2, 4)
CHAIN_BEFORE = _CHAINS[0]
# Parameters the CUDA-core GEMV does not read: pinned to one value, so that one kernel is not tuned twice.
_SIMT_PINNED = {"mt": 1, "tiles": 1, "cluster": 1, "policy": 0, "persist": 0, "ring": 2}
# The wgmma kernel (wgmma = 1) reads mt (8 mt rows of x a block: wgmma's n), block (one or two
# warpgroups of 64 rows of W), cluster (K split over a thread-block cluster), ring (stages of codes in
# shared memory) and persist (the grid, _wgmma_clusters), and pins the rest.
WGMMA_MIN_M = 17  # from here on wgmma is in the space: at M = 16 it ran 0.81x qgemm.cu (experiment)
WGMMA_STEP = 128  # codes of a row one step covers (qgemm_wgmma.cu: STEP): K a multiple of it
_WGMMA_PINNED = {"tiles": 1, "unroll": 1, "policy": 0, "min_blocks": 1}
_WGMMA_MTS = (2, 4, 8)
_WGMMA_BLOCKS = (128, 256)
_WGMMA_PERSIST = (0, 1, 2)
# Its tilings measured first: the experiment's fastest on the H200 (experiments/int4_wgmma.cu, M = 32
# and 64): two warpgroups, rings of 4, K split 2-8 ways, one wave of clusters walking the tiles.
_WGMMA_SEEDS: tuple[dict[str, int], ...] = (
    dict(wgmma=1, mt=8, block=256, cluster=4, ring=4, persist=1),
    dict(wgmma=1, mt=8, block=256, cluster=4, ring=4, persist=0),
    dict(wgmma=1, mt=8, block=256, cluster=8, ring=4, persist=1),
    dict(wgmma=1, mt=4, block=256, cluster=2, ring=4, persist=2),
    dict(wgmma=1, mt=4, block=256, cluster=4, ring=4, persist=1),
    dict(wgmma=1, mt=4, block=256, cluster=8, ring=4, persist=0),
)
# Its tilings measured first: the experiment's fastest (experiments/int4_async.cu, docs/lowbit.md),
# then four products a half: the tiling that led three of its four H200 shapes so, and the first two.
_SIMT_SEEDS: tuple[dict[str, int], ...] = (
    dict(rpw=2, unroll=4, block=256),
    dict(rpw=4, unroll=2, block=256),
    dict(rpw=4, unroll=4, block=128, min_blocks=2),
    dict(rpw=8, unroll=1, block=512),
)
_SIMT_CHAIN_SEEDS: tuple[dict[str, int], ...] = (
    dict(rpw=1, unroll=4, block=512, min_blocks=2, chain=4),
    dict(rpw=2, unroll=4, block=256, chain=4),
    dict(rpw=4, unroll=2, block=256, chain=4),
)

# Tilings measured first: one or two tiles of 16 rows a warp, one to four steps in flight, 16 to 32
# warps an SM, grids of a block per row tile and persistent ones. The first three are the earlier
# kernel's H200 picks for M = 1: K split 8 or 4 ways in clusters where N is small, a persistent grid of
# 512-thread blocks for N = 28672; the next two hold 32 warps an SM in 64 registers.
_SEEDS: tuple[dict[str, int], ...] = (
    dict(block=128, tiles=2, unroll=2, policy=0, cluster=8, persist=0),
    dict(block=256, tiles=1, unroll=2, policy=1, cluster=4, persist=1),
    dict(block=512, tiles=1, unroll=2, policy=2, cluster=1, persist=1),
    dict(block=256, tiles=1, unroll=1, policy=2, min_blocks=4),
    dict(block=512, tiles=1, unroll=1, policy=2, min_blocks=2, persist=2),
    dict(block=256, tiles=1, unroll=2, policy=2, min_blocks=3),
    dict(block=128, tiles=1, unroll=4, policy=1),
    dict(block=256, tiles=1, unroll=2, policy=1),
    dict(block=256, tiles=2, unroll=2, policy=2),
    dict(block=128, tiles=1, unroll=4, policy=1, persist=4),
    dict(block=256, tiles=2, unroll=2, policy=1, persist=2),
    dict(block=512, tiles=1, unroll=2, policy=2, persist=1),
    # Rings, the fastest in experiments/int4_ring.cu on the H200 (M = 1): 28672x4096, 37888x3584,
    # 3584x18944 and 4096x14336.
    dict(block=128, tiles=1, unroll=2, policy=2, ring=3, persist=8),
    dict(block=128, tiles=1, unroll=1, policy=2, ring=4, min_blocks=2),
    dict(block=64, tiles=2, unroll=1, policy=2, ring=3, cluster=8, min_blocks=2, persist=8),
    dict(block=64, tiles=1, unroll=2, policy=1, ring=3, cluster=8, min_blocks=8, persist=4),
    # Past 16 rows of x, the H200's most frequent picks over the 72 tuned problems of M = 16-64 (40-trial
    # sweeps): 32 rows of x a block, 16 warps, one step a stage (where M < 32 the space refuses mt = 4).
    dict(mt=4, block=512, tiles=1, unroll=1, policy=2, ring=3, cluster=2, persist=1),
    dict(mt=4, block=512, tiles=1, unroll=1, policy=2, ring=3, cluster=8, persist=1),
    dict(mt=4, block=512, tiles=1, unroll=1, policy=2, ring=2, cluster=2, persist=1),
)


def group_of(problem: Problem) -> int:
    return int(problem.variant.rstrip("a")[1:])


def kind_fault(name: str, problem: Problem, inputs: tuple[str, ...]) -> str | None:
    """Why an int4 op's problem names the wrong input dtypes (`inputs` are the right ones) or no
    variant of the format; None where it names both right."""
    if problem.inputs != inputs:
        return f"{name} reads inputs {','.join(inputs)}, not {','.join(problem.inputs)}"
    if problem.variant not in VARIANTS:
        return f"{name} needs a variant: one of {', '.join(VARIANTS)}"
    return None


def symmetric(problem: Problem) -> bool:
    return not problem.variant.endswith("a")


def _mt_choices(problem: Problem) -> tuple[int, ...]:
    """Tiles of 8 rows of x a block computes: up to M rounded up to a power of two."""
    top = 1 << (math.ceil(min(problem.m, MAX_M) / 8) - 1).bit_length()
    return tuple(t for t in _MTS if t <= top)


def _per_split(problem: Problem, cluster: int) -> int:
    """Pieces of K a split covers, whole quads (qgemm.cu)."""
    quads = math.ceil(problem.k // PIECE / QUAD)
    return math.ceil(quads / cluster) * QUAD


def x_row_bytes(pieces: int) -> int:
    """Bytes between staged rows of x (qgemm.cu: x_row_bytes)."""
    return (pieces * PIECE_BYTES + 127) // 128 * 128 + 64


def _shared_bytes(problem: Problem, c: Mapping[str, int]) -> int:
    """The staged slice of x: its rows (up to 8 mt) of the split's pieces, as pairs with gaps."""
    return min(8 * c["mt"], problem.m) * x_row_bytes(_per_split(problem, c["cluster"]))


def _static_bytes(c: Mapping[str, int]) -> int:
    """The cluster's partial sums: a float for each row of x and of W a block computes (qgemm.cu)."""
    return 8 * c["mt"] * _rows_per_block(c) * 4 if c["cluster"] > 1 else 4


def _fits(problem: Problem, c: Mapping[str, int]) -> bool:
    """Whether x's slice and the cluster's partial sums together fit an SM's shared memory."""
    return _shared_bytes(problem, c) + _static_bytes(c) <= MAX_SHARED_BYTES


def _rows_per_block(c: Mapping[str, int]) -> int:
    return c["block"] // 32 * c["tiles"] * 16


def _chain_arg(c: Mapping[str, int]) -> str:
    """The CUDA-core GEMV's CHAIN template argument where it is not the kernel's default (the instance
    text configs stored before `chain` were measured with)."""
    chain = c.get("chain", CHAIN_BEFORE)
    return f", {chain}" if chain != CHAIN_BEFORE else ""


def simt_serves(problem: Problem) -> bool:
    """Whether the CUDA-core GEMV (rpw > 0) is in this problem's space: one row of float16 x."""
    return problem.m == 1 and problem.dtype == "float16"


def wgmma_serves(problem: Problem) -> bool:
    """Whether the wgmma kernel (wgmma = 1) is in this problem's space: more than 16 rows of x, K in
    whole steps, and answers for Hopper GPUs only (autotune/core/target.py; sm_90a cubins run on no
    other compute capability)."""
    hopper = all(cc == "9.0" for cc in target_capabilities())
    return problem.m >= WGMMA_MIN_M and problem.k % WGMMA_STEP == 0 and hopper


def _wgmma_shared_bytes(problem: Problem, c: Mapping[str, int]) -> int:
    """Mirrors qgemm_wgmma.cu's shared_bytes: x's slice (8 mt rows over a split's whole steps), the
    partial sums of a tile (two buffers in a cluster), the codes' stages and 1024 bytes of alignment."""
    rows_x, warpgroups = 8 * c["mt"], c["block"] // 128
    per_split = math.ceil(problem.k // WGMMA_STEP / c["cluster"])
    partials = 64 * warpgroups * rows_x * 4 * (2 if c["cluster"] > 1 else 1)
    return rows_x * per_split * WGMMA_STEP * 2 + partials + c["ring"] * c["block"] * 32 + 1024


def _wgmma_clusters(problem: Problem, c: Mapping[str, int], sm_count: int) -> int:
    """Clusters in the wgmma kernel's grid (blocks along x), each walking the tiles gridDim.x apart:
    persist 0, a cluster a tile; 1, as many as a Hopper GPU holds at once at one block an SM (clusters
    do not span its GPCs: of 132 SMs the H200 ran 30 clusters of 4 and 15 of 8 together, 120 SMs;
    experiments/int4_wgmma.cu), so no cluster waits for a second wave; 2, every SM's worth (clusters of
    1 and 2 fit all of them). A wave that does not fit is slower, never wrong: the tuner measures."""
    tiles = math.ceil(problem.n / (c["block"] // 2))  # 64 rows of W a warpgroup
    if c["persist"] == 0:
        return tiles
    blocks = sm_count * 10 // 11 if c["persist"] == 1 else sm_count
    return max(1, min(tiles, blocks // c["cluster"]))


def _instance(include: str, attributes: str, name: str, t: str, call: str) -> str:
    """One extern "C" instance of a kernel file: every kernel of the op takes the same arguments (the
    shipped records' instances were written this way: their text, and so their cubins, stay as they were)."""
    return (
        f'#include "{include}"\n'
        f'extern "C" __global__ void {attributes}\n'
        f"{name}(const {t}* x, const unsigned char* qweight, const {t}* scales,\n"
        f"    const unsigned char* zeros, {t}* out, int M, int N, int K, float alpha, float beta,\n"
        f"    float* workspace, unsigned int* counters) {{\n"
        f"  {call}\n"
        f"}}\n"
    )


def _pinned_fault(c: Mapping[str, int], pinned: Mapping[str, int], kernel: str) -> str | None:
    """Why `c` sets a parameter `kernel` does not read to other than its pinned value (one kernel is
    not tuned twice under two names), or None."""
    unread = [f"{name}={c[name]}" for name, value in pinned.items() if c[name] != value]
    if not unread:
        return None
    runs_with = ", ".join(f"{name}={value}" for name, value in pinned.items())
    return f"{kernel} does not read {', '.join(unread)}: it runs with {runs_with}"


def _simt_shared_bytes(problem: Problem) -> int:
    """x staged whole as pairs: 2 bytes an element (qgemm_simt.cu)."""
    return 2 * problem.k


class QGemm(Op):
    name = NAME
    sizes = ("M", "N", "K")
    variants = VARIANTS
    dtypes = call.ACTIVATIONS
    # x, qweight, scales, zeros, out, M, N, K, alpha, beta, workspace, counters (the last two unused)
    arg_types = "PPPPPiiiffPP"
    programmatic_launch = True  # every instance waits (griddepcontrol.wait) before its first read
    shapes_file = Path(__file__).with_name("shapes.txt")
    input_names = ("x", "qweight", "scales", "zeros")
    optional_inputs = ("zeros",)
    output_name = "out"
    torch_schema = "(Tensor x, Tensor qweight, Tensor scales, Tensor? zeros=None, float alpha=1.0) -> Tensor"

    def complete(self, problem: Problem) -> Problem:
        """The plain problem of this op names its int4 format: group 128, symmetric."""
        return replace(
            problem, inputs=problem.inputs or call.input_dtypes(problem.dtype), variant=problem.variant or "g128"
        )

    def estimate_from(self, problem: Problem) -> tuple[Problem, ...]:
        """The same shape in group 128 (what is tuned first), then in the other activation dtype: the
        kernels of every group and dtype take the same configs and stream the same code bytes."""
        g128 = variant_name(128, symmetric(problem))
        others = [dtype for dtype in self.dtypes if dtype != problem.dtype]

        def at(dtype: str, variant: str) -> Problem:
            return replace(problem, dtype=dtype, inputs=call.input_dtypes(dtype), variant=variant)

        found = [at(problem.dtype, g128)] if problem.variant != g128 else []
        found += [at(dtype, problem.variant) for dtype in others]
        found += [at(dtype, g128) for dtype in others if problem.variant != g128]
        return tuple(found)

    def carried_over(self, problem: Problem, config: Mapping[str, int]) -> dict[str, int]:
        """A sibling's config with rpw and wgmma as this problem's space has them: added as 0 (qgemm.cu)
        where the space has them, dropped elsewhere (where a config of the other kernel stays one this
        space refuses)."""
        carried = dict(config)
        served = (("rpw", simt_serves(problem), 0), ("chain", simt_serves(problem), CHAIN_BEFORE))
        for name, serves, before in (*served, ("wgmma", wgmma_serves(problem), 0)):
            if serves:
                carried.setdefault(name, before)
            elif carried.get(name, before) == before:
                carried.pop(name, None)
        return carried

    def stored_config(self, problem: Problem, config: Mapping[str, Any]) -> dict[str, Any]:
        """A config of a records file written before `chain` joined the CUDA-core GEMV's problems'
        space: chain 2, what its kernels summed (migration 0013 moves database rows)."""
        if simt_serves(problem) and "rpw" in config and "chain" not in config:
            return {**config, "chain": CHAIN_BEFORE}
        return dict(config)

    def input_fault(self, problem: Problem) -> str | None:
        if problem.dtype not in call.ACTIVATIONS:
            return f"int4 weights take float16 or bfloat16 activations, not {problem.dtype}"
        fault = kind_fault(NAME, problem, call.input_dtypes(problem.dtype))
        if fault:
            return fault
        if problem.k % group_of(problem):
            return f"K = {problem.k} is not a multiple of the group size {group_of(problem)}"
        smallest = {"mt": 1, "cluster": cluster_choices()[-1], "block": 64, "tiles": 1}
        if not _fits(problem, smallest):
            return f"K = {problem.k} is too long for x's slice in shared memory, even split {smallest['cluster']} ways"
        if problem.m > MAX_M:
            return f"{NAME} kernels run M <= {MAX_M} (autotune.linear dequantizes larger batches), got M = {problem.m}"
        return None

    def bind(self, arrays: Sequence[DeviceArray | None], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
        return call.bind(NAME, arrays, out)

    def torch_fake(self, *args: Any) -> Any:
        return call.torch_fake(*args)

    # -- what is tuned ------------------------------------------------------------------------

    def space(self, problem: Problem) -> Space:
        def constraint(c: Mapping[str, int]) -> str | None:
            if c.get("rpw", 0):
                return simt_constraint(c)
            if c.get("chain", CHAIN_BEFORE) != CHAIN_BEFORE:
                return f"chain is the CUDA-core GEMV's (rpw > 0): the tensor cores take chain={CHAIN_BEFORE}"
            if c.get("wgmma", 0):
                return wgmma_constraint(c)
            if c["ring"] * c["tiles"] * c["unroll"] > MAX_LOADS_IN_FLIGHT:
                return f"more than {MAX_LOADS_IN_FLIGHT} stages x tiles x steps a thread (runs out of registers)"
            if c["tiles"] * c["mt"] > MAX_SUMS:
                return f"more than {MAX_SUMS} tiles of sums a thread (tiles x mt)"
            if c["block"] * c["min_blocks"] > MAX_THREADS_HINTED:
                return f"block x min_blocks above {MAX_THREADS_HINTED} (fewer than 64 registers a thread)"
            if c["cluster"] > 1 and _static_bytes(c) > MAX_STATIC_SHARED_BYTES:
                return "the cluster's partial sums exceed 32 KiB of static shared memory"
            if not _fits(problem, c):
                return f"x's slice ({_shared_bytes(problem, c)} bytes) exceeds shared memory: split K (cluster)"
            return None

        def simt_constraint(c: Mapping[str, int]) -> str | None:
            unread = _pinned_fault(c, _SIMT_PINNED, "the CUDA-core GEMV (rpw > 0)")
            if unread:
                return unread
            if c["rpw"] * c["unroll"] > SIMT_MAX_LOADS:
                return f"more than {SIMT_MAX_LOADS} pieces (rpw x unroll) in flight a thread (runs out of registers)"
            if c["block"] * c["min_blocks"] > MAX_THREADS_HINTED:
                return f"block x min_blocks above {MAX_THREADS_HINTED} (fewer than 64 registers a thread)"
            if _simt_shared_bytes(problem) > MAX_SHARED_BYTES:
                return f"x ({_simt_shared_bytes(problem)} bytes) exceeds shared memory"
            return None

        def wgmma_constraint(c: Mapping[str, int]) -> str | None:
            unread = _pinned_fault(c, _WGMMA_PINNED, "the wgmma kernel")
            if unread:
                return unread
            if c["mt"] not in _WGMMA_MTS:
                return f"the wgmma kernel multiplies 8 mt rows of x with mt in {_WGMMA_MTS}, not mt={c['mt']}"
            if c["block"] not in _WGMMA_BLOCKS:
                return f"the wgmma kernel runs one or two warpgroups (block 128 or 256), not block={c['block']}"
            if c["persist"] not in _WGMMA_PERSIST:
                return f"the wgmma kernel's grid is persist 0, 1 or 2 (_wgmma_clusters), not persist={c['persist']}"
            if _wgmma_shared_bytes(problem, c) > MAX_SHARED_BYTES:
                return f"x's slice ({_wgmma_shared_bytes(problem, c)} bytes with partials) exceeds shared memory"
            return None

        simt = (Param("rpw", _RPWS), Param("chain", _CHAINS)) if simt_serves(problem) else ()
        wgmma = (Param("wgmma", (0, 1)),) if wgmma_serves(problem) else ()
        return Space(
            params=(
                Param("mt", _mt_choices(problem)),
                Param("block", _BLOCKS),
                Param("tiles", _TILES),
                Param("unroll", _UNROLLS),
                Param("cluster", cluster_choices()),
                Param("policy", (0, 1, 2)),
                Param("min_blocks", _MIN_BLOCKS),
                Param("ring", _RINGS),
                # Blocks per SM of a persistent grid (0: a block per row tile): x is staged once
                # per block, and row tiles are not left to a last, mostly empty wave.
                Param("persist", _PERSIST, compiled=False),
                *simt,
                *wgmma,
            ),
            constraint=constraint,
        )

    def default_config(self, problem: Problem) -> Config:
        """Four warps of one tile each, one step in flight, as many rows of x in a block as fit, K
        split just enough for x's slice to fit shared memory (input_fault refuses a K that never fits)."""
        config = {
            "mt": 1,
            "block": 128,
            "tiles": 1,
            "unroll": 1,
            "policy": 0,
            "min_blocks": 1,
            "persist": 0,
            "cluster": 1,
            "ring": 2,
        }
        if simt_serves(problem):
            config["rpw"], config["chain"] = 0, CHAIN_BEFORE
        if wgmma_serves(problem):
            config["wgmma"] = 0
        for mt in reversed(_mt_choices(problem)):
            for cluster in cluster_choices():
                candidate = {**config, "mt": mt, "cluster": cluster}
                if _fits(problem, candidate):
                    return candidate
        return config

    def seed_configs(self, problem: Problem) -> list[Config]:
        check = self.space(problem).check
        seeds = []
        simt = [*_SIMT_SEEDS, *_SIMT_CHAIN_SEEDS] if simt_serves(problem) else ()
        wgmma = _WGMMA_SEEDS if wgmma_serves(problem) else ()
        tilings = (
            *_SEEDS,
            *({**_SIMT_PINNED, "min_blocks": 1, **t} for t in simt),
            *({**_WGMMA_PINNED, **t} for t in wgmma),
        )
        for tiling in tilings:
            config = {**self.default_config(problem), **tiling}
            if check(config) is None and config not in seeds:
                seeds.append(config)
        return seeds

    # -- how it is built and launched ---------------------------------------------------------

    def kernel_file(self, problem: Problem) -> str:
        if wgmma_serves(problem):
            return WGMMA_FILE
        return SIMT_FILE if simt_serves(problem) else KERNEL_FILE

    def family(self, problem: Problem, config: Mapping[str, int]) -> str:
        if config.get("wgmma", 0):
            return "qgemm_wgmma"
        return "qgemm_simt" if config.get("rpw", 0) else NAME

    def compile_arch(self, problem: Problem, arch: str, config: Mapping[str, int] | None = None) -> str:
        """sm_90a for the wgmma kernel (which wgmma_serves offers on Hopper only), the GPU's own else."""
        return "sm_90a" if config is not None and config.get("wgmma", 0) else arch

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        if c.get("wgmma", 0):
            return (
                f"qgemm_wgmma_{problem.dtype}_{problem.variant}_m{c['mt']}_w{c['block'] // 128}_c{c['cluster']}"
                f"_r{c['ring']}"
            )
        if c.get("rpw", 0):
            return (
                f"qgemm_simt_{problem.dtype}_{problem.variant}_b{c['block']}_r{c['rpw']}_u{c['unroll']}"
                f"_o{c['min_blocks']}" + (f"_h{c['chain']}" if c.get("chain", CHAIN_BEFORE) != CHAIN_BEFORE else "")
            )  # two products a half: the name it had before `chain`
        ring = f"_r{c['ring']}" if c["ring"] != 2 else ""  # two stages: the name it had before rings
        return (
            f"qgemm_{problem.dtype}_{problem.variant}_m{c['mt']}_b{c['block']}_t{c['tiles']}_u{c['unroll']}"
            f"_c{c['cluster']}_p{c['policy']}_o{c['min_blocks']}{ring}"
        )

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        t = CUDA_TYPE[problem.dtype]
        group, sym = group_of(problem), int(symmetric(problem))
        if c.get("wgmma", 0):
            return _instance(
                WGMMA_FILE,
                f"{cluster_declaration(c['cluster'])}__launch_bounds__({c['block']}, 1)",
                self.kernel_name(problem, config),
                t,
                f"at_qgemm_wgmma::qgemm_wgmma_body<{t}, {8 * c['mt']}, {c['block'] // 128}, {c['cluster']}, "
                f"{c['ring']}, {group}, {sym}>(x, qweight, scales, zeros, out, M, N,\n      K, alpha, beta);",
            )
        if c.get("rpw", 0):
            return _instance(
                SIMT_FILE,
                f"__launch_bounds__({c['block']}, {c['min_blocks']})",
                self.kernel_name(problem, config),
                t,
                f"at_qgemm_simt::gemv_body<{c['block']}, {c['rpw']}, {c['unroll']}, {group}, {sym}{_chain_arg(c)}>"
                "(x, qweight, scales, zeros, out, N, K, alpha, beta);",
            )
        template_args = (
            f"{t}, {c['mt']}, {c['block']}, {c['tiles']}, {c['unroll']}, {group}, {sym}, {c['cluster']}, {c['policy']}"
            + (f", {c['ring']}" if c["ring"] != 2 else "")  # RING's default: the instance text it had before
        )
        return _instance(
            KERNEL_FILE,
            f"{cluster_declaration(c['cluster'])}__launch_bounds__({c['block']}, {c['min_blocks']})",
            self.kernel_name(problem, config),
            t,
            f"at_qgemm::qgemm_body<{template_args}>(x, qweight, scales, zeros, out, M, N, K, alpha, beta);",
        )

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        c = config
        if c.get("wgmma", 0):
            return Launch(
                grid=(_wgmma_clusters(problem, c, sm_count), c["cluster"], math.ceil(problem.m / (8 * c["mt"]))),
                block=(c["block"], 1, 1),
                shared_bytes=_wgmma_shared_bytes(problem, c),
                workspace_floats=0,
                counters=0,
            )
        if c.get("rpw", 0):
            rows_per_block = c["block"] // 32 * c["rpw"]
            return Launch(
                grid=(math.ceil(problem.n / rows_per_block), 1, 1),
                block=(c["block"], 1, 1),
                shared_bytes=_simt_shared_bytes(problem),
                workspace_floats=0,
                counters=0,
            )
        tiles = math.ceil(problem.n / _rows_per_block(c))
        blocks = tiles if c["persist"] == 0 else min(tiles, c["persist"] * sm_count)
        return Launch(
            grid=(blocks, c["cluster"], math.ceil(problem.m / (8 * c["mt"]))),
            block=(c["block"], 1, 1),
            shared_bytes=_shared_bytes(problem, c),
            workspace_floats=0,
            counters=0,
        )

    def operands(self, problem: Problem) -> Operands:
        groups = problem.n * (problem.k // group_of(problem))
        return Operands(
            inputs=(problem.m * problem.k, problem.n * problem.k, groups, groups),
            output=problem.m * problem.n,
            sizes=(problem.m, problem.n, problem.k),
        )

    # -- how it is checked and rated ----------------------------------------------------------

    def device_reference(self, problem: Problem) -> DeviceReference:
        # kernels/qgemm/reference.cu: a warp per output in blocks of 256 threads
        return DeviceReference(
            f"at_qgemm_reference_{problem.dtype}_{problem.variant}",
            "PPPPPPiii",
            (math.ceil(problem.m * problem.n * 32 / 256), 1, 1),
            (256, 1, 1),
            source=REFERENCE_FILE,
        )

    def accumulation_tolerance(self, problem: Problem) -> float:
        """Each weight is rounded once to the activations' dtype before its product (as F.linear on the
        dequantized weight has it): K independent errors of up to u |term| add up to about
        0.72 u |reference| / sqrt(K) (one standard deviation, for terms of one size), so 8 u / sqrt(K)
        is 11 of them, and never less than float accumulation's bound. bfloat16 at K = 896 needs it
        (its weights' rounding alone reached 1.18x the float bound on the H200); a dropped piece of
        32 codes still shows, from 1/K of the terms' sum."""
        return max(2.0**-12, 8 * UNIT_ROUNDOFF[problem.dtype] / math.sqrt(problem.k))

    def position(self, problem: Problem, index: int) -> str:
        return f"out[{index // problem.n}, {index % problem.n}]"

    def bytes_moved(self, problem: Problem) -> int:
        """The packed codes, scales (and zero points), x read once; out written once."""
        groups = problem.n * (problem.k // group_of(problem))
        item = ITEMSIZE[problem.dtype]
        zeros = 0 if symmetric(problem) else groups
        activations = (problem.m * problem.k + problem.m * problem.n) * item
        return problem.n * problem.k // 2 + groups * item + zeros + activations

    def flops(self, problem: Problem) -> int:
        return 2 * problem.m * problem.n * problem.k


OP = QGemm()
