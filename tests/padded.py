"""16-bit matrices with gaps between their rows on the GPU, for the GPU tests of the half-precision
GEMM families' leading dimensions (PyCUDA's driver passed in: these helpers import nothing GPU-side)."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_device(cuda: Any, x: np.ndarray, dtype: str, ld: int, offset: int) -> tuple[object, int]:
    """x (float32 values exact in `dtype`) in rows `ld` elements apart, NaN in the gaps, starting
    `offset` elements into a fresh allocation: (the allocation, x's address)."""
    rows, cols = x.shape
    padded = np.full((offset + rows * ld + 8,), np.nan, np.float32)
    padded[offset : offset + rows * ld].reshape(rows, ld)[:, :cols] = x
    if dtype == "float16":
        raw = padded.astype(np.float16).view(np.uint16)
    else:  # bfloat16: the top half of each float32 (the values are exact in bfloat16)
        raw = (padded.view(np.uint32) >> 16).astype(np.uint16)
    owner = cuda.to_device(raw)
    return owner, int(owner) + 2 * offset


def from_device(cuda: Any, address: int, dtype: str, rows: int, ld: int) -> np.ndarray:
    """The rows x ld 16-bit elements at `address`, in float64."""
    raw = np.empty((rows * ld,), np.uint16)
    cuda.memcpy_dtoh(raw, address)
    if dtype == "float16":
        return raw.view(np.float16).astype(np.float64).reshape(rows, ld)
    return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(rows, ld)
