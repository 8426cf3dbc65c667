"""GPU tests of the int4 weight-only op (run with `pytest -m gpu` on the GPU machine): a sample of every
problem's space checked against float64 through the worker (NaN-poisoned output, random codes, scales
and zero points), and autotune.linear / autotune.call / torch.ops.autotune.qgemm on quantized torch
weights: odd N, K not a power of two, M past the kernels' 64 rows, bias, 3-D x, a side stream and a
CUDA graph."""

from __future__ import annotations

import random
from typing import Any

import pytest

from autotune import ops
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.space import Config
from tests.worker_checks import measure_configs

pytestmark = pytest.mark.gpu

# (dtype, m, n, k, variant): odd N, K of 3, 28, 112 and 592 pieces, M of one tile, a partial tile and 64.
PROBLEMS = [
    ("float16", 1, 999, 4096, "g128"),
    ("float16", 3, 1001, 3584, "g128a"),
    ("bfloat16", 16, 4100, 896, "g32"),
    ("bfloat16", 64, 515, 2048, "g64a"),
    ("float16", 1, 4096, 18944, "g128"),
    ("float16", 7, 333, 96, "g32a"),
    # M = 1 float16: the CUDA-core GEMV (rpw > 0) shares the space; groups of 32 and 64, zero points
    ("float16", 1, 1001, 3584, "g32a"),
    ("float16", 1, 333, 128, "g64"),
]
RANDOM_SAMPLES = 4
# Past 16 rows on Hopper the wgmma kernel shares the space: odd N, K split unevenly over a cluster
# (9 steps in parts of 3, the fourth empty), slices of x past M, every group size, both dtypes.
WGMMA_PROBLEMS = [
    ("float16", 33, 999, 1152, "g128a"),
    ("bfloat16", 64, 4100, 2048, "g32"),
    ("float16", 17, 515, 4096, "g64a"),
    ("bfloat16", 40, 1001, 3584, "g128"),
]


def _sample(problem: Problem) -> list[Config]:
    """The default config, the seeds, the space's first and last, K split over clusters, and a few at random."""
    op = ops.for_problem(problem)
    space = op.space(problem)
    configs = list(space)
    default = op.default_config(problem)
    picked = [default, configs[0], configs[-1], *op.seed_configs(problem)]
    picked += [c for c in (dict(default, cluster=size) for size in (2, 8)) if space.check(c) is None]
    picked += random.Random(str(problem)).sample(configs, min(RANDOM_SAMPLES, len(configs)))
    return list({tuple(sorted(c.items())): c for c in picked}.values())


@pytest.mark.parametrize("case", PROBLEMS, ids=str)
def test_every_sampled_qgemm_config_is_correct(case: tuple[str, int, int, int, str]) -> None:
    dtype, m, n, k, variant = case
    problem = ops.make_problem("qgemm", dtype, m, n, k, variant=variant)
    wrong = [r for r in measure_configs(problem, _sample(problem), seed=11) if r[1] != Status.OK.value]
    assert not wrong, wrong


def _wgmma_sample(problem: Problem) -> list[Config]:
    """The wgmma kernel's seeds and one config of each (rows of x, warpgroups, cluster) at random."""
    op = ops.for_problem(problem)
    picked = [c for c in op.seed_configs(problem) if c.get("wgmma")]
    shuffled = [c for c in op.space(problem) if c.get("wgmma")]
    random.Random(str(problem)).shuffle(shuffled)
    for config in shuffled:
        if all(
            (config["mt"], config["block"], config["cluster"]) != (c["mt"], c["block"], c["cluster"]) for c in picked
        ):
            picked.append(config)
    return picked


@pytest.mark.parametrize("case", WGMMA_PROBLEMS, ids=str)
def test_every_sampled_wgmma_config_is_correct(case: tuple[str, int, int, int, str]) -> None:
    dtype, m, n, k, variant = case
    problem = ops.make_problem("qgemm", dtype, m, n, k, variant=variant)
    configs = _wgmma_sample(problem)
    assert len(configs) > 10
    wrong = [r for r in measure_configs(problem, configs, seed=13) if r[1] != Status.OK.value]
    assert not wrong, wrong


def test_the_wgmma_kernel_on_a_side_stream_in_a_graph_with_alpha_and_beta() -> None:
    """Pinned to the wgmma kernel in clusters of 4 (a tile's partial sums added across the cluster
    while the next tile runs), asymmetric weights of 48 x 3000 x 4096."""
    torch = pytest.importorskip("torch")
    import autotune
    from autotune.ops import qgemm

    m, n, k = 48, 3000, 4096
    problem = ops.make_problem("qgemm", "float16", m, n, k, variant="g128a")
    config = {**qgemm.OP.default_config(problem), "wgmma": 1, "mt": 8, "block": 256, "cluster": 4, "ring": 4}
    qw = autotune.quantize(torch.randn(n, k, device="cuda", dtype=torch.float16), "int4", group=128, sym=False)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    _check_pinned(problem, {**config, "persist": 1}, x, qw)


