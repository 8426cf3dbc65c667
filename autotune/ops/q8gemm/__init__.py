"""Weight-only 8-bit GEMV and skinny GEMM (out = alpha * x @ (codes * scales[:, None])^T + beta * out, W in
nn.Linear's N x K layout, docs/lowbit.md's 8-bit format): parameters, constraints, launch geometry, source,
operands and the float64 reference, for M <= 64. A problem's variant names the codes: "int8" (two's
complement) or "fp8" (OCP float8 e4m3, sm_89 and newer); its inputs are (x's dtype, int8 or fp8e4m3, x's
dtype): one scale a row of W, in the activations' dtype.

Three kernels, the same parameters: a CUDA-core kernel (kernels/q8gemm/q8gemm.cu, mma = 0) and a
tensor-core kernel (kernels/q8gemm/q8gemm_mma.cu, mma = 1), both at every M, and at M = 1 a CUDA-core
GEMV that streams the codes as the float16 GEMV streams its matrix (kernels/q8gemm/q8gemv.cu, stream = 1).
A warp owns `rpw` rows of W and `mt` rows of x (or a part of K of them: `ksplit` warps of a block share
the rows, their sums added in order), each lane holding `unroll` 16-byte pieces (16 codes) of each row
in flight. On CUDA cores the codes are widened to float once a piece and multiplied by each row of x
read through L1; on tensor cores they become 16-bit pairs, and each MMA multiplies 16 rows of W by 8
rows of x (rpw and mt in multiples of those), x read through L1 or (`stage`) staged in shared memory a
chunk at a time; through L1, `ring` stages of `unroll` steps rotate in registers (1: ask for a stage,
then multiply it). In the streaming GEMV the `ksplit` warps of a row group read its rows together, lane
after lane along K, with the rows' first pieces asked of L2 before the grid waits on the one before."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.core.arrays import DeviceArray
from autotune.core.dtypes import CUDA_TYPE
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.core.target import target_capabilities
from autotune.gpu.geometry import Launch
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.call import Bound
from autotune.ops.q8gemm import call

NAME = "q8gemm"
# Under kernels/, the mirror of this folder: the tensor-core kernel, which includes the CUDA-core kernel
# (q8gemm/q8gemm.cu); every instance of either includes this file, and at M = 1 the streaming GEMV's
# file, which includes it (so that its edits stale M = 1's measurements alone).
MMA_FILE = "q8gemm/q8gemm_mma.cu"
STREAM_FILE = "q8gemm/q8gemv.cu"
REFERENCE_FILE = "q8gemm/reference.cu"
MAX_M = 64  # the kernels' reach: larger batches belong to a GEMM on the dequantized weight
LINEAR_MAX_M = MAX_M  # autotune.linear's: the op's kernels up to here, the GEMM on the dequantized weight past it
PIECE = 16  # codes a 16-byte load holds (q8gemm.cu: PIECE)
KIND_CODE = {"int8": 0, "fp8": 1}  # q8gemm.cu's KIND
FP8_CAPABILITY = (8, 9)  # float8 conversions in hardware: Ada (sm_89) and newer
_MTS = (1, 2, 4, 8)  # rows of x a warp multiplies each piece by (CUDA cores)
_MMA_MTS = (8, 16, 32, 64)  # the same on tensor cores: tiles of 8
_BLOCKS = (64, 128, 256, 512)
_RPWS = (1, 2, 4)  # rows of W a warp (CUDA cores)
_MMA_RPWS = (16, 32)  # the same on tensor cores: tiles of 16
_UNROLLS = (1, 2, 4, 8)  # pieces of each row a lane has in flight
_KSPLITS = (1, 2, 4, 8)  # warps of a block that share a group's rows, each reading a part of K
# Registers a thread holds: 4 per piece in flight (ring x rpw x unroll), 16 floats a row for the widened
# codes and one sum per row of W and of x; past these ptxas spills.
MAX_LOADS_IN_FLIGHT = 16  # ring x rpw x unroll
MAX_SUMS = 16  # rpw x mt
# Tensor cores: 8 registers a tile of W per step in flight, 4 sums a tile pair (16 rows of W, 8 of x).
MAX_MMA_LOADS = 8  # ring x rpw / 16 x unroll
MAX_MMA_TILES = 16  # rpw / 16 x mt / 8
MAX_STATIC_SHARED = 48 * 1024  # a split's partial sums and a staged chunk of x are static shared memory
# Stages of registers either kernel rotates (x through L1): 1 asks for a stage, then multiplies it; 2-4
# ask for the stage RING - 1 ahead before each one multiplies (q8gemm_ring_body, q8gemm_mma_ring).
_RINGS = (1, 2, 3, 4)
# What the kernels were before a parameter joined the space: M = 1 on CUDA cores only, one stage, not
# the streaming GEMV.
_BEFORE = {"mma": 0, "stage": 0, "ring": 1, "stream": 0}
# Tilings measured first: whole rows a warp, 4-16 pieces a lane in flight, 8-16 warps a block.
_SEEDS: tuple[dict[str, int], ...] = (
    dict(block=256, rpw=2, unroll=4, policy=1),
    dict(block=256, rpw=1, unroll=8, policy=1),
    dict(block=128, rpw=4, unroll=2, policy=1),
    dict(block=512, rpw=1, unroll=4, policy=2),
    dict(block=256, rpw=2, unroll=2, policy=0),
    # Few rows of long K (4096 x 14336, 3584 x 18944): a row group's K split over 2-8 warps.
    dict(block=256, rpw=1, unroll=4, policy=1, ksplit=4),
    dict(block=256, rpw=2, unroll=4, policy=1, ksplit=2),
    dict(block=512, rpw=1, unroll=2, policy=1, ksplit=8),
    # The H200's M = 1 picks of 64-trial sweeps: 2-4 rows a warp, one piece in flight, K split 2-4 ways.
    dict(block=128, rpw=2, unroll=1, policy=1, ksplit=4),
    dict(block=256, rpw=4, unroll=1, policy=1, ksplit=4),
    dict(block=64, rpw=2, unroll=1, policy=1, ksplit=1),
)
# Streaming-GEMV tilings measured first at M = 1 (the probe's best, experiments/q8gemv_stream.cu): few
# rows of long K read by a row group of 4 warps, 2 rows a group; many rows by a warp a row group.
_STREAM_SEEDS: tuple[dict[str, int], ...] = (
    dict(stream=1, block=128, rpw=2, unroll=2, policy=1, ksplit=4),
    dict(stream=1, block=128, rpw=2, unroll=4, policy=1, ksplit=4),
    dict(stream=1, block=256, rpw=2, unroll=2, policy=1, ksplit=8),
    dict(stream=1, block=128, rpw=4, unroll=2, policy=1, ksplit=2),
    dict(stream=1, block=128, rpw=2, unroll=4, policy=1, ksplit=2),
    dict(stream=1, block=128, rpw=2, unroll=4, policy=1, ksplit=1),
    dict(stream=1, block=128, rpw=2, unroll=2, policy=1, ksplit=1),
)
# Tensor-core tilings measured first: 16-32 rows of W a warp, K split over 2-8 warps (a warp's 16 rows
# leave few warps on narrow matrices: 4096 rows are 256 warps whole).
_MMA_SEEDS: tuple[dict[str, int], ...] = (
    dict(mma=1, block=256, rpw=16, unroll=4, policy=1, ksplit=4),
    dict(mma=1, block=256, rpw=16, unroll=2, policy=1, ksplit=8),
    dict(mma=1, block=256, rpw=32, unroll=2, policy=1, ksplit=4),
    dict(mma=1, block=128, rpw=16, unroll=4, policy=1, ksplit=2),
    dict(mma=1, block=512, rpw=16, unroll=4, policy=1, ksplit=8),
    dict(mma=1, block=256, rpw=32, unroll=4, policy=0, ksplit=2),
    # Many rows of x (x past what L1 holds): staged, 256 rows of W a block.
    dict(mma=1, stage=1, block=256, rpw=32, unroll=2, policy=1, ksplit=1),
    dict(mma=1, stage=1, block=256, rpw=16, unroll=4, policy=1, ksplit=1),
    dict(mma=1, stage=1, block=512, rpw=16, unroll=2, policy=1, ksplit=1),
    # Rings: 2-3 stages of one or two steps in flight while one multiplies (the M = 16 sweeps' picks on
    # the few-row, long-K shapes: K split 4-8 ways, 3-4 stages).
    dict(mma=1, block=256, rpw=16, unroll=1, policy=1, ksplit=1, ring=4),
    dict(mma=1, block=256, rpw=16, unroll=2, policy=1, ksplit=2, ring=3),
    dict(mma=1, block=128, rpw=16, unroll=1, policy=1, ksplit=4, ring=4),
    dict(mma=1, block=256, rpw=16, unroll=2, policy=1, ksplit=8, ring=3),
)


def kind_of(problem: Problem) -> str:
    return problem.variant or "int8"


def _fp8_fault() -> str | None:
    """Why float8 codes cannot run on the GPUs answers are for (sm_89 and newer convert them)."""
    for capability in target_capabilities():
        major, minor = (int(part) for part in capability.split("."))
        if (major, minor) < FP8_CAPABILITY:
            return f"fp8 weights need compute capability 8.9 or newer (Ada, Hopper), not {capability}"
    return None


def _mt_choices(problem: Problem) -> tuple[int, ...]:
    """Rows of x a warp multiplies on CUDA cores: up to M rounded up to a power of two."""
    top = 1 << (min(problem.m, MAX_M) - 1).bit_length()
    return tuple(t for t in _MTS if t <= top)


def _mma_mt(problem: Problem) -> int:
    """Rows of x a warp multiplies on tensor cores to cover M in one pass (a power of two, 8 to 64)."""
    return max(_MMA_MTS[0], 1 << (min(problem.m, MAX_M) - 1).bit_length())


def _mma_mt_choices(problem: Problem) -> tuple[int, ...]:
    return tuple(t for t in _MMA_MTS if t <= _mma_mt(problem))


def _mma_shared_bytes(c: Mapping[str, int]) -> int:
    """Mirrors q8gemm_mma.cu: a split block's parts (every lane's sums, for every warp), or x's staged
    chunk (mt rows of unroll steps of 64 values and a 16-byte gap, 2 bytes a value)."""
    if c["stage"]:
        return c["mt"] * (64 * c["unroll"] + 8) * 2
    sums = c["rpw"] // 16 * c["mt"] // 8 * 4
    return c["block"] * sums * 4 if c["ksplit"] > 1 else 0


class Q8Gemm(Op):
    name = NAME
    sizes = ("M", "N", "K")
    variants = call.KINDS
    dtypes = call.ACTIVATIONS
    # x, qweight, scales, out, M, N, K, alpha, beta, workspace, counters (the last two unused)
    arg_types = "PPPPiiiffPP"
    programmatic_launch = True  # every instance waits (griddepcontrol.wait) before its first read
    shapes_file = Path(__file__).with_name("shapes.txt")
    input_names = ("x", "qweight", "scales")
    output_name = "out"
    # torch.ops.autotune.q8gemm(x, qweight, scales, alpha, kind): the options travel as the kind string
    torch_schema = "(Tensor x, Tensor qweight, Tensor scales, float alpha=1.0, str kind='int8') -> Tensor"

    def stored_config(self, problem: Problem, config: Mapping[str, Any]) -> dict[str, Any]:
        """A config stored before the tensor cores joined M = 1 (no mma or stage there: 0, the CUDA-core
        kernel) or before rings (ring 1, the kernels as they were) or the streaming GEMV (stream 0);
        migrations 0011 and 0012 move database rows."""
        return {**config, **{name: value for name, value in _BEFORE.items() if name not in config}}

    def carried_over(self, problem: Problem, config: Mapping[str, int]) -> dict[str, int]:
        """A sibling's config, or one stored before mma, stage, ring or stream, as the space names it now."""
        return self.stored_config(problem, config)

    def complete(self, problem: Problem) -> Problem:
        """The plain problem of this op names int8 codes."""
        kind = problem.variant or "int8"
        inputs = problem.inputs or (call.input_dtypes(problem.dtype, kind) if kind in call.KINDS else ())
        return replace(problem, inputs=inputs, variant=kind)

    def estimate_from(self, problem: Problem) -> tuple[Problem, ...]:
        """The same shape with the other codes, then in the other activation dtype: every kind and dtype
        takes the same configs and streams the same bytes."""
        kind = kind_of(problem)
        other_kinds = [k for k in call.KINDS if k != kind]
        others = [dtype for dtype in self.dtypes if dtype != problem.dtype]

        def at(dtype: str, variant: str) -> Problem:
            return replace(problem, dtype=dtype, inputs=call.input_dtypes(dtype, variant), variant=variant)

        return tuple(
            [at(problem.dtype, k) for k in other_kinds] + [at(d, k) for d in others for k in (kind, *other_kinds)]
        )

    def input_fault(self, problem: Problem) -> str | None:
        if problem.dtype not in call.ACTIVATIONS:
            return f"8-bit weights take float16 or bfloat16 activations, not {problem.dtype}"
        kind = kind_of(problem)
        if kind not in call.KINDS:
            return f"{NAME} needs a variant: one of {', '.join(call.KINDS)}"
        inputs = call.input_dtypes(problem.dtype, kind)
        if problem.inputs != inputs:
            return f"{NAME} {kind} reads inputs {','.join(inputs)}, not {','.join(problem.inputs)}"
        if kind == "fp8":
            fault = _fp8_fault()
            if fault:
                return fault
        if problem.k % PIECE:
            return f"K = {problem.k} is not a multiple of {PIECE} (the kernels read 16-byte pieces of a row)"
        if problem.m > MAX_M:
            return f"{NAME} kernels run M <= {MAX_M}, got M = {problem.m}"
        return None

    def bind(self, arrays: Sequence[DeviceArray | None], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
        return call.bind(NAME, arrays, out, options)

    def torch_fake(self, *args: Any) -> Any:
        return call.torch_fake(*args)

    # -- what is tuned ------------------------------------------------------------------------

    def space(self, problem: Problem) -> Space:
        def constraint(c: Mapping[str, int]) -> str | None:
            if c["block"] // 32 % c["ksplit"]:
                return f"ksplit={c['ksplit']} warps a row group do not divide the block's {c['block'] // 32} warps"
            if c["stream"]:
                return stream_constraint(c)
            return mma_constraint(c) if c["mma"] else simt_constraint(c)

        def stream_constraint(c: Mapping[str, int]) -> str | None:
            if problem.m != 1:
                return "the streaming GEMV runs M = 1 (stream=0 past it)"
            if c["mma"] or c["stage"] or c["ring"] != 1 or c["mt"] != 1:
                return "the streaming GEMV is one CUDA-core stage of one row of x (mma=0 stage=0 ring=1 mt=1)"
            if c["rpw"] not in _RPWS:
                return f"the streaming GEMV takes rpw in {_RPWS}"
            if (c["rpw"] + 2) * c["unroll"] > MAX_LOADS_IN_FLIGHT:
                return (
                    f"more than {MAX_LOADS_IN_FLIGHT} 16-byte vectors ((rpw + 2) x unroll: codes and x) in flight a "
                    "thread (runs out of registers)"
                )
            return None

        def simt_constraint(c: Mapping[str, int]) -> str | None:
            if c["mt"] not in _MTS or c["rpw"] not in _RPWS:
                return f"the CUDA-core kernel takes mt in {_MTS} and rpw in {_RPWS}"
            if problem.m == 1 and c["mt"] != 1:
                return "at M = 1 the CUDA-core kernel multiplies one row of x (mt=1)"
            if c["stage"]:
                return "the CUDA-core kernel reads x through L1 (stage=0)"
            if c["ring"] * c["rpw"] * c["unroll"] > MAX_LOADS_IN_FLIGHT:
                return (
                    f"more than {MAX_LOADS_IN_FLIGHT} pieces (ring x rpw x unroll) in flight a thread (runs out of "
                    "registers)"
                )
            if c["rpw"] * c["mt"] > MAX_SUMS:
                return f"more than {MAX_SUMS} sums (rpw x mt) a thread (runs out of registers)"
            return None

        def mma_constraint(c: Mapping[str, int]) -> str | None:
            if c["mt"] not in _MMA_MTS or c["rpw"] not in _MMA_RPWS:
                return f"the tensor-core kernel takes mt in {_MMA_MTS} and rpw in {_MMA_RPWS}"
            if c["mt"] > _mma_mt(problem):
                return f"mt={c['mt']} rows of x a warp, more than M = {problem.m} needs"
            tiles = c["rpw"] // 16
            if c["ring"] * tiles * c["unroll"] > MAX_MMA_LOADS:
                return f"more than {MAX_MMA_LOADS} tiles of W (ring x rpw / 16 x unroll) in flight a thread (registers)"
            if tiles * c["mt"] // 8 > MAX_MMA_TILES:
                return f"more than {MAX_MMA_TILES} tile pairs (rpw / 16 x mt / 8) of sums a thread (registers)"
            if c["stage"] and c["ksplit"] > 1:
                return "x is staged for a block's whole rows (stage=1 with ksplit=1)"
            if c["stage"] and c["ring"] != 1:
                return "x staged a chunk at a time takes one stage of registers (stage=1 with ring=1)"
            if _mma_shared_bytes(c) > MAX_STATIC_SHARED:
                return f"shared memory ({_mma_shared_bytes(c)} bytes) exceeds {MAX_STATIC_SHARED}"
            return None

        return Space(
            params=(
                Param("mt", tuple(dict.fromkeys(_mt_choices(problem) + _mma_mt_choices(problem)))),
                Param("block", _BLOCKS),
                Param("rpw", _RPWS + _MMA_RPWS),
                Param("unroll", _UNROLLS),
                Param("policy", (0, 1, 2)),
                Param("ksplit", _KSPLITS),
                Param("mma", (0, 1)),
                Param("stage", (0, 1)),
                Param("ring", _RINGS),
                Param("stream", (0, 1)),
            ),
            constraint=constraint,
        )

    def default_config(self, problem: Problem) -> Config:
        """At M = 1 eight warps of one row each, four pieces a lane in flight; past it the tensor cores,
        16 rows of W a warp, K split over 4 warps, every row of x a warp."""
        if problem.m >= 2:
            return dict(
                mt=_mma_mt(problem), block=256, rpw=16, unroll=4, policy=1, ksplit=4, mma=1, stage=0, ring=1, stream=0
            )
        return dict(mt=1, block=256, rpw=1, unroll=4, policy=1, ksplit=1, mma=0, stage=0, ring=1, stream=0)

    def seed_configs(self, problem: Problem) -> list[Config]:
        """At M = 1 the streaming GEMV's tilings, then the CUDA-core kernel's: there the tensor cores ran
        1.05-1.32x and rings 1.04-1.23x the time of the best single stage on CUDA cores (H200,
        docs/lowbit.md), though both stay in the space. Past it the tensor cores' tilings first, rings
        among them."""
        check = self.space(problem).check
        seeds = []
        simt = [{"mt": _mt_choices(problem)[-1], "mma": 0, "stage": 0, "ring": 1, **t} for t in _SEEDS]
        mma = [{"mt": _mma_mt(problem), "stage": 0, "ring": 1, **t} for t in _MMA_SEEDS]
        stream = [{"mt": 1, "mma": 0, "stage": 0, "ring": 1, **t} for t in _STREAM_SEEDS]
        tilings = stream + simt if problem.m == 1 else mma + simt
        for tiling in tilings:
            config = {**self.default_config(problem), **tiling}
            if check(config) is None and config not in seeds:
                seeds.append(config)
        return seeds

    def tiling_for(self, tuned: Problem, problem: Problem, config: Mapping[str, int]) -> Config:
        """`config` with every row of x in one pass where `tuned`'s were (mt covering M, up to 8 on CUDA
        cores, 64 on tensor cores): a config tuned at M = 1 (mt = 1) would read W once per row of x at
        M = 4."""
        if config.get("stream", 0):  # M = 1 only: past it the CUDA-core kernel at the same tiling
            return self.tiling_for(tuned, problem, {**config, "stream": 0}) if problem.m > 1 else dict(config)
        if config["mma"]:
            if config["mt"] < _mma_mt(tuned):
                return dict(config)
            fitted = {**config, "mt": _mma_mt(problem)}
            return fitted if self.space(problem).check(fitted) is None else dict(config)
        if config["mt"] < min(tuned.m, max(_MTS)):
            return dict(config)
        return {**config, "mt": _mt_choices(problem)[-1]}

    def registers(self, problem: Problem, config: Mapping[str, int]) -> float:
        """Registers per thread, estimated by kernel from what a thread holds: tiles of W in flight,
        tiles of sums and of x's fragments (tensor cores), pieces and sums (CUDA cores). Fitted to
        ptxas -v for sm_90 on the 183 instances of the H200 records: within 6 registers on average,
        28 at most. With them the waves rule sees a grid spill into a second wave: fp8 64x4608x3584
        took 64x4096x4096's leader (144 registers, one 256-thread block an SM, 144 blocks) predicted
        at 20.4 us and ran 33.7, where 4096 rows made 128 blocks, one wave."""
        c = config
        if c.get("stream", 0):
            return 48 + 10.3 * c["rpw"] * c["unroll"] - 3.6 * c["unroll"] - 11.1 * c["rpw"]
        if c["mma"]:
            tiles, x_tiles = c["rpw"] // 16, c["mt"] // 8
            in_flight = c["ring"] * tiles * c["unroll"]
            x_in_flight = 0 if c["stage"] else x_tiles * c["ring"] * c["unroll"]
            return 28.6 + 8.6 * in_flight + 6.9 * tiles * x_tiles + 0.85 * x_in_flight + 5.6 * c["stage"]
        return (
            19.4
            + 4.3 * c["ring"] * c["rpw"] * c["unroll"]
            + 4.9 * c["rpw"] * c["mt"]
            + 1.5 * c["mt"] * c["ring"] * c["unroll"]
        )

    def bytes_streamed(self, problem: Problem, config: Mapping[str, int]) -> int:
        """The codes are read once per pass over the rows of x (gridDim.y tiles of mt rows)."""
        passes = math.ceil(problem.m / config["mt"])
        return self.bytes_moved(problem) + (passes - 1) * problem.n * problem.k

    # -- how it is built and launched ---------------------------------------------------------

    def kernel_file(self, problem: Problem) -> str:
        return STREAM_FILE if problem.m == 1 else MMA_FILE

    def family(self, problem: Problem, config: Mapping[str, int]) -> str:
        if config.get("stream", 0):
            return "q8gemv"
        return "q8gemm_mma" if config["mma"] else NAME

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        return (
            f"{self.family(problem, c)}_{problem.dtype}_{kind_of(problem)}_m{c['mt']}_b{c['block']}_r{c['rpw']}"
            f"_u{c['unroll']}_p{c['policy']}_k{c['ksplit']}{'_s' if c['stage'] else ''}"
            + (f"_g{c['ring']}" if c["ring"] != 1 else "")  # one stage: the name it had before rings
        )  # the streaming GEMV's family names it apart

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        t = CUDA_TYPE[problem.dtype]
        kind = KIND_CODE[kind_of(problem)]
        ring = f", {c['ring']}" if c["ring"] != 1 else ""  # one stage: the instance text it had before rings
        sizes = "M, N, K"
        if c.get("stream", 0):
            tiling = f"{c['block']}, {c['rpw']}, {c['unroll']}, {c['policy']}, {c['ksplit']}"
            body = f"q8gemv_body<{t}, {kind}, {tiling}>"
            sizes = "N, K"  # M = 1
        elif c["mma"]:
            tiling = f"{c['mt'] // 8}, {c['block']}, {c['rpw'] // 16}, {c['unroll']}, {c['policy']}"
            if c["stage"]:
                body = f"q8gemm_mma_staged<{t}, {kind}, {tiling}>"
            else:
                body = f"q8gemm_mma_{'ring' if ring else 'body'}<{t}, {kind}, {tiling}, {c['ksplit']}{ring}>"
        else:
            tiling = f"{c['mt']}, {c['block']}, {c['rpw']}, {c['unroll']}, {c['policy']}, {c['ksplit']}"
            body = f"q8gemm_{'ring_' if ring else ''}body<{t}, {kind}, {tiling}{ring}>"
        call = f"at_q8gemm::{body}(x, qweight, scales, out, {sizes}, alpha, beta);"
        return (
            f'#include "{self.kernel_file(problem)}"\n'
            f'extern "C" __global__ void __launch_bounds__({c["block"]})\n'
            f"{self.kernel_name(problem, config)}(const {t}* x, const unsigned char* qweight, const {t}* scales,\n"
            f"    {t}* out, int M, int N, int K, float alpha, float beta, float* workspace,\n"
            f"    unsigned int* counters) {{\n"
            f"  {call}\n"
            f"}}\n"
        )

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        c = config
        rows_per_block = c["block"] // 32 // c["ksplit"] * c["rpw"]
        return Launch(
            grid=(math.ceil(problem.n / rows_per_block), math.ceil(problem.m / c["mt"]), 1),
            block=(c["block"], 1, 1),
            shared_bytes=0,
            workspace_floats=0,
            counters=0,
        )

    def operands(self, problem: Problem) -> Operands:
        return Operands(
            inputs=(problem.m * problem.k, problem.n * problem.k, problem.n),
            output=problem.m * problem.n,
            sizes=(problem.m, problem.n, problem.k),
        )

    # -- how it is checked and rated ----------------------------------------------------------

    def device_reference(self, problem: Problem) -> DeviceReference:
        # kernels/q8gemm/reference.cu: a warp per output in blocks of 256 threads
        return DeviceReference(
            f"at_q8gemm_reference_{problem.dtype}_{kind_of(problem)}",
            "PPPPPiii",
            (math.ceil(problem.m * problem.n * 32 / 256), 1, 1),
            (256, 1, 1),
            source=REFERENCE_FILE,
        )

    def position(self, problem: Problem, index: int) -> str:
        return f"out[{index // problem.n}, {index % problem.n}]"

    def bytes_moved(self, problem: Problem) -> int:
        """The codes, scales and x read once; out written once."""
        item = ITEMSIZE[problem.dtype]
        return problem.n * problem.k + problem.n * item + (problem.m * problem.k + problem.m * problem.n) * item

    def flops(self, problem: Problem) -> int:
        return 2 * problem.m * problem.n * problem.k


OP = Q8Gemm()
