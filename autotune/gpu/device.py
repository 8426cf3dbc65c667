"""Per-GPU state of the launch path: the primary context, device facts, loaded kernels and scratch.

One `Device` per device index, made on first use and kept for the process's life. Scratch (split-K
workspace and arrival counters, TMA tensor maps) belongs to one stream: two streams never share a
buffer, and a buffer is only ever zeroed or rewritten in the order of its own stream. While a stream
captures a CUDA graph nothing here allocates or copies: a captured launch takes scratch sized before
the capture (`reserve`, which `autotune.warmup` calls) or from the caller's allocator (torch).
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, cuda_release, kernel_driver_version, local_gpus
from autotune.gpu import driver, tma
from autotune.gpu.geometry import Launch

# A torch-like allocator of zeroed device memory: (bytes, device) -> (address, owner to keep alive).
Allocator = Callable[[int, int], tuple[int, Any]]


def gpu_info(device: int) -> GpuInfo:
    """The GPU's facts from the driver, without starting a process (a first call pays for this): the
    UUID from the driver API, the driver's version from /proc as nvidia-smi spells it, and only where
    that file is missing, nvidia-smi."""
    version = kernel_driver_version()
    if version is None:
        pci = driver.device_pci_bus_id(device).lower()
        smi = next((g for g in local_gpus() if g.pci_bus_id.lower()[-12:] == pci[-12:]), None)
        number = driver.driver_version()
        version = smi.driver if smi else f"cuda-{number // 1000}.{number % 1000 // 10}"
    major = driver.device_attribute(device, driver.DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = driver.device_attribute(device, driver.DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    return GpuInfo(
        name=driver.device_name(device),
        uuid=driver.device_uuid(device),
        compute_capability=f"{major}.{minor}",
        sm_count=driver.device_attribute(device, driver.DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        l2_bytes=driver.device_attribute(device, driver.DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        memory_bytes=driver.device_memory(device),
        driver=version,
        cuda=cuda_release(),
    )


@dataclass
class StreamScratch:
    """One stream's split-K buffers (zero between launches: the kernels leave them so) and TMA maps."""

    workspace: int = 0
    workspace_floats: int = 0
    counters: int = 0
    counter_count: int = 0
    maps: OrderedDict[tuple[Any, ...], int] = field(default_factory=OrderedDict)
    map_slab: int = 0
    map_slots_used: int = 0  # slots of the slab handed out so far (a slot pinned by a graph is never reused)
    owners: list[Any] = field(default_factory=list)  # caller-allocated memory kept alive
    allocated: list[int] = field(default_factory=list)  # driver allocations, replaced ones included


