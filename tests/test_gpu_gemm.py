"""GPU tests of GEMM and the transposed GEMV (run with `pytest -m gpu` on the GPU machine): every
kernel family verified against float64 on odd and even shapes through the worker, the planted
wrong kernel caught, gemm() and gemv(trans=True) on torch tensors, and a short real GEMM sweep."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune import ops
from autotune.build.compiler import CompileJob, compile_kernel
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.measure.worker.client import Worker
from autotune.ops import gemm
from autotune.ops.gemv import narrow, strips, tall, transposed
from tests.worker_checks import measure_configs

pytestmark = pytest.mark.gpu

# (m, n, k): odd tails everywhere (the wgmma family's, n and k multiples of 8: 257 x 384 x 4104 and
# 1000 x 1000 x 1000), tiny, skinny (M <= 16, on CUDA cores for float32 and M = 1, on
# tensor cores otherwise: M = 2, 3, 7, 12 and 16 cover rows g + 8 absent, partial and full; 5 x 1000 x
# 1016 has 16-byte rows, so skinny_tc's TMA stages serve it with tails in M, N and K) and one larger
# aligned shape.
GEMM_SHAPES = [
    (1, 1, 1),
    (7, 13, 5),
    (1000, 1001, 999),
    (257, 384, 4104),
    (1000, 1000, 1000),
    (16, 4096, 4096),
    (3, 1001, 999),
    (2, 1001, 999),
    (12, 200, 4100),
    (5, 1000, 1016),
]
# Transposed: shapes of 16 columns and more run in the narrow family (odd widths: scalar loads), 9 to 15
# in skinny, up to 8 in tall (rows left past the whole chunks: 4099, 100003; chunks too long for 3 rows:
# 3 x 2); test_strips_by_name runs the tall ones in strips.
TRANS_SHAPES = [
    (1, 1),
    (999, 1001),
    (131072, 256),
    (256, 8192),
    (100003, 255),
    (65541, 1000),
    (4099, 16),
    (70000, 7),
    (8192, 12),
    (65536, 1),
    (4099, 3),
    (100003, 8),
    (3, 2),
]
DTYPES = ["float32", "float16", "bfloat16"]
RANDOM_SAMPLES = 3  # per problem, beside the default, the seeds and the space's first and last


def _sample(problem: Problem) -> list[Config]:
    """The default config (also with its K split over clusters of 2 and 8 blocks), the family's seeds
    and a fixed sample of the space (its largest and smallest tiles included)."""
    op = ops.for_problem(problem)
    configs = list(op.space(problem))
    rng = random.Random(f"{problem}")
    # Seeds of GEMM's families, of narrow and strips (skinny's transposed-GEMV seeds stay unsampled).
    own = op.kernel_file(problem) in (narrow.KERNEL_FILE, strips.KERNEL_FILE, tall.KERNEL_FILE)
    seeds = op.seed_configs(problem) if problem.op == "gemm" or own else []
    default = op.default_config(problem)
    picked = [default, configs[0], configs[-1], *seeds]
    # Split-K reduced in a cluster of blocks (the skinny families), where the problem allows it.
    clustered = [dict(default, cluster=size, split=size) for size in (2, 8) if "cluster" in default]
    picked += [c for c in clustered if op.space(problem).check(c) is None]
    picked += rng.sample(configs, min(RANDOM_SAMPLES, len(configs)))
    unique = {tuple(sorted(c.items())): c for c in picked}
    return list(unique.values())


def _measure_all(problem: Problem) -> list[tuple[Config, str, str]]:
    """(config, status, message) of each sampled config, measured by a real worker."""
    return measure_configs(problem, _sample(problem), seed=7)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=str)
def test_every_gemm_family_is_correct(shape: tuple[int, int, int], dtype: str) -> None:
    problem = Problem("gemm", dtype, *shape)
    results = _measure_all(problem)
    wrong = [(gemm.family(problem).NAME, c, s, m) for c, s, m in results if s != Status.OK.value]
    assert not wrong, wrong


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=str)
def test_every_gemm_family_is_correct_with_b_stored_n_by_k(shape: tuple[int, int, int], dtype: str) -> None:
    """The same sample of each family's space for C = A Wᵀ (W N x K, K contiguous: nn.Linear's layout),
    against at_gemm_reference_nt."""
    problem = Problem("gemm", dtype, *shape, trans=True)
    results = _measure_all(problem)
    wrong = [(gemm.family(problem).NAME, c, s, m) for c, s, m in results if s != Status.OK.value]
    assert not wrong, wrong


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", TRANS_SHAPES, ids=str)
def test_transposed_gemv_is_correct(shape: tuple[int, int], dtype: str) -> None:
    problem = Problem("gemv", dtype, *shape, trans=True)
    wrong = [(c, s, m) for c, s, m in _measure_all(problem) if s != Status.OK.value]
    assert not wrong, wrong


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(131072, 256), (100003, 255)], ids=str)
def test_strips_by_name(shape: tuple[int, int], dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The strips family, which narrow replaced, stays correct where it is named (the worker inherits
    the environment)."""
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, strips.NAME)
    problem = Problem("gemv", dtype, *shape, trans=True)
    assert ops.for_problem(problem).kernel_file(problem) == strips.KERNEL_FILE
    wrong = [(c, s, m) for c, s, m in _measure_all(problem) if s != Status.OK.value]
    assert not wrong, wrong


