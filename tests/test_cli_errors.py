"""Errors that name the real cause: a tensor on the wrong device, an unknown GPU the same way in every
command, `--gpu` rather than Python's keyword, counts in the right number."""

from __future__ import annotations

from typing import Any

import pytest

import autotune
from autotune.core.errors import AutotuneError


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class _Device:
    def __init__(self, kind: str) -> None:
        self.type = kind

    def __str__(self) -> str:
        return self.type


class HostTensor:
    """As much of a torch tensor in host memory as the launch path reads before refusing it."""

    is_cuda = False

    def __init__(self, shape: tuple[int, ...], dtype: str = "float16", device: str = "cpu") -> None:
        self.shape, self.dtype, self.device = shape, _Dtype(dtype), _Device(device)

    def stride(self) -> tuple[int, ...]:
        return (self.shape[1], 1) if len(self.shape) == 2 else (1,)

    def get_device(self) -> int:
        return -1

    def data_ptr(self) -> int:
        return 4096


HostTensor.__module__ = "torch"  # described as a torch tensor


CALLS: dict[str, Any] = {
    "gemv": lambda: autotune.gemv(HostTensor((64, 128)), HostTensor((128,))),
    "gemm": lambda: autotune.gemm(HostTensor((64, 128)), HostTensor((128, 32))),
    "linear": lambda: autotune.linear(HostTensor((1, 128)), HostTensor((64, 128))),
    "warmup": lambda: autotune.warmup(gemv=[(HostTensor((64, 128)), HostTensor((128,)))]),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_cpu_tensor_of_a_good_dtype_is_told_its_device(call: str) -> None:
    with pytest.raises(AutotuneError) as error:
        CALLS[call]()
    message = str(error.value)
    assert "on the CPU" in message and ".cuda()" in message
    assert "float16" not in message  # the dtype is fine: the message must not send the user there


def test_a_tensor_wrong_in_device_and_dtype_is_told_both() -> None:
    with pytest.raises(AutotuneError, match=r"A is a tensor on the CPU and of dtype torch\.float64") as error:
        autotune.gemv(HostTensor((64, 128), "float64"), HostTensor((128,), "float64"))
    assert "float32, float16 or bfloat16" in str(error.value)


def test_a_tensor_on_another_device_names_it() -> None:
    with pytest.raises(AutotuneError, match=r"A is a tensor on device 'meta'"):
        autotune.gemv(HostTensor((64, 128), device="meta"), HostTensor((128,)))
