"""Host-side element encodings: numpy has no bfloat16, so device bits are converted by hand."""

from __future__ import annotations

import numpy as np

# Storage for one element as numpy sees it on the host (bfloat16 travels as raw 16-bit words).
HOST_STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}
# The CUDA type of each dtype in kernel sources.
CUDA_TYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
# Unit roundoff of each dtype (round to nearest): the error of storing a float32 result in it.
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# The spacing of each dtype's subnormals: a result too small for a normal number (float16 below
# 6.1e-5) is stored with up to half of it as absolute error, once for each rounding to the dtype
# (alpha times the sum, then plus beta times C), which no relative tolerance covers.
SUBNORMAL_SPACING = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """float values -> host array holding the device's bits for `dtype` (round to nearest even)."""
    if dtype != "bfloat16":
        return np.asarray(values, dtype=HOST_STORAGE[dtype])
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def decode(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Host array of device bits -> float64 values."""
    if dtype != "bfloat16":
        return np.asarray(stored, dtype=np.float64)
    return (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def all_finite(stored: np.ndarray) -> bool:
    """Whether every value of a host array is finite; uint16 words are bfloat16's (inf and NaN have
    every exponent bit set)."""
    if stored.dtype == np.uint16:
        return bool(((stored & 0x7F80) != 0x7F80).all())
    return bool(np.isfinite(stored).all())
