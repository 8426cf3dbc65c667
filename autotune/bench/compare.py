"""Our tuned kernels beside cuBLAS (through torch) on the same card, same buffers, same timing method.

Runs in one process on the GPU machine: torch allocates the rotating buffers, our kernel and
torch (mv / linear / matmul for GEMV, mm for GEMM, TF32 off) read the same ones, and the
spin-kernel timer times both the same way. The copy ceiling is a device-to-device copy measured
in the same run.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from autotune import ops
from autotune.bench import harness
from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.measure.floor import VARIANTS, ReadKernel, ReadKernels, words_for
from autotune.ops import gemm, gemv
from autotune.runtime import operands
from autotune.runtime.choice_launcher import ChoiceLauncher
from autotune.runtime.operands import describe
from autotune.select.choose import Choice

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
    # The read floor of the matrix's size in the same run (autotune/measure/floor.py), when asked for, and the
    # speedup over cuBLAS that a GEMV at min(floor, ours) would have: the most any kernel could show.
    floor_us: float | None = None
    floor_kernel: str = ""
    bound: float | None = None
    # The selector's pick where it is not our kernel (cuBLASLt measured faster), timed in the same turns;
    # else ours again. `ours_us` stays our kernels' time.
    pick_us: float | None = None
    pick_source: str = ""
    pick_config: dict[str, int] | None = None

    def set_floor(self, floor: ReadFloor) -> None:
        self.floor_us, self.floor_kernel = floor.us, floor.kernel
        self.bound = self.cublas_us / min(floor.us, self.ours_us)


@dataclass(frozen=True)
class ReadFloor:
    us: float  # GPU time per call of the fastest read kernel
    kernel: str  # which one it was


@dataclass
class GemmRow:
    dtype: str
    m: int
    n: int
    k: int
    ours_us: float
    cublas_us: float
    ratio: float  # cublas_us / ours_us
    ours_tflops: float
    cublas_tflops: float
    max_error: float  # ours against the float64 product, relative to sum |a||b|
    source: str  # measured, estimate or default
    config: dict[str, int]
    trans: bool = False  # B stored N x K (C = A Wᵀ, cuBLAS's NT: torch.mm(A, W.t()))
    pick_us: float | None = None  # as BenchRow's
    pick_source: str = ""
    pick_config: dict[str, int] | None = None


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
        # cuBLAS float32 GEMM is compared in true float32, as our CUDA-core kernels compute it.
        self.torch.backends.cuda.matmul.allow_tf32 = False
        self.launcher = ChoiceLauncher()  # after torch: both use the primary context
        self.device = self.launcher.device
        from autotune.build.compiler import compile_support
        from autotune.measure.pycuda_gpu import Kernels, context

        context()  # PyCUDA's timer and read kernels load into the primary context too
        from autotune.measure.worker.timing import Timer

        self.kernels = Kernels()
        self.timer = Timer(self.kernels, compile_support(self.launcher.gpu.arch))
        self._read_kernels: ReadKernels | None = None
        self._floors: dict[int, ReadFloor] = {}

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
        return statistics.median(self.timer.measure(lambda _i: self.timer.launch_empty(), reps=7))

    def read_floor(self, nbytes: int, reps: int = 7) -> ReadFloor:
        """The least time per call in which this card reads `nbytes`, launched and timed as a GEMV
        (autotune/measure/floor.py): the fastest of every read kernel variant, measured once per size."""
        if nbytes not in self._floors:
            if self._read_kernels is None:
                self._read_kernels = ReadKernels(self.launcher.gpu, self.kernels)
            kernels, torch = self._read_kernels, self.torch
            words = words_for(nbytes)
            copies = self.copies(nbytes)
            buffers = [
                torch.randint(-(2**31), 2**31 - 1, (words * 4,), dtype=torch.int32, device="cuda")
                for _ in range(copies)
            ]
            out = torch.zeros(2, dtype=torch.int32, device="cuda")
            launchers: list[Callable[[int], None]] = [
                functools.partial(_read_call, kernels, variant, buffers, words, out.data_ptr()) for variant in VARIANTS
            ]
            medians = [statistics.median(s) for s in self.timer.measure_interleaved(launchers, reps=reps)]
            best = min(range(len(VARIANTS)), key=medians.__getitem__)
            self._floors[nbytes] = ReadFloor(medians[best], VARIANTS[best].describe())
        return self._floors[nbytes]

    def copies(self, operand_bytes: int) -> int:
        """How many rotating copies of an operand of `operand_bytes` keep it cold in this card's L2."""
        return harness.rotation_copies(operand_bytes, self.launcher.gpu.l2_bytes)

    def compare(self, choice: Choice, reps: int = 7, pick: Choice | None = None) -> BenchRow:
        """One GEMV (either layout) timed beside cuBLAS on the same rotating buffers; `pick`, the
        selector's answer where it is not `choice` (cuBLASLt), in the same turns."""
        torch = self.torch
        problem: Problem = choice.problem
        kind = getattr(torch, problem.dtype)
        x_len, y_len = (problem.m, problem.n) if problem.trans else (problem.n, problem.m)
        copies = self.copies(problem.matrix_bytes)
        a = [torch.rand(problem.m, problem.n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        x = [torch.rand(x_len, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        y = torch.full((y_len,), float("nan"), device="cuda", dtype=kind)  # NaN never passes
        da, dx, dy = [describe(t, "A") for t in a], [describe(t, "x") for t in x], describe(y, "y")

        def ours(i: int) -> None:
            self.launcher.gemv(choice, da[i % copies], dx[i % copies], dy, 1.0, 0.0)

        def picked(i: int) -> None:
            assert pick is not None
            self.launcher.gemv(pick, da[i % copies], dx[i % copies], dy, 1.0, 0.0)

        a64, x64 = (a[0].double().t() if problem.trans else a[0].double()), x[0].double()
        extra = [picked] if _differs(pick, choice) else []
        max_error = _worst_error(torch, [ours, *extra], y, a64 @ x64, a64.abs() @ x64.abs())
        if problem.trans:  # cuBLAS on the transposed view, both ways torch offers it
            candidates = [
                lambda i: torch.mv(a[i % copies].t(), x[i % copies], out=y),
                lambda i: torch.matmul(x[i % copies], a[i % copies]),
            ]
        else:
            candidates = [
                lambda i: torch.mv(a[i % copies], x[i % copies], out=y),
                lambda i: torch.nn.functional.linear(x[i % copies], a[i % copies]),
            ]
        ours_samples, *others = self.timer.measure_interleaved([ours, *extra, *candidates], reps=reps)
        ours_us = statistics.median(ours_samples)
        pick_us = statistics.median(others.pop(0)) if extra else ours_us
        cublas_us = min(statistics.median(samples) for samples in others)
        moved = gemv.OP.bytes_moved(problem)
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
            ops.in_space_order(choice.problem, choice.config),
            **_pick_fields(pick or choice, pick_us),
        )

    def compare_gemm(self, choice: Choice, reps: int = 7, pick: Choice | None = None) -> GemmRow:
        """One GEMM timed beside torch.mm (cuBLAS, TF32 off) on the same rotating buffers; for a
        problem with B stored N x K both run on W.t() of the same row-major N x K matrices."""
        torch = self.torch
        p: Problem = choice.problem
        kind = getattr(torch, p.dtype)
        copies = self.copies((p.m * p.k + p.k * p.n) * ITEMSIZE[p.dtype])
        a = [torch.rand(p.m, p.k, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        if p.trans:
            b = [(torch.rand(p.n, p.k, device="cuda", dtype=kind) * 2 - 1).t() for _ in range(copies)]
        else:
            b = [torch.rand(p.k, p.n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        c = torch.full((p.m, p.n), float("nan"), device="cuda", dtype=kind)  # NaN never passes
        da, db, dc = [describe(t, "A") for t in a], [describe(t, "B") for t in b], describe(c, "C")

        def ours(i: int) -> None:
            self.launcher.gemm(choice, da[i % copies], db[i % copies], dc, 1.0, 0.0)

        def picked(i: int) -> None:
            assert pick is not None
            self.launcher.gemm(pick, da[i % copies], db[i % copies], dc, 1.0, 0.0)

        a64, b64 = a[0].double(), b[0].double()
        extra = [picked] if _differs(pick, choice) else []
        max_error = _worst_error(torch, [ours, *extra], c, a64 @ b64, a64.abs() @ b64.abs())
        del a64, b64

        def cublas(i: int) -> None:
            torch.mm(a[i % copies], b[i % copies], out=c)

        ours_samples, *others = self.timer.measure_interleaved([ours, *extra, cublas], reps=reps)
        ours_us, cublas_us = statistics.median(ours_samples), statistics.median(others[-1])
        pick_us = statistics.median(others[0]) if extra else ours_us
        flops = gemm.OP.flops(p)
        return GemmRow(
            p.dtype,
            p.m,
            p.n,
            p.k,
            ours_us,
            cublas_us,
            cublas_us / ours_us,
            flops / ours_us / 1e6,
            flops / cublas_us / 1e6,
            max_error,
            choice.source,
            ops.in_space_order(choice.problem, choice.config),
            p.trans,
            **_pick_fields(pick or choice, pick_us),
        )


def _read_call(kernels: ReadKernels, variant: ReadKernel, buffers: list[Any], words: int, out: int, i: int) -> None:
    kernels.launch(variant, buffers[i % len(buffers)].data_ptr(), words, out)


def _differs(pick: Choice | None, choice: Choice) -> bool:
    return pick is not None and dict(pick.config) != dict(choice.config)


def _pick_fields(pick: Choice, pick_us: float) -> dict[str, Any]:
    return {"pick_us": pick_us, "pick_source": pick.source, "pick_config": dict(pick.config)}


def _worst_error(torch: Any, calls: list[Callable[[int], None]], out: Any, want: Any, scale: Any) -> float:
    """The worst `harness.max_error` of the calls, each run alone into `out` poisoned with NaN first (NaN if
    any left one)."""
    errors = []
    for call in calls:
        out.fill_(float("nan"))
        call(0)
        torch.cuda.synchronize()
        errors.append(harness.max_error(out.double(), want, scale))
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def as_json(gpu: str, copy_gbs: float, launch_floor_us: float, rows: list[BenchRow]) -> dict[str, Any]:
    for row in rows:
        row.pct_copy = 100.0 * row.ours_gbs / copy_gbs
    report: dict[str, Any] = {"gpu": gpu, "copy_gbs": copy_gbs, "launch_floor_us": launch_floor_us}
    report["geomean_speedup"] = harness.geomean([r.speedup for r in rows])
    bounds = [r.bound for r in rows if r.bound is not None]
    if bounds and len(bounds) == len(rows):
        report["geomean_bound"] = harness.geomean(bounds)
    report["rows"] = [asdict(r) for r in rows]
    return report


def rows_of_report(report: Any, gpu: str) -> list[BenchRow]:
    """The rows of a GEMV report that `as_json` wrote for `gpu`, to carry on a run that was cut short.
    A report of another GPU, or one that is not such a report, is refused with one line."""
    names = {field.name for field in fields(BenchRow)}
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise AutotuneError("the report to resume is not a GEMV benchmark report (no list of rows)")
    if report.get("gpu") != gpu:
        raise AutotuneError(f"the report to resume was measured on {report.get('gpu')!r}, not on {gpu!r}")
    rows = []
    for index, row in enumerate(report["rows"]):
        if not isinstance(row, dict) or set(row) != names:
            raise AutotuneError(f"row {index + 1} of the report to resume is not a GEMV benchmark row")
        rows.append(BenchRow(**row))
    return rows


def time_in_turns(bench: Bench, pick: Choice, tuned: Choice | None, reps: int) -> dict[str, Any]:
    """The pick, the sweep's best (`tuned`, where it is another config) and cuBLAS's calls timed in
    turns on the same rotating buffers with Bench's timer, as Bench.compare / compare_gemm time one
    config beside cuBLAS; each of ours is first run once into a NaN-poisoned output and checked against
    float64. The fastest of torch's calls is cuBLAS's time; every one's is kept."""
    torch = bench.torch
    p = pick.problem
    kind = getattr(torch, p.dtype)
    ours = [pick] if tuned is None or tuned.config == pick.config else [pick, tuned]
    cublas: dict[str, Callable[[int], Any]] = {}
    if p.op == "gemv":
        x_len, y_len = (p.m, p.n) if p.trans else (p.n, p.m)
        copies = bench.copies(p.matrix_bytes)
        a = [torch.rand(p.m, p.n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        x = [torch.rand(x_len, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        out = torch.empty(y_len, device="cuda", dtype=kind)
        launchers = [_gemv_call(bench, c, a, x, out) for c in ours]
        want, scale = harness.float64_reference(a[0].double().t() if p.trans else a[0].double(), x[0].double())
        if p.trans:  # cuBLAS on the transposed view, both ways torch offers it (as Bench.compare)
            cublas["torch.mv(A.t(), x)"] = lambda i: torch.mv(a[i % copies].t(), x[i % copies], out=out)
            cublas["x @ A"] = lambda i: torch.matmul(x[i % copies], a[i % copies])
        else:
            cublas["torch.mv"] = lambda i: torch.mv(a[i % copies], x[i % copies], out=out)
            cublas["F.linear"] = lambda i: torch.nn.functional.linear(x[i % copies], a[i % copies])
    else:
        copies = bench.copies((p.m * p.k + p.k * p.n) * ITEMSIZE[p.dtype])
        a = [torch.rand(p.m, p.k, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        if p.trans:  # B is the transpose of a row-major N x K matrix, as Bench.compare_gemm holds it
            b = [(torch.rand(p.n, p.k, device="cuda", dtype=kind) * 2 - 1).t() for _ in range(copies)]
        else:
            b = [torch.rand(p.k, p.n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
        out = torch.empty(p.m, p.n, device="cuda", dtype=kind)
        launchers = [_gemm_call(bench, c, a, b, out) for c in ours]
        want, scale = harness.float64_reference(a[0].double(), b[0].double())
        cublas["torch.mm"] = lambda i: torch.mm(a[i % copies], b[i % copies], out=out)
        cublas["F.linear"] = lambda i: torch.nn.functional.linear(a[i % copies], b[i % copies].t())
    errors = [harness.checked_call_error(torch, launch, out, want, scale) for launch in launchers]
    del want, scale
    samples = bench.timer.measure_interleaved([*launchers, *cublas.values()], reps=reps)
    medians = [statistics.median(s) for s in samples]
    calls = dict(zip(cublas, medians[len(launchers) :], strict=True))
    fastest = min(calls, key=lambda name: calls[name])
    timing: dict[str, Any] = {
        "pick_us": medians[0],
        "pick_error": errors[0],
        "pick_correct": errors[0] <= harness.MAX_ERROR,  # False for NaN too
        "cublas_us": calls[fastest],
        "cublas_call": fastest,
        "cublas_calls_us": calls,
    }
    if tuned is not None:  # the sweep's best: its own samples, or the pick's where it is the same config
        last = len(launchers) - 1
        timing.update(
            sweep_best_us=medians[last], sweep_error=errors[last], sweep_correct=errors[last] <= harness.MAX_ERROR
        )
    return timing


def _gemv_call(bench: Bench, choice: Choice, a: list[Any], x: list[Any], y: Any) -> Callable[[int], None]:
    describe = operands.describe  # looked up at each call: tests stand in for it
    da, dx, dy = [describe(t, "A") for t in a], [describe(t, "x") for t in x], describe(y, "y")

    def call(i: int) -> None:
        bench.launcher.gemv(choice, da[i % len(da)], dx[i % len(dx)], dy, 1.0, 0.0)

    return call


def _gemm_call(bench: Bench, choice: Choice, a: list[Any], b: list[Any], c: Any) -> Callable[[int], None]:
    describe = operands.describe  # looked up at each call: tests stand in for it
    da, db, dc = [describe(t, "A") for t in a], [describe(t, "B") for t in b], describe(c, "C")

    def call(i: int) -> None:
        bench.launcher.gemm(choice, da[i % len(da)], db[i % len(db)], dc, 1.0, 0.0)

    return call


# -- the report tail -------------------------------------------------------------------------------------
