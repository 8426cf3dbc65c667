"""An int4 weight dequantized into the activations' dtype (out = alpha * dequant(W) + beta * out, W in
nn.Linear's N x K layout, docs/lowbit.md's canonical format): parameters, launch geometry, source,
operands and the float64 reference (kernels/qdequant/dequant.cu). A linear of more rows of x than the
int4 GEMM kernels take (qgemm.MAX_M) needs the weight in float16 or bfloat16 for its GEMM.

A problem's M is the weight's rows (nn.Linear's N) and its N the codes a row (K); its variant names
the group and symmetry ("g128", "g128a") and its inputs are (int4, the output's dtype, uint8)."""

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
from autotune.gpu.geometry import Launch
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.call import Bound
from autotune.ops.qdequant import call
from autotune.ops.qgemm import VARIANTS, group_of, kind_fault, symmetric
from autotune.ops.qgemm.call import ACTIVATIONS

NAME = "qdequant"
KERNEL_FILE = "qdequant/dequant.cu"  # under kernels/, the mirror of this folder
REFERENCE_FILE = "qdequant/reference.cu"
WORD = 8  # codes a 4-byte load holds, their values one 16-byte store (dequant.cu: WORD)
_THREADS = (128, 256, 512)
_CHUNKS = (2, 4, 8)  # words a thread, all loads issued before the first value is computed
_REFERENCE_THREADS = 256


def _any(config: Mapping[str, int]) -> str | None:
    return None  # every combination of the choices is valid


class QDequant(Op):
    name = NAME
    variants = VARIANTS
    dtypes = ACTIVATIONS
    # qweight, scales, zeros, out, M, N, alpha, beta, workspace, counters (the last two unused)
    arg_types = "PPPPiiffPP"
    shapes_file = Path(__file__).with_name("shapes.txt")
    input_names = ("qweight", "scales", "zeros")
    optional_inputs = ("zeros",)
    output_name = "out"
    torch_schema = "(Tensor qweight, Tensor scales, Tensor? zeros=None, float alpha=1.0) -> Tensor"

    def complete(self, problem: Problem) -> Problem:
        """The plain problem of this op names its int4 format: group 128, symmetric."""
        return replace(
            problem, inputs=problem.inputs or call.input_dtypes(problem.dtype), variant=problem.variant or "g128"
        )

    def estimate_from(self, problem: Problem) -> tuple[Problem, ...]:
        """The same shape in the other groups and dtypes: every kind reads and writes the same bytes."""
        others = [v for v in VARIANTS if v != problem.variant]
        found = [replace(problem, variant=v) for v in others]
        for dtype in (d for d in self.dtypes if d != problem.dtype):
            found += [replace(problem, dtype=dtype, inputs=call.input_dtypes(dtype), variant=problem.variant)]
        return tuple(found)

    def input_fault(self, problem: Problem) -> str | None:
        if problem.dtype not in ACTIVATIONS:
            return f"int4 weights dequantize to float16 or bfloat16, not {problem.dtype}"
        fault = kind_fault(NAME, problem, call.input_dtypes(problem.dtype))
        if fault:
            return fault
        if problem.n % group_of(problem):
            return f"N = {problem.n} (codes a row) is not a multiple of the group size {group_of(problem)}"
        return None

    def bind(self, arrays: Sequence[DeviceArray | None], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
        return call.bind(NAME, arrays, out)

    def torch_fake(self, *args: Any) -> Any:
        return call.torch_fake(*args)

    # -- what is tuned ------------------------------------------------------------------------

    def space(self, problem: Problem) -> Space:
        return Space(
            params=(Param("threads", _THREADS), Param("chunks", _CHUNKS), Param("policy", (0, 1, 2))),
            constraint=_any,
        )

    def default_config(self, problem: Problem) -> Config:
        return {"threads": 256, "chunks": 4, "policy": 0}

    # -- how it is built and launched ---------------------------------------------------------

    def kernel_file(self, problem: Problem) -> str:
        return KERNEL_FILE

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        return f"qdequant_{problem.dtype}_{problem.variant}_t{c['threads']}_c{c['chunks']}_p{c['policy']}"

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        t = CUDA_TYPE[problem.dtype]
        template_args = f"{t}, {group_of(problem)}, {int(symmetric(problem))}, {c['chunks']}, {c['policy']}"
        return (
            f'#include "{KERNEL_FILE}"\n'
            f'extern "C" __global__ void __launch_bounds__({c["threads"]})\n'
            f"{self.kernel_name(problem, config)}(const unsigned char* qweight, const {t}* scales,\n"
            f"    const unsigned char* zeros, {t}* out, int M, int N, float alpha, float beta,\n"
            f"    float* workspace, unsigned int* counters) {{\n"
            f"  at_qdequant::dequant<{template_args}>(qweight, scales, zeros, out, M, N, alpha, beta);\n"
            f"}}\n"
        )

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        words = problem.m * problem.n // WORD
        per_block = config["threads"] * config["chunks"]
        return Launch(
            grid=(math.ceil(words / per_block), 1, 1),
            block=(config["threads"], 1, 1),
            shared_bytes=0,
            workspace_floats=0,
            counters=0,
        )

    def operands(self, problem: Problem) -> Operands:
        groups = problem.m * (problem.n // group_of(problem))
        return Operands(
            inputs=(problem.m * problem.n, groups, groups), output=problem.m * problem.n, sizes=(problem.m, problem.n)
        )

    # -- how it is checked and rated ----------------------------------------------------------

    def device_reference(self, problem: Problem) -> DeviceReference:
        # kernels/qdequant/reference.cu: a thread per value
        return DeviceReference(
            f"at_qdequant_reference_{problem.dtype}_{problem.variant}",
            "PPPPPii",
            (math.ceil(problem.m * problem.n / _REFERENCE_THREADS), 1, 1),
            (_REFERENCE_THREADS, 1, 1),
            source=REFERENCE_FILE,
            sizes=2,
        )

    def position(self, problem: Problem, index: int) -> str:
        return f"out[{index // problem.n}, {index % problem.n}]"

    def bytes_moved(self, problem: Problem) -> int:
        """The packed codes and scales (and zero points) read once, the weight written once."""
        groups = problem.m * (problem.n // group_of(problem))
        item = ITEMSIZE[problem.dtype]
        zeros = 0 if symmetric(problem) else groups
        return problem.m * problem.n // 2 + groups * item + zeros + problem.m * problem.n * item

    def flops(self, problem: Problem) -> int:
        return problem.m * problem.n  # a multiply by the scale a value


OP = QDequant()
