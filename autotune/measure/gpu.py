"""The only module that imports PyCUDA: the primary context, device facts, loading cubins, timing.

Used in two places: the tuning worker subprocess, and autotune.gemv() in the caller's own process
(where torch or cupy share the same primary context). Nothing here runs at import time.
"""

from __future__ import annotations

import atexit
import functools
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.errors import PYCUDA_HINT, AutotuneError
from autotune.core.fingerprint import GpuInfo, LocalGpu, cuda_release, local_gpus
from autotune.gpu import tma

if TYPE_CHECKING:
    from autotune.gpu.geometry import Launch
    from autotune.ops.base import Op


def driver() -> Any:
    """pycuda.driver, initialised; a clear one-line error where PyCUDA or a CUDA driver is missing."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        if "pycuda" in str(exc) and "libcuda" not in str(exc):
            raise AutotuneError(
                f"PyCUDA is not installed, and tuning and timing need it: {PYCUDA_HINT} "
                "(built against the CUDA toolkit; `autotune doctor` says what is missing)"
            ) from None
        raise AutotuneError(f"PyCUDA cannot load the CUDA driver ({exc}); is this a GPU machine?") from None
    try:
        cuda.init()
        count = cuda.Device.count()
    except cuda.Error as exc:
        raise AutotuneError(f"no usable CUDA driver: {exc}") from None
    if count == 0:
        raise AutotuneError("no CUDA GPU on this machine")
    return cuda


@functools.cache
def context(device_index: int = 0) -> Any:
    """Make the device's primary context current (the one torch and cupy use), once per process."""
    cuda = driver()
    if device_index >= cuda.Device.count():
        raise AutotuneError(f"GPU {device_index} does not exist ({cuda.Device.count()} found)")
    ctx = cuda.Device(device_index).retain_primary_context()
    ctx.push()
    # PyCUDA aborts the interpreter at exit if a context is still on its stack.
    atexit.register(ctx.pop)
    return ctx


def _smi_entry(pci_bus_id: str) -> LocalGpu | None:
    # nvidia-smi writes 8 hex digits of PCI domain, the driver API 4: compare the common tail.
    for entry in local_gpus():
        if entry.pci_bus_id.lower()[-12:] == pci_bus_id.lower()[-12:]:
            return entry
    return None


def device_info(device_index: int = 0) -> GpuInfo:
    cuda = driver()
    context(device_index)
    dev = cuda.Device(device_index)
    attr = cuda.device_attribute
    major, minor = dev.compute_capability()
    smi = _smi_entry(dev.pci_bus_id())
    version = cuda.get_driver_version()
    return GpuInfo(
        name=dev.name(),
        uuid=smi.uuid if smi else f"pci:{dev.pci_bus_id()}",
        compute_capability=f"{major}.{minor}",
        sm_count=dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
        l2_bytes=dev.get_attribute(attr.L2_CACHE_SIZE),
        memory_bytes=dev.total_memory(),
        driver=smi.driver if smi else f"cuda-{version // 1000}.{version % 1000 // 10}",
        cuda=cuda_release(),
    )


def has_programmatic_launch(gpu: GpuInfo) -> bool:
    """Whether `gpu` has programmatic dependent launch (autotune/measure/pdl.py): sm_90 and up."""
    return int(gpu.compute_capability.split(".")[0]) >= 9


def programmatic_launch(op: Op, gpu: GpuInfo) -> bool:
    """Whether `op`'s kernels run on `gpu` with programmatic dependent launch: the op's kernels wait
    for the kernel before them, and the GPU has PDL."""
    return op.programmatic_launch and has_programmatic_launch(gpu)


