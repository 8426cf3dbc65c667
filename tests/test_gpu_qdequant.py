"""GPU tests of the int4 dequantization op (run with `pytest -m gpu` on the GPU machine): every config of
a few problems' spaces checked against float64 through the worker (NaN-poisoned output, random codes,
scales and zero points), and autotune.call / torch.ops.autotune.qdequant on quantized torch weights:
the same bits as QuantizedWeight.dequantize(), odd N, every group, a side stream, a CUDA graph and
torch.compile."""

from __future__ import annotations

from typing import Any

import pytest

from autotune import ops
from autotune.core.outcome import Status
from tests.worker_checks import measure_configs

pytestmark = pytest.mark.gpu

# (dtype, rows, codes a row, variant): odd rows, a row of one group of 32, a grid's tail.
PROBLEMS = [
    ("float16", 999, 1152, "g128"),
    ("bfloat16", 1001, 3584, "g128a"),
    ("float16", 7, 96, "g32a"),
    ("bfloat16", 333, 4096, "g64"),
]


@pytest.mark.parametrize("case", PROBLEMS, ids=str)
def test_every_qdequant_config_is_correct(case: tuple[str, int, int, str]) -> None:
    dtype, m, n, variant = case
    problem = ops.make_problem("qdequant", dtype, m, n, variant=variant)
    configs = ops.for_problem(problem).space(problem)
    wrong = [r for r in measure_configs(problem, configs, seed=5) if r[1] != Status.OK.value]
    assert not wrong, wrong


def _bits(t: Any) -> Any:
    import torch

    return t.view(torch.int16)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("sym", [True, False])
def test_call_gives_the_bits_of_dequantize(dtype: str, group: int, sym: bool) -> None:
    torch = pytest.importorskip("torch")
    import autotune

    gen = torch.Generator(device="cuda").manual_seed(group + sym)
    w = torch.randn(1001, 3584, device="cuda", generator=gen).to(getattr(torch, dtype))
    qw = autotune.quantize(w, "int4", group=group, sym=sym)
    want = qw.dequantize()
    out = torch.full_like(want, float("nan"))
    autotune.call("qdequant", qw.qweight, qw.scales, qw.zeros, out=out)
    assert torch.equal(_bits(out), _bits(want))
    assert torch.equal(_bits(autotune.call("qdequant", qw.qweight, qw.scales, qw.zeros)), _bits(want))


def test_side_stream_graph_and_compile() -> None:
    torch = pytest.importorskip("torch")
    import autotune
    import autotune.runtime.torch_ops

    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    qw = autotune.quantize(w, "int4", group=128, sym=False)
    want = qw.dequantize()

    side = torch.cuda.Stream()
    # A new stream does not wait for the default one: the operands (and out's copy) must be there first.
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = autotune.call("qdequant", qw.qweight, qw.scales, qw.zeros)
    side.synchronize()
    assert torch.equal(_bits(on_side), _bits(want))

    out = torch.empty_like(want)
    autotune.call("qdequant", qw.qweight, qw.scales, qw.zeros, out=out)  # plan and kernel loaded before capture
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        autotune.call("qdequant", qw.qweight, qw.scales, qw.zeros, out=out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(_bits(out), _bits(want))

    def step(qweight: Any, scales: Any, zeros: Any) -> Any:
        return torch.ops.autotune.qdequant(qweight, scales, zeros) * 2

    compiled = torch.compile(step, fullgraph=True)
    assert torch.equal(compiled(qw.qweight, qw.scales, qw.zeros), step(qw.qweight, qw.scales, qw.zeros))
