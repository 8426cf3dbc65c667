"""The caller's arrays as the launch path sees them: address, shape, strides, dtype, device, stream.

Arrays come as torch tensors, cupy arrays, PyCUDA GPUArrays or anything with
__cuda_array_interface__. Each is described once per call; the checks here give one-line errors for
shapes, layouts, dtypes and devices a kernel cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE
from autotune.runtime import driver

_TYPESTR = {"<f4": "float32", "<f2": "float16"}
_TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


@dataclass(frozen=True)
class DeviceArray:
    obj: Any
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None means C-contiguous
    dtype: str
    kind: str  # "torch", "cupy", "pycuda" or "cai"
    device: int | None = None  # None: not known without asking the driver (see device_of)


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
            raise AutotuneError(f"{name} must hold float32 or float16, got {obj.dtype}")
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
        raise AutotuneError(f"{name} must hold float32 or float16, got typestr {interface['typestr']}")
    raw = interface.get("strides")
    element_strides = tuple(s // ITEMSIZE[dtype] for s in raw) if raw else None
    cupy = module.startswith("cupy")
    device = int(obj.device.id) if cupy else None
    pointer = int(interface["data"][0])
    return DeviceArray(
        obj, pointer, tuple(interface["shape"]), element_strides, dtype, "cupy" if cupy else "cai", device
    )


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


def contiguous(array: DeviceArray) -> bool:
    if array.strides is None:
        return True
    expected, step = [], 1
    for extent in reversed(array.shape):
        expected.append(step)
        step *= extent
    pairs = zip(array.strides, reversed(expected), array.shape, strict=True)
    return all(s == e or extent == 1 for s, e, extent in pairs)


def empty_like(a: DeviceArray, shape: tuple[int, ...], device: int) -> Any:
    """A new array of A's kind and dtype for the result, on `device`."""
    if a.kind == "torch":
        import torch

        return torch.empty(shape, dtype=a.obj.dtype, device=a.obj.device)
    if a.kind == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=a.obj.dtype)
    if a.kind == "pycuda":
        import numpy as np
        import pycuda.gpuarray as gpuarray

        return gpuarray.empty(shape, dtype=np.dtype(a.dtype))
    raise AutotuneError("pass out= for arrays that are neither torch, cupy nor PyCUDA arrays")


def strided_vector(array: DeviceArray) -> bool:
    """A vector (1-D, or a 1 x length / length x 1 matrix) whose elements are not adjacent: BLAS's
    incx / incy other than 1 (x[::2], a column of a row-major matrix)."""
    vector = len(array.shape) == 1 or (len(array.shape) == 2 and 1 in array.shape)
    return vector and not contiguous(array)


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


@dataclass(frozen=True)
class GemvLayout:
    """A GEMV as the kernels run it: the row-major m x n matrix that A's memory holds, with its rows
    lda >= n elements apart (n where they are contiguous), whether the product is with its
    transpose, and the shape of y."""

    m: int
    n: int
    trans: bool
    out_shape: tuple[int, ...]
    lda: int

    @property
    def strided(self) -> bool:
        """Whether A's rows have gaps between them (a view of some columns of a wider matrix)."""
        return self.lda != self.n


MAX_LDA = 2**31 - 1  # the kernels take lda as a 32-bit int


def leading_dimension(rows: int, cols: int, strides: tuple[int, ...]) -> int | None:
    """The row stride lda of a rows x cols row-major matrix with these element strides: its elements
    adjacent within a row and its rows lda >= cols elements apart (A[:, :k] or A[:, 1:] of a wider
    row-major matrix); None where the strides are not such a layout."""
    row_stride, col_stride = strides
    if col_stride != 1 and cols != 1:
        return None
    if rows == 1:
        return cols
    return row_stride if row_stride >= cols else None


def transposed_contiguous(array: DeviceArray) -> bool:
    """A 2-D view of a row-major matrix's transpose (torch's A.t(), numpy's A.T): column-major."""
    rows, cols = array.shape
    strides = array.strides or (cols, 1)
    return (strides[0] == 1 or rows == 1) and (strides[1] == rows or cols == 1)


