"""What runs in a patched linear's place: PatchedLinear (its float weight), Int4Linear (its weight as an
int4 QuantizedWeight) and Int8Linear (an 8-bit Quantized8Weight), each on our kernels where the weight is
on a GPU and on F.linear elsewhere.

A linear becomes one of them by a change of class (`adopt`), the way torch.nn.utils.parametrize
changes a module's class: the module object stays the one its parent, a peft wrapper or a forward hook
holds, and keeps its Parameters (a tie such as lm_head's and embed_tokens' holds), its hooks and its
attributes. `release` turns it back into a plain nn.Linear.
"""

from __future__ import annotations

from typing import Any

import torch

import autotune.runtime.torch_ops  # noqa: F401  (registers torch.ops.autotune.*, which compiled graphs call)
from autotune import api
from autotune.model.low_bit_weight import LowBitWeight
from autotune.model.quantized import QuantizedWeight
from autotune.model.quantized8 import Quantized8Weight
from autotune.ops import q8gemm, qgemm
from autotune.ops.qgemm import format as int4

# Our kernels run CUDA tensors; a patched model moved elsewhere (.cpu(), .to("meta")) runs F.linear, so
# that .to() after patching keeps working. The CPU tests set this to send every device's tensors down
# the launch path, which they replace by a double that multiplies with torch.
ANY_DEVICE = False


def float_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, db: str | None) -> Any:
    """F.linear(x, weight, bias) on our kernels where the weight is on a GPU and x in its dtype;
    F.linear itself otherwise (another device, or autocast's mixed dtypes, whose rules it keeps)."""
    if not (weight.is_cuda or ANY_DEVICE) or x.dtype is not weight.dtype:
        return torch.nn.functional.linear(x, weight, bias)
    if torch.compiler.is_compiling():
        # The launch path is Python that dynamo cannot trace: a compiled graph calls the torch op.
        return torch.ops.autotune.linear(x, weight, bias)
    return api.linear(x, weight, bias, db=db)


def int4_linear(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None, db: str | None) -> Any:
    """F.linear(x, W, bias) for an int4 W: our int4 kernels where W is on a GPU and x in its scales'
    dtype; F.linear on the dequantized weight otherwise."""
    buffers = weight._buffers  # not weight.scales: nn.Module.__getattr__ costs host time in eager decode
    scales = buffers["scales"]
    if not (scales.is_cuda or ANY_DEVICE) or x.dtype is not scales.dtype:
        return torch.nn.functional.linear(x, dequantized(weight, x.dtype), bias)
    if torch.compiler.is_compiling():
        return _compiled_int4_linear(x, weight, bias)
    return api.linear(x, weight, bias, db=db)


def _compiled_int4_linear(x: torch.Tensor, weight: QuantizedWeight, bias: torch.Tensor | None) -> Any:
    """What api.linear does with an int4 weight, in torch ops that dynamo traces: the int4 kernels up to
    qgemm.MAX_M rows of x, beyond them the float GEMM on the weight the dequantization op writes (in
    x's dtype, the scales')."""
    buffers = weight._buffers
    if x.numel() > qgemm.MAX_M * weight.in_features:
        dense = torch.ops.autotune.qdequant(buffers["qweight"], buffers["scales"], buffers["zeros"])
        return torch.ops.autotune.linear(x, dense, bias)
    y = torch.ops.autotune.qgemm(x.contiguous(), buffers["qweight"], buffers["scales"], buffers["zeros"])
    return y if bias is None else y + bias  # the qgemm op takes no bias: Inductor fuses the add


def eight_bit_linear(x: torch.Tensor, weight: Quantized8Weight, bias: torch.Tensor | None, db: str | None) -> Any:
    """F.linear(x, W, bias) for an 8-bit W: the q8gemm op where W is on a GPU and x in its scales' dtype,
    F.linear on the dequantized weight otherwise."""
    scales = weight._buffers["scales"]
    if not (scales.is_cuda or ANY_DEVICE) or x.dtype is not scales.dtype:
        return torch.nn.functional.linear(x, weight.dequantize(x.dtype), bias)
    if torch.compiler.is_compiling():
        return _compiled_eight_bit_linear(x, weight, bias)
    return api.linear(x, weight, bias, db=db)


