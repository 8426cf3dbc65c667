"""LowBitWeight: what the int4 (QuantizedWeight) and 8-bit (Quantized8Weight) weight modules share. Each
holds its format's codes and a `scales` buffer in the activations' dtype, is shaped as nn.Linear's
weight (out_features, in_features), runs autotune.linear as its forward, and carries its shape and
format as extra state, which a state_dict's load checks against the module it loads into.

A format says how its metadata reads (`metadata`), how a module of a metadata's shape is made
(`empty_for`), how it is named in messages (`described`), and what a load must check of the buffers it
brings (`check_buffers`). A load checks all of it before anything is copied: torch would copy a tensor of
another dtype by value (an int16 code of 300 becomes 44, bfloat16 scales overflow float16 into inf) and
reads the extra state only after the buffers, so a refused load would leave the module holding another
weight. Imported only where torch is, never by `import autotune`.
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

    def check_buffers(self, buffers: Mapping[str, torch.Tensor]) -> None:
        """Check the values of the buffers a load brings, each already of this module's dtype and shape."""
        if not bool(buffers["scales"].isfinite().all()):
            raise AutotuneError(f"the state_dict's {self.format_name} scales hold NaN or inf")

    # -- shared ---------------------------------------------------------------------------------

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], device: Any = None) -> Any:
        """A module holding a state_dict saved from one (its metadata says the shape and format)."""
        if not isinstance(state, Mapping):
            raise AutotuneError(f"a state_dict is a mapping of names to tensors, got {type(state).__name__}")
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

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        local_metadata: Any,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """torch's load of this module, after checking what it brings: the format first, then each
        buffer's dtype and shape, then (where all are there) their values (module docstring)."""
        if prefix + EXTRA_STATE in state_dict:
            self.set_extra_state(state_dict[prefix + EXTRA_STATE])
            # torch reports a missing or unexpected buffer after the others are copied, in many lines.
            described = f"this {self.format_name} weight ({self.described(self.get_extra_state())})"
            for name, buffer in self._buffers.items():
                if strict and buffer is not None and prefix + name not in state_dict:
                    raise AutotuneError(f"the state_dict has no {prefix}{name}, which {described} needs")
                if strict and buffer is None and prefix + name in state_dict:
                    raise AutotuneError(f"the state_dict holds {prefix}{name}, which {described} has none of")
        brought: dict[str, torch.Tensor] = {}
        for name, buffer in self._buffers.items():
            tensor = state_dict.get(prefix + name)
            if buffer is None or not isinstance(tensor, torch.Tensor):
                continue
            if tensor.dtype != buffer.dtype or tensor.shape != buffer.shape:
                raise AutotuneError(
                    f"the state_dict's {prefix}{name} is {_described(tensor)}, this {self.format_name} weight's"
                    f" {_described(buffer)} ({self.described(self.get_extra_state())})"
                )
            brought[name] = tensor
        if len(brought) == sum(buffer is not None for buffer in self._buffers.values()):
            self.check_buffers(brought)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        return self.described(self.get_extra_state()) + f", dtype={self.dtype}"


def checked_sizes(meta: dict[str, Any]) -> dict[str, Any]:
    """A state_dict's metadata, its in_features and out_features checked to be positive integers."""
    for key in ("out_features", "in_features"):
        size = meta[key]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise AutotuneError(f"the state_dict's metadata has {key} {size!r}, not a positive integer")
    return meta


def held_format(state: Any) -> str:
    """ " (it holds an int8 weight)": what a state_dict's extra state of another format says it holds."""
    return f" (it holds an {state['format']} weight)" if isinstance(state, Mapping) and "format" in state else ""


def _described(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)}"
