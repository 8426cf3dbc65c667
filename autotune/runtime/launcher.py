"""Runtime.call in the caller's process: bind the arrays through their op, select, build and cache
a launch plan per call signature, then launch on the caller's stream and the operands' own GPU.
gemv(), gemm() (and autotune.linear) are thin wrappers with their public signatures.

The first call of a signature (op, its options, each array's shape, strides, dtype and device)
checks the operands in full (the op's bind: autotune/ops/<op>/call.py), selects the config, finds
its kernel (shipped with autotune, else cached, else compiled by nvcc: autotune/build/shipped.py),
loads it into the device's context and binds a LaunchPlan (one per leading dimensions: a GEMV's A
may be a view with gaps between its rows). Later calls of torch tensors take a short path: a
dictionary look-up keyed by what the checks depended on, the data_ptr()s, the current stream, one
driver call.
"""

from __future__ import annotations

import functools
import logging
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from autotune import ops
from autotune.build.shipped import find_kernel
from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.problem import DTYPES, ITEMSIZE, Problem
from autotune.core.space import Config, config_key
from autotune.core.target import targeting
from autotune.gpu import driver
from autotune.gpu.device import Allocator, Device
from autotune.gpu.plan import LaunchPlan
from autotune.ops.base import Op
from autotune.ops.call import Leading, Reroute
from autotune.ops.library import LibraryPlan
from autotune.runtime import operands as opnd
from autotune.runtime.misses import Misses, Tally
from autotune.select.choose import Choice

log = logging.getLogger(__name__)
# What runs a call: one of our kernels, or a library family's candidate (cuBLASLt's algorithm) where
# the selection picked it; both have launch().
Plan = LaunchPlan | LibraryPlan
Chooser = Callable[[Problem, Device, "str | None"], Choice]
GEMV = ops.get("gemv")
GEMM = ops.get("gemm")
_PLAIN, _TRANSPOSED = (False,), (True,)  # the GEMV's options, made once


def _no_stream(index: int) -> int:
    raise AutotuneError("torch's current stream is read only once a torch tensor was seen")


class _NotATensor:
    """Stands in for torch.Tensor until a tensor is seen, so the short path never imports torch."""


@dataclass
class Signature:
    """What one call signature resolves to: its choice and plans (aligned now, unaligned on demand)."""

    choice: Choice
    device: Device
    index: int  # the device's index, read on every call
    out_shape: tuple[int, ...]  # of a new output
    out_dtype: Any  # of a new output: the problem's dtype, as torch names it
    # The plan for 16-byte aligned addresses: already the scalar-load one where a matrix's rows lie
    # further apart than its row length and that breaks 16-byte alignment (the strides are part of
    # the signature).
    aligned: Plan
    unaligned: Plan | None = None
    leading: Leading = None  # the leading dimensions where a matrix has gaps between its rows
    allocator: Allocator | None = None
    tally: Tally | None = None  # an untuned problem's call count (autotune/runtime/misses.py)
    # Where the signature has an out: each input's bytes, then out's, so that the short path refuses
    # an out that shares an input's memory (operands.overlapped) with a few comparisons.
    spans: tuple[int, ...] | None = None


_SHARES = "out shares memory with {name}: the kernel would read what it writes; give an out of its own"


