"""GPU tests (run on the GPU machine with `pytest -m gpu`): every family correct on odd and even
shapes, gemv() on PyCUDA and torch arrays, and a short real sweep."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune import ops
from autotune.build.compiler import CompileJob, CompilePool
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.measure.worker.client import Worker
from autotune.ops import gemv, source_hash

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (7, 7), (1001, 999), (4096, 8192), (333, 4104)]
DTYPES = ["float32", "float16", "bfloat16"]


def _config(**changes: int) -> dict[str, int]:
    return {**gemv.DEFAULT_CONFIG, **changes}


# One config per family, with split-K (through the workspace and in clusters), persistent grids,
# more rows per group than lanes, L2 prefetches before the wait for the kernel before, and every load of
# a step issued before its FMAs (order=1) among them.
FAMILY_CONFIGS = [
    _config(block=128, lanes=1, vec=1, unroll=1, rows=1),
    _config(block=256, lanes=1, vec=8, unroll=2, rows=2, x_smem=1, policy=1, persist=1, order=1),
    _config(block=64, lanes=1, vec=2, unroll=2, rows=8, split=2, cluster=2),
    _config(block=64, lanes=4, vec=4, unroll=4, rows=2, policy=2, split=2, order=1),
    _config(block=256, lanes=8, vec=8, unroll=1, rows=8, policy=2, persist=2, order=1),
    _config(block=256, lanes=16, vec=2, unroll=4, rows=1, persist=2),
    _config(block=256, lanes=16, vec=4, unroll=1, rows=8, x_smem=1, policy=1, split=4, cluster=4, persist=1, order=1),
    _config(block=256, lanes=32, vec=8, unroll=2, rows=2, policy=2, prefetch=1),
    _config(block=128, lanes=32, vec=8, unroll=2, rows=1, x_smem=1, policy=1, split=4, persist=1, prefetch=1, order=1),
    _config(block=256, lanes=64, vec=2, unroll=4, rows=4, policy=2),
    _config(block=128, lanes=64, vec=8, unroll=8, rows=2, policy=1, order=1),  # 256 bytes of A in flight
    _config(block=128, lanes=64, vec=8, unroll=2, rows=2, policy=1, split=8, cluster=8, prefetch=1, order=1),
    _config(block=512, lanes=512, vec=8, unroll=1, rows=1, x_smem=1, policy=1, split=8, prefetch=1),
    # Each thread's first 1 or 2 vectors of each row prefetched into L2 (any vector width).
    _config(block=128, lanes=128, vec=8, unroll=4, rows=2, policy=1, prefetch=2, order=1),
    _config(block=256, lanes=8, vec=2, unroll=2, rows=4, policy=0, split=4, cluster=4, prefetch=3),
    _config(block=64, lanes=1, vec=1, unroll=2, rows=2, x_smem=1, prefetch=3, persist=1),
]


def _fit(problem: Problem, config: dict[str, int]) -> dict[str, int] | None:
    """The config with the widest vector and the largest split this shape allows (a cluster shrinks
    with its split), or None."""
    space = gemv.OP.space(problem)
    vecs = sorted(space.choices()["vec"], reverse=True)
    for vec, split, prefetch in itertools.product(vecs, (config["split"], 2, 1), (config["prefetch"], 0)):
        cluster = split if config["cluster"] > 1 else 1
        candidate = dict(config, vec=min(vec, config["vec"]), split=split, cluster=cluster, prefetch=prefetch)
        if space.check(candidate) is None:
            return candidate
    return None


@pytest.fixture(scope="module")
def worker() -> Worker:
    with Worker() as w:
        yield w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_family_is_correct(worker: Worker, shape: tuple[int, int], dtype: str) -> None:
    problem = Problem("gemv", dtype, *shape)
    gpu = worker.hello()
    worker.setup(problem, seed=sum(shape))
    configs = [c for c in (_fit(problem, c) for c in FAMILY_CONFIGS) if c is not None]
    assert len(configs) >= 9
    with CompilePool() as pool:
        futures = [
            (
                c,
                pool.submit(
                    CompileJob(
                        gemv.OP.kernel_name(problem, c),
                        gemv.OP.kernel_source(problem, c),
                        gpu.arch,
                        source_hash(problem),
                    )
                ),
            )
            for c in configs
        ]
        for config, future in futures:
            compiled = future.result()
            assert compiled.cubin is not None, compiled.message
            outcome = worker.measure(compiled.cubin, compiled.job.name, config)
            assert outcome.status is Status.OK, f"{gemv.OP.family(problem, config)} {config}: {outcome.message}"
            assert outcome.time_us is not None and outcome.time_us > 0


@pytest.mark.parametrize("shape", [(65536, 1), (1, 262144)], ids=["65536x1", "1x262144/t"])
def test_results_too_small_for_a_normal_float16_pass(worker: Worker, shape: tuple[int, int]) -> None:
    """Sums of one term (each y a single product of two inputs in [-1, 1)): of 65536 or 262144 such
    products some fall below float16's smallest normal number (6.1e-5), where storing them costs an
    absolute error no relative tolerance covers. Before the check's subnormal floor every config and
    every cuBLASLt algorithm failed these shapes."""
    m, n = shape
    problem = Problem("gemv", "float16", m, n, trans=m == 1)
    gpu = worker.hello()
    worker.setup(problem, seed=13)
    config = ops.for_problem(problem).default_config(problem)
    with CompilePool() as pool:
        compiled = pool.submit(ops.compile_job(problem, config, gpu.arch)).result()
    assert compiled.cubin is not None, compiled.message
    for _ in range(3):  # fresh data each time: each check draws new inputs
        outcome = worker.measure(compiled.cubin, compiled.job.name, config)
        assert outcome.status is Status.OK, outcome.message


def test_a_timing_records_the_clocks_and_power_it_ran_at(worker: Worker) -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    problem = Problem("gemv", "float16", 8192, 8192)
    gpu = worker.hello()
    worker.setup(problem, seed=3)
    config = gemv.OP.default_config(problem)
    with CompilePool() as pool:
        compiled = pool.submit(ops.compile_job(problem, config, gpu.arch)).result()
    assert compiled.cubin is not None, compiled.message
    outcome = worker.measure(compiled.cubin, compiled.job.name, config)
    assert outcome.status is Status.OK, outcome.message
    assert outcome.sm_mhz is not None and 300 < outcome.sm_mhz < 4000
    assert outcome.mem_mhz is not None and 300 < outcome.mem_mhz < 20000
    assert outcome.power_w is not None and 20 < outcome.power_w < 2000


def test_verifier_rejects_a_wrong_kernel(worker: Worker, tmp_path: Path) -> None:
    problem = Problem("gemv", "float16", 1001, 999)
    gpu = worker.hello()
    worker.setup(problem, seed=5)
    config = dict(gemv.DEFAULT_CONFIG)
    # The same kernel with the reduction cut short by one element (rows still lda apart): must fail
    # verification.
    original = gemv.OP.kernel_source(problem, config)
    source = original.replace("int M, int N, int lda,\n", "int M, int N_full, int lda,\n", 1)
    source = source.replace("(A, M, N, lda);", "(A, M, N_full, lda);")
    source = source.replace("(A, x, y, M, N, lda,", "(A, x, y, M, N_full - 1, lda,")
    assert source.count("N_full") == 3, source
    from autotune.build.compiler import compile_kernel

    compiled = compile_kernel(CompileJob(gemv.OP.kernel_name(problem, config), source, gpu.arch, "planted"), tmp_path)
    assert compiled.cubin is not None, compiled.message
    outcome = worker.measure(compiled.cubin, compiled.job.name, config)
    assert outcome.status is Status.WRONG_RESULT, outcome


def _numpy_reference(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ x.astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(7, 7), (1001, 999), (512, 4096)], ids=str)
def test_gemv_on_pycuda_arrays(shape: tuple[int, int], dtype: type, tmp_path: Path) -> None:
    import pycuda.autoprimaryctx  # noqa: F401  (arrays need a current context before gemv() makes one)
    import pycuda.gpuarray as gpuarray

    import autotune

    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, shape).astype(dtype)
    x = rng.uniform(-1, 1, shape[1]).astype(dtype)
    y = autotune.gemv(gpuarray.to_gpu(a), gpuarray.to_gpu(x), db=str(tmp_path / "t.db"))
    want = _numpy_reference(a, x)
    tol = 1e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(y.get().astype(np.float64), want, rtol=tol, atol=tol * (np.abs(a) @ np.abs(x)).max())
    # alpha and beta, in place into out
    out = gpuarray.to_gpu(rng.uniform(-1, 1, shape[0]).astype(dtype))
    before = out.get().astype(np.float64)
    autotune.gemv(gpuarray.to_gpu(a), gpuarray.to_gpu(x), out=out, alpha=2.0, beta=-0.5, db=str(tmp_path / "t.db"))
    np.testing.assert_allclose(out.get().astype(np.float64), 2 * want - 0.5 * before, rtol=4 * tol, atol=0.05)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gemv_on_torch_tensors(dtype: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import autotune

    kind = getattr(torch, dtype)
    a = torch.rand(1001, 4096, device="cuda", dtype=kind) * 2 - 1
    x = torch.rand(4096, device="cuda", dtype=kind) * 2 - 1
    y = autotune.gemv(a, x, db=str(tmp_path / "t.db"))
    assert isinstance(y, torch.Tensor) and y.dtype == kind and y.shape == (1001,)
    want = a.double() @ x.double()
    scale = (a.double().abs() @ x.double().abs()).max().item()
    assert (y.double() - want).abs().max().item() <= 1e-2 * scale


CHAIN_CONFIGS = [
    _config(block=128, lanes=128, vec=4, unroll=4, rows=2, policy=1),
    _config(block=128, lanes=128, vec=4, unroll=4, rows=2, policy=1, prefetch=1, order=1),
    _config(block=64, lanes=64, vec=4, unroll=2, rows=2, x_smem=1, policy=1, split=4, persist=4, prefetch=1),
    _config(block=128, lanes=64, vec=4, unroll=2, rows=2, policy=1, split=4, cluster=4, order=1),
    _config(block=128, lanes=128, vec=4, unroll=4, rows=2, policy=1, prefetch=2, order=1),
    _config(block=64, lanes=64, vec=4, unroll=2, rows=2, policy=1, split=4, persist=4, prefetch=3),
]


@pytest.mark.parametrize(
    "config",
    CHAIN_CONFIGS,
    ids=lambda c: f"split{c['split']}-cluster{c['cluster']}-prefetch{c['prefetch']}-order{c['order']}",
)
def test_back_to_back_gemvs_read_what_the_one_before_wrote(config: dict[str, int]) -> None:
    """A chain v <- A_k v of GEMVs queued without a sync in between. With programmatic dependent
    launch each one starts before the one before has finished, so this fails (NaN from the poisoned
    vectors, or stale values) if a kernel reads x, or touches the split-K workspace, before its wait."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.gpuarray as gpuarray

    from autotune.runtime.choice_launcher import ChoiceLauncher
    from autotune.runtime.operands import describe
    from autotune.select.choose import Choice

    n, steps = 2048, 24
    rng = np.random.default_rng(7)
    mats = [(rng.uniform(-1, 1, (n, n)) * (3.0 / n) ** 0.5).astype(np.float32) for _ in range(steps)]
    start = rng.uniform(-1, 1, n).astype(np.float32)
    launcher = ChoiceLauncher()
    problem = Problem("gemv", "float32", n, n)
    assert gemv.OP.space(problem).check(config) is None
    choice = Choice(problem, launcher.gpu.name, config, "measured")
    if launcher.device.programmatic:
        assert launcher.runtime.plan(choice, launcher.device, True).config.num_attrs == 1  # PDL
    a_gpu = [gpuarray.to_gpu(a) for a in mats]
    vectors = [gpuarray.to_gpu(start)] + [gpuarray.to_gpu(np.full(n, np.nan, np.float32)) for _ in range(steps)]
    for k in range(steps):
        a, x, y = describe(a_gpu[k], "A"), describe(vectors[k], "x"), describe(vectors[k + 1], "y")
        launcher.gemv(choice, a, x, y, 1.0, 0.0)
    want = start.astype(np.float64)
    for a in mats:
        want = a.astype(np.float64) @ want
    got = vectors[-1].get().astype(np.float64)
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - want) <= 1e-4 * np.linalg.norm(want)


