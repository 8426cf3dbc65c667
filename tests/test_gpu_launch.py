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


def test_transposed_gemvs_that_read_each_others_output_with_programmatic_launches() -> None:
    """y1 = A1 x, then y2 = A2ᵀ y1 and y3 = A3ᵀ y2 in the narrow family's default tiling (launched with
    PDL, split over the rows through the workspace): each must wait for the write before it, eager on
    a side stream and captured in one graph replayed with new inputs. Our kernels are pinned (the
    selector may hand an untuned shape to cuBLASLt); A2 and A3 are scaled so float16 holds y3."""
    torch = _torch()
    from autotune import ops
    from autotune.ops.gemv import narrow
    from autotune.runtime.launcher import Runtime

    runtime = Runtime(
        lambda p, device, db: Choice(p, device.gpu.name, ops.for_problem(p).default_config(p), "measured")
    )
    for m, n in ((6144, 2048), (2048, 2048)):
        problem = Problem("gemv", "float16", m, n, trans=True)
        assert ops.for_problem(problem).kernel_file(problem) == narrow.KERNEL_FILE
        assert ops.for_problem(problem).launch(problem, narrow.default_config(problem), 132).grid[1] > 1
    dev, f16 = "cuda", torch.float16
    A1 = torch.empty(6144, 4096, device=dev, dtype=f16)
    A2 = torch.empty(6144, 2048, device=dev, dtype=f16)
    A3 = torch.empty(2048, 2048, device=dev, dtype=f16)
    x = torch.empty(4096, device=dev, dtype=f16)
    y1, y2, y3 = (torch.empty(n, device=dev, dtype=f16) for n in (6144, 2048, 2048))

    def fill() -> None:
        for t, bound in ((A1, 1.0), (A2, 1 / 64), (A3, 1 / 64), (x, 1.0)):
            t.uniform_(-bound, bound)
        for t in (y1, y2, y3):
            t.fill_(float("nan"))

    def chain() -> None:
        runtime.gemv(A1, x, y1)
        runtime.gemv(A2, y1, y2, trans=True)
        runtime.gemv(A3, y2, y3, trans=True)

    def check() -> None:
        _assert_gemv(y1, A1, x)
        _assert_gemv(y2, A2, y1, trans=True)
        _assert_gemv(y3, A3, y2, trans=True)

    fill()
    chain()  # loads the kernels outside any capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fill()
            chain()
    torch.cuda.synchronize()
    check()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    for _ in range(3):
        fill()
        graph.replay()
        torch.cuda.synchronize()
        check()


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


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_wide_bands_on_a_strided_view_with_beta_on_a_side_stream_and_in_a_graph(dtype: str) -> None:
    """The narrow family's wide body (bands of whole rows, its row shares added through the workspace)
    pinned on some columns of a wider matrix, y = 2 Aᵀx - 0.5 y: called again and again on a side
    stream, then captured in a graph and replayed with new inputs; workspace and counters must be back
    at zero after each call."""
    torch = _torch()
    from autotune import ops
    from autotune.ops.gemv import narrow
    from autotune.runtime.launcher import Runtime

    m, n, lda = 2309, 9216, 9216 + 64
    problem = Problem("gemv", dtype, m, n, trans=True)
    config = [c for c in narrow.seed_configs(problem) if c["bands"]][-1]
    assert config["bands"] > 0 and ops.for_problem(problem).space(problem).check(config) is None
    assert ops.for_problem(problem).launch(problem, config, 132).grid[1] > 1
    runtime = Runtime(lambda p, device, db: Choice(p, device.gpu.name, config, "measured"))
    kind = getattr(torch, dtype)
    whole = torch.empty(m, lda, device="cuda", dtype=kind)
    a, x = whole[:, :n], torch.empty(m, device="cuda", dtype=kind)
    before, out = torch.empty(n, device="cuda", dtype=kind), torch.empty(n, device="cuda", dtype=kind)

    def fill() -> None:
        whole.uniform_(-1, 1)
        x.uniform_(-1, 1)
        before.uniform_(-1, 1)
        out.copy_(before)

    def check() -> None:
        want = 2 * (a.double().t() @ x.double()) - 0.5 * before.double()
        scale = (a.double().abs().t() @ x.double().abs()).max().item()
        assert bool(out.double().isfinite().all()), "NaN or inf in the output"
        assert (out.double() - want).abs().max().item() <= 2e-2 * scale + 1e-2

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(4):
            fill()
            runtime.gemv(a, x, out, alpha=2.0, beta=-0.5, trans=True)
            side.synchronize()
            check()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        runtime.gemv(a, x, out, alpha=2.0, beta=-0.5, trans=True)
    for _ in range(3):
        fill()
        graph.replay()
        torch.cuda.synchronize()
        check()


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
    """autotune.linear(x, W, bias) = F.linear: one row runs our GEMV on W in place, larger batches the
    GEMM with B stored N x K (W itself); the bias is read by the kernel (beta = 1).
    torch.ops.autotune.linear compiles with CUDA graphs."""
    torch = _torch()
    import torch.nn.functional as F

    import autotune.runtime.torch_ops  # registers torch.ops.autotune

    W = torch.randn(3072, 1024, device="cuda", dtype=torch.float16)
    down = torch.randn(1024, 3072, device="cuda", dtype=torch.float16)
    bias = torch.randn(3072, device="cuda", dtype=torch.float16)
    for shape in [(1024,), (1, 1024), (1, 1, 1024), (4, 1024), (2, 3, 1024), (16, 1024), (17, 1024), (300, 1024)]:
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
    for rows in (1, 1, 1, 4, 4, 4):  # warm-up runs, then replays of the recorded graphs
        x = torch.randn(rows, 1024, device="cuda", dtype=torch.float16)
        got = compiled(x)
        hidden = F.linear(x.double(), W.double(), bias.double()).relu()
        want = F.linear(hidden, down.double())
        assert (got.double() - want).abs().max().item() <= 2e-2 * (want.abs().max().item() + 1.0)