class Runtime:
    """Per-process state of the launch path: devices, plans, call signatures."""

    def __init__(self, chooser: Chooser, misses: Misses | None = None) -> None:
        self.chooser = chooser  # public: scripts/bench_first_call.py wraps it with a clock
        self._misses = misses
        self._devices: dict[int, Device] = {}
        self._plans: dict[tuple[Problem, str, int, bool, Leading], Plan] = {}
        self._signatures: dict[tuple[Any, ...], Signature] = {}
        self._lock = threading.RLock()
        self._tensor: type[Any] = _NotATensor
        self._raw_stream: Callable[[int], int] = _no_stream
        self._allocators: dict[int, Allocator] = {}
        self._generation = 0  # forget() calls so far: a signature chosen before one is not kept

    def forget(self) -> None:
        """Forget every call signature's choice (new measurements were stored: tuning on a miss), so
        that the next call of each selects again; plans and loaded kernels stay. A call whose choice
        was made before this does not keep its signature."""
        with self._lock:
            self._generation += 1
            self._signatures = {}

    def _keep(self, key: tuple[Any, ...], sig: Signature, generation: int) -> None:
        """Keep `sig` for the short path unless forget() ran since its choice was made."""
        with self._lock:
            if generation == self._generation:
                self._signatures[key] = sig

    # -- devices and plans -------------------------------------------------------------------

    def device(self, index: int) -> Device:
        found = self._devices.get(index)
        if found is None:
            with self._lock:
                found = self._devices.get(index) or Device(index)
                self._devices[index] = found
        return found

    def plan(self, choice: Choice, device: Device, aligned: bool, stream: int = 0, leading: Leading = None) -> Plan:
        """The plan that runs `choice` on `device`: its own config, or with `aligned` False the
        fitted config with scalar loads (the arrays, or their rows, are not 16-byte aligned). `leading`:
        the leading dimensions in elements (GEMV (lda,), GEMM (lda, ldb, ldc)) where a matrix has gaps
        between its rows (None: all contiguous)."""
        key = (choice.problem, config_key(choice.config), device.index, aligned, leading)
        found = self._plans.get(key)
        if found is None:
            with self._lock:
                found = self._plans.get(key) or self._build(choice, device, aligned, stream, leading)
                self._plans[key] = found
        return found

    def _build(self, choice: Choice, device: Device, aligned: bool, stream: int, leading: Leading) -> Plan:
        with targeting(device.gpu.compute_capability):  # the kernels of this device's GPU
            return self._build_for(choice, device, aligned, stream, leading)

    def _build_for(self, choice: Choice, device: Device, aligned: bool, stream: int, leading: Leading) -> Plan:
        problem = choice.problem
        config = choice.config
        op = ops.for_problem(problem)
        library = ops.library_for(config)
        if library is not None:  # a library's candidate: no kernel of ours to find
            log.debug("%s on GPU %d: %s (%s)", problem, device.index, library.describe(config), choice.source)
            return library.plan(device, problem, config, aligned, leading, op.input_order(problem))
        if not aligned:
            op, config = scalar_loads(problem, config)
        job = ops.compile_job(problem, config, device.gpu.arch, op)
        kernel = find_kernel(job)  # shipped, else the kernel cache, else nvcc
        log.debug("%s on GPU %d: %s (%s config), %s", problem, device.index, job.name, choice.source, kernel.origin)
        call = op.plan(problem, config, device.gpu, leading)
        function = device.function(kernel.image, kernel.key, job.name, call.geom.shared_bytes)
        if call.geom.operand_maps is not None:
            device.prepare_capture_maps(call.geom.operand_maps.nbytes, stream)
        return LaunchPlan(device, function, call, problem.dtype, call.programmatic and device.programmatic)

    def run(
        self,
        choice: Choice,
        device: Device,
        pointers: tuple[int, ...],
        alpha: float,
        beta: float,
        stream: int = 0,
        allocator: Allocator | None = None,
        leading: Leading = None,
    ) -> None:
        """Launch `choice` on arrays at `pointers` (the call's inputs, then the output) on `stream`;
        `leading`: the leading dimensions where a matrix has gaps between its rows. Vector loads need
        16-byte aligned arrays and rows."""
        aligned = not functools.reduce(operator.or_, pointers) & 15 and rows_aligned(choice.problem, leading)
        plan = self.plan(choice, device, aligned, stream, leading)
        plan.launch(pointers, alpha, beta, stream, allocator)

    # -- the library calls ------------------------------------------------------------------

    def call(
        self,
        op: Op,
        *arrays: Any,
        out: Any = None,
        alpha: float = 1.0,
        beta: float = 0.0,
        stream: Any = None,
        db: str | None = None,
        options: tuple[Any, ...] = (),
    ) -> Any:
        """out = alpha * op(arrays) + beta * out with the tuned kernel for the arrays' problem on
        their GPU; returns out (`out`, or a new array). Runs on `stream` (an integer handle, a torch,
        cupy or PyCUDA stream), by default the caller's current stream (torch's or cupy's), also while
        it captures a CUDA graph. `options`: the op's own (the GEMV's (trans,))."""
        return self._call(op, arrays, out, alpha, beta, stream, db, options)

    def _call(
        self,
        op: Op,
        arrays: tuple[Any, ...],
        out: Any,
        alpha: float,
        beta: float,
        stream: Any,
        db: str | None,
        options: tuple[Any, ...],
    ) -> Any:
        """call() with every argument in place: what gemv() and gemm() call, as positional arguments
        cost less to pass than keywords."""
        # The short path: torch tensors of a signature seen before. The key holds everything the
        # full checks depended on, so a hit needs no check at all. For two inputs (GEMV, GEMM) it
        # is signature_key()'s tuple and the plan's launch written out here: a function call would
        # cost ~0.1 us on every launch.
        if len(arrays) == 2 and isinstance(arrays[0], self._tensor):
            first, second = arrays
            if out is None:
                key: tuple[Any, ...] = (
                    op,
                    options,
                    db,
                    first.dtype,
                    first.shape,
                    first.stride(),
                    first.get_device(),
                    second.dtype,
                    second.shape,
                    second.stride(),
                    second.get_device(),
                )
            elif isinstance(out, self._tensor):
                key = (
                    op,
                    options,
                    db,
                    first.dtype,
                    first.shape,
                    first.stride(),
                    first.get_device(),
                    second.dtype,
                    second.shape,
                    second.stride(),
                    second.get_device(),
                    out.dtype,
                    out.shape,
                    out.stride(),
                    out.get_device(),
                )
            else:
                key = ()
            sig = self._signatures.get(key)
            if sig is not None:
                if out is None:
                    if beta != 0.0:
                        raise AutotuneError(f"beta != 0 reads {op.output_name}: pass it as out=")
                    out = first.new_empty(sig.out_shape)
                handle = self._raw_stream(sig.index) if stream is None else self._given(stream, sig.device)
                a, b, c = first.data_ptr(), second.data_ptr(), out.data_ptr()
                spans = sig.spans
                if spans is not None:
                    end = c + spans[2]
                    if a < end and c < a + spans[0]:
                        raise AutotuneError(_SHARES.format(name=op.input_names[0]))
                    if b < end and c < b + spans[1]:
                        raise AutotuneError(_SHARES.format(name=op.input_names[1]))
                plan = sig.aligned if not (a | b | c) & 15 else self._unaligned(sig, handle)
                if isinstance(plan, LaunchPlan):
                    with plan.lock:
                        args = plan.args
                        try:
                            args.p0, args.p1, args.p2, args.alpha, args.beta = a, b, c, alpha, beta
                        except TypeError:  # ctypes refuses text: costs nothing until it happens
                            raise AutotuneError(f"alpha and beta are numbers, got {alpha!r} and {beta!r}") from None
                        if plan.needs_scratch:
                            plan.bind_scratch((a, b, c), handle, sig.allocator)
                        plan.config.stream = handle
                        result = plan.launch_driver(plan.config_ref, plan.function, plan.params, None)
                        if result:
                            result = plan.relaunch(result)
                    if result:
                        driver.check(result, "launching the kernel (cuLaunchKernelEx)")
                else:
                    plan.launch((a, b, c), alpha, beta, handle, sig.allocator)
                if sig.tally is not None:
                    sig.tally.count += 1
                return out
        elif arrays and isinstance(arrays[0], self._tensor) and (out is None or isinstance(out, self._tensor)):
            # Any other number of inputs (the int4 op's x, qweight, scales and zeros) has its short
            # path written out here too, signature_key()'s tuple built in the same loop that reads
            # the addresses: as functions (signature_key, a _launch_seen and its generator of
            # pointers) they cost seven Python calls a launch beside the plan's launch.
            key = (op, options, db)
            pointers: list[int] = []
            bits = 0  # the addresses or-ed together: 16-byte aligned where the low 4 bits are clear
            for array in arrays:
                if array is None:  # an optional input not given: part of the key, a null pointer
                    key += (None,)
                    pointers.append(0)
                else:
                    key += (array.dtype, array.shape, array.stride(), array.get_device())
                    pointer = array.data_ptr()
                    bits |= pointer
                    pointers.append(pointer)
            if out is not None:
                key += (out.dtype, out.shape, out.stride(), out.get_device())
            sig = self._signatures.get(key)
            if sig is not None:
                if out is None:
                    if beta != 0.0:
                        raise AutotuneError(f"beta != 0 reads {op.output_name}: pass it as out=")
                    out = arrays[0].new_empty(sig.out_shape, dtype=sig.out_dtype)
                handle = self._raw_stream(sig.index) if stream is None else self._given(stream, sig.device)
                pointer = out.data_ptr()
                spans = sig.spans
                if spans is not None:
                    end = pointer + spans[-1]
                    for index, start in enumerate(pointers):
                        if start < end and pointer < start + spans[index]:
                            raise AutotuneError(_SHARES.format(name=op.input_names[index]))
                pointers.append(pointer)
                plan = sig.aligned if not (bits | pointer) & 15 else self._unaligned(sig, handle)
                plan.launch(tuple(pointers), alpha, beta, handle, sig.allocator)
                if sig.tally is not None:
                    sig.tally.count += 1
                return out
        return self._call_checked(op, arrays, out, alpha, beta, stream, db, options)

    def _call_checked(
        self,
        op: Op,
        arrays: Sequence[Any],
        out: Any,
        alpha: float,
        beta: float,
        stream: Any,
        db: str | None,
        options: tuple[Any, ...],
    ) -> Any:
        names = op.input_names
        if len(arrays) != len(names):
            takes = f"{len(names)} array{'s' if len(names) != 1 else ''} ({', '.join(names)})"
            raise AutotuneError(f"{op.name} takes {takes}, got {len(arrays)}")
        described = opnd.describe_inputs(arrays, names, op.optional_inputs)
        given = opnd.describe(out, "out") if out is not None else None
        # None only where op.optional_inputs allows it: such an op's bind takes DeviceArray | None.
        bound = op.bind(cast(list[DeviceArray], described), given, options)
        if isinstance(bound, Reroute):
            return self._reroute(bound, out, given, alpha, beta, stream, db)
        problem = bound.problem
        if problem.dtype not in DTYPES:  # uint8 arrays bound as if they were a float op's operands
            raise AutotuneError(f"{op.name} computes in float32, float16 or bfloat16, not {problem.dtype}")
        if given is None and beta != 0.0:
            raise AutotuneError(f"beta != 0 reads {op.output_name}: pass it as out=")
        present = [array for array in described if array is not None]
        device = self.device(opnd.device_of(present + ([given] if given else [])))
        if given is not None:
            shared = opnd.overlapped(given, described, names)
            if shared is not None:
                raise AutotuneError(_SHARES.format(name=shared))
        if given is None:
            out = opnd.new_output(present, problem.dtype, bound.out_shape, device.index)
        written = given or opnd.describe(out, "out")
        generation = self._generation
        choice = self.chooser(problem, device, db)
        tally = self._tally(choice, db)
        handle = self._stream(stream, present[0], device)
        allocator = self._allocator(present[0], device)
        pointers = (*(0 if array is None else array.pointer for array in described), written.pointer)
        self.run(
            choice, device, pointers, _scalar(alpha, "alpha"), _scalar(beta, "beta"), handle, allocator, bound.leading
        )
        if all(array.kind == "torch" for array in present) and (given is None or given.kind == "torch"):
            # The strides are in the key: where a matrix's rows break 16-byte alignment, every call of
            # the signature runs scalar loads, so the short path's check of the addresses stays as it is.
            vector_rows = rows_aligned(problem, bound.leading)
            plan = self.plan(choice, device, vector_rows, handle, bound.leading)
            sig = Signature(
                choice, device, device.index, bound.out_shape, out.dtype, plan, None if vector_rows else plan
            )
            sig.leading, sig.allocator, sig.tally = bound.leading, allocator, tally
            if given is not None:
                sig.spans = (*(opnd.byte_extent(array) for array in described), opnd.byte_extent(given))
            self._keep(signature_key(op, options, db, arrays, out if given is not None else None), sig, generation)
        return out

    def _reroute(
        self,
        route: Reroute,
        out: Any,
        given: DeviceArray | None,
        alpha: float,
        beta: float,
        stream: Any,
        db: str | None,
    ) -> Any:
        """Compute a call as `route` says: another op, or the same through contiguous copies."""
        target = ops.get(route.op)
        arrays = list(route.arrays)
        for index in route.copy_inputs:
            arrays[index] = opnd.contiguous_copy(opnd.describe(arrays[index], target.input_names[index]))
        if route.copy_out and given is not None:  # out's values in, the result back out
            result = self.call(
                target,
                *arrays,
                out=opnd.contiguous_copy(given),
                alpha=alpha,
                beta=beta,
                stream=stream,
                db=db,
                options=route.options,
            )
            opnd.copy_into(given, result)
            return out
        return self.call(target, *arrays, out=out, alpha=alpha, beta=beta, stream=stream, db=db, options=route.options)

    def gemv(
        self,
        A: Any,
        x: Any,
        out: Any = None,
        alpha: float = 1.0,
        beta: float = 0.0,
        *,
        trans: bool = False,
        stream: Any = None,
        db: str | None = None,
    ) -> Any:
        """y = alpha*A@x + beta*y (with `trans`, alpha*Aᵀ@x + beta*y) with the tuned kernel for A's shape
        on A's GPU; returns y (`out`, or a new array). Runs on `stream` (an integer handle, a torch, cupy
        or PyCUDA stream), by default the caller's current stream (torch's or cupy's), also while it
        captures a CUDA graph."""
        return self._call(GEMV, (A, x), out, alpha, beta, stream, db, _TRANSPOSED if trans else _PLAIN)

    def gemm(
        self,
        A: Any,
        B: Any,
        out: Any = None,
        alpha: float = 1.0,
        beta: float = 0.0,
        *,
        stream: Any = None,
        db: str | None = None,
    ) -> Any:
        """C = alpha*A@B + beta*C (row-major) with the tuned kernel for this shape on A's GPU; returns C
        (`out`, or a new array). Streams and graphs as for gemv()."""
        return self._call(GEMM, (A, B), out, alpha, beta, stream, db, ())

    def signatures(self) -> list[Signature]:
        """Every call signature seen so far."""
        return list(self._signatures.values())

    def warmup_scratch(self, choice: Choice, device: Device, captures: int = 1, leading: Leading = None) -> None:
        """Load `choice`'s kernels (aligned and unaligned, for these leading dimensions) and set aside
        scratch for `captures` launches captured into graphs later."""
        for aligned in (True, False) if rows_aligned(choice.problem, leading) else (False,):
            try:
                plan = self.plan(choice, device, aligned, leading=leading)
            except AutotuneError:
                continue
            if not isinstance(plan, LaunchPlan):
                if plan.workspace_bytes:
                    device.reserve_library_workspace(plan.workspace_bytes, captures)
            elif plan.geom.workspace_floats or plan.geom.counters:
                device.reserve(plan.geom, captures)

    # -- helpers -----------------------------------------------------------------------------

    def _tally(self, choice: Choice, db: str | None) -> Tally | None:
        """Count this call of an untuned problem (its signature's later calls count on the same tally)."""
        tally = None if self._misses is None else self._misses.tally(choice, db)
        if tally is not None:
            tally.count += 1
        return tally

    def _unaligned(self, sig: Signature, stream: int) -> Plan:
        if sig.unaligned is None:
            sig.unaligned = self.plan(sig.choice, sig.device, False, stream, sig.leading)
        return sig.unaligned

    def _stream(self, stream: Any, a: DeviceArray, device: Device) -> int:
        if stream is None:
            return opnd.default_stream(a, device.index)
        return self._given(stream, device)

    @staticmethod
    def _given(stream: Any, device: Device) -> int:
        """The handle of a stream the caller passed, which must belong to the operands' GPU."""
        if type(stream) is int:
            return stream
        stream_device = getattr(stream, "device_index", None)
        if stream_device is None and hasattr(stream, "device") and hasattr(stream.device, "id"):
            stream_device = stream.device.id  # cupy
        if isinstance(stream_device, int) and stream_device != device.index:
            raise AutotuneError(f"the stream belongs to GPU {stream_device}, the operands to GPU {device.index}")
        return opnd.stream_handle(stream)

    def _allocator(self, a: DeviceArray, device: Device) -> Allocator | None:
        """torch's caching allocator for scratch a graph capture needs (it serves captures from the
        graph's private pool); none for other arrays."""
        if a.kind != "torch":
            return None
        if self._tensor is _NotATensor:
            import torch

            self._tensor = torch.Tensor
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            self._raw_stream = raw if callable(raw) else (lambda i: int(torch.cuda.current_stream(i).cuda_stream))
        if device.index not in self._allocators:
            import torch

            def allocate(nbytes: int, index: int) -> tuple[int, Any]:
                owner = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
                return int(owner.data_ptr()), owner

            self._allocators[device.index] = allocate
        return self._allocators[device.index]


