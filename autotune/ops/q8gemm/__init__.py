"""Weight-only 8-bit GEMV and skinny GEMM (out = alpha * x @ (codes * scales[:, None])^T + beta * out, W in
nn.Linear's N x K layout, docs/lowbit.md's 8-bit format): parameters, constraints, launch geometry, source,
operands and the float64 reference, for M <= 64 (kernels/q8gemm/q8gemm.cu). A problem's variant names the
codes: "int8" (two's complement) or "fp8" (OCP float8 e4m3, sm_89 and newer); its inputs are (x's dtype,
int8 or fp8e4m3, x's dtype): one scale a row of W, in the activations' dtype.

One CUDA-core kernel serves every M: a warp owns `rpw` rows of W and `mt` rows of x (or a part of K of
them: `ksplit` warps of a block share the rows, their sums added in order), each lane holding `unroll`
16-byte pieces (16 codes) of each row in flight, the codes widened to float once a piece and multiplied
by each row of x read through L1."""

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
KERNEL_FILE = "q8gemm/q8gemm.cu"  # under kernels/, the mirror of this folder
REFERENCE_FILE = "q8gemm/reference.cu"
MAX_M = 64  # the CUDA-core kernel's reach: larger batches belong to a GEMM on the dequantized weight
# autotune.linear's: every code meets each row of x on CUDA cores, so past a few rows the kernel loses to
# float16 (H200, 28672 x 4096 int8, untuned picks: M = 4 1.02x torch's float16, M = 16 0.33x, M = 64
# 0.09x); past 16 rows the GEMM on the weight dequantized on every call is estimated to be faster
# (from the bytes each path moves, not measured).
LINEAR_MAX_M = 16
PIECE = 16  # codes a 16-byte load holds (q8gemm.cu: PIECE)
KIND_CODE = {"int8": 0, "fp8": 1}  # q8gemm.cu's KIND
FP8_CAPABILITY = (8, 9)  # float8 conversions in hardware: Ada (sm_89) and newer
_MTS = (1, 2, 4, 8)  # rows of x a warp multiplies each piece by
_BLOCKS = (64, 128, 256, 512)
_RPWS = (1, 2, 4)  # rows of W a warp
_UNROLLS = (1, 2, 4, 8)  # pieces of each row a lane has in flight
_KSPLITS = (1, 2, 4, 8)  # warps of a block that share a group's rows, each reading a part of K
# Registers a thread holds: 4 per piece in flight (rpw x unroll), 16 floats a row for the widened
# codes and one sum per row of W and of x; past these ptxas spills.
MAX_LOADS_IN_FLIGHT = 16  # rpw x unroll
MAX_SUMS = 16  # rpw x mt
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
    """Rows of x a warp multiplies: up to M rounded up to a power of two."""
    top = 1 << (min(problem.m, MAX_M) - 1).bit_length()
    return tuple(t for t in _MTS if t <= top)


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
            if c["rpw"] * c["unroll"] > MAX_LOADS_IN_FLIGHT:
                return (
                    f"more than {MAX_LOADS_IN_FLIGHT} pieces (rpw x unroll) in flight a thread (runs out of registers)"
                )
            if c["rpw"] * c["mt"] > MAX_SUMS:
                return f"more than {MAX_SUMS} sums (rpw x mt) a thread (runs out of registers)"
            if c["block"] // 32 % c["ksplit"]:
                return f"ksplit={c['ksplit']} warps a row group do not divide the block's {c['block'] // 32} warps"
            return None

        return Space(
            params=(
                Param("mt", _mt_choices(problem)),
                Param("block", _BLOCKS),
                Param("rpw", _RPWS),
                Param("unroll", _UNROLLS),
                Param("policy", (0, 1, 2)),
                Param("ksplit", _KSPLITS),
            ),
            constraint=constraint,
        )

    def default_config(self, problem: Problem) -> Config:
        """Eight warps of one row each, four pieces a lane in flight, every row of x (up to 8) a warp."""
        return {"mt": _mt_choices(problem)[-1], "block": 256, "rpw": 1, "unroll": 4, "policy": 1, "ksplit": 1}

    def seed_configs(self, problem: Problem) -> list[Config]:
        check = self.space(problem).check
        seeds = []
        for tiling in _SEEDS:
            config = {**self.default_config(problem), **tiling}
            if check(config) is None and config not in seeds:
                seeds.append(config)
        return seeds

    def tiling_for(self, tuned: Problem, problem: Problem, config: Mapping[str, int]) -> Config:
        """`config` with every row of x in one pass where `tuned`'s were (mt covering M, up to 8): a
        config tuned at M = 1 (mt = 1) would read W once per row of x at M = 4."""
        if config["mt"] < min(tuned.m, max(_MTS)):
            return dict(config)
        return {**config, "mt": _mt_choices(problem)[-1]}

    def bytes_streamed(self, problem: Problem, config: Mapping[str, int]) -> int:
        """The codes are read once per pass over the rows of x (gridDim.y tiles of mt rows)."""
        passes = math.ceil(problem.m / config["mt"])
        return self.bytes_moved(problem) + (passes - 1) * problem.n * problem.k

    # -- how it is built and launched ---------------------------------------------------------

    def kernel_file(self, problem: Problem) -> str:
        return KERNEL_FILE

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        return (
            f"q8gemm_{problem.dtype}_{kind_of(problem)}_m{c['mt']}_b{c['block']}_r{c['rpw']}_u{c['unroll']}"
            f"_p{c['policy']}_k{c['ksplit']}"
        )

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        t = CUDA_TYPE[problem.dtype]
        body = (
            f"at_q8gemm::q8gemm_body<{t}, {KIND_CODE[kind_of(problem)]}, {c['mt']}, {c['block']}, {c['rpw']}, "
            f"{c['unroll']}, {c['policy']}, {c['ksplit']}>(x, qweight, scales, out, M, N, K, alpha, beta);"
        )
        return (
            f'#include "{KERNEL_FILE}"\n'
            f'extern "C" __global__ void __launch_bounds__({c["block"]})\n'
            f"{self.kernel_name(problem, config)}(const {t}* x, const unsigned char* qweight, const {t}* scales,\n"
            f"    {t}* out, int M, int N, int K, float alpha, float beta, float* workspace,\n"
            f"    unsigned int* counters) {{\n"
            f"  {body}\n"
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
