"""Tensor maps for the Hopper tensor memory accelerator (TMA), made on the host through the driver.

A kernel that copies tiles with cp.async.bulk.tensor names its source by a CUtensorMap: the matrix's
address, shape and row pitch, the box (tile) one copy moves, and how the copy swizzles it into shared
memory. PyCUDA has no call for making one, so cuTensorMapEncodeTiled is called through ctypes on the
driver library PyCUDA already loaded; it runs on the host alone (no context, no GPU work). The kernels
read their maps from global memory: the caller writes the bytes `encode_operands` returns into a
device buffer and passes it (see kernels/gemm/gemm_wgmma.cu).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE

MAP_BYTES = 128  # sizeof(CUtensorMap)
_MAP_ALIGN = 64  # cuTensorMapEncodeTiled wants the map's host address 64-byte aligned

# cuda.h enums (CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion).
_DATA_TYPE = {"float16": 6, "bfloat16": 9}
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes of the swizzle span -> CU_TENSOR_MAP_SWIZZLE_*
_INTERLEAVE_NONE = 0
_L2_PROMOTION_256B = 3
_OOB_FILL_ZEROS = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the matrix read as zero


@dataclass(frozen=True)
class Box:
    """One copy's tile of a row-major matrix: `rows` x `cols` elements, swizzled over `swizzle` bytes
    (0: not swizzled; otherwise a box row is at most that many bytes)."""

    rows: int
    cols: int
    swizzle: int


@dataclass(frozen=True)
class OperandMaps:
    """The two tensor maps of a GEMM kernel: A's (M x K) box, then B's (K x N, or with `b_nk` N x K),
    128 bytes each."""

    a: Box
    b: Box
    b_nk: bool = False

    @property
    def nbytes(self) -> int:
        return 2 * MAP_BYTES


def _encode_function() -> Any:
    """cuTensorMapEncodeTiled of the one driver binding (autotune/gpu/driver.py)."""
    from autotune.gpu import driver  # the driver opened on first use, not at import

    return driver.lib().cuTensorMapEncodeTiled


@dataclass(frozen=True)
class TiledMap:
    """What cuTensorMapEncodeTiled is given for one row-major matrix, beside its address: cuda.h's
    enum values and the sizes, innermost dimension first. The launch path encodes from it, and the
    deployable bundle (autotune/bundle/) writes it into its C header, so both describe one map."""

    data_type: int  # CUtensorMapDataType
    dims: tuple[int, int]  # (columns, rows)
    stride_bytes: int  # the row pitch
    box: tuple[int, int]  # (columns, rows) of one copy
    interleave: int  # CUtensorMapInterleave
    swizzle: int  # CUtensorMapSwizzle
    l2_promotion: int  # CUtensorMapL2promotion
    oob_fill: int  # CUtensorMapFloatOOBfill


def tiled_map(dtype: str, rows: int, cols: int, box: Box, pitch: int | None = None) -> TiledMap:
    """The encoding of a row-major rows x cols matrix of `dtype` with rows `pitch` >= cols elements
    apart (cols where None) read in boxes of `box`."""
    return TiledMap(
        _DATA_TYPE[dtype],
        (cols, rows),
        (cols if pitch is None else pitch) * ITEMSIZE[dtype],
        (box.cols, box.rows),
        _INTERLEAVE_NONE,
        _SWIZZLE[box.swizzle],
        _L2_PROMOTION_256B,
        _OOB_FILL_ZEROS,
    )


def operand_tiled_maps(maps: OperandMaps, dtype: str, sizes: tuple[int, ...]) -> tuple[TiledMap, TiledMap]:
    """A's map (m x k), then B's (k x n, or n x k with maps.b_nk), for C (m x n) = A B, from the
    kernels' sizes (m, n, k, lda, ldb, ldc); (m, n, k) alone means rows without gaps."""
    m, n, k = sizes[:3]
    lda, ldb = sizes[3:5] if len(sizes) >= 5 else (None, None)
    b_rows, b_cols = (n, k) if maps.b_nk else (k, n)
    return tiled_map(dtype, m, k, maps.a, lda), tiled_map(dtype, b_rows, b_cols, maps.b, ldb)


def encode(pointer: int, dtype: str, rows: int, cols: int, box: Box, pitch: int | None = None) -> bytes:
    """The CUtensorMap of a row-major rows x cols matrix of `dtype` at device address `pointer`, rows
    `pitch` elements apart (cols where None)."""
    spec = tiled_map(dtype, rows, cols, box, pitch)
    if pointer % 16 or spec.stride_bytes % 16:
        raise AutotuneError(
            f"a tensor map needs a 16-byte aligned matrix and row pitch, got {pointer:#x}, {spec.stride_bytes}"
        )
    storage = ctypes.create_string_buffer(MAP_BYTES + _MAP_ALIGN)
    address = ctypes.addressof(storage)
    aligned = address + (-address % _MAP_ALIGN)
    dims = (ctypes.c_uint64 * 2)(*spec.dims)
    strides = (ctypes.c_uint64 * 1)(spec.stride_bytes)
    box_dims = (ctypes.c_uint32 * 2)(*spec.box)
    element_strides = (ctypes.c_uint32 * 2)(1, 1)
    status = _encode_function()(
        aligned,
        spec.data_type,
        2,
        pointer,
        dims,
        strides,
        box_dims,
        element_strides,
        spec.interleave,
        spec.swizzle,
        spec.l2_promotion,
        spec.oob_fill,
    )
    if status != 0:
        raise AutotuneError(
            f"cuTensorMapEncodeTiled failed (CUresult {status}) for a {rows}x{cols} {dtype} matrix, "
            f"box {box.rows}x{box.cols}, swizzle {box.swizzle}"
        )
    return ctypes.string_at(aligned, MAP_BYTES)


def encode_operands(maps: OperandMaps, dtype: str, sizes: tuple[int, ...], a_pointer: int, b_pointer: int) -> bytes:
    """A's map then B's, for C (m x n) = A (m x k) B (k x n, or n x k with maps.b_nk), from the kernels'
    sizes (m, n, k, lda, ldb, ldc): the bytes a kernel's map buffer holds."""
    m, n, k = sizes[:3]
    lda, ldb = sizes[3:5] if len(sizes) >= 5 else (None, None)
    b_rows, b_cols = (n, k) if maps.b_nk else (k, n)
    return encode(a_pointer, dtype, m, k, maps.a, lda) + encode(b_pointer, dtype, b_rows, b_cols, maps.b, ldb)
