"""Quantized8Weight: an 8-bit weight (int8 or float8 e4m3 codes, a scale a row) as a torch module, what
autotune.quantize(W, "int8" | "fp8") returns for a tensor.

Its buffers are the 8-bit format's arrays (autotune/ops/q8gemm/format.py, docs/lowbit.md): qweight, the
codes as uint8 (N, K), and scales (N,) in the activations' dtype; the kind and shape travel as the module's
extra state, so a state_dict loads into Quantized8Weight.from_state_dict or into a module made by
Quantized8Weight.empty. Quantization runs the format's numpy code (one implementation for numpy and
torch callers), on the host. Imported only where torch is, never by `import autotune`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from autotune import api
from autotune.core.errors import AutotuneError
from autotune.model.low_bit_weight import LowBitWeight, checked_sizes, held_format
from autotune.model.quantized import host_tensor
from autotune.ops.q8gemm import format as q8format
from autotune.ops.qgemm import format as int4

SCALE_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}  # the 8-bit kernels' activations
_CODE_VIEWS = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}  # how torch reads each kind's bytes
_WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what quantize takes


class Quantized8Weight(LowBitWeight):
    """An 8-bit weight of shape (out_features, in_features) = (N, K), in nn.Linear's layout."""

    format_name = "8-bit"
    qweight: torch.Tensor

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, kind: str) -> None:
        super().__init__()
        kind = q8format.check_kind(kind)
        if qweight.dtype != torch.uint8 or qweight.dim() != 2:
            got = f"{qweight.dtype} {tuple(qweight.shape)}"
            raise AutotuneError(f"an 8-bit weight's codes are a uint8 matrix (N, K), got {got}")
        n, k = qweight.shape
        if scales.shape != (n,) or scales.dtype not in SCALE_DTYPES:
            got = f"{scales.dtype} {tuple(scales.shape)}"
            raise AutotuneError(f"an 8-bit weight's scales are a float16 or bfloat16 vector ({n},), got {got}")
        if scales.device != qweight.device:
            raise AutotuneError(f"codes on {qweight.device} and scales on {scales.device}: put both on one device")
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.kind = kind
        self.options = (kind,)  # autotune.call's options for the q8gemm op: read on every eager call
        self.out_features, self.in_features = int(n), int(k)

    @classmethod
    def from_float(cls, weight: torch.Tensor, kind: str = "int8", scale_dtype: Any = None) -> Quantized8Weight:
        """Quantize a float weight (N, K) by format.quantize8 (per row, absolute maximum), on the host;
        the module lands on the weight's device. Scales in `scale_dtype`, by default the weight's own
        where it is float16 or bfloat16, else float16."""
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.dtype not in _WEIGHT_DTYPES:
            got = f"{weight.dtype} {tuple(weight.shape)}" if isinstance(weight, torch.Tensor) else type(weight).__name__
            raise AutotuneError(f"8-bit quantize takes a float (N, K) matrix of 16, 32 or 64 bits, got {got}")
        if weight.is_meta:
            raise AutotuneError("the weight is on the meta device, with no values to quantize: materialise it first")
        own = weight.dtype if weight.dtype in SCALE_DTYPES else torch.float16
        names = {name: dtype for dtype, name in SCALE_DTYPES.items()}
        chosen = own if scale_dtype is None else names.get(int4.dtype_name(scale_dtype), scale_dtype)
        if chosen not in SCALE_DTYPES:
            name = int4.dtype_name(chosen)
            raise AutotuneError(f"8-bit scales are float16 or bfloat16 (the kernels' activations), not {name}")
        host = weight.detach().to(torch.float32).cpu().numpy()
        quantized = q8format.quantize8(host, kind, SCALE_DTYPES[chosen])
        return cls.from_weight8(quantized, weight.device)

    @classmethod
    def from_weight8(cls, weight: q8format.Weight8, device: Any = None) -> Quantized8Weight:
        """The module holding a format.Weight8 of numpy arrays, on `device`."""
        q8format.check8(weight)
        if weight.scale_dtype not in SCALE_DTYPES.values():
            raise AutotuneError(
                f"8-bit scales are float16 or bfloat16 (the kernels' activations), not {weight.scale_dtype}"
            )
        codes = torch.from_numpy(np.ascontiguousarray(weight.codes)).to(device)
        return cls(codes, host_tensor(weight.scales, weight.scale_dtype, device), weight.kind)

    @classmethod
    def empty(
        cls,
        out_features: int,
        in_features: int,
        kind: str = "int8",
        dtype: torch.dtype = torch.float16,
        device: Any = None,
    ) -> Quantized8Weight:
        """An uninitialised module of this shape and kind, for load_state_dict to fill."""
        if out_features <= 0 or in_features <= 0:
            raise AutotuneError(f"an 8-bit weight of ({out_features}, {in_features}) needs positive sizes")
        qweight = torch.empty((out_features, in_features), dtype=torch.uint8, device=device)
        return cls(qweight, torch.empty((out_features,), dtype=dtype, device=device), kind)

    @classmethod
    def empty_for(cls, meta: Mapping[str, Any], dtype: torch.dtype, device: Any) -> Quantized8Weight:
        return cls.empty(meta["out_features"], meta["in_features"], meta["format"], dtype, device)

    @classmethod
    def metadata(cls, state: Any) -> dict[str, Any]:
        keys = ("format", "in_features", "out_features")
        kinds = q8format.KINDS
        if not isinstance(state, Mapping) or any(key not in state for key in keys) or state["format"] not in kinds:
            held = held_format(state)
            raise AutotuneError(
                f"the state_dict holds no 8-bit weight metadata (extra state with {', '.join(keys)}){held}"
            )
        return checked_sizes({key: state[key] for key in keys})

    @staticmethod
    def described(meta: Mapping[str, Any]) -> str:
        return f"{meta['format']} ({meta['out_features']}, {meta['in_features']})"

    @property
    def variant(self) -> str:
        return self.kind

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight's values (N, K) in `dtype`, by default the activations' (float32: exact). In the
        activations' dtype they are made in it directly: a code is exact in float16 and bfloat16 and its
        product with the scale is rounded once, the bits of the float32 product rounded, with no
        float32 copies (a linear of more than 64 rows dequantizes on every call)."""
        codes = self.qweight.view(_CODE_VIEWS[self.kind])
        if dtype is None or dtype == self.dtype:
            return codes.to(self.dtype) * self.scales[:, None]
        return (codes.to(torch.float32) * self.scales.to(torch.float32)[:, None]).to(dtype)

    def get_extra_state(self) -> dict[str, Any]:
        return {"format": self.kind, "in_features": self.in_features, "out_features": self.out_features}


api.linear_takes(Quantized8Weight)  # autotune.linear takes it as a weight