def _check_pinned(problem: Problem, config: Config, x: Any, qw: Any, scale: float = 1.0) -> None:
    """The int4 op pinned to `config` on x (x / `scale` for alpha and beta): a NaN-poisoned out, alpha
    and beta on a side stream, and a CUDA graph's replay, each within 2e-3 of float64."""
    import torch

    from autotune.ops import qgemm
    from autotune.runtime.launcher import Runtime
    from autotune.select.choose import Choice

    assert qgemm.OP.space(problem).check(config) is None
    runtime = Runtime(lambda p, device, db: Choice(p, device.gpu.name, config, "measured"))
    deq64 = qw.dequantize(torch.float32).double()
    reference = x.double() @ deq64.T
    out = torch.full((problem.m, problem.n), float("nan"), device="cuda", dtype=x.dtype)
    runtime.call(qgemm.OP, x, qw.qweight, qw.scales, qw.zeros, out=out)
    assert torch.isfinite(out).all() and _rel_err(out, reference) < 2e-3
    before = torch.randn_like(out)
    out.copy_(before)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # a new stream does not wait for the default one
    with torch.cuda.stream(side):
        runtime.call(qgemm.OP, x / scale, qw.qweight, qw.scales, qw.zeros, out=out, alpha=0.5, beta=2.0)
    side.synchronize()
    assert _rel_err(out, 0.5 * (x.double() / scale) @ deq64.T + 2.0 * before.double()) < 2e-3
    static_x = torch.zeros_like(x)
    static_y = torch.empty_like(out)
    runtime.call(qgemm.OP, static_x, qw.qweight, qw.scales, qw.zeros, out=static_y)  # loaded before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        runtime.call(qgemm.OP, static_x, qw.qweight, qw.scales, qw.zeros, out=static_y)
    static_x.copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(static_y).all() and _rel_err(static_y, reference) < 2e-3


def _rel_err(y: Any, reference: Any) -> float:
    return float((y.double() - reference).abs().max() / reference.abs().max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 64, 65])
def test_linear_with_int4_weights_matches_float64(dtype: str, sym: bool, rows: int) -> None:
    """Within 2x the error of F.linear on the dequantized weight in the same dtype (the issue's bound),
    x of shape (rows, K) and with a bias; rows = 65 dequantizes and runs the GEMM."""
    torch = pytest.importorskip("torch")
    import autotune

    gen = torch.Generator(device="cuda").manual_seed(rows)
    tdtype = getattr(torch, dtype)
    n, k = 1001, 3584
    w = torch.randn(n, k, device="cuda", generator=gen).to(tdtype)
    qw = autotune.quantize(w, "int4", group=128, sym=sym)
    x = torch.randn(rows, k, device="cuda", generator=gen).to(tdtype)
    bias = torch.randn(n, device="cuda", generator=gen).to(tdtype)
    deq64 = qw.dequantize(torch.float32).double()
    kept = bias.clone()
    for b in (None, bias):
        reference = x.double() @ deq64.T + (0 if b is None else b.double())
        ours = autotune.linear(x, qw, b)
        assert torch.equal(bias, kept)  # the caller's bias is read, never written
        peer = torch.nn.functional.linear(x, qw.dequantize(), b)
        assert ours.shape == (rows, n) and ours.dtype == tdtype
        assert torch.isfinite(ours).all()
        assert _rel_err(ours, reference) <= 2 * _rel_err(peer, reference) + 1e-6


def test_int4_call_poisoned_out_3d_x_side_stream_and_graph() -> None:
    torch = pytest.importorskip("torch")
    import autotune
    import autotune.runtime.torch_ops

    n, k = 4096, 4096
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    qw = autotune.quantize(w, "int4", group=64, sym=False)
    deq64 = qw.dequantize(torch.float32).double()
    x = torch.randn(2, 3, k, device="cuda", dtype=torch.float16)
    y = autotune.linear(x, qw)
    assert y.shape == (2, 3, n)
    assert _rel_err(y, x.double() @ deq64.T) < 2e-3
    # x launched as it is, in any shape: a (K,) vector, 3-D x with a bias, and a strided x (copied).
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    vector = x[1, 2]
    assert autotune.linear(vector, qw).shape == (n,)
    assert _rel_err(autotune.linear(vector, qw), vector.double() @ deq64.T) < 2e-3
    with_bias = autotune.linear(x, qw, bias)
    assert with_bias.shape == (2, 3, n)
    assert _rel_err(with_bias, x.double() @ deq64.T + bias.double()) < 2e-3
    strided = torch.randn(3, 2 * k, device="cuda", dtype=torch.float16)[:, ::2]
    assert _rel_err(autotune.linear(strided, qw), strided.double() @ deq64.T) < 2e-3

    x1 = torch.randn(1, k, device="cuda", dtype=torch.float16)
    out = torch.full((1, n), float("nan"), device="cuda", dtype=torch.float16)
    autotune.call("qgemm", x1, qw.qweight, qw.scales, qw.zeros, out=out)
    assert _rel_err(out, x1.double() @ deq64.T) < 2e-3
    op_out = torch.ops.autotune.qgemm(x1, qw.qweight, qw.scales, qw.zeros)
    assert torch.equal(op_out, out)

    side = torch.cuda.Stream()
    # A new stream does not wait for the default one: the operands (and out's copy) must be there first.
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = autotune.linear(x1, qw)
    side.synchronize()
    assert torch.equal(on_side, out)

    static_x = torch.zeros_like(x1)
    autotune.linear(static_x, qw)  # plans and kernels loaded before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = autotune.linear(static_x, qw)
    fresh = torch.randn(1, k, device="cuda", dtype=torch.float16)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(static_y, fresh.double() @ deq64.T) < 2e-3