# --- row-strided views: the plain GEMV's kernels take A's row stride lda (issue 29) ------------------


def _assert_mv(y: Any, A: Any, x: Any, alpha: float = 1.0, beta: float = 0.0, y0: Any = None) -> None:
    """y = alpha * A x + beta * y0 against torch.mv in float64 (A may be any strided view)."""
    torch = _torch()
    want = alpha * torch.mv(A.double(), x.double())
    scale = abs(alpha) * torch.mv(A.double().abs(), x.double().abs()).max().item()
    if y0 is not None:
        want = want + beta * y0.double()
        scale += abs(beta) * y0.double().abs().max().item()
    got = y.double()
    assert got.shape == want.shape
    assert bool(got.isfinite().all()), "NaN or inf in the output"
    assert (got - want).abs().max().item() <= 1e-2 * scale


def _strided_views(torch: Any, kind: Any) -> dict[str, Any]:
    """Views with gaps between their rows: slices of columns of row-major matrices (rows lda > N
    elements apart), with 16-byte aligned rows and without, and the parts of a fused weight."""
    W = torch.randn(1000, 1024, device="cuda", dtype=kind)
    odd = torch.randn(777, 1022, device="cuda", dtype=kind)  # rows 2044 (16-bit) or 4088 bytes apart
    fused = torch.randn(2048, 3 * 2048, device="cuda", dtype=kind)  # q, k, v side by side in each row
    return {
        "cols-1021": W[:, :1021],  # N odd: scalar loads
        "cols-from-1": W[:, 1:],  # 2 or 4 bytes into the allocation: scalar loads
        "cols-1016": W[:, :1016],  # N a multiple of 8 and rows 16-byte aligned: vector loads with lda
        "cols-1016-of-1022": odd[:, :1016],  # rows not 16-byte aligned: the fitted scalar-load config
        "qkv-q": fused[:, :2048],
        "qkv-k": fused[:, 2048:4096],
        "qkv-v": fused[:, 4096:],
    }


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_row_strided_views_run_in_place(dtype: str) -> None:
    """gemv(A[:, :1021], x), gemv(A[:, 1:], x) and the q, k, v parts of a fused weight run on the
    view's own memory (no copy of A is allocated), on the checked path and the short path, with and
    without out=, alpha and beta included; the transpose of a slice with trans=True is the same
    product. Checked against torch.mv."""
    torch = _torch()
    kind = getattr(torch, dtype)
    for name, A in _strided_views(torch, kind).items():
        assert not A.is_contiguous() and A.stride(1) == 1, name
        m, n = A.shape
        for _ in range(2):  # the second call of each signature takes the short path
            x = torch.randn(n, device="cuda", dtype=kind)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            y = autotune.gemv(A, x)
            torch.cuda.synchronize()
            grown = torch.cuda.max_memory_allocated() - before
            assert grown < A.numel() * A.element_size() // 4, f"{name}: {grown} bytes allocated (a copy of A?)"
            _assert_mv(y, A, x)
            out = torch.randn(m, device="cuda", dtype=kind)
            y0 = out.clone()
            autotune.gemv(A, x, out=out, alpha=0.75, beta=-1.25)
            torch.cuda.synchronize()
            _assert_mv(out, A, x, 0.75, -1.25, y0)
            got = autotune.gemv(A.t(), x, trans=True)  # (Aᵀ)ᵀ x: the plain GEMV of the view
            torch.cuda.synchronize()
            _assert_mv(got, A, x)


