"""A caller's GPU array as the launch path sees it (address, shape, strides in elements, dtype,
device) and the layout questions every op's operand checks ask of one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_LEADING = 2**31 - 1  # the kernels take leading dimensions as 32-bit ints


@dataclass(frozen=True)
class DeviceArray:
    obj: Any
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None means C-contiguous
    dtype: str
    kind: str  # "torch", "cupy", "pycuda" or "cai"
    device: int | None = None  # None: not known without asking the driver (runtime/operands.py: device_of)


def contiguous(array: DeviceArray) -> bool:
    if array.strides is None:
        return True
    expected, step = [], 1
    for extent in reversed(array.shape):
        expected.append(step)
        step *= extent
    pairs = zip(array.strides, reversed(expected), array.shape, strict=True)
    return all(s == e or extent == 1 for s, e, extent in pairs)


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


def row_vector(shape: tuple[int, ...], length: int) -> bool:
    """A row of `length` elements with leading extents of 1: 1 x length, or 1 x 1 x length, the x of a
    transformers decode step (batch 1, one token)."""
    return len(shape) >= 2 and shape[-1] == length and all(extent == 1 for extent in shape[:-1])


def strided_vector(array: DeviceArray) -> bool:
    """A vector (1-D, or a shape whose extents but one are 1: 1 x length, length x 1, 1 x 1 x length)
    whose elements are not adjacent: BLAS's incx / incy other than 1 (x[::2], a column of a row-major
    matrix)."""
    vector = len(array.shape) >= 1 and sum(extent != 1 for extent in array.shape) <= 1
    return vector and not contiguous(array)
