"""A test op whose inputs hold different dtypes, as a low-bit weight's op does: x (the problem's
dtype), a packed int4 weight, scales (the problem's dtype) and optional uint8 zeros. Nothing
compiles or runs it: the worker's and the launch path's tests drive it through doubles of the
driver. Register it for a test's duration only (ops.register / ops.unregister)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autotune.core.arrays import DeviceArray
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.call import Bound

GROUP = 32


def _any(config: Mapping[str, int]) -> str | None:
    return None


def inputs_of(dtype: str) -> tuple[str, ...]:
    return (dtype, "int4", dtype, "uint8")


class Mixed(Op):
    """out[M x N] = x[M x K] @ dequant(W[N x K])^T, in name only."""

    name = "mixed"
    sizes = ("M", "N", "K")
    arg_types = "PPPPPiiiffPP"  # x, qweight, scales, zeros, out, M, N, K, alpha, beta, workspace, counters
    input_names = ("x", "qweight", "scales", "zeros")
    optional_inputs = ("zeros",)

    def __init__(self, reference: DeviceReference | None = None) -> None:
        self.reference = reference
        self.bound: list[list[DeviceArray | None]] = []  # what each bind() was given
        self.host_inputs: list[np.ndarray] = []  # what the last host_reference() was given

    def input_fault(self, problem: Problem) -> str | None:
        return None if problem.inputs == inputs_of(problem.dtype) else f"not {problem.inputs}"

    def bind(self, arrays: Sequence[DeviceArray | None], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
        self.bound.append(list(arrays))
        x, qweight = arrays[0], arrays[1]
        assert x is not None and qweight is not None
        m, k, n = x.shape[0], x.shape[1], qweight.shape[0]
        return Bound(Problem(self.name, x.dtype, m, n, k, inputs=inputs_of(x.dtype)), (m, n))

    def space(self, problem: Problem) -> Space:
        return Space(params=(Param("threads", (64, 128)),), constraint=_any)

    def default_config(self, problem: Problem) -> Config:
        return {"threads": 64}

    def kernel_file(self, problem: Problem) -> str:
        return __file__

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        return f"mixed_{problem.dtype}_t{config['threads']}"

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        return f'extern "C" __global__ void {self.kernel_name(problem, config)}() {{}}\n'

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        return Launch((problem.n, 1, 1), (config["threads"], 1, 1), shared_bytes=0, workspace_floats=0, counters=0)

    def operands(self, problem: Problem) -> Operands:
        m, n, k = problem.m, problem.n, problem.k
        groups = n * k // GROUP
        return Operands(inputs=(m * k, n * k, groups, groups), output=m * n, sizes=(m, n, k))

    def device_reference(self, problem: Problem) -> DeviceReference | None:
        return self.reference

    def host_reference(self, problem: Problem, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        self.host_inputs = list(inputs)
        out = np.zeros(problem.m * problem.n)
        return out, out

    def bytes_moved(self, problem: Problem) -> int:
        return 1

    def flops(self, problem: Problem) -> int:
        return 1
