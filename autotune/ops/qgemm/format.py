"""The canonical int4 weight format (docs/lowbit.md): quantize, pack, unpack, dequantize and check it, on
numpy arrays and torch tensors alike (each function follows its arguments' array type).

W is in nn.Linear's layout, N x K. Codes q in [0, 15] are packed two per byte along K, even k in the low
nibble: qweight is uint8 (N, K // 2). Each group of g in {32, 64, 128} consecutive k of a row has a scale
(N, K // g), in the activations' dtype; symmetric weights are w = (q - 8) * s, asymmetric ones carry an
integer zero per group, uint8 (N, K // g) in [0, 15], and are w = (q - z) * s (GPTQ's and AWQ's convention).

torch is never imported here: `import autotune` and the CPU CI run this on numpy alone. On the host numpy
has no bfloat16, so bfloat16 scales travel as their raw 16-bit words (autotune/core/dtypes.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core import dtypes
from autotune.core.errors import AutotuneError

GROUPS = (32, 64, 128)
SCALE_DTYPES = ("float16", "bfloat16", "float32")
WEIGHT_DTYPES = ("float16", "bfloat16", "float32", "float64")  # what quantize takes
# Signed codes [-8, 7] stored as q - 8: half the span of codes is 7.5, so the largest |w| of a group
# lands on the edge of the 8 (-8) or 7 bucket and every code is used (torchao's symmetric mapping).
SYM_OFFSET = 8
SYM_HALF_SPAN = 7.5
CODE_MAX = 15


@dataclass(frozen=True)
class Int4Weight:
    """One weight matrix in the canonical format; numpy arrays or torch tensors, never mixed."""

    qweight: Any  # uint8 (N, K // 2), even k in the low nibble
    scales: Any  # (N, K // group) in scale_dtype; numpy's bfloat16: uint16 words
    zeros: Any | None  # uint8 (N, K // group) in [0, 15]; None when symmetric
    group: int
    sym: bool
    n: int
    k: int
    scale_dtype: str  # "float16", "bfloat16" or "float32"

    @property
    def variant(self) -> str:
        """The problem's variant name: "g128" (symmetric), "g128a" (asymmetric)."""
        return variant_name(self.group, self.sym)


def variant_name(group: int, sym: bool) -> str:
    return f"g{group}" if sym else f"g{group}a"


def is_torch_tensor(x: Any) -> bool:
    """Whether `x` is a torch tensor, without importing torch (a tensor's maker has imported it)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_numpy(x: Any, what: str) -> bool:
    if isinstance(x, np.ndarray):
        return True
    if is_torch_tensor(x):
        return False
    raise AutotuneError(f"int4 {what} must be a numpy array or a torch tensor, got {type(x).__name__}")


def dtype_name(dtype: Any) -> str:
    """'float16' for np.float16, torch.float16 or 'float16' alike."""
    return str(np.dtype(dtype) if isinstance(dtype, type) else dtype).removeprefix("torch.")


def _stored_name(scales: Any) -> str:
    """The dtype scales stand for: numpy's uint16 words are bfloat16."""
    name = dtype_name(scales.dtype)
    return "bfloat16" if name == "uint16" and isinstance(scales, np.ndarray) else name


def check_group(group: Any) -> int:
    if isinstance(group, bool) or not isinstance(group, int) or group not in GROUPS:
        raise AutotuneError(f"int4 group must be one of {', '.join(map(str, GROUPS))}, got {group!r}")
    return group


def _float32(x: Any) -> Any:
    return x.astype(np.float32) if isinstance(x, np.ndarray) else x.float()


def _clip(x: Any, low: float, high: float) -> Any:
    return np.clip(x, low, high) if isinstance(x, np.ndarray) else x.clamp(low, high)


def _round(x: Any) -> Any:
    """Round half to even, as numpy and torch both do."""
    return np.round(x) if isinstance(x, np.ndarray) else x.round()


