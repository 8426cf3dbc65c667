"""The caller's arrays as the launch path sees them: address, shape, strides, dtype, device, stream.

Arrays come as torch tensors, cupy arrays, PyCUDA GPUArrays or anything with
__cuda_array_interface__. Each is described once per call (one-line errors for arrays no kernel
can run: on the CPU, of other dtypes, on different GPUs); each op checks shapes and layouts itself
(its bind: autotune/ops/<op>/call.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.problem import INPUT_BITS
from autotune.gpu import driver

# uint8 arrays hold packed low-bit weights and integer zero points (the op's bind says which).
_TYPESTR = {"<f4": "float32", "<f2": "float16", "|u1": "uint8"}
_TORCH_DTYPES = {
    "torch.float32": "float32",
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.uint8": "uint8",
}
_PACKED = "(uint8: a packed weight)"


def describe(obj: Any, name: str) -> DeviceArray:
    module = type(obj).__module__
    if module.startswith("torch"):  # torch's array interface cannot express bfloat16
        dtype = _TORCH_DTYPES.get(str(obj.dtype))
        if dtype is None or not obj.is_cuda:
            raise AutotuneError(_torch_refusal(obj, name, dtype is not None))
        return DeviceArray(obj, obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dtype, "torch", obj.get_device())
    if hasattr(obj, "gpudata") and hasattr(obj, "shape"):
        dtype = _TYPESTR.get(obj.dtype.str)
        if dtype is None:
            raise AutotuneError(f"{name} must hold float32 or float16 {_PACKED}, got {obj.dtype}")
        strides = tuple(s // obj.dtype.itemsize for s in obj.strides)
        return DeviceArray(obj, int(obj.gpudata), tuple(obj.shape), strides, dtype, "pycuda")
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        raise AutotuneError(
            f"{name} must be a GPU array (PyCUDA GPUArray, torch tensor or __cuda_array_interface__), "
            f"got {type(obj).__name__}"
        )
    dtype = _TYPESTR.get(interface["typestr"])
    if dtype is None:
        raise AutotuneError(f"{name} must hold float32 or float16 {_PACKED}, got typestr {interface['typestr']}")
    raw = interface.get("strides")
    element_strides = tuple(s * 8 // INPUT_BITS[dtype] for s in raw) if raw else None
    cupy = module.startswith("cupy")
    device = int(obj.device.id) if cupy else None
    pointer = int(interface["data"][0])
    return DeviceArray(
        obj, pointer, tuple(interface["shape"]), element_strides, dtype, "cupy" if cupy else "cai", device
    )


def describe_inputs(arrays: Sequence[Any], names: Sequence[str], optional: Sequence[str]) -> list[DeviceArray | None]:
    """A call's input arrays described, in the op's order; None stays None where the op takes the
    input as optional (Op.optional_inputs), else it is a one-line error."""
    described: list[DeviceArray | None] = []
    for array, name in zip(arrays, names, strict=True):
        if array is None and name not in optional:
            raise AutotuneError(f"{name} is required")
        described.append(None if array is None else describe(array, name))
    return described


def _torch_refusal(tensor: Any, name: str, dtype_ok: bool) -> str:
    """Why a torch tensor cannot be launched on, naming what is wrong: its device, its dtype or both
    (a CPU float16 tensor's dtype is fine, and an error blaming it sends the user the wrong way)."""
    wrong = []
    if not tensor.is_cuda:
        where = getattr(tensor, "device", None)
        kind = getattr(where, "type", str(where))
        wrong.append("on the CPU" if kind == "cpu" else f"on device {str(where)!r}")
    if not dtype_ok:
        wrong.append(f"of dtype {tensor.dtype}")
    fix = [] if tensor.is_cuda else ["move it to the GPU with .cuda()"]
    if not dtype_ok:
        fix.append("use float32, float16 or bfloat16")
    return f"{name} is a tensor {' and '.join(wrong)}: {' and '.join(fix)}"


def device_of(arrays: list[DeviceArray]) -> int:
    """The device all arrays live on; a one-line error when they live on different ones."""
    devices = {a.device if a.device is not None else _ask_driver(a) for a in arrays}
    if len(devices) > 1:
        raise AutotuneError(f"the operands live on different GPUs ({', '.join(map(str, sorted(devices)))})")
    return devices.pop()


def _ask_driver(array: DeviceArray) -> int:
    return driver.pointer_device(array.pointer) if array.pointer else 0


def default_stream(array: DeviceArray, device: int) -> int:
    """The stream the caller works on: torch's or cupy's current stream, else the legacy default."""
    if array.kind == "torch":
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)
    if array.kind == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def stream_handle(stream: Any) -> int:
    """A CUstream from what a caller may pass: an integer handle, a torch, cupy or PyCUDA stream."""
    if isinstance(stream, bool):
        raise AutotuneError(f"stream must be a stream or an integer handle, got {stream!r}")
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch, cupy, PyCUDA
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise AutotuneError(
        f"stream must be a torch, cupy or PyCUDA stream or an integer handle, got {type(stream).__name__}"
    )


