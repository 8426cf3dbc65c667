"""GEMV on the GPU for one problem: rotating buffers, float64 verification, timing (worker side)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.dtypes import HOST_STORAGE, UNIT_ROUNDOFF, decode, encode
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import ITEMSIZE, Problem
from autotune.measure.gpu import Kernels, Scratch, driver, programmatic_launch
from autotune.measure.worker.fill import RandomFill
from autotune.measure.worker.timing import Timer
from autotune.ops import gemv
from autotune.ops.geometry import Launch

# Float32 accumulation error allowed, as a fraction of sum |a_ij x_j|: far above what N <= 2^24
# terms accumulate in practice, far below a dropped or doubled block of terms.
ACCUMULATION_TOL = 2.0**-12
ROTATION_BYTES_PER_L2 = 4  # rotate inputs over 4x the L2 so every call reads the matrix from DRAM
MAX_COPIES = 256


def check(got: np.ndarray, want: np.ndarray, scale: np.ndarray, dtype: str) -> str | None:
    """Why `got` disagrees with the float64 `want` (one line), or None when it agrees."""
    bad = ~np.isfinite(got)
    if bad.any():
        first = int(np.argmax(bad))
        return f"{int(bad.sum())} of {got.size} outputs are NaN or infinite (first at row {first})"
    tolerance = UNIT_ROUNDOFF[dtype] * np.abs(want) + ACCUMULATION_TOL * scale + 1e-30
    ratio = np.abs(got - want) / tolerance
    worst = int(np.argmax(ratio))
    if ratio[worst] > 1.0:
        return f"row {worst}: got {got[worst]:.7g}, want {want[worst]:.7g} ({ratio[worst]:.3g}x the tolerance)"
    return None


class GemvRunner:
    def __init__(
        self, kernels: Kernels, timer: Timer, support: Path, problem: Problem, gpu: GpuInfo, seed: int
    ) -> None:
        cuda = driver()
        self.problem, self.gpu, self._kernels, self._timer = problem, gpu, kernels, timer
        m, n, item = problem.m, problem.n, ITEMSIZE[problem.dtype]
        self.copies = max(1, min(MAX_COPIES, math.ceil(ROTATION_BYTES_PER_L2 * gpu.l2_bytes / problem.matrix_bytes)))
        self._a = [cuda.mem_alloc(m * n * item) for _ in range(self.copies)]
        self._x = [cuda.mem_alloc(n * item) for _ in range(self.copies)]
        self._y = cuda.mem_alloc(m * item)
        self._ref = cuda.mem_alloc(m * 8)
        self._absref = cuda.mem_alloc(m * 8)
        self._scratch = Scratch()
        self._random = RandomFill(kernels, support, problem.dtype, gpu.sm_count, seed)
        self._reference = kernels.function(support, f"at_reference_{problem.dtype}", "PPPPii")
        for i in range(self.copies):
            self._random(self._a[i], m * n)
            self._random(self._x[i], n)
        cuda.Context.synchronize()

    def _launch(self, fn: Any, geom: Launch, copy: int, alpha: float, beta: float) -> None:
        p = self.problem
        workspace, counters = self._scratch.get(geom.workspace_floats, geom.counters)
        fn.prepared_async_call(
            geom.grid,
            geom.block,
            None,
            self._a[copy],
            self._x[copy],
            self._y,
            p.m,
            p.n,
            alpha,
            beta,
            workspace,
            counters,
            shared_size=geom.shared_bytes,
        )

    def _read_y(self) -> np.ndarray:
        cuda = driver()
        host = np.empty(self.problem.m, dtype=HOST_STORAGE[self.problem.dtype])
        cuda.memcpy_dtoh(host, self._y)
        return decode(host, self.problem.dtype)

    def _fresh_reference(self) -> tuple[np.ndarray, np.ndarray]:
        """New random A and x in copy 0, and their float64 product on the GPU."""
        cuda = driver()
        m, n = self.problem.m, self.problem.n
        self._random(self._a[0], m * n)
        self._random(self._x[0], n)
        blocks = math.ceil(m * 32 / 256)
        self._reference.prepared_async_call(
            (blocks, 1, 1), (256, 1, 1), None, self._a[0], self._x[0], self._ref, self._absref, m, n
        )
        ref, absref = np.empty(m), np.empty(m)
        cuda.memcpy_dtoh(ref, self._ref)
        cuda.memcpy_dtoh(absref, self._absref)
        return ref, absref

    def verify(self, fn: Any, geom: Launch) -> tuple[str | None, float]:
        """Two checks on fresh data: beta = 0 into a NaN-poisoned y, then alpha and beta both in play."""
        cuda = driver()
        dtype, m = self.problem.dtype, self.problem.m
        ref, absref = self._fresh_reference()
        cuda.memset_d8(self._y, 0xFF, m * ITEMSIZE[dtype])  # all-ones bits are NaN in every dtype
        self._launch(fn, geom, 0, 1.0, 0.0)
        cuda.Context.synchronize()
        got = self._read_y()
        rel_error = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))
        problem = check(got, ref, absref, dtype)
        if problem:
            return f"alpha=1, beta=0: {problem}", rel_error
        alpha, beta = 0.75, -1.25
        y0 = encode(np.random.default_rng(self._random.seed).uniform(-1, 1, m), dtype)
        cuda.memcpy_htod(self._y, y0)
        self._launch(fn, geom, 0, alpha, beta)
        cuda.Context.synchronize()
        y0_values = decode(y0, dtype)
        want = alpha * ref + beta * y0_values
        problem = check(self._read_y(), want, abs(alpha) * absref + abs(beta) * np.abs(y0_values), dtype)
        return (f"alpha={alpha}, beta={beta}: {problem}" if problem else None), rel_error

    def measure(self, cubin: Path, name: str, config: Mapping[str, int]) -> Outcome:
        geom = gemv.launch(self.problem, config, self.gpu.sm_count)
        fn = self._kernels.function(cubin, name, gemv.ARG_TYPES, programmatic=programmatic_launch(gemv, self.gpu))
        problem, rel_error = self.verify(fn, geom)
        if problem:
            return Outcome(Status.WRONG_RESULT, problem, rel_error=rel_error)
        times = self._timer.measure(lambda i: self._launch(fn, geom, i % self.copies, 1.0, 0.0))
        median = float(np.median(times))
        gbs = gemv.bytes_moved(self.problem) / (median * 1e-6) / 1e9
        return Outcome(Status.OK, "", time_us=median, times_us=times, gbs=gbs, rel_error=rel_error)