def _uint8(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.astype(np.uint8)
    return x.to(sys.modules["torch"].uint8)


def _group_max(x: Any) -> Any:
    return x.max(axis=-1) if isinstance(x, np.ndarray) else x.amax(dim=-1)


def _group_min(x: Any) -> Any:
    return x.min(axis=-1) if isinstance(x, np.ndarray) else x.amin(dim=-1)


def _all_finite(x: Any) -> bool:
    return bool(np.isfinite(x).all()) if isinstance(x, np.ndarray) else bool(x.isfinite().all())


def pack_int4(q: Any) -> Any:
    """Codes (N, K) with values in [0, 15] -> uint8 (N, K // 2), q[:, 2j] in byte j's low nibble."""
    if q.ndim != 2 or q.shape[1] % 2:
        raise AutotuneError(f"int4 codes must be (N, K) with K even, got shape {tuple(q.shape)}")
    codes = _uint8(q)
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def unpack_int4(qweight: Any) -> Any:
    """uint8 (N, K // 2) -> uint8 codes (N, K) in [0, 15]; pack_int4's inverse."""
    if qweight.ndim != 2:
        raise AutotuneError(f"int4 qweight must be (N, K // 2), got shape {tuple(qweight.shape)}")
    n, half = qweight.shape
    if isinstance(qweight, np.ndarray):
        codes = np.empty((n, 2 * half), dtype=np.uint8)
    else:
        codes = qweight.new_empty((n, 2 * half))
    codes[:, 0::2] = qweight & 0x0F
    codes[:, 1::2] = qweight >> 4
    return codes


def _default_scale_dtype(w: Any, scale_dtype: Any) -> str:
    """The scales' dtype: as asked; else a float16 or bfloat16 tensor's own, else float16."""
    if scale_dtype is None:
        name = dtype_name(w.dtype)
        return name if name in ("float16", "bfloat16") and not isinstance(w, np.ndarray) else "float16"
    name = dtype_name(scale_dtype)
    if name not in SCALE_DTYPES:
        raise AutotuneError(f"int4 scales must be {', '.join(SCALE_DTYPES)}, got {name}")
    return name


def _round_scales(scale: Any, dtype: str) -> tuple[Any, Any]:
    """float32 scales -> (stored in `dtype`, the stored values as float32), each rounded UP to `dtype`.

    Rounding up keeps every w / s within the codes' span, so |w - dequantized| <= s / 2 holds with the
    stored scale (to nearest, as torchao rounds, a scale a half-ulp low pushes the group's extreme past
    the last code), and a positive scale never becomes 0."""
    if dtype == "float32":
        return scale, scale
    if isinstance(scale, np.ndarray):
        with np.errstate(over="ignore"):  # a scale beyond float16: inf, which quantize_int4 reports
            stored = dtypes.encode(scale, dtype) if dtype == "bfloat16" else scale.astype(np.float16)
        words = stored.view(np.uint16)
        words += (_stored_float32(stored, dtype) < scale).astype(np.uint16)  # the next value up
    else:
        torch = sys.modules["torch"]
        stored = scale.to(getattr(torch, dtype))
        words = stored.view(torch.int16)
        words += (stored.float() < scale).to(torch.int16)
    return stored, _stored_float32(stored, dtype)


def _stored_float32(scales: Any, dtype: str) -> Any:
    """Scales as stored -> float32 (exact: float16 and bfloat16 are subsets of float32)."""
    if isinstance(scales, np.ndarray) and dtype == "bfloat16":
        return dtypes.decode(scales, dtype).astype(np.float32)
    return _float32(scales)


def _check_weight(w: Any, group: int) -> tuple[int, int]:
    if not isinstance(w, np.ndarray) and not is_torch_tensor(w):
        raise AutotuneError(f"int4 quantize takes a numpy array or a torch tensor (N, K), got {type(w).__name__}")
    if getattr(w, "is_meta", False):
        raise AutotuneError("the weight is on the meta device, with no values to quantize: materialise it first")
    if w.ndim != 2:
        raise AutotuneError(f"int4 quantize needs a 2-D weight (N, K), got shape {tuple(w.shape)}")
    n, k = (int(size) for size in w.shape)
    if not n or not k:
        raise AutotuneError(f"int4 quantize needs a non-empty weight, got shape ({n}, {k})")
    if k % 2:
        raise AutotuneError(f"K = {k} is odd: int4 packs two codes per byte along K")
    if k % group:
        raise AutotuneError(f"K = {k} is not a multiple of the int4 group {group}")
    name = dtype_name(w.dtype)
    if name not in WEIGHT_DTYPES:
        raise AutotuneError(f"int4 quantize needs {', '.join(WEIGHT_DTYPES)} weights, got {name}")
    if not _all_finite(w):
        raise AutotuneError("the weight holds NaN or inf: int4 quantize needs finite values")
    return n, k


def quantize_int4(w: Any, group: int = 128, sym: bool = True, scale_dtype: Any = None) -> Int4Weight:
    """W (N, K), numpy or torch, -> the canonical int4 format, on W's device.

    The mappings are torchao's affine ones (choose_qparams_affine): symmetric s = max|w| / 7.5,
    q = clamp(round(w / s) + 8, 0, 15); asymmetric over the group's range widened to hold 0,
    s = (max - min) / 15, z = clamp(round(-min / s), 0, 15), q = clamp(round(w / s) + z, 0, 15).
    Computed in float32; the scale is rounded up to `scale_dtype` (default: a float16 or bfloat16
    tensor's dtype, else float16) and the codes are computed with the rounded scale, so dequantize
    gives |w - w'| <= s / 2. An all-zero group gets s = 0 and codes of 0."""
    group = check_group(group)
    if not isinstance(sym, bool):
        raise AutotuneError(f"int4 sym is True or False, got {sym!r}")
    n, k = _check_weight(w, group)
    dtype = _default_scale_dtype(w, scale_dtype)
    with np.errstate(over="ignore"):  # a float64 weight beyond float32, or a range beyond it: reported below
        grouped = _float32(w).reshape(n, k // group, group)
        if not _all_finite(grouped):
            raise AutotuneError("the weight holds values beyond float32's range: int4 quantize computes in float32")
        if sym:
            scale = _group_max(abs(grouped)) / SYM_HALF_SPAN
        else:
            low, high = _clip(_group_min(grouped), -np.inf, 0.0), _clip(_group_max(grouped), 0.0, np.inf)
            scale = (high - low) / CODE_MAX
    if not _all_finite(scale):
        raise AutotuneError("the weight's range overflows float32: int4 quantize computes its scales in float32")
    stored, used = _round_scales(scale, dtype)
    if not _all_finite(used):
        biggest = float(abs(grouped).max())
        raise AutotuneError(
            f"a weight of {biggest:.4g} needs an int4 scale beyond {dtype}'s range: use scale_dtype='float32'"
        )
    divisor = used + (used == 0)  # an all-zero group: every w / s is 0, no NaN
    if sym:
        offset: Any = SYM_OFFSET
        zeros = None
    else:
        zeros = _clip(_round(-low / divisor), 0, CODE_MAX)
        offset = zeros[..., None]
    codes = _clip(_round(grouped / divisor[..., None]) + offset, 0, CODE_MAX).reshape(n, k)
    zeros = None if zeros is None else _uint8(zeros)
    return Int4Weight(pack_int4(codes), stored, zeros, group, sym, n, k, dtype)


def dequantize(weight: Int4Weight) -> Any:
    """The weight's values as float32 (N, K), numpy or torch as stored: exact, since each is a code
    difference (at most 4 bits) times a float16 or bfloat16 scale."""
    n, k, group = weight.n, weight.k, weight.group
    codes = _float32(unpack_int4(weight.qweight)).reshape(n, k // group, group)
    scales = _stored_float32(weight.scales, weight.scale_dtype)[..., None]
    offset = SYM_OFFSET if weight.zeros is None else _float32(weight.zeros)[..., None]
    return ((codes - offset) * scales).reshape(n, k)


def dequantize_in_scale_dtype(weight: Int4Weight) -> Any:
    """The weight's values (N, K) in its scales' own dtype, torch tensors only: dequantize()'s values
    rounded to that dtype, bit for bit. q - z and s are exact in it, so its one multiply rounds the
    exact product once, as the cast of the float32 product does; the temporaries are uint8 codes and
    the result itself, not dequantize()'s three float32 (N, K) arrays (what a linear of more than
    qgemm.MAX_M rows writes and reads before its GEMM)."""
    n, k, group = weight.n, weight.k, weight.group
    packed = weight.qweight
    codes = packed.new_empty((n, k // 2, 2))  # even k from the low nibble: pack_int4's order
    codes[..., 0] = packed & 0x0F
    codes[..., 1] = packed >> 4
    values = codes.view(n, k // group, group).to(weight.scales.dtype)
    values.sub_(SYM_OFFSET if weight.zeros is None else weight.zeros[..., None])
    return values.mul_(weight.scales[..., None]).view(n, k)


def int4_weight(qweight: Any, scales: Any, zeros: Any | None, group: int, *, values: bool = True) -> Int4Weight:
    """Arrays already in the canonical format (a checkpoint's) -> an Int4Weight, checked (`values`:
    the zero points' values too, see check_format)."""
    n, k = check_format(qweight, scales, zeros, group, values=values)
    if values and not finite_scales(scales):
        raise AutotuneError("int4 scales hold NaN or inf")
    return Int4Weight(qweight, scales, zeros, group, zeros is None, n, k, _stored_name(scales))


def finite_scales(scales: Any) -> bool:
    """Whether every scale is finite (numpy's uint16 words are bfloat16's)."""
    return dtypes.all_finite(scales) if isinstance(scales, np.ndarray) else _all_finite(scales)


def check_format(qweight: Any, scales: Any, zeros: Any | None, group: int, *, values: bool = True) -> tuple[int, int]:
    """(N, K) of arrays in the canonical format; a one-line AutotuneError for anything else. Without
    `values` the zero points' values are not read: on a GPU that read waits for the device."""
    group = check_group(group)
    arrays = [("qweight", qweight), ("scales", scales)] + ([] if zeros is None else [("zeros", zeros)])
    kinds = {_is_numpy(array, what) for what, array in arrays}
    if len(kinds) > 1:
        raise AutotuneError("int4 qweight, scales and zeros must be all numpy arrays or all torch tensors")
    if kinds == {False} and len({str(array.device) for _, array in arrays}) > 1:
        raise AutotuneError("int4 qweight, scales and zeros must be on one device")
    if qweight.ndim != 2 or dtype_name(qweight.dtype) != "uint8":
        described = f"{dtype_name(qweight.dtype)} {tuple(qweight.shape)}"
        raise AutotuneError(f"int4 qweight must be uint8 of shape (N, K // 2), got {described}")
    n, k = int(qweight.shape[0]), 2 * int(qweight.shape[1])
    if k % group:
        raise AutotuneError(f"K = {k} (qweight's columns x 2) is not a multiple of the int4 group {group}")
    grouped = (n, k // group)
    if tuple(scales.shape) != grouped:
        raise AutotuneError(f"int4 scales must have shape (N, K // group) = {grouped}, got {tuple(scales.shape)}")
    if _stored_name(scales) not in SCALE_DTYPES:
        raise AutotuneError(f"int4 scales must be {', '.join(SCALE_DTYPES)}, got {dtype_name(scales.dtype)}")
    if zeros is not None:
        _check_zeros(zeros, grouped, values)
    return n, k


def _check_zeros(zeros: Any, grouped: tuple[int, int], values: bool) -> None:
    if tuple(zeros.shape) != grouped or dtype_name(zeros.dtype) != "uint8":
        described = f"{dtype_name(zeros.dtype)} {tuple(zeros.shape)}"
        raise AutotuneError(f"int4 zeros must be uint8 of shape (N, K // group) = {grouped}, got {described}")
    size = zeros.size if isinstance(zeros, np.ndarray) else zeros.numel()
    if values and size:
        largest = int(zeros.max())
        if largest > CODE_MAX:
            raise AutotuneError(f"int4 zeros must lie in [0, 15], found {largest}")
