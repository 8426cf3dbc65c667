"""The launch path on a GPU: the caller's stream, CUDA graph capture and replay, torch.compile, split-K
scratch per stream, calls from several threads. Every result is checked against a float64 reference
on fresh random data, the output poisoned with NaN first."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import autotune
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.select.choose import Choice

pytestmark = pytest.mark.gpu

SPLIT_K = {**gemv.DEFAULT_CONFIG, "block": 64, "lanes": 64, "vec": 8, "split": 16, "persist": 4, "policy": 1}


def _torch() -> Any:
    return pytest.importorskip("torch")


def _assert_gemv(y: Any, A: Any, x: Any, trans: bool = False) -> None:
    a64 = A.double().t() if trans else A.double()
    want = a64 @ x.double()
    scale = (a64.abs() @ x.double().abs()).max().item()
    got = y.double()
    assert bool(got.isfinite().all()), "NaN or inf in the output"
    assert (got - want).abs().max().item() <= 1e-2 * scale


def _assert_gemm(c: Any, A: Any, B: Any) -> None:
    want = A.double() @ B.double()
    scale = (A.double().abs() @ B.double().abs()).max().item()
    assert bool(c.double().isfinite().all())
    assert (c.double() - want).abs().max().item() <= 1e-2 * scale


def test_a_producer_on_a_side_stream_then_gemv_and_gemm_on_that_stream() -> None:
    """The producer's writes are still in flight when our kernels are queued: launched anywhere but
    the caller's stream, they would read the old A (5 of 5 wrong before the launch path took the
    caller's stream)."""
    torch = _torch()
    A = torch.empty(8192, 8192, device="cuda", dtype=torch.float16)
    x = torch.empty(8192, device="cuda", dtype=torch.float16)
    y = torch.empty(8192, device="cuda", dtype=torch.float16)
    G = torch.empty(256, 4096, device="cuda", dtype=torch.float16)
    H = torch.empty(4096, 512, device="cuda", dtype=torch.float16)
    C = torch.empty(256, 512, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    right = 0
    for _ in range(20):
        with torch.cuda.stream(side):
            y.fill_(float("nan"))
            C.fill_(float("nan"))
            torch.cuda._sleep(2_000_000)  # hold the stream so the producer is still pending
            A.uniform_(-1, 1)
            x.uniform_(-1, 1)
            G.uniform_(-1, 1)
            H.uniform_(-1, 1)
            autotune.gemv(A, x, out=y)
            autotune.gemm(G, H, out=C)
        side.synchronize()
        _assert_gemv(y, A, x)
        _assert_gemm(C, G, H)
        right += 1
    assert right == 20


def test_cupy_arrays_on_a_cupy_stream() -> None:
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(3)
    stream = cupy.cuda.Stream(non_blocking=True)
    for _ in range(20):
        a = rng.uniform(-1, 1, (4096, 4096)).astype(np.float16)
        v = rng.uniform(-1, 1, 4096).astype(np.float16)
        with stream:
            A = cupy.empty((4096, 4096), dtype=cupy.float16)
            x = cupy.empty(4096, dtype=cupy.float16)
            y = cupy.full(4096, cupy.nan, dtype=cupy.float16)
            A.set(a, stream=stream)
            x.set(v, stream=stream)
            autotune.gemv(A, x, out=y)
            got = y.get(stream=stream).astype(np.float64)
        stream.synchronize()
        want = a.astype(np.float64) @ v.astype(np.float64)
        scale = (np.abs(a.astype(np.float64)) @ np.abs(v.astype(np.float64))).max()
        assert np.isfinite(got).all() and np.abs(got - want).max() <= 1e-2 * scale


def test_capture_then_replay_with_new_inputs() -> None:
    torch = _torch()
    A = torch.empty(4096, 4096, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    x = torch.empty(4096, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    y = torch.full((4096,), float("nan"), device="cuda", dtype=torch.float16)
    autotune.warmup(gemv=[(A, x)])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        autotune.gemv(A, x, out=y)
    for _ in range(5):
        A.copy_(torch.rand_like(A) * 2 - 1)
        x.copy_(torch.rand_like(x) * 2 - 1)
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_gemv(y, A, x)


def test_two_gemvs_and_a_gemm_in_one_graph() -> None:
    """A chain (the second GEMV reads what the first wrote) captured with programmatic launches."""
    torch = _torch()
    dev, f16 = "cuda", torch.float16
    A1 = torch.empty(6144, 4096, device=dev, dtype=f16)
    A2 = torch.empty(4096, 6144, device=dev, dtype=f16)
    x = torch.empty(4096, device=dev, dtype=f16)
    y1 = torch.empty(6144, device=dev, dtype=f16)
    y2 = torch.empty(4096, device=dev, dtype=f16)
    G = torch.empty(512, 1024, device=dev, dtype=f16)
    H = torch.empty(1024, 768, device=dev, dtype=f16)
    C = torch.empty(512, 768, device=dev, dtype=f16)
    for t in (A1, A2, x, G, H):
        t.uniform_(-1, 1)
    autotune.warmup(gemv=[(A1, x), (A2, y1)], gemm=[(G, H)])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        autotune.gemv(A1, x, out=y1)
        autotune.gemv(A2, y1, out=y2)
        autotune.gemm(G, H, out=C)
    for _ in range(3):
        for t in (A1, A2, x, G, H):
            t.copy_(torch.rand_like(t) * 2 - 1)
        for t in (y1, y2, C):
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_gemv(y1, A1, x)
        _assert_gemv(y2, A2, y1)
        _assert_gemm(C, G, H)


def test_a_first_call_inside_a_capture_is_recorded_right_or_names_warmup() -> None:
    torch = _torch()
    A = torch.empty(3000, 2000, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    x = torch.empty(2000, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    y = torch.full((3000,), float("nan"), device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            autotune.gemv(A, x, out=y)
    except AutotuneError as error:
        assert "warmup" in str(error)
        return
    graph.replay()
    torch.cuda.synchronize()
    _assert_gemv(y, A, x)


def test_torch_compile_fullgraph_around_the_custom_ops() -> None:
    torch = _torch()
    import autotune.runtime.torch_ops  # noqa: F401  (registers torch.ops.autotune)

    def step(A: Any, x: Any, G: Any, H: Any) -> tuple[Any, Any]:
        return torch.ops.autotune.gemv(A, x) * 2.0 + 1.0, torch.ops.autotune.gemm(G, H)

    compiled = torch.compile(step, fullgraph=True)
    A = torch.empty(2048, 1024, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    x = torch.empty(1024, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    G = torch.empty(64, 256, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    H = torch.empty(256, 128, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    y, C = compiled(A, x, G, H)
    torch.cuda.synchronize()
    _assert_gemv((y - 1.0) / 2.0, A, x)
    _assert_gemm(C, G, H)
    graphs = torch.compile(step, fullgraph=True, mode="reduce-overhead")  # torch's CUDA graphs
    for _ in range(3):
        x.uniform_(-1, 1)
        y, C = graphs(A, x, G, H)
        y, C = y.clone(), C.clone()
        torch.cuda.synchronize()
        _assert_gemv((y - 1.0) / 2.0, A, x)
        _assert_gemm(C, G, H)


def test_split_k_on_two_streams_at_once() -> None:
    """256x131072 with the K dimension split 16 ways through a workspace in global memory: two
    streams running it at the same time each need workspace and counters of their own."""
    torch = _torch()
    from autotune.runtime.launcher import Runtime

    problem = Problem("gemv", "float16", 256, 131072)
    assert gemv.OP.space(problem).check(SPLIT_K) is None
    runtime = Runtime(lambda p, device, db: Choice(p, device.gpu.name, SPLIT_K, "measured"))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    As = [torch.empty(256, 131072, device="cuda", dtype=torch.float16) for _ in streams]
    xs = [torch.empty(131072, device="cuda", dtype=torch.float16) for _ in streams]
    ys = [torch.empty(256, device="cuda", dtype=torch.float16) for _ in streams]
    for _ in range(10):
        for stream, A, x, y in zip(streams, As, xs, ys, strict=True):
            with torch.cuda.stream(stream):
                A.uniform_(-1, 1)
                x.uniform_(-1, 1)
                y.fill_(float("nan"))
                for _ in range(8):  # many launches in flight on both streams at once
                    runtime.gemv(A, x, y)
        torch.cuda.synchronize()
        for A, x, y in zip(As, xs, ys, strict=True):
            _assert_gemv(y, A, x)


def test_four_threads_on_two_streams_and_two_shapes() -> None:
    torch = _torch()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    shapes = [(4096, 4096), (2048, 8192)]
    failures: list[str] = []

    def work(thread: int) -> None:
        try:
            torch.cuda.set_device(0)
            m, n = shapes[thread % 2]
            stream = streams[thread // 2]
            A = torch.empty(m, n, device="cuda", dtype=torch.float16)
            x = torch.empty(n, device="cuda", dtype=torch.float16)
            y = torch.empty(m, device="cuda", dtype=torch.float16)
            for _ in range(40):
                with torch.cuda.stream(stream):
                    A.uniform_(-1, 1)
                    x.uniform_(-1, 1)
                    y.fill_(float("nan"))
                    autotune.gemv(A, x, out=y)
                    want = (A.double() @ x.double()).float()
                    scale = (A.double().abs() @ x.double().abs()).max()
                    bad = ((y.double() - want.double()).abs().max() > 1e-2 * scale) | ~y.isfinite().all()
                stream.synchronize()
                if bool(bad):
                    failures.append(f"thread {thread}: wrong result")
        except Exception as error:  # reported below, with the thread that raised it
            failures.append(f"thread {thread}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_the_transposed_view_and_a_1_d_output_on_the_default_stream() -> None:
    torch = _torch()
    A = torch.empty(1000, 3000, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    v = torch.empty(1000, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    y = autotune.gemv(A, v, trans=True)
    torch.cuda.synchronize()
    assert y.shape == (3000,)
    _assert_gemv(y, A, v, trans=True)


def test_an_explicit_stream_argument_orders_the_call_after_its_producer() -> None:
    """stream= as a torch stream and as its integer handle, from outside `with torch.cuda.stream`."""
    torch = _torch()
    side = torch.cuda.Stream()
    A = torch.empty(8192, 4096, device="cuda", dtype=torch.float16)
    x = torch.empty(4096, device="cuda", dtype=torch.float16)
    y = torch.empty(8192, device="cuda", dtype=torch.float16)
    for given in (side, side.cuda_stream):
        with torch.cuda.stream(side):
            y.fill_(float("nan"))
            torch.cuda._sleep(2_000_000)
            A.uniform_(-1, 1)
            x.uniform_(-1, 1)
        autotune.gemv(A, x, out=y, stream=given)
        side.synchronize()
        _assert_gemv(y, A, x)


def test_tensors_on_each_gpu_run_there_concurrently() -> None:
    """Each GPU's tensors launch on that GPU (its primary context, modules and stream), from threads
    running at the same time; operands split across GPUs are a one-line error."""
    torch = _torch()
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip("needs two GPUs")
    failures: list[str] = []

    def work(device: int) -> None:
        try:
            for m, n in ((4096, 4096), (1000, 3000), (256, 131072)):
                A = torch.empty(m, n, device=f"cuda:{device}", dtype=torch.float16).uniform_(-1, 1)
                x = torch.empty(n, device=f"cuda:{device}", dtype=torch.float16).uniform_(-1, 1)
                for _ in range(10):
                    y = autotune.gemv(A, x)
                    torch.cuda.synchronize(device)
                    _assert_gemv(y, A, x)
                    assert y.device == A.device
        except Exception as error:  # reported below with its device
            failures.append(f"cuda:{device}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=work, args=(d,)) for d in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    A = torch.empty(64, 64, device="cuda:0", dtype=torch.float16)
    x = torch.empty(64, device="cuda:1", dtype=torch.float16)
    with pytest.raises(AutotuneError, match="different GPUs"):
        autotune.gemv(A, x)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_transposed_views_and_one_row_vectors_run_in_place(dtype: str) -> None:
    """A.t() of a row-major matrix runs the other GEMV kernel on the same memory (no copy), with and
    without trans=True, on the short path too; a 1 x N x gives a 1 x M y."""
    torch = _torch()
    kind = getattr(torch, dtype)
    W = torch.randn(1001, 3001, device="cuda", dtype=kind)  # row-major; W.t() is 3001 x 1001
    for _ in range(2):  # the second call takes the short path
        v = torch.randn(1001, device="cuda", dtype=kind)
        _assert_gemv(autotune.gemv(W.t(), v), W.t(), v)  # = Wᵀ v
        u = torch.randn(3001, device="cuda", dtype=kind)
        y = torch.full((1001,), float("nan"), device="cuda", dtype=kind)
        autotune.gemv(W.t(), u, out=y, trans=True)  # = W u
        _assert_gemv(y, W, u)
        row = torch.randn(1, 3001, device="cuda", dtype=kind)
        got = autotune.gemv(W, row)
        assert got.shape == (1, 1001)
        _assert_gemv(got[0], W, row[0])
    with pytest.raises(AutotuneError, match="no columns"):
        autotune.gemv(W[:, :0], torch.empty(0, device="cuda", dtype=kind))


def test_linear_is_f_linear_for_every_batch_and_under_torch_compile() -> None:
    """autotune.linear(x, W, bias) = F.linear: one row runs our GEMV on W in place (bias read by the
    kernel), larger batches run F.linear; torch.ops.autotune.linear compiles with CUDA graphs."""
    torch = _torch()
    import torch.nn.functional as F

    import autotune.runtime.torch_ops  # registers torch.ops.autotune

    W = torch.randn(3072, 1024, device="cuda", dtype=torch.float16)
    down = torch.randn(1024, 3072, device="cuda", dtype=torch.float16)
    bias = torch.randn(3072, device="cuda", dtype=torch.float16)
    for shape in [(1024,), (1, 1024), (1, 1, 1024), (4, 1024), (2, 3, 1024)]:
        for b in (None, bias):
            x = torch.randn(shape, device="cuda", dtype=torch.float16)
            got = autotune.linear(x, W, b)
            want = F.linear(x.double(), W.double(), None if b is None else b.double())
            assert got.shape == want.shape and got.dtype == x.dtype
            scale = (x.double().abs() @ W.double().abs().t()).max().item() + 1.0
            assert bool(got.isfinite().all()) and (got.double() - want).abs().max().item() <= 1e-2 * scale
    with pytest.raises(AutotuneError, match="features"):
        autotune.linear(torch.randn(1, 1000, device="cuda", dtype=torch.float16), W)

    def step(x: Any) -> Any:
        return torch.ops.autotune.linear(torch.relu(torch.ops.autotune.linear(x, W, bias)), down)

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up runs, then replays of the recorded graph
        x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
        got = compiled(x)
        hidden = F.linear(x.double(), W.double(), bias.double()).relu()
        want = F.linear(hidden, down.double())
        assert (got.double() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1.0)