def signature_key(op: Op, options: tuple[Any, ...], db: str | None, arrays: Sequence[Any], out: Any) -> tuple[Any, ...]:
    """The key of a torch call signature: the op, its options, the database, then dtype, shape,
    strides and device of each array and of out where out was given. call() builds the same tuple
    inline on its short paths."""
    key: tuple[Any, ...] = (op, options, db)
    for array in (*arrays, out) if out is not None else arrays:
        # An optional input not given (None) is part of the signature: its kernel reads no array.
        key += (None,) if array is None else (array.dtype, array.shape, array.stride(), array.get_device())
    return key


def rows_aligned(problem: Problem, leading: Leading) -> bool:
    """Whether rows these many elements apart start 16-byte aligned wherever the first does, as
    vector loads need (None: contiguous rows, which the problem's space already fits its vectors to)."""
    return leading is None or all(ld * ITEMSIZE[problem.dtype] % 16 == 0 for ld in leading)


def scalar_loads(problem: Problem, config: Config) -> tuple[Op, Config]:
    """(op, config) that run `problem` with one element per load. Tuned configs may use 16-byte
    vector loads, which need aligned rows, and a sliced view may not give them; scalar loads always
    work. The config keeps its tiling where it can (Space.fit: a prefetch that needs 16-byte loads
    goes with them). An op without scalar loads (a GEMM family such as wgmma) names its stand-in; one
    whose kernels pick their loads from the arrays themselves (the tall family) runs the config as it is."""
    op = ops.for_problem(problem).for_unaligned(problem)
    if op.loads_as_aligned(problem):
        return op, dict(config)
    space = op.space(problem)
    for candidate in (config, op.default_config(problem)):
        scalar = space.fit(candidate, {"vec": 1})
        if scalar is not None:
            return op, scalar
    raise AutotuneError(f"{problem}: no config with scalar loads fits; pass 16-byte aligned arrays")


def _scalar(value: object, name: str) -> float:
    """alpha or beta as the kernel takes it; text (which float() would read) and anything float()
    refuses is a one-line error, not a ValueError from the middle of the launch path."""
    if isinstance(value, str | bytes):
        raise AutotuneError(f"{name} is a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise AutotuneError(f"{name} is a number, got {type(value).__name__}") from None
