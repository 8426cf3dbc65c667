"""GPU tests of the 8-bit weight-only op (run with `pytest -m gpu` on the GPU machine): a sample of each
problem's space checked against float64 through the worker (NaN-poisoned output, random codes, every
e4m3 code finite), both kernels (CUDA cores; tensor cores, x through L1 or staged in shared memory;
one stage of registers or a ring of them), and autotune.call on weights quantized by format.quantize8:
odd N, K of 5 to 1184 pieces, M past one tile of x, both kinds and dtypes, 3-D x, alpha and beta, a
side stream and a CUDA graph."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from autotune import ops
from autotune.core import dtypes
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.ops.q8gemm import format as q8format
from tests.worker_checks import measure_configs

pytestmark = pytest.mark.gpu

# (dtype, m, n, k, kind): odd N, K of 6, 56, 128, 224 and 1184 pieces, M of one row, a partial tile, 64.
PROBLEMS = [
    ("float16", 1, 999, 4096, "int8"),
    ("bfloat16", 3, 1001, 3584, "fp8"),
    ("float16", 16, 4100, 896, "int8"),
    ("bfloat16", 64, 515, 2048, "int8"),
    ("float16", 1, 4096, 18944, "fp8"),
    ("float16", 7, 333, 96, "fp8"),
    ("bfloat16", 5, 1001, 18944, "fp8"),  # K split 2-8 ways over a block's warps, its last rows past N
    # the tensor-core kernel: K of 5 and 13 pieces (a step's quad part past K), M past 8, 32 and 64 rows
    ("float16", 2, 1001, 80, "int8"),
    ("bfloat16", 33, 517, 208, "int8"),
    ("float16", 64, 4100, 4096, "fp8"),
    ("float16", 40, 999, 18944, "int8"),
    # the streaming GEMV (M = 1) in bfloat16: odd N, a row group's last rows past N
    ("bfloat16", 1, 1001, 3584, "int8"),
]
RANDOM_SAMPLES = 6


def _sample(problem: Problem) -> list[Config]:
    """The default config, the seeds, the space's first and last, and a few at random."""
    op = ops.for_problem(problem)
    configs = list(op.space(problem))
    picked = [op.default_config(problem), configs[0], configs[-1], *op.seed_configs(problem)]
    picked += [c for c in configs if c["ksplit"] == 8 and c["block"] == 512 and c["rpw"] == 2][:2]
    mma = [c for c in configs if c.get("mma", 0)]
    picked += [c for c in mma if c["ksplit"] == 8][:2] + [c for c in mma if c["rpw"] == 32 and c["ksplit"] == 1][:2]
    picked += [c for c in mma if c["mt"] == 8 and c["ksplit"] == 2][:1]  # in passes over x's tiles where M > 8
    staged = [c for c in mma if c["stage"]]
    picked += staged[:1] + staged[-1:] + [c for c in staged if c["mt"] == 8 and c["block"] == 512][:1]
    for kernel in (0, 1):  # rings, K split or not: stages past the split's end, partial tiles of x
        rings = [c for c in configs if c["ring"] > 1 and c["mma"] == kernel]
        picked += [c for c in rings if c["ksplit"] == 8][:1] + [c for c in rings if c["ksplit"] == 1][-2:]
        picked += [c for c in rings if c["ring"] == 3 and c["unroll"] == 2 and c["ksplit"] == 4][:1]
    stream = [c for c in configs if c.get("stream", 0)]  # the streaming GEMV: groups of 1-8 warps, 1-4 rows
    picked += stream[:1] + stream[-1:] + [c for c in stream if c["rpw"] == 4 and c["ksplit"] == 8][:1]
    picked += random.Random(str(problem)).sample(configs, min(RANDOM_SAMPLES, len(configs)))
    return list({tuple(sorted(c.items())): c for c in picked}.values())


@pytest.mark.parametrize("case", PROBLEMS, ids=str)
def test_every_sampled_config_is_correct(case: tuple[str, int, int, int, str]) -> None:
    dtype, m, n, k, kind = case
    problem = ops.make_problem("q8gemm", dtype, m, n, k, variant=kind)
    wrong = [r for r in measure_configs(problem, _sample(problem), seed=13) if r[1] != Status.OK.value]
    assert not wrong, wrong


def _quantized(n: int, k: int, kind: str, dtype: str, seed: int) -> tuple[Any, Any, np.ndarray]:
    """(qweight, scales) on the GPU and the float64 weight they hold."""
    import torch

    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) / np.sqrt(k)
    weight = q8format.quantize8(w, kind, dtype)
    scales = dtypes.decode(weight.scales, dtype).astype(np.float32)
    exact = q8format.codes_values(weight.codes, kind).astype(np.float64) * scales[:, None].astype(np.float64)
    qweight = torch.from_numpy(weight.codes).cuda()
    return qweight, torch.from_numpy(scales).to(getattr(torch, dtype)).cuda(), exact


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rows", [1, 5, 64])
def test_call_matches_float64_on_the_exact_weight(kind: str, dtype: str, rows: int) -> None:
    import torch

    import autotune

    n, k = 1001, 2048
    qweight, scales, exact = _quantized(n, k, kind, dtype, seed=rows)
    x = torch.randn(rows, k, device="cuda").to(getattr(torch, dtype))
    y = autotune.call("q8gemm", x, qweight, scales, options=(kind,))
    reference = x.double().cpu().numpy() @ exact.T
    err = np.abs(y.double().cpu().numpy() - reference).max() / np.abs(reference).max()
    unit = 2.0**-8 if dtype == "bfloat16" else 2.0**-11  # the output's own rounding, with room
    assert y.shape == (rows, n) and y.dtype == x.dtype and err < 2 * unit, err