class Kernels:
    """Loaded cubins and their functions, each loaded once per process."""

    def __init__(self) -> None:
        self._modules: dict[Path, Any] = {}
        self._functions: dict[tuple[Path, str, bool], Any] = {}

    def function(self, cubin: Path, name: str, arg_types: str, *, programmatic: bool = False) -> Any:
        """A PyCUDA Function, prepared; with `programmatic`, a pdl.ProgrammaticFunction (same calls)."""
        key = (cubin, name, programmatic)
        if key not in self._functions:
            cuda = driver()
            if programmatic:
                from autotune.measure.pdl import ProgrammaticFunction

                self._functions[key] = ProgrammaticFunction(cubin.read_bytes(), name, arg_types)
            else:
                if cubin not in self._modules:
                    self._modules[cubin] = cuda.module_from_buffer(cubin.read_bytes())
                function = self._modules[cubin].get_function(name)
                function.prepare(arg_types)
                self._functions[key] = function
        return self._functions[key]


class TensorMapSlots:
    """Device copies of TMA kernels' tensor maps (see autotune/gpu/tma.py): one slot of a device slab per
    (boxes, dtype, sizes, A, B), since the maps hold the arrays' addresses. Callers that rotate
    through several copies of their operands (the tuner, benchmarks) find every pair's maps ready.
    When the slots run out, the least recently used is rewritten: a synchronous host-to-device copy
    goes through the legacy default stream, where the kernels run too, so it waits for any launch
    still reading the old maps."""

    SLOTS = 256

    def __init__(self) -> None:
        self._slab: Any = None
        self._slots: OrderedDict[tuple[Any, ...], int] = OrderedDict()

    def get(self, maps: tma.OperandMaps, dtype: str, sizes: tuple[int, ...], a: int, b: int) -> int:
        """The device address of the maps of A at `a` and B at `b`; sizes: the kernel's (m, n, k, lda, ldb, ldc)."""
        key = (maps, dtype, sizes, a, b)
        index = self._slots.get(key)
        if index is not None:
            self._slots.move_to_end(key)
            return int(self._slab) + index * maps.nbytes
        cuda = driver()
        if self._slab is None:
            self._slab = cuda.mem_alloc(self.SLOTS * maps.nbytes)
        index = len(self._slots) if len(self._slots) < self.SLOTS else self._slots.popitem(last=False)[1]
        data = tma.encode_operands(maps, dtype, sizes, a, b)
        address = int(self._slab) + index * maps.nbytes
        cuda.memcpy_htod(address, np.frombuffer(data, dtype=np.uint8))
        self._slots[key] = index
        return address


class Scratch:
    """The split-K workspace (floats) and arrival counters a launch needs. Split-K kernels leave both
    zeroed after every launch, so they are zeroed only here, when they grow. TMA kernels get their
    tensor maps in the workspace's place (for_launch)."""

    def __init__(self) -> None:
        self._maps = TensorMapSlots()
        self._workspace: Any = None
        self._workspace_floats = 0
        self._counters: Any = None
        self._counter_count = 0

    def get(self, floats: int, counters: int) -> tuple[Any, Any]:
        """(workspace, counters) with room for at least this many; 0 (a null pointer) for none yet."""
        cuda = driver()
        if floats > self._workspace_floats:
            self._workspace = cuda.mem_alloc(floats * 4)
            cuda.memset_d32(self._workspace, 0, floats)
            self._workspace_floats = floats
        if counters > self._counter_count:
            self._counters = cuda.mem_alloc(counters * 4)
            cuda.memset_d32(self._counters, 0, counters)
            self._counter_count = counters
        return self._workspace or 0, self._counters or 0

    def for_launch(self, geom: Launch, dtype: str, sizes: tuple[int, ...], inputs: Sequence[int]) -> tuple[Any, Any]:
        """(workspace, counters) for a launch on input arrays at `inputs`: the split-K buffers, or for
        a TMA kernel (geom.operand_maps: GEMMs, sizes = (m, n, k, lda, ldb, ldc), inputs A and B) the
        device address of its maps."""
        workspace, counters = self.get(geom.workspace_floats, geom.counters)
        if geom.operand_maps is not None:
            workspace = self._maps.get(geom.operand_maps, dtype, tuple(sizes), inputs[0], inputs[1])
        return workspace, counters


def opt_in_shared(function: Any, shared_bytes: int) -> None:
    """Let `function` launch with `shared_bytes` of dynamic shared memory (needed once static and dynamic
    together pass 48 KiB)."""
    cuda = driver()
    function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
