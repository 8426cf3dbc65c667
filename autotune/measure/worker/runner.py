"""One problem of any op on the GPU (worker side): rotating input buffers, float64 verification on
fresh data with the output poisoned first, timing.

Each candidate kernel is loaded and launched by the launch path's own code (autotune/gpu/: a Device's
loaded function and a LaunchPlan, the same launch Runtime.call makes), so what is measured is what
runs. PyCUDA keeps the rest: the context, memory, events, the random fill and the reference.

The op says what its kernels read and write (Op.operands) and how the float64 reference is made
(Op.device_reference, or Op.host_reference for ops whose inputs are small enough to copy back).
The comparison runs on the GPU (kernels/measure/support.cu: at_compare): only counts and the worst
element come back, however large the output.
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune import ops
from autotune.core.dtypes import HOST_STORAGE, SUBNORMAL_SPACING, UNIT_ROUNDOFF, decode
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import ITEMSIZE, Problem, input_bytes
from autotune.gpu.device import Device
from autotune.gpu.geometry import KernelCall
from autotune.gpu.plan import LaunchPlan
from autotune.measure.pycuda_gpu import Kernels, driver, programmatic_launch
from autotune.measure.sensors import Reading, medians
from autotune.measure.worker.fill import BYTE_FILL_FILE, RandomFill
from autotune.measure.worker.timing import Timer

ROTATION_BYTES_PER_L2 = 4  # rotate inputs over 4x the L2 so every call reads them from DRAM
MAX_COPIES = 256
# One call of what is measured: (input copy, alpha, beta); our kernel or a cuBLASLt algorithm.
Call = Callable[[int, float, float], None]
ALPHA, BETA = 0.75, -1.25  # the second check's scalars: both in play, neither 1


class Runner:
    def __init__(
        self,
        kernels: Kernels,
        timer: Timer,
        support: Path,
        problem: Problem,
        gpu: GpuInfo,
        seed: int,
        device_index: int = 0,
    ) -> None:
        cuda = driver()
        self.problem, self.gpu, self._kernels, self._timer = problem, gpu, kernels, timer
        self._device_index = device_index
        self._op = ops.for_problem(problem)
        self._operands = self._op.operands(problem)
        self._reference_kernel = self._op.device_reference(problem)
        self._item = item = ITEMSIZE[problem.dtype]  # the output's
        # Each input array in its own dtype (an int4 weight, float16 scales); the output in problem.dtype.
        self._input_dtypes = problem.input_dtypes(len(self._operands.inputs))
        sizes = [input_bytes(n, dtype) for n, dtype in zip(self._operands.inputs, self._input_dtypes, strict=True)]
        self.copies = max(1, min(MAX_COPIES, math.ceil(ROTATION_BYTES_PER_L2 * gpu.l2_bytes / sum(sizes))))
        self._inputs = [[cuda.mem_alloc(size) for size in sizes] for _ in range(self.copies)]
        count = self._operands.output
        self._out = cuda.mem_alloc(count * item)
        self._out0 = cuda.mem_alloc(count * item)
        self._ref = cuda.mem_alloc(count * 8)
        self._absref = cuda.mem_alloc(count * 8)
        self._result = cuda.mem_alloc(4 * 8)
        self._candidates: dict[str, int] = {}  # each library family's count for this problem, asked once
        dtype = problem.dtype
        self._random = RandomFill(
            kernels, support, lambda: _fixed_kernels(BYTE_FILL_FILE, gpu.arch), gpu.sm_count, seed
        )
        self._reference = None
        reference = self._reference_kernel
        if reference is not None:
            source = support if reference.source is None else _fixed_kernels(reference.source, gpu.arch)
            self._reference = kernels.function(source, reference.kernel, reference.arg_types)
        self._compare = kernels.function(support, f"at_compare_{dtype}", "PPPPddQdddP")
        for buffers in self._inputs:
            self._fill_inputs(buffers)
        cuda.Context.synchronize()

    def _fill_inputs(self, buffers: list[Any]) -> None:
        """Fresh random data in one copy of the inputs, each by its dtype."""
        for buffer, elements, dtype in zip(buffers, self._operands.inputs, self._input_dtypes, strict=True):
            self._random(buffer, elements, dtype)

    def _fresh_reference(self) -> None:
        """New random inputs in copy 0, and their float64 result (and its magnitude) in ref/absref."""
        cuda = driver()
        inputs = self._inputs[0]
        self._fill_inputs(inputs)
        kernel = self._reference_kernel
        if kernel is not None and self._reference is not None:
            self._reference.prepared_async_call(
                kernel.grid,
                kernel.block,
                None,
                *inputs,
                self._ref,
                self._absref,
                *self._operands.sizes[: kernel.sizes],
            )
            return
        ref, absref = self._op.host_reference(self.problem, self._host_inputs(inputs))
        cuda.memcpy_htod(self._ref, np.ascontiguousarray(ref, dtype=np.float64))
        cuda.memcpy_htod(self._absref, np.ascontiguousarray(absref, dtype=np.float64))

    def _host_inputs(self, inputs: list[Any]) -> list[np.ndarray]:
        """The inputs copied back for Op.host_reference: floats decoded to float64 from their own
        dtype, packed integers as their raw bytes (uint8)."""
        cuda = driver()
        host = []
        for buffer, elements, dtype in zip(inputs, self._operands.inputs, self._input_dtypes, strict=True):
            storage = HOST_STORAGE.get(dtype)
            raw = np.empty(elements if storage else input_bytes(elements, dtype), dtype=storage or np.uint8)
            cuda.memcpy_dtoh(raw, buffer)
            host.append(decode(raw, dtype).astype(np.float64) if storage else raw)
        return host

    def _disagreement(self, alpha: float, beta: float, out0: Any) -> tuple[str | None, float]:
        """Compare the output with alpha*ref + beta*out0 on the GPU: (why it disagrees or None, relative error)."""
        cuda = driver()
        dtype, count = self.problem.dtype, self._operands.output
        cuda.memset_d32(self._result, 0, 8)
        blocks = max(1, min(math.ceil(count / 256), 32 * self.gpu.sm_count))
        self._compare.prepared_async_call(
            (blocks, 1, 1),
            (256, 1, 1),
            None,
            self._out,
            self._ref,
            self._absref,
            out0 if out0 is not None else 0,
            alpha,
            beta,
            count,
            UNIT_ROUNDOFF[dtype],
            self._op.accumulation_tolerance(self.problem),
            SUBNORMAL_SPACING[dtype],
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
        got = self._element(index)
        where = self._op.position(self.problem, index)
        how_far = "not finite" if math.isinf(ratio) else f"{ratio:.3g}x the tolerance"
        return f"{failures} of {count} outputs wrong; worst {where}: got {got:.7g} ({how_far})", rel_error

    def _element(self, index: int) -> float:
        cuda = driver()
        host = np.empty(1, dtype=HOST_STORAGE[self.problem.dtype])
        cuda.memcpy_dtoh(host, int(self._out) + index * self._item)
        return float(decode(host, self.problem.dtype)[0])

    def verify(self, call: Call) -> tuple[str | None, float]:
        """Two checks of `call` on fresh data: beta = 0 into a NaN-poisoned output, then alpha and beta
        both in play."""
        cuda = driver()
        count = self._operands.output
        self._fresh_reference()
        cuda.memset_d8(self._out, 0xFF, count * self._item)  # all-ones bits are NaN in every dtype
        call(0, 1.0, 0.0)
        problem, rel_error = self._disagreement(1.0, 0.0, None)
        if problem:
            return f"alpha=1, beta=0: {problem}", rel_error
        self._random(self._out0, count, self.problem.dtype)
        cuda.memcpy_dtod(self._out, self._out0, count * self._item)
        call(0, ALPHA, BETA)
        problem, _ = self._disagreement(ALPHA, BETA, self._out0)
        return (f"alpha={ALPHA}, beta={BETA}: {problem}" if problem else None), rel_error

    def measure(self, cubin: Path, name: str, config: Mapping[str, int]) -> Outcome:
        """Kernel `name` of `cubin` with `config`, checked and timed as the launch path launches it: a
        LaunchPlan (its inputs in the op's order, then the output) on the legacy default stream, where
        the timer's events are; split-K scratch and tensor maps are that stream's on this Device."""
        plan = self.plan(cubin, name, config)
        arrays = [(*(int(buffer) for buffer in buffers), int(self._out)) for buffers in self._inputs]
        return self._checked_and_timed(lambda copy, alpha, beta: plan.launch(arrays[copy], alpha, beta, 0, None))

    def plan(self, cubin: Path, name: str, config: Mapping[str, int]) -> LaunchPlan:
        """The launch plan of one candidate: its function loaded once per cubin's content (opted in to
        its dynamic shared memory) and the op's geometry for `config`."""
        geom = self._op.launch(self.problem, config, self.gpu.sm_count)
        programmatic = programmatic_launch(self._op, self.gpu, self.problem)
        device = launch_device(self._device_index)
        data = cubin.read_bytes()
        function = device.function(data, hashlib.sha256(data).hexdigest(), name, geom.shared_bytes)
        order = tuple(range(len(self._operands.inputs)))
        call = KernelCall(geom, tuple(self._operands.sizes), self._op.arg_types, order, programmatic)
        return LaunchPlan(device, function, call, self.problem.dtype, programmatic)

    def measure_library(self, family: str, config: Mapping[str, int]) -> Outcome:
        """A library family's candidate (cuBLASLt's algorithm of rank config["cublas_algo"]), checked
        and timed as our kernels are, on the same buffers, through the plan the launch path runs it by."""
        library = ops.library_named(family)
        count = self.library_candidates(family)
        rank = library.rank_of(config)
        if rank >= count:
            return Outcome(Status.INVALID, f"{library.label} offers {count} algorithms for this problem")
        order = tuple(range(len(self._operands.inputs)))
        plan = library.plan(launch_device(self._device_index), self.problem, config, True, None, order)
        arrays = [(*(int(buffer) for buffer in buffers), int(self._out)) for buffers in self._inputs]
        return self._checked_and_timed(lambda copy, alpha, beta: plan.launch(arrays[copy], alpha, beta, 0, None))

    def library_candidates(self, family: str) -> int:
        """How many candidates library `family` offers for this problem (0 where it has none)."""
        if family not in self._candidates:
            device = launch_device(self._device_index)
            self._candidates[family] = ops.library_named(family).candidates(device, self.problem)
        return self._candidates[family]

    def _checked_and_timed(self, call: Call) -> Outcome:
        problem, rel_error = self.verify(call)
        if problem:
            return Outcome(Status.WRONG_RESULT, problem, rel_error=rel_error)
        readings: list[Reading | None] = []
        times = self._timer.measure(lambda i: call(i % self.copies, 1.0, 0.0), readings=readings)
        median = float(np.median(times))
        gbs = self._op.bytes_moved(self.problem) / (median * 1e-6) / 1e9
        return Outcome(Status.OK, "", time_us=median, times_us=times, gbs=gbs, rel_error=rel_error, **medians(readings))


@functools.cache
def _fixed_kernels(file_name: str, arch: str) -> Path:
    """A kernels/ file of the worker's own kernels (the byte fill, an op's reference), compiled once
    per process."""
    from autotune.build.compiler import compile_fixed

    return compile_fixed(file_name, arch, f"the measuring kernels of kernels/{file_name}")


@functools.cache
def launch_device(index: int) -> Device:
    """This process's Device of GPU `index` (autotune/gpu/device.py: the primary context PyCUDA made
    current, loaded kernels, per-stream scratch), made on first use."""
    return Device(index)