def test_a_wrong_gemm_kernel_is_caught(tmp_path: Path) -> None:
    problem = Problem("gemm", "float16", 300, 200, 100)
    op = ops.for_problem(problem)
    config = op.default_config(problem)
    # The planted bug: the kernel believes K is one shorter, dropping the last term of every output.
    source = op.kernel_source(problem, config).replace("int M, int N, int K,", "int M, int N, int K_full,", 1)
    source = source.replace("{\n", "{\n  const int K = K_full - 1;\n", 1)
    compiled = compile_kernel(CompileJob(op.kernel_name(problem, config), source, "sm_90", "planted"), tmp_path)
    assert compiled.cubin is not None, compiled.message
    with Worker() as worker:
        worker.hello()
        worker.setup(problem, seed=3)
        outcome = worker.measure(compiled.cubin, compiled.job.name, config)
    assert outcome.status is Status.WRONG_RESULT, outcome
    assert "outputs wrong" in outcome.message


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 1001, 999), (8, 4096, 4096), (512, 512, 512)], ids=str)
def test_gemm_on_torch_tensors(shape: tuple[int, int, int], dtype: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import autotune

    kind = getattr(torch, dtype)
    m, n, k = shape
    a = torch.rand(m, k, device="cuda", dtype=kind) * 2 - 1
    b = torch.rand(k, n, device="cuda", dtype=kind) * 2 - 1
    db = str(tmp_path / "t.db")
    c = autotune.gemm(a, b, db=db)
    assert isinstance(c, torch.Tensor) and c.dtype == kind and c.shape == (m, n)
    want = a.double() @ b.double()
    scale = (a.double().abs() @ b.double().abs()).max().item()
    assert (c.double() - want).abs().max().item() <= 1e-2 * scale
    before = torch.rand(m, n, device="cuda", dtype=kind)
    out = before.clone()
    autotune.gemm(a, b, out=out, alpha=2.0, beta=-0.5, db=db)
    assert (out.double() - (2 * want - 0.5 * before.double())).abs().max().item() <= 2e-2 * scale + 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_gemv_on_torch_tensors(dtype: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import autotune

    kind = getattr(torch, dtype)
    a = torch.rand(4099, 1001, device="cuda", dtype=kind) * 2 - 1
    x = torch.rand(4099, device="cuda", dtype=kind) * 2 - 1
    y = autotune.gemv(a, x, trans=True, db=str(tmp_path / "t.db"))
    assert y.shape == (1001,) and y.dtype == kind
    want = a.double().t() @ x.double()
    scale = (a.double().abs().t() @ x.double().abs()).max().item()
    assert (y.double() - want).abs().max().item() <= 1e-2 * scale


@pytest.mark.parametrize("dtype", DTYPES)
def test_tall_transposed_gemv_on_a_strided_view_with_beta_called_again_and_again(dtype: str, tmp_path: Path) -> None:
    """The narrow family on some columns of a wider matrix (row stride 320), y = 2 Aᵀx - 0.5 y, five
    times: its split partials and arrival counter must be back at zero after each call."""
    torch = pytest.importorskip("torch")
    import autotune

    kind = getattr(torch, dtype)
    wide = torch.rand(70001, 320, device="cuda", dtype=kind) * 2 - 1
    a, x = wide[:, :256], torch.rand(70001, device="cuda", dtype=kind) * 2 - 1
    problem = autotune.best("gemv", 70001, 256, dtype=dtype, trans=True, gpu=torch.cuda.get_device_name()).problem
    assert ops.for_problem(problem).kernel_file(problem) == narrow.KERNEL_FILE
    want = a.double().t() @ x.double()
    scale = (a.double().abs().t() @ x.double().abs()).max().item()
    db = str(tmp_path / "t.db")
    for _ in range(5):
        before = torch.rand(256, device="cuda", dtype=kind)
        out = before.clone()
        autotune.gemv(a, x, out=out, alpha=2.0, beta=-0.5, trans=True, db=db)
        assert (out.double() - (2 * want - 0.5 * before.double())).abs().max().item() <= 2e-2 * scale + 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("columns", [1, 3, 8])
def test_tall_family_on_strided_and_unaligned_views_called_again_and_again(dtype: str, columns: int) -> None:
    """The tall family's kernels read a contiguous aligned matrix as one flat array, and any other row
    by row: some columns of a wider matrix (row stride 11), a matrix and x starting one element into
    their buffers, and the flat case, y = 2 Aᵀx - 0.5 y four times each with a grid of many blocks (its
    partials and arrival counter back at zero after each call), with one, and with one cluster."""
    torch = pytest.importorskip("torch")
    from autotune.runtime.choice_launcher import ChoiceLauncher
    from autotune.runtime.operands import describe
    from autotune.select.choose import Choice

    kind, rows = getattr(torch, dtype), 70001
    problem = Problem("gemv", dtype, rows, columns, trans=True)
    assert transposed.family_of(problem) is tall
    launcher = ChoiceLauncher()
    wide = torch.rand(rows, 11, device="cuda", dtype=kind) * 2 - 1
    flat = torch.rand(1 + rows * columns, device="cuda", dtype=kind) * 2 - 1
    x_flat = torch.rand(1 + rows, device="cuda", dtype=kind) * 2 - 1
    views = {
        "strided": (wide[:, :columns], x_flat[:rows]),
        "unaligned": (flat[1:].view(rows, columns), x_flat[1:]),
        "flat": (flat[: rows * columns].view(rows, columns), x_flat[:rows]),
    }
    base = tall.default_config(problem)
    configs = [{**base, "depth": 1}, {**base, "depth": 64}]
    if 8 in tall.space(problem).choices()["cluster"]:  # one cluster of 8 blocks adding in shared memory
        configs.append({**base, "depth": 1, "cluster": 8})
    for config in configs:
        choice = Choice(problem, launcher.gpu.name, config, "default")
        for name, (a, x) in views.items():
            want = a.double().t() @ x.double()
            scale = (a.double().abs().t() @ x.double().abs()).max().item()
            for _ in range(4):
                before = torch.rand(columns, device="cuda", dtype=kind)
                out = before.clone()
                launcher.gemv(choice, describe(a, "A"), describe(x, "x"), describe(out, "out"), 2.0, -0.5)
                torch.cuda.synchronize()
                error = (out.double() - (2 * want - 0.5 * before.double())).abs().max().item()
                assert error <= 2e-2 * scale + 1e-2, (name, config, error)


def test_short_real_gemm_sweep_then_best(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    db = str(tmp_path / "sweep.db")
    runner = CliRunner()
    args = ["sweep", "--op", "hgemm", "--m", "1024", "--n", "1024", "--k", "1000", "--trials", "10", "--db", db]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "hgemm 1024x1024x1000" in result.output
    best = runner.invoke(
        app, ["best", "--op", "hgemm", "--m", "1024", "--n", "1024", "--k", "1000", "--db", db, "--json"]
    )
    assert best.exit_code == 0, best.output
    assert '"measured"' in best.output


@pytest.mark.parametrize("op", ["gemm", "gemv_trans", "gemv_trans_tall"])
def test_unaligned_views_fall_back_to_scalar_loads(op: str, tmp_path: Path) -> None:
    """Contiguous views starting 2 bytes into a buffer: 16-byte loads would fault or misread."""
    torch = pytest.importorskip("torch")
    import autotune

    def view(*shape: int) -> Any:
        flat = torch.rand(1 + int(np.prod(shape)), device="cuda", dtype=torch.float16) * 2 - 1
        return flat[1:].view(*shape)

    db = str(tmp_path / "t.db")
    if op == "gemm":
        a, b = view(64, 256), view(256, 512)
        got, want = autotune.gemm(a, b, db=db), a.double() @ b.double()
        scale = (a.double().abs() @ b.double().abs()).max().item()
    else:
        a, x = view(4096, 512) if op == "gemv_trans" else view(65536, 256), view(4096 if op == "gemv_trans" else 65536)
        got, want = autotune.gemv(a, x, trans=True, db=db), a.double().t() @ x.double()
        scale = (a.double().abs().t() @ x.double().abs()).max().item()
    assert a.data_ptr() % 16 != 0
    assert (got.double() - want).abs().max().item() <= 1e-2 * scale


def test_tma_kernels_follow_the_callers_arrays() -> None:
    """A TMA config's tensor maps name A and B: the launcher must rewrite them when the arrays change
    (three calls: new arrays, other arrays, the first ones again), with tails in M, N and K."""
    torch = pytest.importorskip("torch")
    from autotune.ops.gemm import wgmma as gemm_wgmma
    from autotune.runtime.choice_launcher import ChoiceLauncher
    from autotune.runtime.operands import describe
    from autotune.select.choose import Choice

    problem = Problem("gemm", "float16", 520, 264, 1000)
    if gemm.family(problem) is not gemm_wgmma:
        pytest.skip("the wgmma family needs a Hopper GPU")
    launcher = ChoiceLauncher()
    config = {**gemm_wgmma.default_config(problem), "tma": 1}
    choice = Choice(problem, launcher.gpu.name, config, "default")
    pairs = [
        (
            torch.rand(520, 1000, device="cuda", dtype=torch.float16) - 0.5,
            torch.rand(1000, 264, device="cuda", dtype=torch.float16) - 0.5,
        )
        for _ in range(2)
    ]
    for a, b in (pairs[0], pairs[1], pairs[0]):
        c = torch.full((520, 264), float("nan"), device="cuda", dtype=torch.float16)
        launcher.gemm(choice, describe(a, "A"), describe(b, "B"), describe(c, "out"), 1.0, 0.0)
        want = a.double() @ b.double()
        scale = (a.double().abs() @ b.double().abs()).max().item()
        assert (c.double() - want).abs().max().item() <= 1e-2 * scale
