"""What autotune.linear(x, W) costs the host with an int4 weight W, counted as tests/test_launch_cost.py
counts a float16 launch: the Python functions a call of a seen signature runs, through a double of the
driver. The weight is a stand-in for QuantizedWeight (autotune/model/quantized.py needs torch) that
keeps its buffers where torch.nn.Module does, behind a Python __getattr__, so that reading them the
slow way counts as the Python call it is under torch."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

import autotune
from autotune import api, ops
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.ops import qdequant, qgemm
from autotune.ops.qgemm.call import input_dtypes
from autotune.ops.qgemm.format import variant_name
from autotune.runtime import operands
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice
from tests.test_launch_cost import _autotune_calls
from tests.test_runtime import H200, FakeCuda, FakeTensor, cuda  # noqa: F401

PACKAGE = str(Path(autotune.__file__).parent)
# Python functions per int4 linear() call of a seen signature: linear, _linear_quantized, Runtime._call
# (which writes out the short path of any number of inputs) and the plan's launch. Before, 17: also
# QuantizedWeight's shape and dtype properties, four nn.Module.__getattr__ (scales twice, qweight,
# zeros), signature_key, _launch_seen and the five entries of its generator of pointers.
MOST_CALLS = 4
# With 3-D or 1-D x (launched as it is) or a bias (read by the kernel as its C), no more.
MOST_CALLS_RESHAPED = MOST_CALLS


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


F16, U8 = _Dtype("torch.float16"), _Dtype("torch.uint8")


class Tensor(FakeTensor):
    """FakeTensor with its own dtype and the few tensor methods linear() uses, which record the new
    tensors they make (`made`): a view or a copy costs a torch call."""

    made: ClassVar[list[Tensor]] = []

    def __init__(self, shape: tuple[int, ...], pointer: int, dtype: _Dtype = F16, strides: Any = None) -> None:
        super().__init__(shape, pointer, strides)
        self.dtype = dtype  # type: ignore[assignment]
        Tensor.made.append(self)

    def stride(self) -> tuple[int, ...]:
        if self._strides is not None:
            return tuple(self._strides)
        return tuple(math.prod(self.shape[i + 1 :]) for i in range(len(self.shape)))

    def numel(self) -> int:
        return math.prod(self.shape)

    def is_contiguous(self) -> bool:
        plain = Tensor.stride(Tensor(self.shape, 0))
        Tensor.made.pop()
        return all(s == p or e == 1 for s, p, e in zip(self.stride(), plain, self.shape, strict=True))

    def contiguous(self) -> Tensor:
        return self if self.is_contiguous() else Tensor(self.shape, self._pointer + (64 << 20), self.dtype)

    def reshape(self, *shape: int) -> Tensor:  # a view where it can be, else a copy
        return Tensor(tuple(shape), self.contiguous()._pointer, self.dtype)

    def expand(self, *shape: int) -> Tensor:
        strides = (0,) * (len(shape) - len(self.shape)) + self.stride()
        return Tensor(tuple(shape), self._pointer, self.dtype, strides)

    def new_empty(self, shape: tuple[int, ...], dtype: Any = None) -> Tensor:
        return Tensor(tuple(shape), 9 << 20, self.dtype if dtype is None else dtype)

    def copy_(self, source: Tensor) -> Tensor:
        return self


Tensor.__module__ = "torch"  # described as a torch tensor


class Int4Module:
    """QuantizedWeight's attributes, with its buffers where torch.nn.Module keeps them."""

    def __init__(self, n: int, k: int, group: int, sym: bool) -> None:
        grouped = (n, k // group)
        zeros = None if sym else Tensor(grouped, 6 << 20, U8)
        qweight, scales = Tensor((n, k // 2), 4 << 20, U8), Tensor(grouped, 5 << 20)
        self._buffers = {"qweight": qweight, "scales": scales, "zeros": zeros}
        self.group, self.sym = group, sym
        self.out_features, self.in_features = n, k
        self.dequantized = 0

    def __getattr__(self, name: str) -> Any:  # nn.Module.__getattr__: a Python call per buffer read
        buffers = self.__dict__["_buffers"]
        if name in buffers:
            return buffers[name]
        raise AttributeError(name)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.out_features, self.in_features)

    @property
    def dtype(self) -> Any:
        return self.scales.dtype

    def dequantize(self) -> Tensor:
        self.dequantized += 1
        dequantized = Tensor(self.shape, 7 << 20)
        dequantized.T = dequantized  # type: ignore[attr-defined]  # only passed on to the GEMM
        return dequantized


def _ready(monkeypatch: pytest.MonkeyPatch, weight: Int4Module, m: int) -> Runtime:
    """api's launch path, as a first torch call leaves it, choosing the weight's int4 problem."""
    n, k = weight.shape
    dtype = "float16"
    problem = Problem(
        "qgemm", dtype, m, n, k, inputs=input_dtypes(dtype), variant=variant_name(weight.group, weight.sym)
    )
    # The int4 GEMM's problem for the weight; any other (the dequantization of many rows) at its default.
    runtime = Runtime(
        lambda p, device, db: Choice(
            problem if p.op == "qgemm" else p, H200.name, ops.for_problem(p).default_config(p), "default"
        )
    )
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    monkeypatch.setattr(operands, "empty_like", lambda a, shape, device, dtype=None: Tensor(shape, 9 << 20))
    runtime._tensor = FakeTensor
    runtime._raw_stream = lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(api, "_RUNTIME", runtime)
    # As model/quantized.py registers QuantizedWeight (api.linear_takes).
    monkeypatch.setattr(api, "QUANTIZED_TYPES", (*api.QUANTIZED_TYPES, Int4Module))
    return runtime


def _python_calls(call: Callable[[], Any]) -> list[str]:
    """The Python functions `call` enters that a real call runs too: autotune's, and the weight's
    (QuantizedWeight's properties, nn.Module's __getattr__); the fake tensors' stand for torch's C."""
    return _autotune_calls(call, also="Int4Module.")


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("rows", [1, 16])
def test_an_int4_linear_of_a_seen_signature_runs_its_entry_and_launch_only(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    sym: bool,
    rows: int,
) -> None:
    weight = Int4Module(512, 1024, 128, sym)
    _ready(monkeypatch, weight, rows)
    cuda.arg_types = qgemm.OP.arg_types
    x = Tensor((rows, 1024), 1 << 20)
    first = api.linear(x, weight)
    Tensor.made.clear()
    calls = _python_calls(lambda: api.linear(x, weight))
    assert len(calls) <= MOST_CALLS, calls
    # x is launched as it is and the output comes back as made: no view of either.
    assert [t.shape for t in Tensor.made] == [(rows, 512)] and first.shape == (rows, 512)
    zeros = 0 if sym else 6 << 20
    assert [launch.args[:5] for launch in cuda.launches] == [[1 << 20, 4 << 20, 5 << 20, zeros, 9 << 20]] * 2


@pytest.mark.parametrize("case", ["3-D x", "vector x", "bias"])
def test_an_int4_linear_with_3d_or_1d_x_or_a_bias_stays_on_the_short_path(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    weight = Int4Module(512, 1024, 64, False)
    _ready(monkeypatch, weight, {"3-D x": 6, "vector x": 1, "bias": 2}[case])
    cuda.arg_types = qgemm.OP.arg_types
    x = Tensor({"3-D x": (2, 3, 1024), "vector x": (1024,), "bias": (2, 1024)}[case], 1 << 20)
    bias = Tensor((512,), 8 << 20) if case == "bias" else None
    first = api.linear(x, weight, bias)
    Tensor.made.clear()
    calls = _python_calls(lambda: api.linear(x, weight, bias))
    assert len(calls) <= MOST_CALLS_RESHAPED, calls
    assert first.shape == (*x.shape[:-1], 512) and len(cuda.launches) == 2
    # x goes in as it is (the op reads (..., K) as rows) and the output is made in its final shape:
    # the only new tensor is the output, no view of x or of the result.
    assert [t.shape for t in Tensor.made] == [first.shape]
    assert {launch.args[0] for launch in cuda.launches} == {1 << 20}
    assert {launch.args[9] for launch in cuda.launches} == {1.0 if case == "bias" else 0.0}  # beta: C read


def test_a_bias_is_copied_into_a_new_output_also_for_one_row(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One row's bias (n,) expanded to (1, n) is contiguous already: contiguous() would hand the
    kernel the bias itself as its C, and the call would overwrite it."""
    weight = Int4Module(512, 1024, 128, True)
    _ready(monkeypatch, weight, 1)
    cuda.arg_types = qgemm.OP.arg_types
    bias = Tensor((512,), 8 << 20)
    y = api.linear(Tensor((1, 1024), 1 << 20), weight, bias)
    assert y.data_ptr() != bias.data_ptr() and cuda.launches[0].args[4] == y.data_ptr()


def test_non_contiguous_x_is_made_contiguous_and_many_rows_dequantize(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    weight = Int4Module(512, 1024, 128, True)
    runtime = _ready(monkeypatch, weight, 4)
    cuda.arg_types = qgemm.OP.arg_types
    strided = Tensor((4, 1024), 1 << 20, strides=(2048, 1))  # every other row of a wider matrix
    api.linear(strided, weight)
    assert cuda.launches[-1].args[0] == (1 << 20) + (64 << 20)  # a contiguous copy, not x
    # More rows than the int4 GEMM takes: one dequantization kernel writes the dense weight (codes,
    # scales, no zeros, out), and the dense GEMM runs x times its transpose.
    gemms: list[tuple[Any, ...]] = []
    monkeypatch.setattr(runtime, "gemm", lambda a, b, **options: gemms.append((a, b)) or "dense GEMM")
    monkeypatch.setattr(FakeTensor, "T", property(lambda t: ("transposed", t.data_ptr())), raising=False)
    cuda.arg_types = qdequant.OP.arg_types
    many = Tensor((qgemm.MAX_M + 1, 1024), 1 << 20)
    assert api.linear(many, weight) == "dense GEMM" and weight.dequantized == 0
    dequant = cuda.launches[-1]
    assert len(cuda.launches) == 2 and dequant.args[:6] == [4 << 20, 5 << 20, 0, 9 << 20, 512, 1024]
    assert gemms == [(many, ("transposed", 9 << 20))]
    with pytest.raises(AutotuneError, match="features"):
        api.linear(Tensor((1, 1000), 1 << 20), weight)
    with pytest.raises(AutotuneError, match="no rows"):
        api.linear(Tensor((0, 1024), 1 << 20), weight)
