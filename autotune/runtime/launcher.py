"""autotune.gemv() and gemm() in the caller's process: select, build and cache a launch plan per call
signature, then launch on the caller's stream and the operands' own GPU.

The first call of a signature (op, shapes, strides, dtype, device) checks the operands in full,
selects the config, finds its kernel (shipped with autotune, else cached, else compiled by nvcc:
autotune/build/shipped.py), loads it into the device's context and binds a LaunchPlan (one per
leading dimension: a GEMV's A may be a view with gaps between its rows). Later calls of torch tensors
take a short path: a dictionary look-up keyed by what the checks depended on, three data_ptr()s, the
current stream, one driver call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from autotune import ops
from autotune.build.shipped import find_kernel
from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, config_key
from autotune.core.target import targeting
from autotune.ops import make_problem
from autotune.ops.base import Op
from autotune.runtime import operands as opnd
from autotune.runtime.device import Allocator, Device
from autotune.runtime.misses import Misses, Tally
from autotune.runtime.plan import LaunchPlan
from autotune.select.choose import Choice
from autotune.vendor.mapping import is_vendor, rank_of

if TYPE_CHECKING:
    from autotune.runtime.vendor_plan import VendorPlan

log = logging.getLogger(__name__)
# What runs a call: one of our kernels, or cuBLASLt where it was measured fastest (both have launch()).
Plan = Union[LaunchPlan, "VendorPlan"]
Chooser = Callable[[Problem, Device, "str | None"], Choice]
# The leading dimensions of a call whose matrices have gaps between their rows, in the op's order
# (GEMV: (lda,); GEMM: (lda, ldb, ldc)); None where every matrix is contiguous.
Leading = tuple[int, ...] | None


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
    # The plan for 16-byte aligned addresses: already the scalar-load one where a matrix's rows lie
    # further apart than its row length and that breaks 16-byte alignment (the strides are part of
    # the signature).
    aligned: Plan
    unaligned: Plan | None = None
    leading: Leading = None  # the leading dimensions where a matrix has gaps between its rows
    allocator: Allocator | None = None
    swap: bool = False  # a transposed GEMV: its kernels take x before A
    tally: Tally | None = None  # an untuned problem's call count (autotune/runtime/misses.py)


class Runtime:
    """Per-process state of the launch path: devices, plans, call signatures."""

    def __init__(self, chooser: Chooser, misses: Misses | None = None) -> None:
        self._choose = chooser
        self._misses = misses
        self._devices: dict[int, Device] = {}
        self._plans: dict[tuple[Problem, str, int, bool, Leading], Plan] = {}
        self._gemv: dict[tuple[Any, ...], Signature] = {}
        self._gemm: dict[tuple[Any, ...], Signature] = {}
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
            self._gemv = {}
            self._gemm = {}

    def _keep(
        self, signatures: dict[tuple[Any, ...], Signature], key: tuple[Any, ...], sig: Signature, generation: int
    ) -> None:
        """Keep `sig` for the short path unless forget() ran since its choice was made."""
        with self._lock:
            if generation == self._generation:
                signatures[key] = sig

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
        if is_vendor(config):  # the `cublas` family's algorithm: no kernel of ours to find
            from autotune.runtime.vendor_plan import VendorPlan

            log.debug("%s on GPU %d: cuBLASLt %s (%s)", problem, device.index, config, choice.source)
            return VendorPlan(device, problem, rank_of(config), aligned, leading)
        op = ops.for_problem(problem)
        if not aligned:
            op, config = scalar_loads(problem, config)
        job = ops.compile_job(problem, config, device.gpu.arch, op)
        kernel = find_kernel(job)  # shipped, else the kernel cache, else nvcc
        log.debug("%s on GPU %d: %s (%s config), %s", problem, device.index, job.name, choice.source, kernel.origin)
        geom = op.launch(problem, config, device.gpu.sm_count)
        function = device.function(kernel.image, kernel.key, job.name, geom.shared_bytes)
        sizes = op.operands(problem).sizes if leading is None else op.strided_sizes(problem, leading)
        programmatic = op.programmatic_launch and device.programmatic
        if geom.operand_maps is not None:
            device.prepare_capture_maps(geom.operand_maps.nbytes, stream)
        return LaunchPlan(device, function, op.arg_types, geom, sizes, problem.dtype, programmatic)

    def run(
        self,
        choice: Choice,
        device: Device,
        pointers: tuple[int, int, int],
        alpha: float,
        beta: float,
        stream: int = 0,
        allocator: Allocator | None = None,
        leading: Leading = None,
    ) -> None:
        """Launch `choice` on arrays at `pointers` (in the kernel's order) on `stream`; `leading`: the
        leading dimensions where a matrix has gaps between its rows. Vector loads need 16-byte aligned
        arrays and rows."""
        aligned = not (pointers[0] | pointers[1] | pointers[2]) & 15 and rows_aligned(choice.problem, leading)
        plan = self.plan(choice, device, aligned, stream, leading)
        plan.launch(*pointers, alpha, beta, stream, allocator)

    # -- the library calls ------------------------------------------------------------------

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
        # The short path: torch tensors of a signature seen before. The key holds everything the
        # full checks depended on, so a hit needs no check at all. It is signature_key()'s tuple,
        # written out here and in gemm(): a function call would cost ~0.1 us on every launch.
        if isinstance(A, self._tensor):
            if out is None:
                key: tuple[Any, ...] = (
                    A.dtype,
                    A.shape,
                    A.stride(),
                    A.get_device(),
                    x.dtype,
                    x.shape,
                    x.stride(),
                    x.get_device(),
                    trans,
                    db,
                )
            elif isinstance(out, self._tensor):
                key = (
                    A.dtype,
                    A.shape,
                    A.stride(),
                    A.get_device(),
                    x.dtype,
                    x.shape,
                    x.stride(),
                    x.get_device(),
                    trans,
                    db,
                    out.dtype,
                    out.shape,
                    out.stride(),
                    out.get_device(),
                )
            else:
                key = ()
            sig = self._gemv.get(key)
            if sig is not None:
                if out is None:
                    if beta != 0.0:
                        raise AutotuneError("beta != 0 reads y: pass it as out=")
                    out = A.new_empty(sig.out_shape)
                handle = self._raw_stream(sig.index) if stream is None else self._given(stream, sig.device)
                a, v, y = A.data_ptr(), x.data_ptr(), out.data_ptr()
                plan = sig.aligned if not (a | v | y) & 15 else self._unaligned(sig, handle)
                if sig.swap:
                    plan.launch(v, a, y, alpha, beta, handle, sig.allocator)
                else:
                    plan.launch(a, v, y, alpha, beta, handle, sig.allocator)
                if sig.tally is not None:
                    sig.tally.count += 1
                return out
        return self._gemv_checked(A, x, out, alpha, beta, trans, stream, db)

    def _gemv_checked(
        self, A: Any, x: Any, out: Any, alpha: float, beta: float, trans: bool, stream: Any, db: str | None
    ) -> Any:
        a, xv = opnd.describe(A, "A"), opnd.describe(x, "x")
        y = given = opnd.describe(out, "out") if out is not None else None
        if len(xv.shape) == 2 and xv.shape[0] > 1 and xv.shape[1] > 1 and len(a.shape) == 2:
            # A batch of B vectors as the rows of x (B x N): Y = X Aᵀ (X A with `trans`), a GEMM whose
            # B operand is A itself (the N x K layout for A x), never a copy of A.
            return self.gemm(x, A if trans else A.T, out, alpha, beta, stream=stream, db=db)
        if opnd.strided_vector(xv):  # incx != 1
            return self._gemv_checked(A, opnd.contiguous_copy(xv), out, alpha, beta, trans, stream, db)
        if y is not None and opnd.strided_vector(y):  # incy != 1: y's values in, the result back out
            result = self._gemv_checked(A, x, opnd.contiguous_copy(y), alpha, beta, trans, stream, db)
            opnd.copy_into(y, result)
            return out
        layout = opnd.check_gemv_operands(a, xv, y, trans)
        if y is None and beta != 0.0:
            raise AutotuneError("beta != 0 reads y: pass it as out=")
        device = self.device(opnd.device_of([a, xv] + ([y] if y else [])))
        if y is None:
            out = opnd.empty_like(a, layout.out_shape, device.index)
            y = opnd.describe(out, "out")
        problem = make_problem("gemv", a.dtype, layout.m, layout.n, trans=layout.trans)
        generation = self._generation
        choice = self._choose(problem, device, db)
        tally = self._tally(choice, db)
        handle = self._stream(stream, a, device)
        # The transposed GEMV's kernels take (x, A, y): yᵀ = xᵀ A is a one-row GEMM.
        pointers = (xv.pointer, a.pointer, y.pointer) if layout.trans else (a.pointer, xv.pointer, y.pointer)
        leading = (layout.lda,) if layout.strided else None
        self.run(choice, device, pointers, float(alpha), float(beta), handle, self._allocator(a, device), leading)
        if a.kind == xv.kind == "torch" and (given is None or given.kind == "torch"):
            # A's strides are in the key: where its rows break 16-byte alignment, every call of the
            # signature runs scalar loads, so the short path's check of the addresses stays as it is.
            vector_rows = rows_aligned(problem, leading)
            plan = self.plan(choice, device, vector_rows, handle, leading)
            unaligned = None if vector_rows else plan
            sig = Signature(choice, device, device.index, layout.out_shape, plan, unaligned=unaligned, leading=leading)
            sig.allocator = self._allocator(a, device)
            sig.swap = layout.trans
            sig.tally = tally
            key = signature_key(A, x, out if given is not None else None, (trans, db))
            self._keep(self._gemv, key, sig, generation)
        return out

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
        if isinstance(A, self._tensor):  # the short path, as in gemv()
            if out is None:
                key: tuple[Any, ...] = (
                    A.dtype,
                    A.shape,
                    A.stride(),
                    A.get_device(),
                    B.dtype,
                    B.shape,
                    B.stride(),
                    B.get_device(),
                    db,
                )
            elif isinstance(out, self._tensor):
                key = (
                    A.dtype,
                    A.shape,
                    A.stride(),
                    A.get_device(),
                    B.dtype,
                    B.shape,
                    B.stride(),
                    B.get_device(),
                    db,
                    out.dtype,
                    out.shape,
                    out.stride(),
                    out.get_device(),
                )
            else:
                key = ()
            sig = self._gemm.get(key)
            if sig is not None:
                if out is None:
                    if beta != 0.0:
                        raise AutotuneError("beta != 0 reads C: pass it as out=")
                    out = A.new_empty(sig.out_shape)
                handle = self._raw_stream(sig.index) if stream is None else self._given(stream, sig.device)
                a, b, c = A.data_ptr(), B.data_ptr(), out.data_ptr()
                plan = sig.aligned if not (a | b | c) & 15 else self._unaligned(sig, handle)
                plan.launch(a, b, c, alpha, beta, handle, sig.allocator)
                if sig.tally is not None:
                    sig.tally.count += 1
                return out
        return self._gemm_checked(A, B, out, alpha, beta, stream, db)

    def _gemm_checked(self, A: Any, B: Any, out: Any, alpha: float, beta: float, stream: Any, db: str | None) -> Any:
        a, b = opnd.describe(A, "A"), opnd.describe(B, "B")
        c = given = opnd.describe(out, "out") if out is not None else None
        layout = opnd.check_gemm_operands(a, b, c)
        m, n, k = layout.m, layout.n, layout.k
        if c is None and beta != 0.0:
            raise AutotuneError("beta != 0 reads C: pass it as out=")
        device = self.device(opnd.device_of([a, b] + ([c] if c else [])))
        if c is None:
            out = opnd.empty_like(a, (m, n), device.index)
            c = opnd.describe(out, "out")
        problem = make_problem("gemm", a.dtype, m, n, k, trans=layout.b_nk)
        generation = self._generation
        choice = self._choose(problem, device, db)
        tally = self._tally(choice, db)
        handle = self._stream(stream, a, device)
        leading = layout.leading
        pointers = (a.pointer, b.pointer, c.pointer)
        self.run(choice, device, pointers, float(alpha), float(beta), handle, self._allocator(a, device), leading)
        if a.kind == b.kind == "torch" and (given is None or given.kind == "torch"):
            # As for gemv(): where the strides break 16-byte alignment every call runs scalar loads.
            vector_rows = rows_aligned(problem, leading)
            plan = self.plan(choice, device, vector_rows, handle, leading)
            unaligned = None if vector_rows else plan
            sig = Signature(choice, device, device.index, (m, n), plan, unaligned=unaligned, leading=leading)
            sig.allocator = self._allocator(a, device)
            sig.tally = tally
            key = signature_key(A, B, out if given is not None else None, (db,))
            self._keep(self._gemm, key, sig, generation)
        return out

    def signatures(self) -> list[Signature]:
        """Every call signature seen so far."""
        return [*self._gemv.values(), *self._gemm.values()]

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
                    device.reserve_vendor(plan.workspace_bytes, captures)
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

    def _stream(self, stream: Any, a: opnd.DeviceArray, device: Device) -> int:
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

    def _allocator(self, a: opnd.DeviceArray, device: Device) -> Allocator | None:
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


def signature_key(first: Any, second: Any, out: Any, tail: tuple[Any, ...]) -> tuple[Any, ...]:
    """The key of a torch call signature: dtype, shape, strides and device of both operands, the
    call's own options (`tail`), then out's four where out was given. gemv() and gemm() build the
    same tuple inline on their short path."""

    def layout(t: Any) -> tuple[Any, ...]:
        return (t.dtype, t.shape, t.stride(), t.get_device())

    return (*layout(first), *layout(second), *tail, *(layout(out) if out is not None else ()))


def rows_aligned(problem: Problem, leading: Leading) -> bool:
    """Whether rows these many elements apart start 16-byte aligned wherever the first does, as
    vector loads need (None: contiguous rows, which the problem's space already fits its vectors to)."""
    return leading is None or all(ld * ITEMSIZE[problem.dtype] % 16 == 0 for ld in leading)


def scalar_loads(problem: Problem, config: Config) -> tuple[Op, Config]:
    """(op, config) that run `problem` with one element per load. Tuned configs may use 16-byte
    vector loads, which need aligned rows, and a sliced view may not give them; scalar loads always
    work. The config keeps its tiling where it can (Space.fit: a prefetch that needs 16-byte loads
    goes with them). An op without scalar loads (a GEMM family such as wgmma) names its stand-in."""
    op = ops.for_problem(problem).for_unaligned(problem)
    space = op.space(problem)
    for candidate in (config, op.default_config(problem)):
        scalar = space.fit(candidate, {"vec": 1})
        if scalar is not None:
            return op, scalar
    raise AutotuneError(f"{problem}: no config with scalar loads fits; pass 16-byte aligned arrays")