def test_strided_views_run_the_transposed_gemv_in_place() -> None:
    """Aᵀx of a slice of columns, and A x of the transpose of one, run the transposed GEMV's kernels
    (a one-row GEMM) with A's row stride as their ldb; every other column is refused."""
    torch = _torch()
    W = torch.randn(1000, 1024, device="cuda", dtype=torch.float16)
    for view in (W[:, :1021], W[:, 1:], W[:, :1016]):
        x = torch.randn(1000, device="cuda", dtype=torch.float16)
        for _ in range(2):
            _assert_mv(autotune.gemv(view, x, trans=True), view.t(), x)
            _assert_mv(autotune.gemv(view.t(), x), view.t(), x)
    with pytest.raises(AutotuneError, match="contiguous"):
        autotune.gemv(W[:, ::2], torch.randn(512, device="cuda", dtype=torch.float16))  # every other column


# Tilings spread over the families, each with a part of the kernel that addresses rows: the bulk L2
# prefetch of row segments and the per-thread prefetch of row heads, split-K through the workspace
# and in a cluster, x in shared memory, thread-, sub-warp-, warp- and block-per-row.
STRIDED_TILINGS = [
    dict(block=128, lanes=128, vec=8, unroll=4, rows=2, policy=1, prefetch=1, order=1),
    dict(block=128, lanes=128, vec=8, unroll=4, rows=2, policy=1, prefetch=2, order=1),
    dict(block=64, lanes=32, vec=8, unroll=2, rows=1, policy=1, persist=4, split=2, prefetch=3),
    dict(block=128, lanes=32, vec=8, unroll=2, rows=2, policy=1, split=2, cluster=2, prefetch=1),
    dict(block=256, lanes=8, vec=8, unroll=1, rows=8, x_smem=1, policy=2, persist=2),
    dict(block=128, lanes=1, vec=8, unroll=2, rows=2),
    dict(block=512, lanes=512, vec=8, unroll=4, rows=1, policy=1, order=1),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("tiling", STRIDED_TILINGS, ids=lambda t: "-".join(f"{k}{v}" for k, v in t.items()))
def test_every_family_on_strided_views(dtype: str, tiling: dict[str, int]) -> None:
    """Each tiling (fitted to the view's shape, as the selector fits configs) on every strided view:
    16-byte loads with lda != N where the base and rows keep 16-byte alignment, the fitted scalar
    config where they do not. y poisoned with NaN first, then alpha and beta both in play."""
    torch = _torch()
    from autotune.core.space import config_key
    from autotune.runtime.launcher import Runtime, rows_aligned

    kind = getattr(torch, dtype)
    configs: dict[Problem, dict[str, int]] = {}

    def choose(problem: Problem, device: Any, db: str | None) -> Choice:
        fitted = gemv.OP.space(problem).fit({**gemv.DEFAULT_CONFIG, **tiling})
        assert fitted is not None, (problem, tiling)
        configs[problem] = fitted
        return Choice(problem, device.gpu.name, fitted, "measured")

    runtime = Runtime(choose)
    vector_runs = 0
    for name, A in _strided_views(torch, kind).items():
        m, n = A.shape
        x = torch.randn(n, device="cuda", dtype=kind)
        y = torch.full((m,), float("nan"), device="cuda", dtype=kind)
        runtime.gemv(A, x, out=y)
        torch.cuda.synchronize()
        _assert_mv(y, A, x)
        y0 = torch.randn(m, device="cuda", dtype=kind)
        y.copy_(y0)
        runtime.gemv(A, x, out=y, alpha=0.75, beta=-1.25)  # the short path
        torch.cuda.synchronize()
        _assert_mv(y, A, x, 0.75, -1.25, y0)
        problem = Problem("gemv", dtype, m, n)
        leading = (A.stride(0),) if A.stride(0) != n else None
        aligned = A.data_ptr() % 16 == 0 and rows_aligned(problem, leading)
        key = (problem, config_key(configs[problem]), 0, aligned, leading)
        assert key in runtime._plans, f"{name}: no {'vector' if aligned else 'scalar'}-load plan was made"
        vector_runs += int(aligned and configs[problem]["vec"] > 1)
    # cols-1016 and the three qkv parts ran wide loads with lda != N; cols-1016-of-1022's rows lie
    # 2044 or 4088 bytes apart, so its tiling ran with scalar loads.
    assert vector_runs == 4


def test_strided_views_in_a_captured_graph_replayed_with_new_inputs() -> None:
    """The q, k, v parts of a fused weight, a view with rows that break 16-byte alignment and one that
    starts 2 bytes in, captured into one graph after warmup; replays read new weights and inputs."""
    torch = _torch()
    f16 = torch.float16
    fused = torch.empty(2048, 3 * 2048, device="cuda", dtype=f16).uniform_(-1, 1)
    odd = torch.empty(1000, 1022, device="cuda", dtype=f16).uniform_(-1, 1)
    views = [fused[:, :2048], fused[:, 2048:4096], fused[:, 4096:], odd[:, :1016], odd[:, 1:]]
    xs = [torch.empty(A.shape[1], device="cuda", dtype=f16).uniform_(-1, 1) for A in views]
    ys = [torch.full((A.shape[0],), float("nan"), device="cuda", dtype=f16) for A in views]
    autotune.warmup(gemv=list(zip(views, xs, strict=True)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for A, x, y in zip(views, xs, ys, strict=True):
            autotune.gemv(A, x, out=y)
    for _ in range(3):
        fused.copy_(torch.rand_like(fused) * 2 - 1)
        odd.copy_(torch.rand_like(odd) * 2 - 1)
        for x in xs:
            x.copy_(torch.rand_like(x) * 2 - 1)
        for y in ys:
            y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for A, x, y in zip(views, xs, ys, strict=True):
            _assert_mv(y, A, x)


def test_split_k_on_a_strided_view_in_a_graph_and_on_two_streams() -> None:
    """256 columns short of a 256 x 131328 matrix, split 16 ways through the workspace with 16-byte
    loads (rows 262656 bytes apart): eager on two streams at once, then captured and replayed."""
    torch = _torch()
    from autotune.runtime.launcher import Runtime

    problem = Problem("gemv", "float16", 256, 131072)
    assert gemv.OP.space(problem).check(SPLIT_K) is None
    runtime = Runtime(lambda p, device, db: Choice(p, device.gpu.name, SPLIT_K, "measured"))
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    whole = [torch.empty(256, 131328, device="cuda", dtype=torch.float16) for _ in streams]
    As = [W[:, 256:] for W in whole]
    xs = [torch.empty(131072, device="cuda", dtype=torch.float16) for _ in streams]
    ys = [torch.empty(256, device="cuda", dtype=torch.float16) for _ in streams]
    for _ in range(5):
        for stream, W, x, y, A in zip(streams, whole, xs, ys, As, strict=True):
            with torch.cuda.stream(stream):
                W.uniform_(-1, 1)
                x.uniform_(-1, 1)
                y.fill_(float("nan"))
                for _ in range(8):
                    runtime.gemv(A, x, y)
        torch.cuda.synchronize()
        for A, x, y in zip(As, xs, ys, strict=True):
            _assert_mv(y, A, x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # split-K scratch from torch's allocator (the graph's pool)
        runtime.gemv(As[0], xs[0], ys[0])
    for _ in range(3):
        whole[0].copy_(torch.rand_like(whole[0]) * 2 - 1)
        xs[0].copy_(torch.rand_like(xs[0]) * 2 - 1)
        ys[0].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _assert_mv(ys[0], As[0], xs[0])


def test_a_producer_on_a_side_stream_then_gemv_of_strided_views() -> None:
    """As test_a_producer_on_a_side_stream_then_gemv_and_gemm_on_that_stream, with the parts of a
    fused weight: the kernels must run on the caller's stream after the producer's writes."""
    torch = _torch()
    fused = torch.empty(4096, 3 * 4096, device="cuda", dtype=torch.float16)
    parts = [fused[:, i * 4096 : (i + 1) * 4096] for i in range(3)]
    x = torch.empty(4096, device="cuda", dtype=torch.float16)
    ys = [torch.empty(4096, device="cuda", dtype=torch.float16) for _ in parts]
    side = torch.cuda.Stream()
    for _ in range(10):
        with torch.cuda.stream(side):
            for y in ys:
                y.fill_(float("nan"))
            torch.cuda._sleep(2_000_000)
            fused.uniform_(-1, 1)
            x.uniform_(-1, 1)
            for A, y in zip(parts, ys, strict=True):
                autotune.gemv(A, x, out=y)
        side.synchronize()
        for A, y in zip(parts, ys, strict=True):
            _assert_mv(y, A, x)


def test_cupy_strided_views_on_a_cupy_stream() -> None:
    """cupy views of some columns (__cuda_array_interface__ with strides in bytes) run in place."""
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(11)
    stream = cupy.cuda.Stream(non_blocking=True)
    for dtype in (np.float32, np.float16):
        whole = rng.uniform(-1, 1, (1000, 1024)).astype(dtype)
        with stream:
            W = cupy.asarray(whole)
            for cols in (slice(0, 1021), slice(1, None), slice(0, 1016), slice(256, 768)):
                A = W[:, cols]
                a = whole[:, cols].astype(np.float64)
                v = rng.uniform(-1, 1, a.shape[1]).astype(dtype)
                x = cupy.asarray(v)
                y = cupy.full(a.shape[0], cupy.nan, dtype=dtype)
                autotune.gemv(A, x, out=y)
                got = y.get(stream=stream).astype(np.float64)
                stream.synchronize()
                want = a @ v.astype(np.float64)
                scale = (np.abs(a) @ np.abs(v.astype(np.float64))).max()
                assert np.isfinite(got).all() and np.abs(got - want).max() <= 1e-2 * scale, (dtype, cols)
