"""A launcher of given choices (not the selector's) on described arrays: what the benchmarks time."""

from __future__ import annotations

from autotune.core.arrays import DeviceArray, leading_dimension
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.gpu.device import Device
from autotune.ops.gemm import call as gemm_call
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

    def gemv(self, choice: Choice, a: DeviceArray, x: DeviceArray, y: DeviceArray, alpha: float, beta: float) -> None:
        """y = alpha*A x + beta*y (Aᵀx for a transposed problem) with A as described: a row-major
        M x N matrix whose rows may lie further apart (a slice of columns)."""
        problem = choice.problem
        pointers = (a.pointer, x.pointer, y.pointer)
        lda = None
        if len(a.shape) == 2 and a.strides is not None:
            lda = leading_dimension(a.shape[0], a.shape[1], a.strides)
            if lda is None:
                raise AutotuneError(f"A (shape {a.shape}, strides {a.strides}) is not a row-major matrix")
        leading = (lda,) if lda is not None and lda != problem.n else None
        self.runtime.run(choice, self.device, pointers, alpha, beta, self.stream, leading=leading)

    def gemm(self, choice: Choice, a: DeviceArray, b: DeviceArray, c: DeviceArray, alpha: float, beta: float) -> None:
        """C = alpha*A B + beta*C with the operands as described (B K x N, or the transpose of an
        N x K matrix for a transposed problem; rows may lie further apart)."""
        layout = gemm_call.check_operands(a, b, c)
        if layout.b_nk != choice.problem.trans:
            raise AutotuneError(f"B's layout does not match {choice.problem}")
        pointers = (a.pointer, b.pointer, c.pointer)
        self.runtime.run(choice, self.device, pointers, alpha, beta, self.stream, leading=layout.leading)


def _no_selector(problem: Problem, device: Device, db: str | None) -> Choice:
    raise AutotuneError("a ChoiceLauncher runs the choices it is given")
