"""The canonical 8-bit weight-only format: quantize, dequantize and check it, on numpy arrays.

W is in nn.Linear's layout, N x K, of one of two kinds: "int8", or "fp8" (OCP float8 e4m3, "e4m3fn":
1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits; no infinities, NaN only at 0x7F and 0xFF,
largest finite value 448, subnormals in steps of 2^-9). codes is uint8 (N, K), the raw bytes: for int8
the two's complement byte of q in [-127, 127] (quantize never writes -128, 0x80, but it decodes as
-128); for fp8 the e4m3 bit pattern. scales has one scale per output row, (N,), in the activations'
dtype (float16, bfloat16 or float32), and w = value(code) * scale[n].

Quantization is symmetric, per row, by absolute maximum: s = max|w[n, :]| / QMAX, QMAX = 127 (int8)
or 448 (fp8). The scale is rounded to its dtype first, upward (as the int4 format's are: then every
w / s lies within +-QMAX and nothing is clipped), and the codes are computed against the rounded
scale, the one dequantization multiplies by: int8 q = clip(round-half-even(w / s), -127,
127), |w - w'| <= s / 2; fp8 the e4m3 encoding of w / s, round to nearest even, beyond +-448
saturating to +-448, zero as 0x00 (quantize writes 0x80 in neither kind). A row of zeros gets
scale 1 and codes 0.

torch is never imported here: `import autotune` and the CPU CI run this on numpy alone. On the host
numpy has no bfloat16, so bfloat16 scales travel as their raw 16-bit words (autotune/core/dtypes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.core import dtypes
from autotune.core.errors import AutotuneError

KINDS = ("int8", "fp8")
QMAX = {"int8": 127.0, "fp8": 448.0}
SCALE_DTYPES = ("float16", "bfloat16", "float32")

E4M3_MAX_CODE = 0x7E  # 448 = 1.75 * 2^8, the largest finite e4m3 value
E4M3_NAN_CODE = 0x7F  # what e4m3_encode writes for NaN (0xFF is NaN too)
E4M3_MANTISSA_BITS = 3
E4M3_BIAS = 7
E4M3_MIN_NORMAL_EXPONENT = 1 - E4M3_BIAS  # 2^-6; below it subnormals, multiples of 2^-9
E4M3_SUBNORMAL_STEPS = 2 ** (E4M3_MANTISSA_BITS - E4M3_MIN_NORMAL_EXPONENT)  # 512: 1 / 2^-9


def _e4m3_table() -> npt.NDArray[np.float32]:
    """The value of each of the 256 codes, from its bit fields (NaN at 0x7F and 0xFF)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> E4M3_MANTISSA_BITS) & 0xF
    mantissa = (codes & 0x7) / 8.0
    normal = np.ldexp(1.0 + mantissa, exponent - E4M3_BIAS)
    subnormal = np.ldexp(mantissa, E4M3_MIN_NORMAL_EXPONENT)
    magnitude = np.where(exponent == 0, subnormal, normal)
    magnitude[(codes & 0x7F) == E4M3_NAN_CODE] = np.nan
    table = (sign * magnitude).astype(np.float32)
    table.flags.writeable = False
    return table


E4M3_VALUES = _e4m3_table()

# Per float type that e4m3_encode rounds from: the unsigned type of its bits, mantissa bits, exponent bias.
_FLOAT_LAYOUT: dict[np.dtype[Any], tuple[type[np.unsignedinteger[Any]], int, int]] = {
    np.dtype(np.float32): (np.uint32, 23, 127),
    np.dtype(np.float64): (np.uint64, 52, 1023),
}


@dataclass(frozen=True)
class Weight8:
    """One weight matrix in the canonical 8-bit format (numpy arrays)."""

    codes: npt.NDArray[np.uint8]  # (N, K): int8's two's complement bytes or e4m3 bit patterns
    scales: npt.NDArray[Any]  # (N,) in scale_dtype; bfloat16: uint16 words
    kind: str  # "int8" or "fp8"
    n: int
    k: int
    scale_dtype: str  # "float16", "bfloat16" or "float32"

    @property
    def variant(self) -> str:
        """The problem's variant name: the kind, "int8" or "fp8"."""
        return self.kind


