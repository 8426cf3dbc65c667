"""The CUDA driver API through ctypes: the handful of calls the launch path makes, each checked.

The launch path needs no PyCUDA: it loads cubins, launches with cuLaunchKernelEx (programmatic
dependent launch, any stream) and asks whether a stream is capturing. ctypes costs less per launch
than NVIDIA's cuda-bindings here (docs/launch.md has the figures). Nothing is loaded at import time:
`lib()` opens libcuda.so.1 on first use, so `import autotune` works on a machine without a driver.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from autotune.core.errors import AutotuneError

# cuda.h enums (CUDA 12 and 13).
ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID
ATTRIBUTE_CLUSTER_DIMENSION = 4  # CUlaunchAttributeID: clusterDim
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute
DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9  # CUpointer_attribute
STREAM_CAPTURE_STATUS_NONE = 0
STREAM_CAPTURE_STATUS_ACTIVE = 1
STREAM_CAPTURE_MODE_RELAXED = 2


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte union of values."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [
        ("grid_x", ctypes.c_uint),
        ("grid_y", ctypes.c_uint),
        ("grid_z", ctypes.c_uint),
        ("block_x", ctypes.c_uint),
        ("block_y", ctypes.c_uint),
        ("block_z", ctypes.c_uint),
        ("shared_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


def programmatic_attribute() -> LaunchAttribute:
    """The attribute that allows a launch to overlap the end of the kernel before it."""
    value = struct.pack("<i", 1).ljust(64, b"\0")  # programmaticStreamSerializationAllowed = 1
    return LaunchAttribute(ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, b"\0" * 4, value)


def cluster_attribute(x: int, y: int, z: int) -> LaunchAttribute:
    """The attribute that launches the grid in thread-block clusters of x by y by z blocks (for a
    kernel compiled without __cluster_dims__; each must divide the grid's dimension)."""
    attribute = LaunchAttribute(ATTRIBUTE_CLUSTER_DIMENSION, b"\0" * 4, b"")
    # Copied, not assigned: a c_char array takes bytes up to their first NUL, and x's hold three.
    ctypes.memmove(ctypes.addressof(attribute) + LaunchAttribute.value.offset, struct.pack("<3I", x, y, z), 12)
    return attribute


_P = ctypes.c_void_p
_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetUuid_v2": [ctypes.c_char_p, ctypes.c_int],
    "cuDeviceTotalMem_v2": [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int],
    "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_P), ctypes.c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuCtxPushCurrent_v2": [_P],
    "cuCtxPopCurrent_v2": [ctypes.POINTER(_P)],
    "cuCtxSetCurrent": [_P],
    "cuModuleLoadData": [ctypes.POINTER(_P), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(_P), _P, ctypes.c_char_p],
    "cuFuncSetAttribute": [_P, ctypes.c_int, ctypes.c_int],
    "cuLaunchKernelEx": [ctypes.POINTER(LaunchConfig), _P, ctypes.POINTER(_P), _P],
    "cuMemAlloc_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t],
    "cuMemFree_v2": [ctypes.c_uint64],
    "cuMemsetD32Async": [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, _P],
    "cuStreamSynchronize": [_P],
    "cuMemcpyHtoDAsync_v2": [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, _P],
    "cuMemHostAlloc": [ctypes.POINTER(_P), ctypes.c_size_t, ctypes.c_uint],
    "cuStreamGetCaptureInfo_v2": [
        _P,
        ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_uint64),
        _P,
        _P,
        _P,
    ],
    "cuThreadExchangeStreamCaptureMode": [ctypes.POINTER(ctypes.c_int)],
    "cuPointerGetAttribute": [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuTensorMapEncodeTiled": [
        _P,  # CUtensorMap*
        ctypes.c_int,  # data type
        ctypes.c_uint32,  # rank
        _P,  # global address
        ctypes.POINTER(ctypes.c_uint64),  # global dims, innermost first
        ctypes.POINTER(ctypes.c_uint64),  # global strides in bytes, rank - 1 of them
        ctypes.POINTER(ctypes.c_uint32),  # box dims
        ctypes.POINTER(ctypes.c_uint32),  # element strides
        ctypes.c_int,  # interleave
        ctypes.c_int,  # swizzle
        ctypes.c_int,  # L2 promotion
        ctypes.c_int,  # out-of-bounds fill
    ],
}


@functools.cache
def lib() -> Any:
    """libcuda.so.1 with the signatures above, initialised; a one-line error where there is none."""
    try:
        library = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise AutotuneError(
            f"the CUDA driver (libcuda.so.1) cannot be loaded: {error}; is this a GPU machine?"
        ) from None
    for name, argtypes in _SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int
    check(library.cuInit(0), "cuInit")
    return library


def error_name(result: int) -> str:
    name = ctypes.c_char_p()
    lib().cuGetErrorName(result, ctypes.byref(name))
    return name.value.decode() if name.value else f"CUresult {result}"


class DriverError(AutotuneError):
    """A driver call that failed: one line naming the call and the driver's error; `result` the CUresult."""

    def __init__(self, message: str, result: int) -> None:
        super().__init__(message)
        self.result = result


def check(result: int, what: str) -> None:
    """Raise a DriverError naming the call and the driver's error for a non-zero CUresult."""
    if result != 0:
        raise DriverError(f"{what} failed: {error_name(result)}", result)


