"""Runtime.call with inputs of different dtypes (an int4 weight packed in uint8, float16 scales) and
an optional input left out (a symmetric weight's zeros), against a double of the CUDA driver (no GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from autotune import ops
from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.gpu import driver
from autotune.runtime import operands
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice
from tests.mixed_op import Mixed
from tests.test_launch import CudaArray
from tests.test_runtime import H200, FakeCuda, FakeTensor, cuda  # noqa: F401

M, N, K = 4, 64, 256


class _Uint8:
    def __str__(self) -> str:
        return "torch.uint8"


class ByteTensor(FakeTensor):
    """A CUDA torch tensor of uint8 (a packed weight), as far as the launch path reads one."""

    dtype = _Uint8()  # type: ignore[assignment]


ByteTensor.__module__ = "torch"


@pytest.fixture
def mixed(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mixed]:  # noqa: F811
    op = Mixed()
    ops.register(op)
    cuda.arg_types = op.arg_types
    monkeypatch.setattr(driver, "pointer_device", lambda pointer: 0)
    yield op
    ops.unregister(op.name)


def _runtime(op: Mixed) -> Runtime:
    """A runtime whose selector answers the call's own problem with the op's default config."""
    return Runtime(lambda problem, device, db: Choice(problem, H200.name, {"threads": 64}, "default"))


def _arrays(zeros: bool) -> list[CudaArray | None]:
    x, qweight = CudaArray((M, K), pointer=1 << 24), CudaArray((N, K // 2), "|u1", pointer=2 << 24)
    scales = CudaArray((N, K // 32), pointer=3 << 24)
    return [x, qweight, scales, CudaArray((N, K // 32), "|u1", pointer=4 << 24) if zeros else None]


@pytest.mark.parametrize("zeros", [True, False])
def test_an_optional_input_left_out_is_a_null_pointer_and_none_to_bind(
    cuda: FakeCuda,  # noqa: F811
    mixed: Mixed,
    zeros: bool,
) -> None:
    y = CudaArray((M, N), pointer=5 << 24)
    assert _runtime(mixed).call(mixed, *_arrays(zeros), out=y) is y
    (launch,) = cuda.launches
    assert launch.args[:8] == [1 << 24, 2 << 24, 3 << 24, (4 << 24) if zeros else 0, 5 << 24, M, N, K]
    _, qweight, _, given_zeros = mixed.bound[-1]
    assert qweight is not None and qweight.dtype == "uint8" and qweight.shape == (N, K // 2)
    assert (given_zeros is not None) == zeros


def test_a_required_input_left_out_is_a_one_line_error(cuda: FakeCuda, mixed: Mixed) -> None:  # noqa: F811
    x, qweight, _, zeros = _arrays(True)
    with pytest.raises(AutotuneError, match=r"^scales is required$"):
        _runtime(mixed).call(mixed, x, qweight, None, zeros, out=CudaArray((M, N)))
    assert cuda.launches == [] and mixed.bound == []


def test_uint8_arrays_describe_as_uint8() -> None:
    packed = operands.describe(CudaArray((N, K // 2), "|u1", strides=(K, 1)), "qweight")
    assert (packed.dtype, packed.strides) == ("uint8", (K, 1))  # bytes are elements
    assert operands.describe(ByteTensor((N, K // 2), 1 << 20), "qweight").dtype == "uint8"
    with pytest.raises(AutotuneError, match=r"^q must hold float32 or float16 \(uint8: a packed weight\), got"):
        operands.describe(CudaArray((8,), "<i4"), "q")


def test_a_float_op_given_uint8_arrays_is_a_one_line_error(cuda: FakeCuda) -> None:  # noqa: F811
    runtime = Runtime(lambda problem, device, db: pytest.fail("nothing is selected for uint8"))
    with pytest.raises(AutotuneError, match=r"^gemv computes in float32, float16 or bfloat16, not uint8$"):
        runtime.gemv(CudaArray((64, 128), "|u1"), CudaArray((128,), "|u1"))
    assert cuda.launches == []


def test_a_new_output_has_the_problems_dtype_not_the_first_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, str | None]] = []
    monkeypatch.setattr(operands, "empty_like", lambda a, shape, device, dtype=None: made.append((a.dtype, dtype)))
    packed = DeviceArray(None, 16, (N, K // 2), None, "uint8", "torch", 0)
    scales = DeviceArray(None, 32, (N, K // 32), None, "float16", "torch", 0)
    operands.new_output([packed, scales], "float16", (M, N), 0)  # like the float16 input
    operands.new_output([packed], "bfloat16", (M, N), 0)  # like the first, in the problem's dtype
    assert made == [("float16", None), ("uint8", "bfloat16")]


def test_a_seen_torch_signature_with_an_input_left_out_launches_a_null_pointer(
    cuda: FakeCuda,  # noqa: F811
    mixed: Mixed,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = _runtime(mixed)
    runtime._tensor, runtime._raw_stream = FakeTensor, lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    new: list[Any] = []
    monkeypatch.setattr(operands, "empty_like", lambda a, shape, device, dtype=None: FakeTensor(shape, 9 << 20))
    monkeypatch.setattr(
        FakeTensor, "new_empty", lambda self, shape, dtype: new.append(str(dtype)) or FakeTensor(shape, 8 << 20), False
    )
    x, qweight = FakeTensor((M, K), 1 << 24), ByteTensor((N, K // 2), 2 << 24)
    scales = FakeTensor((N, K // 32), 3 << 24)
    for _ in range(2):  # described and checked, then the short path
        runtime.call(mixed, x, qweight, scales, None)
    assert len(mixed.bound) == 1 and new == ["torch.float16"]
    assert [launch.args[:5] for launch in cuda.launches] == [
        [1 << 24, 2 << 24, 3 << 24, 0, 9 << 20],
        [1 << 24, 2 << 24, 3 << 24, 0, 8 << 20],
    ]