def test_call_poisoned_out_3d_x_alpha_beta_side_stream_and_graph() -> None:
    import torch

    import autotune

    n, k = 777, 1024
    qweight, scales, exact = _quantized(n, k, "fp8", "float16", seed=5)
    x = torch.randn(2, 3, k, device="cuda", dtype=torch.float16)
    before = torch.randn(2, 3, n, device="cuda", dtype=torch.float16)
    reference = 0.5 * (x.double().cpu().numpy() @ exact.T) + 2.0 * before.double().cpu().numpy()
    scale = np.abs(reference).max()

    out = before.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        autotune.call("q8gemm", x, qweight, scales, out=out, alpha=0.5, beta=2.0, options=("fp8",))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert np.abs(out.double().cpu().numpy() - reference).max() / scale < 2e-3

    poisoned = torch.full((2, 3, n), float("nan"), device="cuda", dtype=torch.float16)
    graph_out = torch.empty_like(poisoned)
    autotune.call("q8gemm", x, qweight, scales, out=graph_out, options=("fp8",))  # warm: kernel loaded
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        autotune.call("q8gemm", x, qweight, scales, out=poisoned, options=("fp8",))
    for _ in range(3):
        poisoned.fill_(float("nan"))
        graph.replay()
    torch.cuda.synchronize()
    got = poisoned.double().cpu().numpy()
    assert np.isfinite(got).all()
    assert np.abs(got - x.double().cpu().numpy() @ exact.T).max() / scale < 2e-3


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("rows", [1, 5, 16, 17, 64, 65])
def test_linear_on_a_quantized_module_matches_float64(kind: str, rows: int) -> None:
    """autotune.quantize(W, kind) on a tensor -> Quantized8Weight; autotune.linear runs q8gemm up to 64 rows
    and the GEMM on the dequantized weight past them, with a bias and a 3-D x."""
    import torch

    import autotune
    from autotune.model.quantized8 import Quantized8Weight

    w = torch.randn(1001, 2048, device="cuda", dtype=torch.bfloat16) / 45
    qw = autotune.quantize(w, kind)
    assert isinstance(qw, Quantized8Weight) and qw.qweight.device == w.device and qw.dtype == torch.bfloat16
    exact = qw.dequantize(torch.float32).double()
    assert (exact - w.double()).abs().max() <= (w.double().abs().amax(dim=1, keepdim=True) / 16).max()
    x = torch.randn(1, rows, 2048, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1001, device="cuda", dtype=torch.bfloat16)
    y = autotune.linear(x, qw, bias)
    want = x.double() @ exact.T + bias.double()
    err = float((y.double() - want).abs().max() / want.abs().max())
    assert y.shape == (1, rows, 1001) and err < 2 * 2.0**-8, err  # bfloat16's own rounding, twice


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dequantizing_in_the_activations_dtype_gives_the_float32_values_rounded(kind: str, dtype: str) -> None:
    import torch

    import autotune

    qw = autotune.quantize(torch.randn(300, 512, device="cuda") * 3, kind, scale_dtype=getattr(torch, dtype))
    assert torch.equal(qw.dequantize(), qw.dequantize(torch.float32).to(getattr(torch, dtype)))


def test_the_module_round_trips_its_state_dict_and_refuses_another_kind() -> None:
    import torch

    import autotune
    from autotune.core.errors import AutotuneError
    from autotune.model.quantized8 import Quantized8Weight

    qw = autotune.quantize(torch.randn(64, 256, device="cuda", dtype=torch.float16), "fp8")
    state = qw.state_dict()
    assert set(state) == {"qweight", "scales", "_extra_state"}
    again = Quantized8Weight.from_state_dict(state, device="cuda")
    assert torch.equal(again.qweight, qw.qweight) and torch.equal(again.scales, qw.scales) and again.kind == "fp8"
    other = Quantized8Weight.empty(64, 256, "int8", torch.float16, device="cuda")
    with pytest.raises(AutotuneError, match=r"holds an 8-bit weight fp8 \(64, 256\)"):
        other.load_state_dict(state)


def test_a_quantized_linear_replays_in_a_cuda_graph() -> None:
    import torch

    import autotune

    qw = autotune.quantize(torch.randn(777, 1024, device="cuda", dtype=torch.float16), "int8")
    x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    eager = autotune.linear(x, qw)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = autotune.linear(x, qw)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_the_torch_op_runs_compiled_fullgraph_and_in_a_cuda_graph() -> None:
    import torch

    import autotune
    import autotune.runtime.torch_ops  # registers torch.ops.autotune.q8gemm

    qw = autotune.quantize(torch.randn(777, 1024, device="cuda", dtype=torch.float16), "fp8")
    x = torch.randn(5, 1024, device="cuda", dtype=torch.float16)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.autotune.q8gemm(x, qw.qweight, qw.scales, 1.0, "fp8") * 2

    eager = autotune.call("q8gemm", x, qw.qweight, qw.scales, options=("fp8",)) * 2
    assert torch.equal(step(x), eager)
    assert torch.equal(torch.compile(step, fullgraph=True)(x), eager)
    int8 = autotune.quantize(torch.randn(777, 1024, device="cuda", dtype=torch.float16), "int8")
    plain = torch.ops.autotune.q8gemm(x, int8.qweight, int8.scales)  # the kind left at its default
    assert torch.equal(plain, autotune.call("q8gemm", x, int8.qweight, int8.scales, options=("int8",)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(x)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