def device_count() -> int:
    count = ctypes.c_int()
    check(lib().cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    return count.value


def primary_context(device: int) -> int:
    """The device's primary context (the one torch and cupy use), retained for the process's life."""
    handle = ctypes.c_void_p()
    check(lib().cuDevicePrimaryCtxRetain(ctypes.byref(handle), device), f"retaining GPU {device}'s context")
    return int(handle.value or 0)


def current_context() -> int:
    handle = ctypes.c_void_p()
    check(lib().cuCtxGetCurrent(ctypes.byref(handle)), "cuCtxGetCurrent")
    return int(handle.value or 0)


def adopt_context(context: int) -> None:
    """Make `context` current on a thread that has none, for good, as the CUDA runtime's first call on
    a thread does. Pushing and popping it would leave such a thread (torch's autograd threads, say)
    without one, and torch's next call there would have to set it again, with a warning."""
    check(lib().cuCtxSetCurrent(context), "cuCtxSetCurrent")


@contextmanager
def in_context(context: int) -> Iterator[None]:
    """Make `context` current on this thread for the block, then restore what was current."""
    library = lib()
    check(library.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
    try:
        yield
    finally:
        library.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


@contextmanager
def relaxed_capture() -> Iterator[None]:
    """Let this thread make calls that a stream capture in global mode forbids (loading a module),
    as torch's allocator does around cudaMalloc; the mode in force before is restored after."""
    library = lib()
    mode = ctypes.c_int(STREAM_CAPTURE_MODE_RELAXED)
    check(library.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)), "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        library.cuThreadExchangeStreamCaptureMode(ctypes.byref(mode))


def capture_id(stream: int) -> int:
    """The id of the CUDA graph capture `stream` takes part in, 0 when it is not capturing (the
    legacy default stream never is). A capture that an error invalidated counts as capturing."""
    if stream == 0:
        return 0
    status, ident = ctypes.c_int(), ctypes.c_uint64()
    check(
        lib().cuStreamGetCaptureInfo_v2(stream, ctypes.byref(status), ctypes.byref(ident), None, None, None),
        "cuStreamGetCaptureInfo",
    )
    return int(ident.value) or -1 if status.value != STREAM_CAPTURE_STATUS_NONE else 0


def pointer_device(pointer: int) -> int:
    """The device ordinal that holds a device pointer."""
    ordinal = ctypes.c_int()
    check(
        lib().cuPointerGetAttribute(ctypes.byref(ordinal), POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer),
        "cuPointerGetAttribute (is it a device pointer?)",
    )
    return ordinal.value


def device_attribute(device: int, attribute: int) -> int:
    value = ctypes.c_int()
    check(lib().cuDeviceGetAttribute(ctypes.byref(value), attribute, device), "cuDeviceGetAttribute")
    return value.value


def device_name(device: int) -> str:
    buffer = ctypes.create_string_buffer(256)
    check(lib().cuDeviceGetName(buffer, 256, device), "cuDeviceGetName")
    return buffer.value.decode()


def device_pci_bus_id(device: int) -> str:
    buffer = ctypes.create_string_buffer(64)
    check(lib().cuDeviceGetPCIBusId(buffer, 64, device), "cuDeviceGetPCIBusId")
    return buffer.value.decode()


def device_uuid(device: int) -> str:
    """The GPU's UUID as nvidia-smi spells it: 'GPU-' and 32 hex digits in groups of 8-4-4-4-12."""
    raw = ctypes.create_string_buffer(16)
    check(lib().cuDeviceGetUuid_v2(raw, device), "cuDeviceGetUuid")
    digits = raw.raw.hex()
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def device_memory(device: int) -> int:
    size = ctypes.c_size_t()
    check(lib().cuDeviceTotalMem_v2(ctypes.byref(size), device), "cuDeviceTotalMem")
    return size.value


def driver_version() -> int:
    version = ctypes.c_int()
    check(lib().cuDriverGetVersion(ctypes.byref(version)), "cuDriverGetVersion")
    return version.value


def load_function(cubin: bytes, name: str) -> int:
    """Load a cubin into the current context and return its kernel `name` (modules stay loaded)."""
    library = lib()
    module = ctypes.c_void_p()
    check(library.cuModuleLoadData(ctypes.byref(module), cubin), f"loading the cubin of {name}")
    function = ctypes.c_void_p()
    check(library.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), f"finding {name}")
    return int(function.value or 0)


def allow_shared(function: int, shared_bytes: int) -> None:
    """Let `function` launch with `shared_bytes` of dynamic shared memory (needed once static and dynamic
    together pass 48 KiB)."""
    check(
        lib().cuFuncSetAttribute(function, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
        "cuFuncSetAttribute",
    )


def mem_alloc(nbytes: int) -> int:
    pointer = ctypes.c_uint64()
    check(lib().cuMemAlloc_v2(ctypes.byref(pointer), nbytes), f"allocating {nbytes} bytes")
    return pointer.value


def mem_free(pointer: int) -> None:
    check(lib().cuMemFree_v2(pointer), "cuMemFree")


def memset_d32_async(pointer: int, value: int, count: int, stream: int) -> None:
    check(lib().cuMemsetD32Async(pointer, value, count, stream), "cuMemsetD32Async")


def stream_synchronize(stream: int) -> None:
    check(lib().cuStreamSynchronize(stream), "cuStreamSynchronize")


def mem_host_alloc(nbytes: int) -> int:
    """Page-locked host memory (a captured copy may read only such memory), never freed."""
    pointer = ctypes.c_void_p()
    check(lib().cuMemHostAlloc(ctypes.byref(pointer), nbytes, 0), f"allocating {nbytes} bytes of pinned memory")
    return int(pointer.value or 0)


def memcpy_htod_async(pointer: int, source: int, nbytes: int, stream: int) -> None:
    """Copy `nbytes` from host address `source` to the device at `pointer`, ordered on `stream`. From
    pageable memory the driver stages the bytes before it returns, so they need not outlive the call;
    in a capture the source must be pinned, and the graph copies it again at every replay."""
    check(lib().cuMemcpyHtoDAsync_v2(pointer, source, nbytes, stream), "cuMemcpyHtoDAsync")
