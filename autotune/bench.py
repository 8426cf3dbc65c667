"""Our tuned GEMV beside cuBLAS (through torch) on the same card, same buffers, same timing method.

Runs in one process on the GPU machine: torch allocates the rotating buffers, our kernel and
torch.mv / F.linear both read them, and the spin-kernel timer times both the same way. The copy
ceiling is a device-to-device copy measured in the same run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from autotune.errors import AutotuneError
from autotune.launch import Launcher, describe
from autotune.ops import gemv
from autotune.problem import Problem
from autotune.select import Choice

ROTATION_BYTES_PER_L2 = 4
COPY_BYTES = 2 * 2**30


@dataclass
class BenchRow:
    dtype: str
    m: int
    n: int
    ours_us: float
    cublas_us: float
    speedup: float  # cublas_us / ours_us
    ours_gbs: float
    cublas_gbs: float
    pct_copy: float  # ours_gbs against the copy bandwidth of the same run
    max_error: float  # ours against torch's result, relative to sum |a||x|
    source: str  # measured, estimate or default
    config: dict[str, int]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise AutotuneError("the cuBLAS comparison needs torch on the GPU machine") from None
    if not torch.cuda.is_available():
        raise AutotuneError("torch sees no CUDA GPU")
    return torch


class Bench:
    def __init__(self) -> None:
        self.torch = _torch()
        self.torch.cuda.init()
        self.launcher = Launcher()  # after torch: both use the primary context
        from autotune.compiler import CompileJob, compile_kernel
        from autotune.paths import kernels_dir
        from autotune.worker.timing import Timer

        support = compile_kernel(
            CompileJob("support", (kernels_dir() / "support.cu").read_text(), self.launcher.gpu.arch, "support")
        )
        if support.cubin is None:
            raise AutotuneError(f"cannot compile the support kernels: {support.message}")
        self.timer = Timer(self.launcher._kernels, support.cubin)

    def copy_gbs(self) -> float:
        """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
        torch = self.torch
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        src.fill_(1)
        samples = self.timer.measure(lambda _i: dst.copy_(src), target_ms=20, reps=7)
        return 2 * COPY_BYTES / (statistics.median(samples) * 1e-6) / 1e9

    def launch_floor_us(self) -> float:
        """GPU time per call of an empty kernel launched back to back: no GEMV can go below it."""
        cuda_spin = self.timer._spin

        def empty(_i: int) -> None:
            cuda_spin.prepared_async_call((1, 1, 1), (32, 1, 1), None, 0)

        return statistics.median(self.timer.measure(empty, reps=7))

    def compare(self, choice: Choice, reps: int = 7) -> BenchRow:
        torch = self.torch
        problem: Problem = choice.problem
        kind = getattr(torch, problem.dtype)
        copies = max(1, min(256, math.ceil(ROTATION_BYTES_PER_L2 * self.launcher.gpu.l2_bytes / problem.matrix_bytes)))
        a = [torch.rand(problem.m, problem.n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        x = [torch.rand(problem.n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        y = torch.empty(problem.m, device="cuda", dtype=kind)
        da, dx, dy = [describe(t, "A") for t in a], [describe(t, "x") for t in x], describe(y, "y")

        def ours(i: int) -> None:
            self.launcher.gemv(choice, da[i % copies], dx[i % copies], dy, 1.0, 0.0)

        ours(0)
        torch.cuda.synchronize()
        want = a[0].double() @ x[0].double()
        scale = (a[0].double().abs() @ x[0].double().abs()).clamp_min(1e-30)
        max_error = float(((y.double() - want).abs() / scale).max())
        ours_us = statistics.median(self.timer.measure(ours, reps=reps))
        mv = statistics.median(self.timer.measure(lambda i: torch.mv(a[i % copies], x[i % copies], out=y), reps=reps))
        linear = statistics.median(
            self.timer.measure(lambda i: torch.nn.functional.linear(x[i % copies], a[i % copies]), reps=reps)
        )
        cublas_us = min(mv, linear)
        moved = gemv.bytes_moved(problem)
        return BenchRow(
            problem.dtype,
            problem.m,
            problem.n,
            ours_us,
            cublas_us,
            cublas_us / ours_us,
            moved / ours_us / 1e3,
            moved / cublas_us / 1e3,
            0.0,
            max_error,
            choice.source,
            dict(choice.config),
        )


def as_json(gpu: str, copy_gbs: float, launch_floor_us: float, rows: list[BenchRow]) -> dict[str, Any]:
    for row in rows:
        row.pct_copy = 100.0 * row.ours_gbs / copy_gbs
    return {"gpu": gpu, "copy_gbs": copy_gbs, "launch_floor_us": launch_floor_us, "rows": [asdict(r) for r in rows]}