def _compiled_eight_bit_linear(x: torch.Tensor, weight: Quantized8Weight, bias: torch.Tensor | None) -> Any:
    """What api.linear does with an 8-bit weight, in torch ops that dynamo traces: the q8gemm op up to
    q8gemm.LINEAR_MAX_M rows of x, beyond them the float GEMM on the weight dequantized in x's dtype."""
    buffers = weight._buffers
    if x.numel() > q8gemm.LINEAR_MAX_M * weight.in_features:
        return torch.ops.autotune.linear(x, weight.dequantize(), bias)
    y = torch.ops.autotune.q8gemm(x.contiguous(), buffers["qweight"], buffers["scales"], 1.0, weight.kind)
    return y if bias is None else y + bias  # the op takes no bias: Inductor fuses the add


def dequantized(weight: QuantizedWeight, dtype: torch.dtype) -> Any:
    """The int4 weight's values in `dtype`, from its buffers as they are: QuantizedWeight.dequantize
    checks the format first, with a data-dependent read that would break a compiled graph."""
    buffers = weight._buffers
    stored = int4.Int4Weight(
        buffers["qweight"],
        buffers["scales"],
        buffers["zeros"],
        weight.group,
        weight.sym,
        weight.out_features,
        weight.in_features,
        "float16",  # only numpy's bfloat16 words need the name: torch scales are read in their own dtype
    )
    return int4.dequantize(stored).to(dtype)


class PatchedLinear(torch.nn.Linear):  # type: ignore[misc]  # torch is untyped where it is not installed
    """An nn.Linear running autotune.linear (torch.ops.autotune.linear under torch.compile): the same
    weight and bias Parameters and state_dict keys as before."""

    db: str | None  # the database the launch path selects from (eager calls; the torch op takes none)

    @classmethod
    def adopt(cls, linear: torch.nn.Linear, db: str | None) -> PatchedLinear:
        linear.__class__ = cls
        linear.db = db
        return linear  # type: ignore[no-any-return]

    def forward(self, input: torch.Tensor) -> Any:  # nn.Linear's name for it
        parameters = self._parameters
        return float_linear(input, parameters["weight"], parameters["bias"], self.db)

    def release(self) -> torch.nn.Linear:
        """Back to a plain nn.Linear, with the same Parameters."""
        del self.db
        self.__class__ = torch.nn.Linear
        return self


class QuantizedLinear(torch.nn.Module):  # type: ignore[misc]
    """A linear whose weight is a low-bit weight module, a child named `weight` (its buffers' state_dict
    keys `weight.qweight`, `weight.scales`, ... beside `bias`): what Int4Linear and Int8Linear share.
    Frozen: x and the bias get gradients, the weight none."""

    in_features: int
    out_features: int
    db: str | None
    label = ""  # what extra_repr writes before the weight's variant

    @classmethod
    def adopt(cls, linear: torch.nn.Linear, quantized: LowBitWeight, db: str | None) -> Any:
        """`linear` holding `quantized` instead of its float weight, which it drops."""
        del linear._parameters["weight"]  # its memory is freed where nothing else holds it
        linear.__class__ = cls
        linear.weight = quantized
        linear.db = db
        return linear

    def release(self) -> torch.nn.Linear:
        """Back to a plain nn.Linear whose weight is the low-bit weight dequantized (a new Parameter in the
        scales' dtype: the float weight quantized away is not restored)."""
        weight = torch.nn.Parameter(self._modules["weight"].dequantize())
        del self.db
        del self._modules["weight"]
        self.__class__ = torch.nn.Linear
        self.weight = weight
        return self

    def extra_repr(self) -> str:
        has_bias = self._parameters["bias"] is not None
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={has_bias}, "
            f"weight={self.label}{self._modules['weight'].variant}"
        )


class Int4Linear(QuantizedLinear):
    """A linear whose weight is an int4 QuantizedWeight: state_dict keys `weight.qweight`, `weight.scales`,
    `weight.zeros` (asymmetric only) and `weight._extra_state`, beside `bias`."""

    label = "int4 "

    def forward(self, input: torch.Tensor) -> Any:
        return int4_linear(input, self._modules["weight"], self._parameters["bias"], self.db)


class Int8Linear(QuantizedLinear):
    """A linear whose weight is an 8-bit Quantized8Weight (int8 or fp8 codes): state_dict keys
    `weight.qweight`, `weight.scales` and `weight._extra_state`, beside `bias`."""

    def forward(self, input: torch.Tensor) -> Any:
        return eight_bit_linear(input, self._modules["weight"], self._parameters["bias"], self.db)