def new_output(inputs: Sequence[DeviceArray], dtype: str, shape: tuple[int, ...], device: int) -> Any:
    """A new array of `dtype` (the problem's) for the result, on `device`: like the first input that
    holds `dtype` (the activations, not a packed weight), else like the first input."""
    like = next((array for array in inputs if array.dtype == dtype), None)
    return empty_like(like, shape, device) if like is not None else empty_like(inputs[0], shape, device, dtype)


def empty_like(a: DeviceArray, shape: tuple[int, ...], device: int, dtype: str | None = None) -> Any:
    """A new array of A's kind and of `dtype` (None: A's) for the result, on `device`."""
    if a.kind == "torch":
        import torch

        return torch.empty(shape, dtype=a.obj.dtype if dtype is None else getattr(torch, dtype), device=a.obj.device)
    if a.kind not in ("cupy", "pycuda"):
        raise AutotuneError("pass out= for arrays that are neither torch, cupy nor PyCUDA arrays")
    import numpy as np

    if dtype == "bfloat16":  # numpy, and so cupy and PyCUDA, have no bfloat16
        raise AutotuneError(f"pass out= for a bfloat16 result of {a.kind} arrays")
    if a.kind == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=a.obj.dtype if dtype is None else np.dtype(dtype))
    import pycuda.gpuarray as gpuarray

    return gpuarray.empty(shape, dtype=np.dtype(dtype or a.dtype))


def contiguous_copy(array: DeviceArray) -> Any:
    """A contiguous copy of a torch or cupy array, made on the caller's current stream (so it is
    captured into a graph with the call): how a strided vector reaches kernels that read x
    contiguous. A vector is 1/M of the matrix's bytes, so the copy costs a small launch, not bandwidth."""
    if array.kind == "torch":
        return array.obj.contiguous()
    if array.kind == "cupy":
        import cupy

        return cupy.ascontiguousarray(array.obj)
    raise AutotuneError(f"a strided vector of shape {array.shape} must be a torch or cupy array (or contiguous)")


def copy_into(target: DeviceArray, source: Any) -> None:
    """target[...] = source on the caller's current stream (torch or cupy, as contiguous_copy)."""
    if target.kind == "torch":
        target.obj.copy_(source.reshape(target.obj.shape))
    elif target.kind == "cupy":
        target.obj[...] = source.reshape(target.obj.shape)
    else:
        raise AutotuneError(f"a strided out of shape {target.shape} must be a torch or cupy array (or contiguous)")


_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "uint8": 1}


def byte_extent(array: DeviceArray | None) -> int:
    """The bytes from an array's first element to just past its last (0 for none, or an empty one)."""
    if array is None or 0 in array.shape:
        return 0
    if array.strides is None:
        elements = 1
        for size in array.shape:
            elements *= size
    else:
        elements = 1 + sum((size - 1) * abs(stride) for size, stride in zip(array.shape, array.strides, strict=True))
    return elements * _ELEMENT_BYTES.get(array.dtype, 1)


def overlapped(out: DeviceArray, inputs: Sequence[DeviceArray | None], names: Sequence[str]) -> str | None:
    """The input whose memory `out` shares (by address ranges), or None: a kernel that reads what it
    writes gives a wrong result, as torch refuses F.linear(x, W, out=x)."""
    start, end = out.pointer, out.pointer + byte_extent(out)
    for name, array in zip(names, inputs, strict=True):
        if array is not None and array.pointer < end and start < array.pointer + byte_extent(array):
            return name
    return None