class Device:
    """One GPU as the launch path sees it."""

    MAP_SLOTS = 256  # tensor-map pairs kept per stream before the least recently used is rewritten
    CAPTURE_MAP_SLOTS = 64  # tensor-map pairs for captured launches, each written once

    def __init__(self, index: int) -> None:
        count = driver.device_count()
        if not 0 <= index < count:
            raise AutotuneError(f"GPU {index} does not exist ({count} found)")
        self.index = index
        self.context = driver.primary_context(index)
        with driver.in_context(self.context):
            self.gpu = gpu_info(index)
        self.programmatic = int(self.gpu.compute_capability.split(".")[0]) >= 9
        self._functions: dict[tuple[str, str], int] = {}
        self._shared_allowed: dict[int, int] = {}  # a function's dynamic shared memory opt-in, in bytes
        self._streams: dict[int, StreamScratch] = {}
        # Scratch set aside before a capture, taken by captured launches (never given back: the
        # graph that holds its address may be replayed at any time).
        self._reserved: list[StreamScratch] = []
        self._captured: dict[tuple[int, int], StreamScratch] = {}  # by (capture id, stream)
        # Captured TMA launches read maps the graph copies from pinned host memory at every replay:
        # both slabs are allocated before any capture (prepare_capture_maps), each slot used once.
        self._capture_maps_device = 0
        self._capture_maps_host = 0
        self._capture_maps_used = 0
        self._capture_maps_slots = 0
        # Library families (autotune/ops/library.py: cuBLASLt): a handle each, a workspace per stream
        # and per capture, and workspaces set aside before captures (warmup), as for split-K scratch.
        self._library_handles: dict[str, int] = {}
        self._library_workspaces: dict[Any, tuple[int, int, Any]] = {}  # key -> (address, bytes, owner)
        self._library_reserved: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def library_handle(self, name: str, create: Callable[[], int]) -> int:
        """This GPU's handle of library `name`, made once by `create` in its context."""
        with self._lock:
            if name not in self._library_handles:
                with driver.in_context(self.context):
                    self._library_handles[name] = create()
            return self._library_handles[name]

    def library_workspace(self, nbytes: int, stream: int, allocator: Allocator | None) -> int:
        """A library's workspace of at least `nbytes` that only `stream` uses (a library leaves it
        dirty, so it is never a split-K buffer); while the stream captures, one set aside before the
        capture (`reserve_library_workspace`) or from the caller's allocator, kept for the graph's life."""
        with self._lock:
            capture = driver.capture_id(stream)
            key: Any = (capture, stream) if capture else stream
            found = self._library_workspaces.get(key)
            if found is not None and found[1] >= nbytes:
                return found[0]
            owner: Any = None
            if not capture:
                with driver.in_context(self.context):
                    pointer = driver.mem_alloc(nbytes)
            elif (fitting := next((r for r in self._library_reserved if r[1] >= nbytes), None)) is not None:
                self._library_reserved.remove(fitting)
                pointer = fitting[0]
            elif allocator is not None:
                pointer, owner = allocator(nbytes, self.index)
            else:
                raise AutotuneError(
                    "the library algorithm picked for this shape (cuBLASLt's) needs a workspace, which cannot be "
                    "allocated while a CUDA graph captures: call autotune.warmup(...) with these operands first"
                )
            # A smaller workspace it replaces stays allocated: calls still queued on the stream use it.
            self._library_workspaces[key] = (pointer, nbytes, owner)
            return pointer

    def reserve_library_workspace(self, nbytes: int, captures: int = 1) -> None:
        """Set aside library workspaces of `nbytes` for calls captured later (autotune.warmup)."""
        with self._lock, driver.in_context(self.context):
            fitting = [r for r in self._library_reserved if r[1] >= nbytes]
            for _ in range(captures - len(fitting)):
                self._library_reserved.append((driver.mem_alloc(nbytes), nbytes))

    def function(self, cubin: bytes, cubin_key: str, name: str, shared_bytes: int) -> int:
        """The kernel `name` of a cubin, loaded into this GPU's context once."""
        key = (cubin_key, name)
        with self._lock:
            if key not in self._functions:
                with driver.in_context(self.context), driver.relaxed_capture():
                    self._functions[key] = driver.load_function(cubin, name)
            function = self._functions[key]
            # One instance serves problems whose shared memory differs (an int4 kernel stages x's
            # K elements), so the opt-in follows the largest launch asked for, not the first. Any
            # dynamic amount opts in: a kernel with static shared memory (the int4 cluster's partial
            # sums) needs it once static and dynamic together pass 48 KiB, and the static size lives
            # in the cubin, not here.
            if shared_bytes > self._shared_allowed.get(function, 0):
                with driver.in_context(self.context), driver.relaxed_capture():
                    driver.allow_shared(function, shared_bytes)
                self._shared_allowed[function] = shared_bytes
            return function

    def scratch(self, geom: Launch, stream: int, allocator: Allocator | None) -> StreamScratch:
        """The scratch of `stream` with room for `geom`; while the stream captures, scratch set
        aside before the capture or allocated by `allocator` (never by the driver: a capture in
        global mode forbids it)."""
        with self._lock:
            capture = driver.capture_id(stream)
            if capture:
                return self._capture_scratch(geom, (capture, stream), allocator)
            scratch = self._streams.setdefault(stream, StreamScratch())
            if not _fits(scratch, geom):
                with driver.in_context(self.context):
                    self._grow(scratch, geom, stream, None)
            return scratch

    def release_scratch(self, stream: int) -> None:
        """Free `stream`'s split-K buffers and tensor maps once its queued work is done; its next launch
        allocates fresh, zeroed ones. The worker calls it between problems, so that no candidate's
        leftovers (a dirty counter, a grown buffer) reach the next problem. Never for a stream whose
        launches a CUDA graph holds: the graph keeps the addresses."""
        with self._lock:
            scratch = self._streams.pop(stream, None)
            if scratch is None:
                return
            with driver.in_context(self.context):
                driver.stream_synchronize(stream)
                for pointer in scratch.allocated:
                    driver.mem_free(pointer)

    def reserve(self, geom: Launch, captures: int = 1) -> None:
        """Set aside zeroed scratch for `geom` for launches captured later (autotune.warmup)."""
        with self._lock, driver.in_context(self.context):
            while len(self._reserved) < captures:
                self._reserved.append(StreamScratch())
            for scratch in self._reserved:
                self._grow(scratch, geom, 0, None)
            # Zeroed before any graph that takes them can run, on whatever stream it replays.
            driver.stream_synchronize(0)

    def _capture_scratch(self, geom: Launch, capture: tuple[int, int], allocator: Allocator | None) -> StreamScratch:
        scratch = self._captured.get(capture)
        if scratch is None or not _fits(scratch, geom):
            fitting = next((s for s in self._reserved if _fits(s, geom)), None)
            if not (geom.workspace_floats or geom.counters):
                scratch = StreamScratch()  # tensor maps only: see tensor_maps
            elif fitting is not None:
                self._reserved.remove(fitting)
                scratch = fitting
            elif allocator is not None:
                scratch = StreamScratch()
                self._grow(scratch, geom, capture[1], allocator)
            else:
                raise AutotuneError(
                    "this config needs scratch memory, which cannot be allocated while a CUDA graph "
                    "captures: call autotune.warmup(...) with these operands before capturing"
                )
            self._captured[capture] = scratch
        return scratch

    def _grow(self, scratch: StreamScratch, geom: Launch, stream: int, allocator: Allocator | None) -> None:
        # A smaller buffer it replaces stays allocated: launches still queued on the stream use it.
        if geom.workspace_floats > scratch.workspace_floats:
            scratch.workspace = self._zeroed(geom.workspace_floats, stream, allocator, scratch)
            scratch.workspace_floats = geom.workspace_floats
        if geom.counters > scratch.counter_count:
            scratch.counters = self._zeroed(geom.counters, stream, allocator, scratch)
            scratch.counter_count = geom.counters

    def _zeroed(self, words: int, stream: int, allocator: Allocator | None, scratch: StreamScratch) -> int:
        """`words` 4-byte words of device memory, zeroed in `stream`'s order (a captured memset
        zeroes them again at every replay, which the kernels' own contract leaves true anyway)."""
        if allocator is not None:
            pointer, owner = allocator(words * 4, self.index)
            scratch.owners.append(owner)
        else:
            pointer = driver.mem_alloc(words * 4)
            scratch.allocated.append(pointer)
        driver.memset_d32_async(pointer, 0, words, stream)
        return pointer

    def tensor_maps(
        self,
        scratch: StreamScratch,
        stream: int,
        maps: tma.OperandMaps,
        dtype: str,
        sizes: tuple[int, ...],
        a: int,
        b: int,
    ) -> int:
        """The device address of the tensor maps of A at `a` and B at `b`, written in `stream`'s
        order when new; while capturing, only maps written before the capture serve."""
        key = (maps, dtype, sizes, a, b)
        with self._lock:
            slot = scratch.maps.get(key)
            if slot is not None:
                scratch.maps.move_to_end(key)
                return slot
            if driver.capture_id(stream):
                slot = self._prepared_maps(key) or self._captured_maps(key, stream)
                scratch.maps[key] = slot
                return slot
            with driver.in_context(self.context):
                if not scratch.map_slab:
                    scratch.map_slab = driver.mem_alloc(self.MAP_SLOTS * maps.nbytes)
                    scratch.allocated.append(scratch.map_slab)
                if scratch.map_slots_used < self.MAP_SLOTS:
                    slot = scratch.map_slab + scratch.map_slots_used * maps.nbytes
                    scratch.map_slots_used += 1
                elif scratch.maps:
                    slot = scratch.maps.popitem(last=False)[1]
                else:
                    raise AutotuneError("every tensor-map slot of this stream is held by a captured graph")
                data = ctypes.create_string_buffer(tma.encode_operands(maps, dtype, sizes, a, b), maps.nbytes)
                driver.memcpy_htod_async(slot, ctypes.addressof(data), maps.nbytes, stream)
            scratch.maps[key] = slot
            return slot

    def prepare_capture_maps(self, nbytes: int, stream: int, slots: int = CAPTURE_MAP_SLOTS) -> None:
        """Allocate, outside any capture, the pinned and device memory captured TMA launches use."""
        with self._lock:
            if self._capture_maps_device and self._capture_maps_slots >= slots:
                return
            if driver.capture_id(stream):
                raise AutotuneError(
                    "a TMA kernel's first call cannot run while a CUDA graph captures: call "
                    "autotune.warmup(...) with these operands before capturing"
                )
            with driver.in_context(self.context):
                self._capture_maps_device = driver.mem_alloc(slots * nbytes)
                self._capture_maps_host = driver.mem_host_alloc(slots * nbytes)
            self._capture_maps_used, self._capture_maps_slots = 0, slots

    def _captured_maps(self, key: tuple[Any, ...], stream: int) -> int:
        """A slot of the capture slab for maps first seen inside a capture: encoded into its pinned
        host slot now, copied to the device by the graph (a memcpy node) before the kernel."""
        maps: tma.OperandMaps = key[0]
        if self._capture_maps_used >= self._capture_maps_slots:
            raise AutotuneError(
                "this TMA kernel's tensor maps cannot be written while a CUDA graph captures: call "
                "autotune.warmup(...) with these operands (or more captures=) before capturing"
            )
        offset = self._capture_maps_used * maps.nbytes
        self._capture_maps_used += 1
        data = tma.encode_operands(maps, key[1], key[2], key[3], key[4])
        host, device = self._capture_maps_host + offset, self._capture_maps_device + offset
        ctypes.memmove(host, data, len(data))
        driver.memcpy_htod_async(device, host, len(data), stream)
        return device

    def _prepared_maps(self, key: tuple[Any, ...]) -> int:
        """Maps some stream wrote before the capture, pinned from then on (a graph holds their
        address); 0 where none did."""
        for scratch in self._streams.values():
            slot = scratch.maps.pop(key, None)
            if slot is not None:
                # Taken out of that stream's slots, so no later launch there rewrites it; that
                # stream's slab simply has one slot fewer.
                return slot
        return 0


def _fits(scratch: StreamScratch, geom: Launch) -> bool:
    return scratch.workspace_floats >= geom.workspace_floats and scratch.counter_count >= geom.counters
