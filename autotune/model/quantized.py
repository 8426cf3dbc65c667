"""QuantizedWeight: an int4 weight as a torch module, what autotune.quantize returns for a tensor.

Its buffers are the canonical format's arrays (autotune/ops/qgemm/format.py, docs/lowbit.md): qweight,
scales and zeros (None when symmetric, so absent from the state_dict); the metadata travels as the
module's extra state, so a state_dict loads into QuantizedWeight.from_state_dict or into a module of the
same shape made by QuantizedWeight.empty. Imported only where torch is, never by `import autotune`.

It sits in model/, beside the library surface, not with the int4 op in ops/qgemm/: its forward is
autotune.linear, and it makes autotune.linear take it as a weight; the op below knows neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from autotune import api
from autotune.core.errors import AutotuneError
from autotune.model.low_bit_weight import LowBitWeight, checked_sizes, held_format
from autotune.ops.qgemm import checkpoints
from autotune.ops.qgemm import format as int4

FORMAT = "int4"


class QuantizedWeight(LowBitWeight):
    """An int4 weight of shape (out_features, in_features) = (N, K), in nn.Linear's layout."""

    format_name = FORMAT
    qweight: torch.Tensor
    zeros: torch.Tensor | None

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group: int) -> None:
        super().__init__()
        n, k = int4.check_format(qweight, scales, zeros, group)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)
        self.group, self.sym = group, zeros is None
        self.out_features, self.in_features = n, k

    @classmethod
    def from_float(
        cls, weight: torch.Tensor, group: int = 128, sym: bool = True, scale_dtype: Any = None
    ) -> QuantizedWeight:
        """Quantize a float weight (N, K) on its device (format.quantize_int4 says how)."""
        quantized = int4.quantize_int4(weight.detach(), group, sym, scale_dtype)
        return cls(quantized.qweight, quantized.scales, quantized.zeros, quantized.group)

    @classmethod
    def from_int4(cls, weight: int4.Int4Weight, device: Any = None) -> QuantizedWeight:
        """The module holding an Int4Weight of numpy arrays (a checkpoint's), on `device`."""
        zeros = None if weight.zeros is None else torch.from_numpy(weight.zeros).to(device)
        return cls(
            torch.from_numpy(weight.qweight).to(device),
            host_tensor(weight.scales, weight.scale_dtype, device),
            zeros,
            weight.group,
        )

    @classmethod
    def from_awq(cls, qweight: Any, qzeros: Any, scales: Any, group: int, version: str = "gemm") -> QuantizedWeight:
        """AWQ's "gemm" packing (tensors) -> the module, on the tensors' device (checkpoints.py says how)."""
        device = qweight.device
        weight = checkpoints.from_awq(_array(qweight), _array(qzeros), _array(scales), group, version)
        return cls.from_int4(weight, device)

    @classmethod
    def from_gptq(
        cls,
        qweight: Any,
        qzeros: Any,
        scales: Any,
        g_idx: Any = None,
        group: int = 128,
        sym: bool | None = None,
        checkpoint_format: str = "gptq",
    ) -> QuantizedWeight:
        """GPTQ's packing (tensors) -> the module, on the tensors' device (checkpoints.py says how)."""
        device = qweight.device
        g_idx = None if g_idx is None else _array(g_idx)
        weight = checkpoints.from_gptq(
            _array(qweight), _array(qzeros), _array(scales), g_idx, group, sym, checkpoint_format
        )
        return cls.from_int4(weight, device)

    @classmethod
    def empty(
        cls,
        out_features: int,
        in_features: int,
        group: int = 128,
        sym: bool = True,
        dtype: torch.dtype = torch.float16,
        device: Any = None,
    ) -> QuantizedWeight:
        """An uninitialised module of this shape and format, for load_state_dict to fill."""
        group = int4.check_group(group)
        if in_features % group or in_features <= 0 or out_features <= 0:
            raise AutotuneError(
                f"an int4 weight of ({out_features}, {in_features}) needs positive sizes and K a multiple of {group}"
            )
        grouped = (out_features, in_features // group)
        qweight = torch.empty((out_features, in_features // 2), dtype=torch.uint8, device=device)
        scales = torch.empty(grouped, dtype=dtype, device=device)
        zeros = None if sym else torch.zeros(grouped, dtype=torch.uint8, device=device)
        return cls(qweight, scales, zeros, group)

    @classmethod
    def empty_for(cls, meta: Mapping[str, Any], dtype: torch.dtype, device: Any) -> QuantizedWeight:
        return cls.empty(meta["out_features"], meta["in_features"], meta["group"], meta["sym"], dtype, device)

    @classmethod
    def metadata(cls, state: Any) -> dict[str, Any]:
        keys = ("format", "group", "sym", "in_features", "out_features")
        if not isinstance(state, Mapping) or any(key not in state for key in keys) or state["format"] != FORMAT:
            held = held_format(state)
            raise AutotuneError(
                f"the state_dict holds no int4 weight metadata (extra state with {', '.join(keys)}){held}"
            )
        meta = {key: state[key] for key in keys}
        int4.check_group(meta["group"])
        if not isinstance(meta["sym"], bool):
            raise AutotuneError(f"the state_dict's int4 metadata has sym {meta['sym']!r}, not True or False")
        return checked_sizes(meta)

    @staticmethod
    def described(meta: Mapping[str, Any]) -> str:
        variant = int4.variant_name(meta["group"], meta["sym"])
        return f"{variant} ({meta['out_features']}, {meta['in_features']})"

    @property
    def variant(self) -> str:
        return int4.variant_name(self.group, self.sym)

    def weight(self) -> int4.Int4Weight:
        """The buffers as the format's Int4Weight, checked (a load may have replaced them)."""
        return int4.int4_weight(self.qweight, self.scales, self.zeros, self.group)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight's values (N, K) in `dtype`, by default the activations' (float32: exact). In
        the activations' dtype they are made in it directly, the same bits with no float32 copies."""
        # The zero points' values were checked when the buffers were made or loaded; reading them back
        # on every call would wait for the GPU (a linear of more than 64 rows dequantizes on each call)
        # and cannot run inside a CUDA graph's capture.
        weight = int4.int4_weight(self.qweight, self.scales, self.zeros, self.group, values=False)
        if dtype is None or dtype == self.dtype:
            return int4.dequantize_in_scale_dtype(weight)
        return int4.dequantize(weight).to(dtype)

    def get_extra_state(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "group": self.group,
            "sym": self.sym,
            "in_features": self.in_features,
            "out_features": self.out_features,
        }

    def check_buffers(self, buffers: Mapping[str, torch.Tensor]) -> None:
        super().check_buffers(buffers)
        int4.int4_weight(buffers["qweight"], buffers["scales"], buffers.get("zeros"), self.group)  # zeros in [0, 15]


def _array(tensor: Any) -> Any:
    """A tensor's values as a numpy array on the host (bfloat16 as its uint16 words); anything else as
    it is, for the format's checks to name."""
    if not isinstance(tensor, torch.Tensor):
        return tensor
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def host_tensor(array: Any, dtype: str, device: Any) -> torch.Tensor:
    """numpy -> torch on `device`; bfloat16's uint16 words become bfloat16."""
    if dtype == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(array).to(device)


api.linear_takes(QuantizedWeight)  # autotune.linear takes it as a weight
