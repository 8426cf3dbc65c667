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
        """y = alpha*A x + beta*y with A as described: a row-major M x N matrix whose rows may lie
        further apart (a slice of columns) for the plain GEMV, the contiguous matrix for the transposed."""
        problem = choice.problem
        pointers = (x.pointer, a.pointer, y.pointer) if problem.trans else (a.pointer, x.pointer, y.pointer)
        lda = None
        if not problem.trans and len(a.shape) == 2 and a.strides is not None:
            lda = opnd.leading_dimension(a.shape[0], a.shape[1], a.strides)
            if lda is None:
                raise AutotuneError(f"A (shape {a.shape}, strides {a.strides}) is not a row-major matrix")
        self.runtime.run(choice, self.device, pointers, alpha, beta, self.stream, lda=lda if lda != problem.n else None)

    def gemm(
        self, choice: Choice, a: opnd.DeviceArray, b: opnd.DeviceArray, c: opnd.DeviceArray, alpha: float, beta: float
    ) -> None:
        self.runtime.run(choice, self.device, (a.pointer, b.pointer, c.pointer), alpha, beta, self.stream)


def _no_selector(problem: Problem, device: Device, db: str | None) -> Choice:
    raise AutotuneError("a ChoiceLauncher runs the choices it is given")
