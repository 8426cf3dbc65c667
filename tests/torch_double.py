"""A double of the launch path for CPU tests where torch is installed: the calls autotune.linear and the
torch ops make (gemm, gemv, the int4 qgemm and qdequant, the 8-bit q8gemm), done by torch on the CPU and
counted. `install` puts it in the launch path's place, registers CPU kernels for torch.ops.autotune.linear,
gemm, qgemm, qdequant and q8gemm (so that torch.compile's graphs run on the CPU too) and lets patched
models send CPU tensors down that path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from autotune import api
from autotune.ops.qgemm import format as int4


class TorchRuntime:
    """The launch path's calls, by torch; `calls` names each one made (gemm, gemv, qgemm)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _called(self, name: str) -> None:
        # The real launch path is Python that dynamo cannot trace, where this double is torch it can:
        # a compiled graph must reach it through a torch op, whose kernel runs outside the trace.
        assert not torch.compiler.is_compiling(), f"dynamo traced the launch path's {name}: call the torch op"
        self.calls.append(name)

    def gemm(self, a: Any, b: Any, out: Any = None, beta: float = 0.0, db: str | None = None) -> Any:
        self._called("gemm")
        return _into(a @ b, out, beta)

    def gemv(self, a: Any, x: Any, out: Any = None, beta: float = 0.0, db: str | None = None) -> Any:
        self._called("gemv")
        return _into(x @ a.T, out, beta)  # a (1, K) x gives a (1, N) y, as the launch path's GEMV does

    def _call(self, op: Any, arrays: Any, out: Any, alpha: float, beta: float, *rest: Any) -> Any:
        """The int4 ops: qgemm (x, qweight, scales, zeros), x times the weight the arrays hold, dequantized;
        qdequant (qweight, scales, zeros), that weight in the scales' dtype; the 8-bit q8gemm (x, qweight,
        scales; options (kind,) last) as qgemm."""
        assert op.name in ("qgemm", "qdequant", "q8gemm"), op.name
        self._called(op.name)
        if op.name == "q8gemm":
            result = _eight_bit_product(*arrays, *rest[-1])
        else:
            result = _int4_product(*arrays) if op.name == "qgemm" else _int4_weight(*arrays)
        return _into(alpha * result, out, beta)


def _into(product: Any, out: Any, beta: float) -> Any:
    return product if out is None else out.copy_(beta * out + product)


def _int4_product(x: Any, qweight: Any, scales: Any, zeros: Any = None) -> Any:
    group = x.shape[-1] // scales.shape[1]
    weight = int4.dequantize(int4.int4_weight(qweight, scales, zeros, group))
    return (x.float() @ weight.T).to(x.dtype)


def _eight_bit_product(x: Any, qweight: Any, scales: Any, kind: str = "int8") -> Any:
    codes = qweight.view(torch.int8 if kind == "int8" else torch.float8_e4m3fn).float()
    return (x.float() @ (codes * scales.float()[:, None]).T).to(x.dtype)


def _int4_weight(qweight: Any, scales: Any, zeros: Any = None) -> Any:
    group = 2 * qweight.shape[1] // scales.shape[1]
    return int4.dequantize(int4.int4_weight(qweight, scales, zeros, group)).to(scales.dtype)


@contextmanager
def _cpu_kernels(runtime: TorchRuntime) -> Iterator[None]:
    """CPU kernels for the torch ops a patched model's compiled graph calls, through `runtime`."""
    library = torch.library.Library("autotune", "IMPL")

    def linear(x: Any, weight: Any, bias: Any = None) -> Any:
        return api.linear(x, weight, bias)

    def gemm(a: Any, b: Any, alpha: float = 1.0) -> Any:
        return alpha * runtime.gemm(a, b)

    def qgemm(x: Any, qweight: Any, scales: Any, zeros: Any = None, alpha: float = 1.0) -> Any:
        runtime._called("qgemm")
        return alpha * _int4_product(x, qweight, scales, zeros)

    def qdequant(qweight: Any, scales: Any, zeros: Any = None, alpha: float = 1.0) -> Any:
        runtime._called("qdequant")
        return alpha * _int4_weight(qweight, scales, zeros)

    def q8gemm(x: Any, qweight: Any, scales: Any, alpha: float = 1.0, kind: str = "int8") -> Any:
        runtime._called("q8gemm")
        return alpha * _eight_bit_product(x, qweight, scales, kind)

    library.impl("linear", linear, "CPU")
    library.impl("gemm", gemm, "CPU")
    library.impl("qgemm", qgemm, "CPU")
    library.impl("qdequant", qdequant, "CPU")
    library.impl("q8gemm", q8gemm, "CPU")
    try:
        yield
    finally:
        library._destroy()


@contextmanager
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[TorchRuntime]:
    """The double as the launch path, with CPU kernels for the torch ops, and patched models' CPU
    tensors sent down it (autotune/model/modules.py's ANY_DEVICE)."""
    from autotune.model import modules

    runtime = TorchRuntime()
    monkeypatch.setattr(api, "_RUNTIME", runtime)
    monkeypatch.setattr(api, "gemm", runtime.gemm)
    monkeypatch.setattr(modules, "ANY_DEVICE", True)
    with _cpu_kernels(runtime):
        yield runtime