def check_gemv_operands(a: DeviceArray, x: DeviceArray, out: DeviceArray | None, trans: bool = False) -> GemvLayout:
    """The layout of y = A x (with `trans`, y = Aᵀ x): A row-major, or a transposed view of a
    row-major matrix, which is the same product with the other kernel (A.t() @ x = Aᵀx). Both
    kernels take A's row stride lda, so A may have gaps between its rows: a slice of columns such as
    A[:, :k] or A[:, 1:] (or its transpose) runs in place. x and y are vectors, or 1 x length /
    length x 1 matrices."""
    if len(a.shape) != 2:
        raise AutotuneError(f"A must be a 2-D matrix, got shape {a.shape}")
    rows, cols = a.shape
    if rows == 0 or cols == 0:
        empty = "rows" if rows == 0 else "columns"
        raise AutotuneError(f"A has no {empty} (shape {a.shape}): a GEMV needs M >= 1 and N >= 1")
    strides = a.strides or (cols, 1)
    if contiguous(a):
        m, n, runs_trans, lda = rows, cols, trans, cols
    elif transposed_contiguous(a):
        m, n, runs_trans, lda = cols, rows, not trans, rows  # A's memory is the row-major cols x rows matrix
    elif (direct := leading_dimension(rows, cols, strides)) is not None:
        m, n, runs_trans, lda = rows, cols, trans, direct
    elif (flipped := leading_dimension(cols, rows, strides[::-1])) is not None:
        m, n, runs_trans, lda = cols, rows, not trans, flipped  # A = Wᵀ with W row-major, strided
    else:
        raise AutotuneError(
            f"A (shape {a.shape}, strides {a.strides}) must be row-major with the elements of a row "
            "adjacent (rows may lie further apart, as in a slice of columns) or the transpose of such a "
            "matrix (copy it, e.g. A.contiguous())"
        )
    if lda > MAX_LDA:
        raise AutotuneError(
            f"A's rows lie {lda} elements apart, more than the kernels' 32-bit lda holds (copy it, e.g. A.contiguous())"
        )
    x_len, y_len = (rows, cols) if trans else (cols, rows)
    what = f"A{'ᵀ' if trans else ''}x with A {rows}x{cols}"
    if x.shape not in ((x_len,), (x_len, 1), (1, x_len)) or not contiguous(x):
        raise AutotuneError(f"x must be a contiguous vector of length {x_len} ({what}), got shape {x.shape}")
    if x.dtype != a.dtype:
        raise AutotuneError(f"A and x must share a dtype, got {a.dtype} and {x.dtype}")
    if out is not None:
        if out.shape not in ((y_len,), (y_len, 1), (1, y_len)) or not contiguous(out):
            raise AutotuneError(f"out must be a contiguous vector of length {y_len} ({what}), got shape {out.shape}")
        if out.dtype != a.dtype:
            raise AutotuneError(f"out must have A's dtype {a.dtype}, got {out.dtype}")
    out_shape = (1, y_len) if x.shape == (1, x_len) and x_len != 1 else (y_len,)
    return GemvLayout(m, n, runs_trans, out_shape, lda)


@dataclass(frozen=True)
class GemmLayout:
    """A GEMM as the kernels run it: C (m x n) = A (m x k) B, B stored k x n or, with `b_nk`, n x k
    (the caller passed the transpose of a row-major n x k matrix, W.t() of an nn.Linear weight),
    and each matrix's row stride in elements."""

    m: int
    n: int
    k: int
    b_nk: bool
    lda: int
    ldb: int
    ldc: int

    @property
    def leading(self) -> tuple[int, int, int] | None:
        """(lda, ldb, ldc) where some matrix has gaps between its rows, else None (all contiguous)."""
        contiguous_rows = (self.k, self.k if self.b_nk else self.n, self.n)
        lds = (self.lda, self.ldb, self.ldc)
        return None if lds == contiguous_rows else lds


def _row_stride(array: DeviceArray, name: str, what: str) -> int:
    """The row stride of a matrix the kernels read row-major (rows may lie further apart)."""
    rows, cols = array.shape
    stride = leading_dimension(rows, cols, array.strides or (cols, 1))
    if stride is None:
        view = "a transposed view" if transposed_contiguous(array) else "not row-major"
        raise AutotuneError(
            f"{name} (shape {array.shape}, strides {array.strides}) is {view}: {what} "
            f"(copy it, e.g. {name}.contiguous())"
        )
    if stride > MAX_LDA:
        raise AutotuneError(
            f"{name}'s rows lie {stride} elements apart, more than the kernels' 32-bit leading dimension holds "
            f"(copy it, e.g. {name}.contiguous())"
        )
    return stride


def check_gemm_operands(a: DeviceArray, b: DeviceArray, out: DeviceArray | None) -> GemmLayout:
    """The layout of C = A B: A row-major (its rows may lie further apart, as in a slice of columns),
    B row-major K x N or the transpose of a row-major N x K matrix (W.t() of an nn.Linear weight,
    run by the kernels for that layout, never copied), C row-major."""
    for name, array in (("A", a), ("B", b)):
        if len(array.shape) != 2:
            raise AutotuneError(f"{name} must be a 2-D matrix, got shape {array.shape}")
        if 0 in array.shape:
            empty = "rows" if array.shape[0] == 0 else "columns"
            raise AutotuneError(f"{name} has no {empty} (shape {array.shape}): a GEMM needs M, N and K >= 1")
    (m, k), (k_b, n) = a.shape, b.shape
    if k_b != k:
        raise AutotuneError(f"A is {m}x{k} and B is {k_b}x{n}: A's columns must equal B's rows")
    if b.dtype != a.dtype:
        raise AutotuneError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    lda = _row_stride(a, "A", "the GEMM kernels read A row-major")
    b_strides = b.strides or (n, 1)
    ldb = leading_dimension(k, n, b_strides)
    b_nk = False
    if ldb is None:
        flipped = leading_dimension(n, k, b_strides[::-1])
        if flipped is None:
            raise AutotuneError(
                f"B (shape {b.shape}, strides {b.strides}) must be row-major or the transpose of a row-major "
                "matrix (copy it, e.g. B.contiguous())"
            )
        ldb, b_nk = flipped, True
    if ldb > MAX_LDA:
        raise AutotuneError(f"B's rows lie {ldb} elements apart, more than the kernels' 32-bit ldb holds")
    ldc = n
    if out is not None:
        if out.shape != (m, n):
            raise AutotuneError(f"out must be a {m}x{n} matrix, got shape {out.shape}")
        if out.dtype != a.dtype:
            raise AutotuneError(f"out must have A's dtype {a.dtype}, got {out.dtype}")
        ldc = _row_stride(out, "out", "the GEMM kernels write C row-major")
    return GemmLayout(m, n, k, b_nk, lda, ldb, ldc)