def test_short_real_sweep_then_best(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    db = str(tmp_path / "sweep.db")
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", "--op", "hgemv", "--m", "1024", "--n", "1000", "--trials", "12", "--db", db])
    assert result.exit_code == 0, result.output
    assert "hgemv 1024x1000" in result.output
    best = runner.invoke(app, ["best", "--m", "1024", "--n", "1000", "--db", db, "--json"])
    assert best.exit_code == 0, best.output
    assert '"measured"' in best.output
    # The leaders were measured again on a second set of buffers, and the best is one of them.
    from autotune.store import open_store

    problem = Problem("gemv", "float16", 1024, 1000)
    with open_store(db, import_shipped=False) as store:
        pid = store.problem_id(problem, store.gpu_names()[0], create=False)
        assert pid is not None
        leader = store.leaders(pid, source_hash(problem), 1)[0]
        assert leader.rounds == 2 and len(leader.times_us) >= 2


# Configs tuned on aligned shapes (the H200's picks for float16 4096x8192 and 1024^2: 16-byte loads,
# the second with L2 prefetches that need them) and shapes none of them runs on as they are.
TUNED_ALIGNED = [
    _config(block=128, lanes=128, vec=8, unroll=8, rows=2, policy=1, order=1),
    _config(block=512, lanes=128, vec=8, unroll=4, rows=2, policy=2, prefetch=1, order=1),
]
MISFITS = [("float16", 5000, 7001), ("bfloat16", 4096, 4100), ("float32", 1000, 1002), ("float16", 333, 4095)]


def _torch_operands(dtype: str, m: int, n: int, offset: int = 0) -> tuple[Any, Any]:
    """A (m x n) and x, random in [-1, 1); `offset` elements into their allocations (unaligned views)."""
    torch = pytest.importorskip("torch")
    kind = getattr(torch, dtype)
    a = (torch.rand(m * n + offset, device="cuda", dtype=kind) * 2 - 1)[offset:].view(m, n)
    x = (torch.rand(n + offset, device="cuda", dtype=kind) * 2 - 1)[offset:]
    return a, x


@functools.cache
def _launcher() -> Any:
    from autotune.runtime.choice_launcher import ChoiceLauncher

    return ChoiceLauncher()  # the primary context, which torch uses too


def _run_and_check(problem: Problem, config: dict[str, int], a: Any, x: Any) -> None:
    import torch

    from autotune.runtime.operands import describe
    from autotune.select.choose import Choice

    launcher = _launcher()
    y = torch.full((problem.m,), float("nan"), device="cuda", dtype=a.dtype)
    choice = Choice(problem, launcher.gpu.name, config, "estimate")
    launcher.gemv(choice, describe(a, "A"), describe(x, "x"), describe(y, "y"), 1.0, 0.0)
    want = a.double() @ x.double()
    scale = (a.double().abs() @ x.double().abs()).max().item()
    assert torch.isfinite(y).all(), config
    assert (y.double() - want).abs().max().item() <= 1e-2 * scale, config


@pytest.mark.parametrize("tuned", TUNED_ALIGNED, ids=["b128-l128-u8", "b512-l128-prefetch"])
@pytest.mark.parametrize("misfit", MISFITS, ids=lambda s: f"{s[0]}-{s[1]}x{s[2]}")
def test_a_tuned_config_fitted_to_a_shape_it_misses_is_correct(
    misfit: tuple[str, int, int], tuned: dict[str, int]
) -> None:
    """What the selector answers for a shape no tuned config runs on: the nearest shape's config
    moved by Space.fit (narrower loads, no prefetch), run on fresh data with y poisoned."""
    dtype, m, n = misfit
    problem = Problem("gemv", dtype, m, n)
    assert gemv.OP.space(problem).check(tuned) is not None
    fitted = gemv.OP.space(problem).fit(tuned)
    assert fitted is not None and fitted["vec"] < tuned["vec"]
    _run_and_check(problem, fitted, *_torch_operands(dtype, m, n))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_unaligned_views_run_the_tuned_config_with_scalar_loads(dtype: str) -> None:
    """Views that start 2 or 4 bytes past an allocation: the launcher swaps in Space.fit's scalar
    version of a prefetching config (runtime.launcher.scalar_loads) instead of the default."""
    from autotune.runtime.launcher import scalar_loads

    problem = Problem("gemv", dtype, 1024, 1024)
    config = TUNED_ALIGNED[1] if dtype != "float32" else {**TUNED_ALIGNED[1], "vec": 4}
    assert gemv.OP.space(problem).check(config) is None
    _, scalar = scalar_loads(problem, config)
    assert scalar == {**config, "vec": 1, "prefetch": 0}
    _run_and_check(problem, config, *_torch_operands(dtype, 1024, 1024, offset=1))
