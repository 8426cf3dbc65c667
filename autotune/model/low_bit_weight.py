"""LowBitWeight: what the int4 (QuantizedWeight) and 8-bit (Quantized8Weight) weight modules share. Each
holds its format's codes and a `scales` buffer in the activations' dtype, is shaped as nn.Linear's
weight (out_features, in_features), runs autotune.linear as its forward, and carries its shape and
format as extra state, which a state_dict's load checks against the module it loads into.

A format says how its metadata reads (`metadata`), how a module of a metadata's shape is made
(`empty_for`), how it is named in messages (`described`), and what a load must check of its buffers
(`check_loaded`). Imported only where torch is, never by `import autotune`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from autotune import api
from autotune.core.errors import AutotuneError

EXTRA_STATE = "_extra_state"  # torch's key for get_extra_state's value in a state_dict


class LowBitWeight(torch.nn.Module):  # type: ignore[misc]  # torch is untyped where it is not installed
    """A low-bit weight of shape (out_features, in_features) = (N, K), in nn.Linear's layout."""

    format_name: ClassVar[str]  # how messages name the format: "int4", "8-bit"
    scales: torch.Tensor
    out_features: int
    in_features: int

    # -- what each format says --------------------------------------------------------------------

    @classmethod
    def metadata(cls, state: Any) -> dict[str, Any]:
        """A state_dict's extra state, checked to be this format's: its keys and values."""
        raise NotImplementedError

    @classmethod
    def empty_for(cls, meta: Mapping[str, Any], dtype: torch.dtype, device: Any) -> LowBitWeight:
        """An uninitialised module of the shape and format `meta` names, scales in `dtype`."""
        raise NotImplementedError

    @staticmethod
    def described(meta: Mapping[str, Any]) -> str:
        """The format and shape a metadata names, as messages and repr show them."""
        raise NotImplementedError

    def get_extra_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def check_loaded(self) -> None:
        """Check the buffers a load has just replaced (nothing by default)."""

    # -- shared ---------------------------------------------------------------------------------

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], device: Any = None) -> Any:
        """A module holding a state_dict saved from one (its metadata says the shape and format)."""
        meta = cls.metadata(state.get(EXTRA_STATE))
        scales = state.get("scales")
        if not isinstance(scales, torch.Tensor):
            raise AutotuneError(f"the {cls.format_name} state_dict has no scales tensor")
        module = cls.empty_for(meta, scales.dtype, device)
        module.load_state_dict(state)
        return module

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.out_features, self.in_features))

    @property
    def dtype(self) -> torch.dtype:
        """The activations' dtype: the scales' (float16 or bfloat16)."""
        return self.scales.dtype

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x @ W^T (+ bias), what autotune.linear(x, self, bias) computes."""
        return api.linear(x, self, bias)

    def set_extra_state(self, state: Any) -> None:
        meta = self.metadata(state)
        if meta != self.get_extra_state():
            raise AutotuneError(
                f"the state_dict holds an {self.format_name} weight {self.described(meta)}, this module {self}"
            )
        self.check_loaded()

    def extra_repr(self) -> str:
        return self.described(self.get_extra_state()) + f", dtype={self.dtype}"
