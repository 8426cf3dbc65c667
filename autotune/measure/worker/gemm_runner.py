"""GEMM (and the transposed GEMV, a one-row GEMM) on the GPU for one problem: rotating buffers,
float64 verification on the GPU, timing (worker side).

A float64 reference of a large GEMM is too big to compare on the host trial after trial, so the
support kernels compute it and compare every element on the GPU; only counts and the worst
element come back.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune import ops
from autotune.core.dtypes import HOST_STORAGE, UNIT_ROUNDOFF, decode
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.limits import MAX_GRID_Y
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import ITEMSIZE, Problem
from autotune.measure.gpu import DEFAULT_SHARED_LIMIT, Kernels, Scratch, driver, opt_in_shared
from autotune.measure.worker.fill import RandomFill
from autotune.measure.worker.gemv_runner import ACCUMULATION_TOL, ROTATION_BYTES_PER_L2
from autotune.measure.worker.timing import Timer
from autotune.ops import gemm
from autotune.ops.geometry import Launch

MAX_COPIES = 64
REFERENCE_TILE = 64  # kernels/measure/support.cu: at_gemm_reference's tile


def as_gemm(problem: Problem) -> Problem:
    """The GEMM a problem runs as: itself, or the one-row GEMM of a transposed GEMV."""
    from autotune.ops import gemv_t

    return gemv_t.as_gemm(problem) if problem.trans else problem


class GemmRunner:
    def __init__(
        self, kernels: Kernels, timer: Timer, support: Path, problem: Problem, gpu: GpuInfo, seed: int
    ) -> None:
        cuda = driver()
        self.problem, self.gpu, self._kernels, self._timer = problem, gpu, kernels, timer
        self._op = ops.for_problem(problem)
        shape = as_gemm(problem)
        self._shape = shape
        m, n, k, item = shape.m, shape.n, shape.k, ITEMSIZE[problem.dtype]
        if math.ceil(m / REFERENCE_TILE) > MAX_GRID_Y:
            raise AutotuneError(f"{problem}: M={m} is past what the float64 reference kernel covers")
        operand_bytes = (m * k + k * n) * item
        self.copies = max(1, min(MAX_COPIES, math.ceil(ROTATION_BYTES_PER_L2 * gpu.l2_bytes / operand_bytes)))
        self._a = [cuda.mem_alloc(m * k * item) for _ in range(self.copies)]
        self._b = [cuda.mem_alloc(k * n * item) for _ in range(self.copies)]
        self._c = cuda.mem_alloc(m * n * item)
        self._c0 = cuda.mem_alloc(m * n * item)
        self._ref = cuda.mem_alloc(m * n * 8)
        self._absref = cuda.mem_alloc(m * n * 8)
        self._result = cuda.mem_alloc(4 * 8)
        self._scratch = Scratch()
        dtype = problem.dtype
        self._random = RandomFill(kernels, support, dtype, gpu.sm_count, seed)
        self._reference = kernels.function(support, f"at_gemm_reference_{dtype}", "PPPPiii")
        self._compare = kernels.function(support, f"at_compare_{dtype}", "PPPPddQddP")
        for i in range(self.copies):
            self._random(self._a[i], m * k)
            self._random(self._b[i], k * n)
        cuda.Context.synchronize()

    def _launch(self, fn: Any, geom: Launch, copy: int, alpha: float, beta: float) -> None:
        s = self._shape
        a, b = int(self._a[copy]), int(self._b[copy])
        workspace, counters = self._scratch.for_launch(geom, self.problem.dtype, (s.m, s.n, s.k), a, b)
        fn.prepared_async_call(
            geom.grid,
            geom.block,
            None,
            self._a[copy],
            self._b[copy],
            self._c,
            s.m,
            s.n,
            s.k,
            alpha,
            beta,
            workspace,
            counters,
            shared_size=geom.shared_bytes,
        )

    def _fresh_reference(self) -> None:
        """New random A and B in copy 0, and their float64 product (and |A||B|) on the GPU."""
        s = self._shape
        self._random(self._a[0], s.m * s.k)
        self._random(self._b[0], s.k * s.n)
        grid = (math.ceil(s.n / REFERENCE_TILE), math.ceil(s.m / REFERENCE_TILE), 1)
        self._reference.prepared_async_call(
            grid, (256, 1, 1), None, self._a[0], self._b[0], self._ref, self._absref, s.m, s.n, s.k
        )

    def _disagreement(self, alpha: float, beta: float, c0: Any) -> tuple[str | None, float]:
        """Compare C with alpha*ref + beta*c0 on the GPU: (why it disagrees or None, relative error)."""
        cuda = driver()
        s, dtype = self._shape, self.problem.dtype
        count = s.m * s.n
        cuda.memset_d32(self._result, 0, 8)
        blocks = max(1, min(math.ceil(count / 256), 32 * self.gpu.sm_count))
        self._compare.prepared_async_call(
            (blocks, 1, 1),
            (256, 1, 1),
            None,
            self._c,
            self._ref,
            self._absref,
            c0 if c0 is not None else 0,
            alpha,
            beta,
            count,
            UNIT_ROUNDOFF[dtype],
            ACCUMULATION_TOL,
            self._result,
        )
        raw = np.empty(4, dtype=np.uint64)
        cuda.memcpy_dtoh(raw, self._result)
        failures, worst = int(raw[0]), int(raw[1])
        err2, ref2 = (struct.unpack("<d", struct.pack("<Q", int(v)))[0] for v in raw[2:])
        rel_error = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
        if failures == 0:
            return None, rel_error
        index = worst & 0xFFFFFFFF
        ratio = struct.unpack("<f", struct.pack("<I", worst >> 32))[0]
        got = self._element(self._c, index, ITEMSIZE[dtype])
        row, col = divmod(index, s.n)
        where = f"C[{row}, {col}]" if self.problem.op == "gemm" else f"y[{col}]"
        return (
            f"{failures} of {count} outputs wrong; worst {where}: got {got:.7g} ({ratio:.3g}x the tolerance)",
            rel_error,
        )

    def _element(self, buffer: Any, index: int, item: int) -> float:
        cuda = driver()
        host = np.empty(1, dtype=HOST_STORAGE[self.problem.dtype])
        cuda.memcpy_dtoh(host, int(buffer) + index * item)
        return float(decode(host, self.problem.dtype)[0])

    def verify(self, fn: Any, geom: Launch) -> tuple[str | None, float]:
        """Two checks on fresh data: beta = 0 into a NaN-poisoned C, then alpha and beta both in play."""
        cuda = driver()
        s, item = self._shape, ITEMSIZE[self.problem.dtype]
        self._fresh_reference()
        cuda.memset_d8(self._c, 0xFF, s.m * s.n * item)  # all-ones bits are NaN in every dtype
        self._launch(fn, geom, 0, 1.0, 0.0)
        problem, rel_error = self._disagreement(1.0, 0.0, None)
        if problem:
            return f"alpha=1, beta=0: {problem}", rel_error
        self._random(self._c0, s.m * s.n)
        cuda.memcpy_dtod(self._c, self._c0, s.m * s.n * item)
        alpha, beta = 0.75, -1.25
        self._launch(fn, geom, 0, alpha, beta)
        problem, _ = self._disagreement(alpha, beta, self._c0)
        return (f"alpha={alpha}, beta={beta}: {problem}" if problem else None), rel_error

    def measure(self, cubin: Path, name: str, config: Mapping[str, int]) -> Outcome:
        geom = self._op.launch(self.problem, config, self.gpu.sm_count)
        fn = self._kernels.function(cubin, name, gemm.ARG_TYPES)
        if geom.shared_bytes > DEFAULT_SHARED_LIMIT:
            opt_in_shared(fn, geom.shared_bytes)
        problem, rel_error = self.verify(fn, geom)
        if problem:
            return Outcome(Status.WRONG_RESULT, problem, rel_error=rel_error)
        times = self._timer.measure(lambda i: self._launch(fn, geom, i % self.copies, 1.0, 0.0))
        median = float(np.median(times))
        gbs = self._op.bytes_moved(self.problem) / (median * 1e-6) / 1e9
        return Outcome(Status.OK, "", time_us=median, times_us=times, gbs=gbs, rel_error=rel_error)
