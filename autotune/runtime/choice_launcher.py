"""A launcher of given choices (not the selector's) on described arrays: what the benchmarks time."""

from __future__ import annotations

from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.runtime import operands as opnd
from autotune.runtime.device import Device
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice


class ChoiceLauncher:
    """Runs a given choice (not the selector's) on described arrays of GPU `index` on one stream:
    what the benchmarks time beside cuBLAS."""

    def __init__(self, index: int = 0, stream: int = 0) -> None:
        self.runtime = Runtime(_no_selector)
        self.device = self.runtime.device(index)
        self.gpu = self.device.gpu
        self.stream = stream

    def gemv(
        self, choice: Choice, a: opnd.DeviceArray, x: opnd.DeviceArray, y: opnd.DeviceArray, alpha: float, beta: float
    ) -> None:
        pointers = (x.pointer, a.pointer, y.pointer) if choice.problem.trans else (a.pointer, x.pointer, y.pointer)
        self.runtime.run(choice, self.device, pointers, alpha, beta, self.stream)

    def gemm(
        self, choice: Choice, a: opnd.DeviceArray, b: opnd.DeviceArray, c: opnd.DeviceArray, alpha: float, beta: float
    ) -> None:
        self.runtime.run(choice, self.device, (a.pointer, b.pointer, c.pointer), alpha, beta, self.stream)


def _no_selector(problem: Problem, device: Device, db: str | None) -> Choice:
    raise AutotuneError("a ChoiceLauncher runs the choices it is given")
