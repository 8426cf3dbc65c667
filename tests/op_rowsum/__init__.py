"""A test op, y = alpha * (row sums of A) + beta * y, kept in this one folder with its kernel
(rowsum.cu): it proves that an op plugs into the tuner, the worker, the store, the selector and
the records through autotune.ops.base.Op alone. Importing `tests.op_rowsum.registered` registers
it (the tests register it only while they run, so other tests see the shipped ops alone)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.arrays import DeviceArray, contiguous
from autotune.core.dtypes import CUDA_TYPE
from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem, check_dim
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.ops.base import Op, Operands
from autotune.ops.call import Bound

KERNEL_FILE = str(Path(__file__).with_name("rowsum.cu"))


def _any(config: Mapping[str, int]) -> str | None:
    return None  # every combination of the choices is valid


class RowSum(Op):
    name = "rowsum"
    # A, y, M, N, alpha, beta, workspace, counters (the last two unused: no split)
    arg_types = "PPiiffPP"
    shapes_file = Path(__file__).with_name("shapes.txt")
    input_names = ("A",)
    output_name = "y"

    def bind(self, arrays: Sequence[DeviceArray], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
        """y = row sums of A: A a contiguous M x N matrix, y a contiguous vector of M."""
        (a,) = arrays
        if len(a.shape) != 2 or not contiguous(a):
            raise AutotuneError(f"A must be a contiguous 2-D matrix, got shape {a.shape}")
        m, n = check_dim("M", a.shape[0]), check_dim("N", a.shape[1])
        if out is not None and (out.shape != (m,) or not contiguous(out) or out.dtype != a.dtype):
            raise AutotuneError(f"out must be a contiguous {a.dtype} vector of length {m}, got shape {out.shape}")
        return Bound(Problem(self.name, a.dtype, m, n), (m,))

    def space(self, problem: Problem) -> Space:
        return Space(params=(Param("threads", (32, 64, 128, 256)), Param("unroll", (1, 2, 4))), constraint=_any)

    def default_config(self, problem: Problem) -> Config:
        return {"threads": 32, "unroll": 1}

    def kernel_file(self, problem: Problem) -> str:
        return KERNEL_FILE

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        return f"rowsum_{problem.dtype}_t{config['threads']}_u{config['unroll']}"

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        t = CUDA_TYPE[problem.dtype]
        return (
            f'#include "{KERNEL_FILE}"\n'
            f'extern "C" __global__ void __launch_bounds__({config["threads"]})\n'
            f"{self.kernel_name(problem, config)}(const {t}* A, {t}* y, int M, int N, float alpha, float beta,\n"
            f"    float* workspace, unsigned int* counters) {{\n"
            f"  at_rowsum::rowsum<{t}, {config['threads']}, {config['unroll']}>(A, y, M, N, alpha, beta);\n"
            f"}}\n"
        )

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        return Launch(
            grid=(problem.m, 1, 1), block=(config["threads"], 1, 1), shared_bytes=0, workspace_floats=0, counters=0
        )

    def operands(self, problem: Problem) -> Operands:
        return Operands(inputs=(problem.m * problem.n,), output=problem.m, sizes=(problem.m, problem.n))

    def host_reference(self, problem: Problem, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        a = inputs[0].reshape(problem.m, problem.n)
        return a.sum(axis=1), np.abs(a).sum(axis=1)

    def position(self, problem: Problem, index: int) -> str:
        return f"y[{index}]"

    def bytes_moved(self, problem: Problem) -> int:
        return (problem.m * problem.n + problem.m) * ITEMSIZE[problem.dtype]

    def flops(self, problem: Problem) -> int:
        return problem.m * problem.n


OP = RowSum()
