"""GEMM and the transposed GEMV without a GPU: problems, shapes files, family dispatch, store,
records files, selector and CLI answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import api, ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem, parse_shapes
from autotune.ops import gemm, make_problem, source_hash, standard_shapes
from autotune.ops.gemv import transposed as gemv_t
from autotune.select.choose import DEFAULT, ESTIMATE, MEASURED, Selector
from autotune.store import Store, open_store
from tests.fakes import record

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SQUARE = Problem("gemm", "float16", 4096, 4096, 4096)
SKINNY = Problem("gemm", "float16", 8, 4096, 4096)
TRANS = Problem("gemv", "float16", 4096, 8192, trans=True)


def measure(store: Store, problem: Problem, config: dict[str, int], time_us: float) -> None:
    record(store, problem, config, Outcome(Status.OK, time_us=time_us, times_us=[time_us]), H200)


# --- problems and shapes ---------------------------------------------------------------------------


def test_gemm_problem_needs_k_and_gemv_refuses_it() -> None:
    assert make_problem("gemm", "float16", 4096, 4096, 4096) == SQUARE
    assert str(SQUARE) == "hgemm 4096x4096x4096" and SQUARE.shape == (4096, 4096, 4096)
    assert str(TRANS) == "hgemv 4096x8192 (transposed)" and TRANS.shape == (4096, 8192)
    with pytest.raises(AutotuneError, match="needs K"):
        make_problem("gemm", "float16", 4096, 4096)
    with pytest.raises(AutotuneError, match="--k applies to GEMM only"):
        make_problem("gemv", "float16", 4096, 4096, 64)
    nt = make_problem("gemm", "float16", 8, 4096, 4096, trans=True)
    assert nt == Problem("gemm", "float16", 8, 4096, 4096, trans=True) != SKINNY
    assert str(nt) == "hgemm 8x4096x4096 (B stored N x K)"
    with pytest.raises(AutotuneError, match="K must be a positive integer"):
        make_problem("gemm", "float16", 4096, 4096, 0)


def test_gemm_shapes_files_have_three_columns() -> None:
    assert parse_shapes("# c\n1 2 3\n\n4 5 6  # x\n", "f", ("M", "N", "K")) == [(1, 2, 3), (4, 5, 6)]
    with pytest.raises(AutotuneError, match="f line 1: expected three integers 'M N K', got '1 2'"):
        parse_shapes("1 2\n", "f", ("M", "N", "K"))
    shapes = standard_shapes("gemm")
    assert (4096, 4096, 4096) in shapes and (8192, 8192, 8192) in shapes
    assert {(m, n) for m, n, k in shapes if m <= 16 and n == k} >= {(m, n) for m in (1, 2, 4, 8, 16) for n in (4096,)}
    assert len([s for s in shapes if s[0] <= 16]) == 15


def test_problems_for_gemm_and_the_transposed_gemv() -> None:
    assert api.problems_for("hgemm", None, 4096, 4096, None, 4096) == [SQUARE]
    assert len(api.problems_for("sgemm", None, None, None, None)) == len(standard_shapes("gemm"))
    trans = api.problems_for("hgemv", None, None, None, None, trans=True)
    assert trans and all(p.trans for p in trans)
    with pytest.raises(AutotuneError, match="give all of --m, --n and --k"):
        api.problems_for("hgemm", None, 4096, 4096, None)
    with pytest.raises(AutotuneError, match="--k applies to GEMM only"):
        api.problems_for("hgemv", None, 4096, 4096, None, 64)


# --- families ---------------------------------------------------------------------------------------


def test_each_problem_gets_one_family_and_its_own_source_hash() -> None:
    assert gemm.family(SQUARE).NAME == "wgmma"
    assert gemm.family(Problem("gemm", "float16", 1000, 1001, 999)).NAME == "mma"  # n, k not multiples of 8
    assert gemm.family(Problem("gemm", "float32", 4096, 4096, 4096)).NAME == "simt"
    assert gemm.family(SKINNY).NAME == "skinny_tc"
    assert gemm.family(Problem("gemm", "float32", 8, 4096, 4096)).NAME == "skinny"
    assert ops.for_problem(TRANS) is gemv_t.TRANSPOSED
    assert gemv_t.as_gemm(TRANS) == Problem("gemm", "float16", 1, 8192, 4096)
    cuda_core_skinny = Problem("gemm", "float32", 8, 64, 64)
    hashes = {source_hash(p) for p in (SQUARE, Problem("gemm", "float32", 64, 64, 64), SKINNY, cuda_core_skinny)}
    assert len(hashes) == 4
    thin = Problem("gemv", "float16", 16384, 12, trans=True)  # between narrow's strips and tall: skinny's
    assert source_hash(thin) == source_hash(cuda_core_skinny)
    tall = Problem("gemv", "float16", 262144, 8, trans=True)  # the tall family's
    assert source_hash(tall) not in {*hashes, source_hash(thin), source_hash(TRANS)}
    assert source_hash(TRANS) not in {*hashes, source_hash(Problem("gemv", "float16", 4096, 8192))}
    assert source_hash(Problem("gemv", "float16", 4096, 8192)) not in hashes


@pytest.mark.parametrize("problem", [SQUARE, SKINNY, TRANS, Problem("gemm", "bfloat16", 1000, 1001, 999)], ids=str)
def test_default_configs_are_valid_and_launchable(problem: Problem) -> None:
    op = ops.for_problem(problem)
    config = op.default_config(problem)
    assert op.space(problem).check(config) is None
    geometry = op.launch(problem, config, 132)
    assert 0 < geometry.block[0] * geometry.block[1] * geometry.block[2] <= 1024
    assert op.kernel_name(problem, config) in op.kernel_source(problem, config)


# --- store, records, selector -------------------------------------------------------------------------


def test_gemm_and_transposed_problems_are_stored_apart(store: Store) -> None:
    plain = Problem("gemv", "float16", 4096, 8192)
    ids = {store.problem_id(p, H200.name) for p in (plain, TRANS, SQUARE, Problem("gemm", "float16", 4096, 4096, 8192))}
    assert len(ids) == 4
    measure(store, SQUARE, gemm.OP.default_config(SQUARE), 200.0)
    assert [p.problem for p in store.problems(op="gemm")] == [SQUARE, Problem("gemm", "float16", 4096, 4096, 8192)]


def test_records_files_carry_k_and_trans(db_path: Path, tmp_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as store:
        measure(store, SQUARE, gemm.OP.default_config(SQUARE), 200.0)
        measure(store, TRANS, gemv_t.TRANSPOSED.default_config(TRANS), 30.0)
        assert store.export_records(H200.name, tmp_path / "r.jsonl") == 2
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert {(line.get("k"), line.get("trans")) for line in lines[1:]} == {(4096, False), (0, True)}
    with open_store(str(tmp_path / "other.db"), import_shipped=False) as other:
        assert other.import_records(tmp_path / "r.jsonl") == 2
        assert other.best(H200.name, SQUARE, source_hash(SQUARE)) is not None
        assert other.best(H200.name, TRANS, source_hash(TRANS)) is not None
        assert other.best(H200.name, Problem("gemv", "float16", 4096, 8192), None) is None


def test_selector_answers_gemm_from_the_nearest_shape_in_three_dimensions(store: Store) -> None:
    config = gemm.OP.default_config(SQUARE)
    measure(store, SQUARE, config, 200.0)
    measure(store, Problem("gemm", "float16", 8192, 8192, 8192), config, 1500.0)
    selector = Selector(store)
    assert selector.choose(SQUARE, H200.name).source == MEASURED
    near = selector.choose(Problem("gemm", "float16", 4096, 4096, 5000), H200.name)
    assert (near.source, near.from_shape) == (ESTIMATE, (4096, 4096, 4096))
    assert selector.choose(TRANS, H200.name).source == DEFAULT  # the usual layout's rows do not count
    assert selector.choose(Problem("gemm", "float32", 4096, 4096, 4096), H200.name).source == DEFAULT


# --- CLI ----------------------------------------------------------------------------------------------


def test_cli_best_for_gemm_and_transposed_gemv(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    db = str(tmp_path / "t.db")
    runner = CliRunner()
    args = ["best", "--op", "hgemm", "--m", "4096", "--n", "4096", "--k", "4096", "--gpu", "NVIDIA B200", "--db", db]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert (answer["op"], answer["k"], answer["source"]) == ("hgemm", 4096, DEFAULT)
    trans = runner.invoke(app, ["best", "--m", "4096", "--n", "8192", "--trans", "--gpu", "NVIDIA B200", "--db", db])
    assert trans.exit_code == 0, trans.output
    assert "hgemv 4096x8192 (transposed)" in trans.output


@pytest.mark.parametrize("problem", [SQUARE, SKINNY, TRANS, Problem("gemm", "float32", 4096, 4096, 4096)], ids=str)
def test_misaligned_arrays_get_a_config_with_scalar_loads(problem: Problem) -> None:
    from autotune.runtime.launcher import scalar_loads

    for config in list(ops.for_problem(problem).space(problem))[::97]:
        op, scalar = scalar_loads(problem, config)
        assert scalar["vec"] == 1 and op.space(problem).check(scalar) is None
        assert op.kernel_name(problem, scalar).startswith("gemm_mma" if problem == SQUARE else "")


def test_wgmma_problems_run_unaligned_arrays_on_the_mma_family() -> None:
    from autotune.runtime.launcher import scalar_loads

    assert gemm.family(SQUARE).NAME == "wgmma"
    op, config = scalar_loads(SQUARE, gemm.OP.default_config(SQUARE))
    assert op.kernel_file(SQUARE) == "gemm/gemm_mma.cu" and config["vec"] == 1
    assert op.compile_arch(SQUARE, "sm_80") == "sm_80"  # mma runs on any tensor-core GPU
    assert "gemm_mma" in op.kernel_source(SQUARE, config)
    assert op.launch(SQUARE, config, 132).grid[0] > 0
    # Its nvcc job is keyed by the mma source, not by the wgmma source the problem's own op uses (a
    # shared helper once keyed, and built, the problem's own family whatever the launcher asked).
    own = ops.compile_job(SQUARE, gemm.OP.default_config(SQUARE), "sm_90")
    stand_in = ops.compile_job(SQUARE, config, "sm_90", op)
    assert own.depends_hash == source_hash(SQUARE) != stand_in.depends_hash
    assert stand_in.name.startswith("gemm_mma") and stand_in.arch == "sm_90"
    assert own.name.startswith("gemm_wgmma") and own.arch == "sm_90a"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_known_good_tilings_are_valid_seeds_for_the_goal_shapes(dtype: str) -> None:
    # The tiled families on the squares, the skinny ones (both) on batched decode.
    for problem in [Problem("gemm", dtype, s, s, s) for s in (4096, 8192)] + [
        Problem("gemm", dtype, m, 4096, 4096) for m in (1, 16)
    ]:
        seeds = gemm.OP.seed_configs(problem)
        assert len(seeds) >= 4, problem
        assert all(gemm.OP.space(problem).check(seed) is None for seed in seeds)


@pytest.mark.shipped_records
def test_the_shipped_h200_records_answer_gemm_and_transposed_gemv(tmp_path: Path) -> None:
    """db/records ships tuned GEMM and transposed-GEMV configs: a GPU-less machine answers `measured`."""
    db = str(tmp_path / "f.db")
    for problem in (SQUARE, SKINNY, Problem("gemm", "float32", 8192, 8192, 8192), TRANS):
        choice = api.best(
            problem.blas_name, problem.m, problem.n, problem.k or None, trans=problem.trans, gpu="NVIDIA H200", db=db
        )
        assert choice.source == MEASURED, (problem, choice.notes)
        assert choice.time_us is not None and choice.time_us > 0


def test_cli_best_reports_tflops_for_a_measured_gemm(db_path: Path) -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    with open_store(str(db_path), import_shipped=False) as store:
        measure(store, SQUARE, gemm.OP.default_config(SQUARE), 275.0)  # 2 * 4096^3 flops in 275 us
    args = ["best", "--op", "hgemm", "--m", "4096", "--n", "4096", "--k", "4096", "--gpu", "h200", "--db", str(db_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # best wraps its lines at the terminal's width (80 here): the words are read across the wraps.
    assert "[measured]: measured 275.00 us, 499.8 TFLOP/s" in " ".join(result.output.split())
    # An untuned shape shows the cost model's time for it, rated as its own TFLOP/s, never the
    # neighbour's measurement.
    args[args.index("--m") + 1] = "3000"
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    first = " ".join(result.output.split("\nconfig:")[0].split())  # the answer's line, unwrapped
    assert "[estimate]: predicted " in first and first.endswith(" TFLOP/s") and "275.00" not in result.output
    predicted_us = float(first.split("predicted ")[1].split(" us")[0])
    assert 200 < predicted_us < 275  # fewer rows than the tuned 4096^3, at its rates
    words = " ".join(result.output.split())
    assert "predicted from: roofline" in words and "timed on 4096x4096x4096" in words
