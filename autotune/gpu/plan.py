"""A launch plan: one kernel bound to its geometry and a packed parameter buffer, launched by one
driver call.

Everything that does not change between calls of one (op, shape, dtype, layout, device) is worked
out once, as Triton's compiled-kernel launcher and CUTLASS's initialize/run split do: the function
handle, grid, block, shared memory, the launch attributes (PDL, clusters), a ctypes structure holding the kernel's
arguments and the array of their addresses that cuLaunchKernelEx reads. A call writes the array
addresses and alpha/beta into that structure and launches; the driver copies the arguments at
launch, so the buffer is free again as soon as the call returns.

The structure's array fields are named by the call's order (p0, p1, ... for the inputs, then the
output) and laid out in the kernel's: a kernel that takes its inputs in another order (the
transposed GEMV's take x before A) costs nothing at launch.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import re
import struct
import threading
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.gpu import driver
from autotune.gpu.device import Allocator, Device
from autotune.gpu.geometry import KernelCall

_CTYPES: dict[str, Any] = {"P": ctypes.c_uint64, "i": ctypes.c_int32, "f": ctypes.c_float}
# Every op's kernels take their arrays (inputs, then the output), integer sizes, alpha and beta,
# then the split-K workspace and counters (ops/base.py).
_ARGUMENTS = re.compile(r"(P{2,})(i*)ffPP")


@functools.cache
def arguments_struct(arg_types: str, order: tuple[int, ...]) -> type[ctypes.Structure]:
    """The ctypes structure of a kernel's arguments ("PPPiiiffPP" for GEMV: A, x, y, M, N, lda,
    alpha, beta, workspace, counters); `order`: which call input each kernel input array is."""
    shape = _ARGUMENTS.fullmatch(arg_types)
    if shape is None:
        raise AutotuneError(f"kernel arguments {arg_types!r} are not arrays, sizes, alpha, beta, scratch")
    inputs = len(shape.group(1)) - 1
    if sorted(order) != list(range(inputs)):
        raise AutotuneError(f"input order {order} does not name each of the kernel's {inputs} inputs once")
    arrays = [f"p{index}" for index in order] + [f"p{inputs}"]
    sizes = [f"size{i}" for i in range(len(shape.group(2)))]
    names = [*arrays, *sizes, "alpha", "beta", "workspace", "counters"]
    fields = [(name, _CTYPES[kind]) for name, kind in zip(names, arg_types, strict=True)]
    return type("KernelArguments", (ctypes.Structure,), {"_fields_": fields})


class LaunchPlan:
    """One kernel ready to launch on one device for one problem and layout.

    Runtime.call's short path launches a plan of two inputs itself, to save a Python call a launch:
    under `lock` it writes `args`, binds the scratch where the plan needs it and calls
    `launch_driver`, as `launch` does."""

    def __init__(self, device: Device, function: int, call: KernelCall, dtype: str, programmatic: bool) -> None:
        self.device = device
        self.geom = geom = call.geom
        self.sizes = call.sizes
        self.dtype = dtype
        self.order = call.order
        self.needs_scratch = bool(geom.workspace_floats or geom.counters or geom.operand_maps)
        self.args = arguments_struct(call.arg_types, call.order)()
        # Past two inputs the addresses go in with one pack_into (a C call) instead of a setattr a
        # field, in the kernel's order: ~1 us less a launch. The array fields lead the structure, 8
        # bytes each.
        inputs = len(call.order)
        self._pack_arrays = struct.Struct(f"{inputs + 1}Q").pack_into
        kernel_order = (*call.order, inputs)
        identity = kernel_order == tuple(range(inputs + 1))
        self._in_kernel_order = None if identity else operator.itemgetter(*kernel_order)
        for index, size in enumerate(call.sizes):
            setattr(self.args, f"size{index}", size)
        base = ctypes.addressof(self.args)
        offsets = [getattr(type(self.args), entry[0]).offset for entry in self.args._fields_]
        self.params = (ctypes.c_void_p * len(offsets))(*(base + offset for offset in offsets))
        # The launch attributes: programmatic dependent launch, and clusters given at launch.
        attributes = [driver.programmatic_attribute()] if programmatic else []
        if geom.cluster_dims is not None:
            attributes.append(driver.cluster_attribute(*geom.cluster_dims))
        self._attributes = (driver.LaunchAttribute * max(1, len(attributes)))(*attributes)
        self.config = driver.LaunchConfig(
            *geom.grid,
            *geom.block,
            geom.shared_bytes,
            None,
            ctypes.cast(self._attributes, ctypes.POINTER(driver.LaunchAttribute)) if attributes else None,
            len(attributes),
        )
        self.config_ref = ctypes.byref(self.config)
        self.function = ctypes.c_void_p(function)
        self._context = device.context
        self._current = ctypes.c_void_p()
        self._current_ref = ctypes.byref(self._current)
        library = driver.lib()
        # Fresh function pointers without argtypes: every argument below is already a ctypes
        # object, and skipping the per-argument conversion is a measurable share of a launch.
        self.launch_driver = library["cuLaunchKernelEx"]
        self._get_context = library["cuCtxGetCurrent"]
        self.lock = threading.Lock()

    def launch(
        self, pointers: tuple[int, ...], alpha: float, beta: float, stream: int, allocator: Allocator | None
    ) -> None:
        """Launch on `stream` with arrays at `pointers` (the call's inputs, then the output) from any
        thread."""
        with self.lock:
            args = self.args
            if len(pointers) == 3:  # two inputs and the output: GEMV, GEMM
                args.p0, args.p1, args.p2 = pointers
            elif self._in_kernel_order is None:
                self._pack_arrays(args, 0, *pointers)
            else:
                self._pack_arrays(args, 0, *self._in_kernel_order(pointers))
            args.alpha, args.beta = alpha, beta
            if self.needs_scratch:
                self.bind_scratch(pointers, stream, allocator)
            self.config.stream = stream
            result = self.launch_driver(self.config_ref, self.function, self.params, None)
            if result:
                result = self.relaunch(result)
        if result:
            driver.check(result, "launching the kernel (cuLaunchKernelEx)")

    def relaunch(self, result: int) -> int:
        """After a failed launch, with `lock` held and the arguments written: most likely another
        GPU's context (or none) is current on this thread and the launch did not run, so launch
        again in the device's own. Checking first would cost a driver call a launch."""
        self._get_context(self._current_ref)
        if self._current.value == self._context:
            return result
        if not self._current.value:
            driver.adopt_context(self._context)
            return int(self.launch_driver(self.config_ref, self.function, self.params, None))
        with driver.in_context(self._context):
            return int(self.launch_driver(self.config_ref, self.function, self.params, None))

    def bind_scratch(self, pointers: tuple[int, ...], stream: int, allocator: Allocator | None) -> None:
        """Write this stream's split-K scratch (or the TMA kernels' tensor maps) into the arguments."""
        scratch = self.device.scratch(self.geom, stream, allocator)
        self.args.workspace, self.args.counters = scratch.workspace, scratch.counters
        maps = self.geom.operand_maps
        if maps is not None:  # TMA kernels read their tensor maps where the workspace would be
            a, b = (pointers[index] for index in self.order[:2])  # the kernel's A and B
            self.args.workspace = self.device.tensor_maps(scratch, stream, maps, self.dtype, self.sizes, a, b)