def check_kind(kind: Any) -> str:
    if not isinstance(kind, str) or kind not in KINDS:
        raise AutotuneError(f"8-bit weight kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def check_scale_dtype(scale_dtype: Any) -> str:
    name = str(np.dtype(scale_dtype) if isinstance(scale_dtype, type) else scale_dtype).removeprefix("torch.")
    if name not in SCALE_DTYPES:
        raise AutotuneError(f"8-bit weight scales must be {', '.join(SCALE_DTYPES)}, got {name}")
    return name


def _uint8_codes(codes: Any, what: str) -> npt.NDArray[np.uint8]:
    if not isinstance(codes, np.ndarray) or codes.dtype != np.uint8:
        described = str(codes.dtype) if isinstance(codes, np.ndarray) else type(codes).__name__
        raise AutotuneError(f"{what} needs a uint8 numpy array of codes, got {described}")
    return codes


def e4m3_decode(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """uint8 e4m3 codes -> their float32 values, of the same shape (NaN for 0x7F and 0xFF)."""
    return E4M3_VALUES[_uint8_codes(codes, "e4m3_decode")]


def e4m3_encode(values: npt.ArrayLike) -> npt.NDArray[np.uint8]:
    """Real values -> uint8 e4m3 codes: round to nearest, ties to the even mantissa; finite values and
    infinities beyond +-448 saturate to +-448 (CUDA's __NV_SATFINITE), NaN gives 0x7F, -0.0 0x80.

    float16 and float32 round from their float32 bits, everything else from float64's: one rounding,
    exact. Normal results round the bits' mantissa in place (a carry moves into the exponent, as it
    should); below 2^-6 the code is the subnormal's multiple of 2^-9, round(|x| * 2^9) exactly."""
    x = np.asarray(values)
    if x.dtype.kind not in "fiub":
        raise AutotuneError(f"e4m3_encode needs real values, got {x.dtype}")
    x = x.astype(np.float32 if x.dtype.kind == "f" and x.dtype.itemsize <= 4 else np.float64, copy=False)
    flat = x.reshape(-1)  # a view where x is contiguous
    codes = np.empty(flat.shape, dtype=np.uint8)
    for start in range(0, flat.size, _ENCODE_CHUNK):  # temporaries that stay in cache
        _e4m3_encode_1d(flat[start : start + _ENCODE_CHUNK], codes[start : start + _ENCODE_CHUNK])
    return codes.reshape(x.shape)


_ENCODE_CHUNK = 1 << 16


def _e4m3_encode_1d(x: npt.NDArray[np.floating[Any]], codes: npt.NDArray[np.uint8]) -> None:
    """e4m3_encode of float32 or float64 x (1-D) into codes."""
    uint, mantissa_bits, bias = _FLOAT_LAYOUT[x.dtype]
    shift = mantissa_bits - E4M3_MANTISSA_BITS
    magnitude = x.view(uint) & uint((1 << (8 * x.dtype.itemsize - 1)) - 1)
    # Round to nearest even at the 3rd mantissa bit, then rebias the exponent: e4m3's code below 448.
    rounded = (magnitude >> uint(shift)) & uint(1)
    rounded += magnitude
    rounded += uint((1 << (shift - 1)) - 1)
    rounded >>= uint(shift)
    rounded -= uint((bias - E4M3_BIAS) << E4M3_MANTISSA_BITS)  # wraps below 2^-6: replaced next
    np.minimum(rounded, uint(E4M3_MAX_CODE), out=rounded)
    codes[:] = rounded
    small = magnitude < uint((bias + E4M3_MIN_NORMAL_EXPONENT) << mantissa_bits)
    codes[small] = np.rint(np.abs(x[small]) * E4M3_SUBNORMAL_STEPS)
    codes |= np.signbit(x).view(np.uint8) << np.uint8(7)
    codes[np.isnan(x)] = E4M3_NAN_CODE


def codes_values(codes: npt.NDArray[np.uint8], kind: str) -> npt.NDArray[np.float32]:
    """The float32 value of each code: int8's signed byte (0x80 is -128), fp8's e4m3 value."""
    kind = check_kind(kind)
    codes = _uint8_codes(codes, f"{kind} codes_values")
    if kind == "fp8":
        return e4m3_decode(codes)
    return codes.view(np.int8).astype(np.float32)


def _stored_float32(scales: npt.NDArray[Any], dtype: str) -> npt.NDArray[np.float32]:
    """Scales as stored -> float32 (exact: float16 and bfloat16 are subsets of float32)."""
    if dtype == "bfloat16":
        return dtypes.decode(scales, dtype).astype(np.float32)
    return scales.astype(np.float32)


def _round_scales_up(scale: npt.NDArray[np.float64], dtype: str) -> tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
    """float64 scales -> (stored in `dtype`, the stored values as float32), each the least value of
    `dtype` not below the scale: every |w| / s <= QMAX, and a positive scale never becomes 0."""
    with np.errstate(over="ignore"):  # beyond the dtype: inf, which quantize8 reports
        if dtype == "bfloat16":
            stored = dtypes.encode(scale.astype(np.float32), dtype)
        else:
            stored = scale.astype(dtypes.HOST_STORAGE[dtype])
        below = _stored_float32(stored, dtype) < scale
        if dtype == "bfloat16":
            stored += below.astype(np.uint16)  # the next bfloat16 word up
        else:
            stored = np.where(below, np.nextafter(stored, stored.dtype.type(np.inf)), stored)
    return stored, _stored_float32(stored, dtype)


def _check_weight(w: Any) -> tuple[int, int]:
    if not isinstance(w, np.ndarray):  # a torch tensor goes to model/quantized8.py first
        raise AutotuneError(f"8-bit quantize needs a numpy array, got {type(w).__name__}")
    if w.ndim != 2:
        raise AutotuneError(f"8-bit quantize needs a 2-D weight (N, K), got shape {tuple(w.shape)}")
    n, k = (int(size) for size in w.shape)
    if not n or not k:
        raise AutotuneError(f"8-bit quantize needs a non-empty weight, got shape ({n}, {k})")
    if w.dtype not in (np.float16, np.float32, np.float64):
        raise AutotuneError(f"8-bit quantize needs float16, float32 or float64 weights, got {w.dtype}")
    if not np.isfinite(w).all():
        raise AutotuneError("the weight holds NaN or inf: 8-bit quantize needs finite values")
    return n, k


def quantize8(w: npt.NDArray[Any], kind: str = "int8", scale_dtype: str = "float16") -> Weight8:
    """W (N, K), float16, float32 or float64 -> the canonical 8-bit format (module docstring).

    Computed in float32: s = max|w| / QMAX per row, rounded up to `scale_dtype`, then the codes of
    w / s. int8 gives |w - w'| <= s / 2; fp8 |w - w'| <= 2^-4 |w| where |w| / s >= 2^-6, and at most
    half of 2^-9 s below that. A row's largest |w| takes code +-448 (fp8) or +-127 (int8), except
    that a bfloat16 scale, up to 2^-7 above max|w| / 127, can leave it at +-126."""
    kind = check_kind(kind)
    dtype = check_scale_dtype(scale_dtype)
    n, k = _check_weight(w)
    with np.errstate(over="ignore"):  # float64 beyond float32: inf, reported next
        w32 = w.astype(np.float32, copy=False)
    if w.dtype == np.float64 and not np.isfinite(w32).all():
        raise AutotuneError("the weight holds values beyond float32's range: 8-bit quantize computes in float32")
    absmax = np.maximum(w32.max(axis=1), -w32.min(axis=1)).astype(np.float64)
    scale = np.where(absmax > 0, absmax / QMAX[kind], 1.0)
    stored, used = _round_scales_up(scale, dtype)
    if not np.isfinite(used).all():  # only float16's range is this narrow: bfloat16 has float32's
        raise AutotuneError(
            f"a weight of {float(absmax.max()):.4g} needs an {kind} scale beyond {dtype}'s range: "
            "use scale_dtype='bfloat16'"
        )
    ratio = w32 / used[:, None]
    if kind == "fp8":
        codes = e4m3_encode(ratio)
        codes[codes == 0x80] = 0  # -0.0, from w = -0.0 or a negative too small for 2^-10 s: +0.0
    else:
        np.rint(ratio, out=ratio)  # half to even
        np.clip(ratio, -QMAX[kind], QMAX[kind], out=ratio)
        codes = ratio.astype(np.int8).view(np.uint8)
    return Weight8(codes, stored, kind, n, k, dtype)


def dequantize8(weight: Weight8) -> npt.NDArray[np.float32]:
    """The weight's values as float32 (N, K): value(code) * scale, exact for float16 and bfloat16
    scales (a code has at most 8 significant bits, a scale 11)."""
    check8(weight)
    values = codes_values(weight.codes, weight.kind)
    values *= _stored_float32(weight.scales, weight.scale_dtype)[:, None]
    return values


def check8(weight: Weight8) -> None:
    """A one-line AutotuneError unless the weight's arrays match its kind, shape and scale dtype."""
    if not isinstance(weight, Weight8):
        raise AutotuneError(f"check8 needs a Weight8, got {type(weight).__name__}")
    check_kind(weight.kind)
    dtype = check_scale_dtype(weight.scale_dtype)
    n, k = weight.n, weight.k
    if any(isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in (n, k)):
        raise AutotuneError(f"an 8-bit weight's n and k must be positive integers, got ({n!r}, {k!r})")
    codes, scales = weight.codes, weight.scales
    if not isinstance(codes, np.ndarray) or codes.dtype != np.uint8 or codes.shape != (n, k):
        described = f"{codes.dtype} {codes.shape}" if isinstance(codes, np.ndarray) else type(codes).__name__
        raise AutotuneError(f"8-bit codes must be uint8 of shape (N, K) = {(n, k)}, got {described}")
    storage = np.dtype(dtypes.HOST_STORAGE[dtype])
    if not isinstance(scales, np.ndarray) or scales.dtype != storage or scales.shape != (n,):
        described = f"{scales.dtype} {scales.shape}" if isinstance(scales, np.ndarray) else type(scales).__name__
        raise AutotuneError(f"{dtype} 8-bit scales must be {storage} of shape (N,) = ({n},), got {described}")
    if not dtypes.all_finite(scales):
        raise AutotuneError("8-bit scales hold NaN or inf")