def test_more_than_64_rows_run_in_a_cuda_graph() -> None:
    """Past the int4 kernels' 64 rows the weight is dequantized on every call, with nothing read back
    from the GPU (the zero points' values are checked at load), so the call is captured like any other."""
    torch = pytest.importorskip("torch")
    import autotune

    n, k = 1001, 3584
    qw = autotune.quantize(torch.randn(n, k, device="cuda", dtype=torch.float16), "int4", group=128, sym=False)
    deq64 = qw.dequantize(torch.float32).double()
    static_x = torch.zeros(65, k, device="cuda", dtype=torch.float16)
    autotune.linear(static_x, qw)  # plans and kernels loaded before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = autotune.linear(static_x, qw)
    fresh = torch.randn(65, k, device="cuda", dtype=torch.float16)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(static_y, fresh.double() @ deq64.T) < 2e-3


def test_compiled_model_runs_the_int4_op() -> None:
    torch = pytest.importorskip("torch")
    import autotune
    import autotune.runtime.torch_ops

    w = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    qw = autotune.quantize(w, "int4", group=128)

    def step(x: Any) -> Any:
        return torch.ops.autotune.qgemm(x, qw.qweight, qw.scales, None) * 2

    compiled = torch.compile(step, fullgraph=True)
    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    assert torch.allclose(compiled(x), step(x))


@pytest.mark.parametrize("chain", [2, 4])
@pytest.mark.parametrize("sym", [True, False])
def test_the_cuda_core_gemv_keeps_activations_in_the_thousands_finite(sym: bool, chain: int) -> None:
    """The CUDA-core GEMV sums a piece's products in half: x in the thousands (as real activations
    reach) would overflow them unscaled. Pinned to that kernel, alpha, beta, a side stream and a graph."""
    torch = pytest.importorskip("torch")
    import autotune
    from autotune.ops import qgemm

    n, k = 1001, 4096
    problem = ops.make_problem("qgemm", "float16", 1, n, k, variant="g128" if sym else "g128a")
    config = {**qgemm.OP.default_config(problem), "rpw": 4, "unroll": 2, "block": 256, "chain": chain}
    w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05
    qw = autotune.quantize(w, "int4", group=128, sym=sym)
    # A few huge entries in one piece of 32 (as a massive activation is), the rest as usual: unscaled,
    # a piece's half sum would reach 8 x 15 x 2500; the output itself stays well inside float16.
    x = torch.randn(1, k, device="cuda", dtype=torch.float16)
    x[0, 32:40] = 2500.0
    x[0, 45] = -30000.0
    _check_pinned(problem, config, x, qw, scale=1000)


@pytest.mark.parametrize("shape", [(6144, 4096), (4096, 14336)], ids=str)
@pytest.mark.parametrize("seed", range(7))
def test_the_cuda_core_gemv_is_within_twice_f_linears_error(shape: tuple[int, int], seed: int) -> None:
    """The issue's bound, at the LLM shapes where summing in half loses most (K long), for each of the
    CUDA-core GEMV's seed tilings pinned in turn (two products a half, then four): max|y - y64| /
    max|y64| <= 2x F.linear's."""
    torch = pytest.importorskip("torch")
    import autotune
    from autotune.ops import qgemm
    from autotune.runtime.launcher import Runtime
    from autotune.select.choose import Choice

    n, k = shape
    problem = ops.make_problem("qgemm", "float16", 1, n, k, variant="g128")
    simt = [c for c in qgemm.OP.seed_configs(problem) if c["rpw"]]
    assert len(simt) == 7 and {c["chain"] for c in simt} == {2, 4}
    config = simt[seed]
    assert qgemm.OP.space(problem).check(config) is None
    runtime = Runtime(lambda p, device, db: Choice(p, device.gpu.name, config, "measured"))
    gen = torch.Generator(device="cuda").manual_seed(seed)
    qw = autotune.quantize(torch.randn(n, k, device="cuda", generator=gen).half(), "int4", group=128)
    x = torch.randn(1, k, device="cuda", generator=gen).half()
    reference = x.double() @ qw.dequantize(torch.float32).double().T
    out = torch.full((1, n), float("nan"), device="cuda", dtype=torch.float16)
    runtime.call(qgemm.OP, x, qw.qweight, qw.scales, qw.zeros, out=out)
    peer = torch.nn.functional.linear(x, qw.dequantize())
    assert torch.isfinite(out).all()
    assert _rel_err(out, reference) <= 2 * _rel_err(peer, reference), (
        config,
        _rel_err(out, reference),
        _rel_err(peer, reference),
    )
