"""A launch plan: one kernel bound to its geometry and a packed parameter buffer, launched by one
driver call.

Everything that does not change between calls of one (op, shape, dtype, layout, device) is worked
out once, as Triton's compiled-kernel launcher and CUTLASS's initialize/run split do: the function
handle, grid, block, shared memory, the PDL attribute, a ctypes structure holding the kernel's
arguments and the array of their addresses that cuLaunchKernelEx reads. A call writes the three
array addresses and alpha/beta into that structure and launches; the driver copies the arguments
at launch, so the buffer is free again as soon as the call returns.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.ops.geometry import Launch
from autotune.runtime import driver
from autotune.runtime.device import Allocator, Device

_CTYPES: dict[str, Any] = {"P": ctypes.c_uint64, "i": ctypes.c_int32, "f": ctypes.c_float}


@functools.cache
def arguments_struct(arg_types: str) -> type[ctypes.Structure]:
    """The ctypes structure of a kernel's arguments. Every op's kernels take three arrays, their
    sizes (leading dimensions included), alpha and beta, then the split-K workspace and counters
    ("PPPiiiffPP" for GEMV: M, N, lda)."""
    sizes = arg_types[3:-4]
    if arg_types[:3] != "PPP" or arg_types[-4:] != "ffPP" or set(sizes) - {"i"}:
        raise AutotuneError(f"kernel arguments {arg_types!r} are not arrays, sizes, alpha, beta, scratch")
    names = ["a", "b", "c", *(f"size{i}" for i in range(len(sizes))), "alpha", "beta", "workspace", "counters"]
    fields = [(name, _CTYPES[kind]) for name, kind in zip(names, arg_types, strict=True)]
    return type("KernelArguments", (ctypes.Structure,), {"_fields_": fields})


class LaunchPlan:
    """One kernel ready to launch on one device for one problem and layout."""

    def __init__(
        self,
        device: Device,
        function: int,
        arg_types: str,
        geom: Launch,
        sizes: tuple[int, ...],
        dtype: str,
        programmatic: bool,
    ) -> None:
        self.device = device
        self.geom = geom
        self.sizes = sizes
        self.dtype = dtype
        self.needs_scratch = bool(geom.workspace_floats or geom.counters or geom.operand_maps)
        self._args = arguments_struct(arg_types)()
        for index, size in enumerate(sizes):
            setattr(self._args, f"size{index}", size)
        base = ctypes.addressof(self._args)
        offsets = [getattr(type(self._args), entry[0]).offset for entry in self._args._fields_]
        self._params = (ctypes.c_void_p * len(offsets))(*(base + offset for offset in offsets))
        self._attribute = driver.programmatic_attribute()
        self._config = driver.LaunchConfig(
            *geom.grid,
            *geom.block,
            geom.shared_bytes,
            None,
            ctypes.pointer(self._attribute) if programmatic else None,
            1 if programmatic else 0,
        )
        self._config_ref = ctypes.byref(self._config)
        self._function = ctypes.c_void_p(function)
        self._context = device.context
        self._current = ctypes.c_void_p()
        self._current_ref = ctypes.byref(self._current)
        library = driver.lib()
        # Fresh function pointers without argtypes: every argument below is already a ctypes
        # object, and skipping the per-argument conversion is a measurable share of a launch.
        self._launch = library["cuLaunchKernelEx"]
        self._get_context = library["cuCtxGetCurrent"]
        self._lock = threading.Lock()

    def launch(
        self, a: int, b: int, c: int, alpha: float, beta: float, stream: int, allocator: Allocator | None
    ) -> None:
        """Launch on `stream` with arrays at a, b, c (in the kernel's order) from any thread."""
        with self._lock:
            args = self._args
            args.a, args.b, args.c, args.alpha, args.beta = a, b, c, alpha, beta
            if self.needs_scratch:
                self._bind_scratch(a, b, stream, allocator)
            self._config.stream = stream
            result = self._launch(self._config_ref, self._function, self._params, None)
            if result:
                # Most likely another GPU's context (or none) is current on this thread: the
                # launch failed without running. Checking first would cost a driver call a launch.
                self._get_context(self._current_ref)
                if self._current.value != self._context:
                    with driver.in_context(self._context):
                        result = self._launch(self._config_ref, self._function, self._params, None)
        if result:
            driver.check(result, "launching the kernel (cuLaunchKernelEx)")

    def _bind_scratch(self, a: int, b: int, stream: int, allocator: Allocator | None) -> None:
        scratch = self.device.scratch(self.geom, stream, allocator)
        self._args.workspace, self._args.counters = scratch.workspace, scratch.counters
        maps = self.geom.operand_maps
        if maps is not None:  # TMA kernels read their tensor maps where the workspace would be
            self._args.workspace = self.device.tensor_maps(scratch, stream, maps, self.dtype, self.sizes, a, b)
