"""cuBLASLt as a candidate, without a GPU: the row-major to column-major mapping, vendor trials in
records files, the cost model's prediction for cuBLASLt and the selector's use of vendor rows."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.ops.cublas import FAMILY as CUBLAS
from autotune.ops.cublas.mapping import OP_N, OP_T, Matrix, matmul_for, required_alignment
from autotune.select.choose import vendor_evidence
from autotune.select.cost import CostModel
from autotune.store.record_lines import BadLine, parse_trial


def test_gemm_is_the_transposed_product_in_column_major() -> None:
    """C = A B row-major is Cᵀ = Bᵀ Aᵀ: cuBLASLt's A is our B (op N for K x N, op T for N x K)."""
    kn = matmul_for(Problem("gemm", "float16", 8, 4096, 1024))
    assert (kn.op_a, kn.a, kn.b, kn.d) == (OP_N, Matrix(4096, 1024, 4096), Matrix(1024, 8, 1024), Matrix(4096, 8, 4096))
    assert (kn.a_arg, kn.b_arg, kn.d_arg) == (1, 0, 2)
    nk = matmul_for(Problem("gemm", "float16", 8, 4096, 1024, trans=True), (2048, 1024, 5000))
    assert (nk.op_a, nk.a, nk.b, nk.d) == (OP_T, Matrix(1024, 4096, 1024), Matrix(1024, 8, 2048), Matrix(4096, 8, 5000))


def test_gemv_layouts_and_argument_order() -> None:
    """y = A x reads A transposed; y = Aᵀ x reads it as it lies, and our kernels take (x, A, y)."""
    plain = matmul_for(Problem("gemv", "float32", 300, 700), (1024,))
    assert (plain.op_a, plain.a, plain.b, plain.d, plain.a_arg) == (
        OP_T, Matrix(700, 300, 1024), Matrix(700, 1, 700), Matrix(300, 1, 300), 0,
    )  # fmt: skip
    trans = matmul_for(Problem("gemv", "float32", 300, 700, trans=True))
    assert (trans.op_a, trans.a, trans.b, trans.d, trans.a_arg, trans.b_arg) == (
        OP_N, Matrix(700, 300, 700), Matrix(300, 1, 300), Matrix(700, 1, 700), 1, 0,
    )  # fmt: skip


def test_alignment_and_ranks() -> None:
    problem = Problem("gemm", "float16", 8, 64, 64)
    assert required_alignment((0, 256, 4096), problem, None) == 16
    assert required_alignment((2, 256, 4096), problem, None) == 2
    assert required_alignment((0, 256, 4096), problem, (68, 64, 64)) == 2  # rows 136 bytes apart
    assert CUBLAS.rank_of(CUBLAS.config(3)) == 3
    for bad in ({"cublas_algo": 8}, {"cublas_algo": True}, {"cublas_algo": "1"}):
        with pytest.raises(AutotuneError):
            CUBLAS.rank_of(bad)
    with pytest.raises(AutotuneError, match="does not serve"):
        matmul_for(Problem("rowsum", "float32", 4, 4))


def _line(**changes: Any) -> dict[str, Any]:
    line = {
        "kind": "trial", "op": "gemm", "dtype": "float16", "m": 8, "n": 4096, "k": 4096,
        "trans": False, "config": {"cublas_algo": 2}, "time_us": 20.5, "times_us": [20.5, 20.6], "gbs": 3000.0,
        "rel_error": 1e-4, "source_hash": "cublasLt-130100", "nvcc": "13.0.88", "pycuda": "2026.1",
        "driver": "580.159.04", "cuda": "13.0", "created_at": "2026-11-26T03:48:05+00:00",
    }  # fmt: skip
    return {**line, **changes}


def test_records_carry_cublas_trials_and_nothing_else_of_the_kind() -> None:
    values = parse_trial(_line())
    assert values["config"] == {"cublas_algo": 2}
    for bad, why in (
        (_line(source_hash="abc123"), "cuBLASLt trial"),  # a vendor config under a kernel source
        (_line(config={"cublas_algo": 2, "vec": 4}), "cuBLASLt trial"),
        (_line(config={"block": 64}), "cuBLASLt trial"),  # a kernel config under the library's source
        (_line(config={"cublas_algo": 9}), "cublas_algo"),
    ):
        with pytest.raises(BadLine, match=why):
            parse_trial(bad)


def test_the_cost_model_predicts_cublas_from_its_times_on_tuned_shapes() -> None:
    """cuBLASLt at 2x the roofline on the tuned shapes is predicted at about 2x on a new one."""

    class Row:
        def __init__(self, time_us: float) -> None:
            self.config, self.time_us = {"mt": 1}, time_us

    shapes = [Problem("gemm", "float16", 8, n, 4096) for n in (1024, 2048, 4096, 8192)]
    model = CostModel({p: [Row(2.0 + p.n * 4096 * 2 / 3e6)] for p in shapes}, 132)
    assert model.roofline is not None
    timed = {p: 2 * model.roofline.time_us(p) for p in shapes}
    new = Problem("gemm", "float16", 8, 3000, 4096)
    prediction = model.predict_config_free(new, timed, CUBLAS.config(0), "cuBLASLt's own pick", "cuBLASLt")
    assert prediction is not None and prediction.config == {"cublas_algo": 0}
    assert prediction.time_us == pytest.approx(2 * model.roofline.time_us(new), rel=1e-6)
    assert "cuBLASLt" in prediction.basis
    assert model.predict_config_free(new, {}, CUBLAS.config(0), "its own pick", "cuBLASLt") is None


def test_cublas_is_judged_on_the_shapes_our_family_serves_where_it_has_times_there() -> None:
    """vendor_evidence: cuBLASLt's times on the shapes the model (one kernel family) was fitted to, where
    it holds any; its times on every tuned shape of the dtype and layout otherwise."""

    class Row:
        def __init__(self, time_us: float) -> None:
            self.config, self.time_us = {"mt": 1}, time_us

    family = [Problem("gemm", "float32", 129, n, 1009) for n in (2048, 4096)]
    skinny = Problem("gemm", "float32", 16, 4097, 1023)  # another family's shape
    model = CostModel({p: [Row(50.0)] for p in family}, 132)
    timed = {family[0]: 60.0, skinny: 30.0}
    assert vendor_evidence(model, timed) == {family[0]: 60.0}
    assert vendor_evidence(model, {skinny: 30.0}) == {skinny: 30.0}


@pytest.mark.vendor
def test_the_selector_prefers_cublas_to_our_safe_default_and_its_measured_best(monkeypatch: Any, store: Any) -> None:
    """Where cuBLASLt was measured fastest on this very shape it answers; on a shape of a dtype
    nothing of ours is tuned for, its own pick (rank 0) stands in for our safe default; on another
    library version than the one timed, ours answers with a note."""
    from autotune.core.fingerprint import GpuInfo, toolchain
    from autotune.core.outcome import Outcome, Status
    from autotune.ops import source_hash
    from autotune.select import choose as choosing
    from autotune.store.rows import Provenance

    gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 62914560, 150 * 2**30, "580.159.04", "13.0")
    gpu_id = store.upsert_gpu(gpu)
    problem = Problem("gemm", "bfloat16", 8, 4096, 4096)
    pid = store.problem_id(problem, gpu.name)
    ours = choosing.Selector(store).choose(problem, gpu.name)
    assert ours.source == "default"
    where = Provenance(pid, gpu_id, source_hash(problem), toolchain(), gpu.driver, gpu.cuda)
    store.record_trial(where, ours.config, Outcome(Status.OK, "", time_us=40.0, times_us=[40.0]))
    vendor = Provenance(pid, gpu_id, "cublasLt-130100", toolchain(), gpu.driver, gpu.cuda)
    store.record_trial(vendor, {"cublas_algo": 1}, Outcome(Status.OK, "", time_us=12.0, times_us=[12.0]))
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: "cublasLt-130100")
    exact = choosing.Selector(store).choose(problem, gpu.name, gpu.driver, gpu.cuda)
    assert (exact.config, exact.source, exact.time_us) == ({"cublas_algo": 1}, "measured", 12.0)
    assert choosing.Selector(store).choose(problem, gpu.name, vendor=False).config == ours.config
    untuned = Problem("gemm", "bfloat16", 8, 2048, 2048, trans=True)  # no shape of this layout tuned
    guess = choosing.Selector(store).choose(untuned, gpu.name)
    assert (guess.config, guess.source) == ({"cublas_algo": 0}, "default")
    assert "cuBLASLt's own pick" in guess.notes[-1]
    monkeypatch.setenv("AUTOTUNE_VENDOR", "0")  # switched off: ours everywhere
    assert choosing.Selector(store).choose(problem, gpu.name, gpu.driver, gpu.cuda).config == ours.config
    assert choosing.Selector(store).choose(untuned, gpu.name).config != {"cublas_algo": 0}
    monkeypatch.delenv("AUTOTUNE_VENDOR")
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: "cublasLt-140000")
    other = choosing.Selector(store).choose(problem, gpu.name, gpu.driver, gpu.cuda)
    assert other.config == ours.config and "cublasLt-130100 measured 12.00 us" in other.notes[-1]


@pytest.mark.vendor
def test_a_tie_within_the_margin_goes_to_our_kernel(monkeypatch: Any, store: Any) -> None:
    """cuBLASLt 1% faster than our stored best is a tie under measurement noise: ours answers; 3%
    faster, cuBLASLt does."""
    from autotune.core.fingerprint import GpuInfo, toolchain
    from autotune.core.outcome import Outcome, Status
    from autotune.ops import source_hash
    from autotune.select import choose as choosing
    from autotune.store.rows import Provenance

    assert choosing.VENDOR_MARGIN == 0.02
    gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 62914560, 150 * 2**30, "580.159.04", "13.0")
    gpu_id = store.upsert_gpu(gpu)
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: "cublasLt-130100")
    for n, vendor_us, answer in ((4096, 99.0, "ours"), (8192, 97.0, "cublas")):
        problem = Problem("gemm", "float16", 8, n, 4096)
        pid = store.problem_id(problem, gpu.name)
        ours = choosing.Selector(store).choose(problem, gpu.name, vendor=False).config
        where = Provenance(pid, gpu_id, source_hash(problem), toolchain(), gpu.driver, gpu.cuda)
        store.record_trial(where, ours, Outcome(Status.OK, "", time_us=100.0, times_us=[100.0]))
        vendor = Provenance(pid, gpu_id, "cublasLt-130100", toolchain(), gpu.driver, gpu.cuda)
        store.record_trial(vendor, {"cublas_algo": 3}, Outcome(Status.OK, "", time_us=vendor_us, times_us=[vendor_us]))
        choice = choosing.Selector(store).choose(problem, gpu.name, gpu.driver, gpu.cuda)
        assert choice.config == ({"cublas_algo": 3} if answer == "cublas" else ours), (n, choice)
        assert ("a tie, which ours takes" in choice.notes[-1]) == (answer == "ours")


@pytest.mark.vendor
def test_shapes_cublas_led_still_teach_the_model_of_our_kernels(store: Any) -> None:
    """A tuned shape where cuBLASLt was fastest still holds our kernels' trials: the cost model of
    our kernels learns from them (they had dropped out of its evidence)."""
    from autotune.core.fingerprint import GpuInfo, toolchain
    from autotune.core.outcome import Outcome, Status
    from autotune.ops import source_hash
    from autotune.select import choose as choosing
    from autotune.store.rows import Provenance

    gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 62914560, 150 * 2**30, "580.159.04", "13.0")
    gpu_id = store.upsert_gpu(gpu)
    tuned = [Problem("gemv", "float16", 4096, n, trans=True) for n in (2048, 4096, 8192)]
    for problem in tuned:
        pid = store.problem_id(problem, gpu.name)
        ours = Provenance(pid, gpu_id, source_hash(problem), toolchain(), gpu.driver, gpu.cuda)
        config = choosing.Selector(store).choose(problem, gpu.name, vendor=False).config
        store.record_trial(ours, config, Outcome(Status.OK, "", time_us=10.0, times_us=[10.0]))
        vendor = Provenance(pid, gpu_id, "cublasLt-130100", toolchain(), gpu.driver, gpu.cuda)
        store.record_trial(vendor, {"cublas_algo": 0}, Outcome(Status.OK, "", time_us=9.0, times_us=[9.0]))
    hidden = Problem("gemv", "float16", 4096, 6000, trans=True)
    selector = choosing.Selector(store)
    model = selector._model(hidden, gpu.name, source_hash(hidden))
    assert {s.problem for s in model.shapes} == set(tuned)


@pytest.mark.vendor
def test_a_shape_far_from_every_tuned_one_gets_cublas(monkeypatch: Any, store: Any) -> None:
    """Beyond EXTRAPOLATION_OCTAVES from every tuned shape the cost model has learned nothing: cuBLASLt's
    own pick answers (where the library is there); near the tuned shapes, ours."""
    from autotune.select import choose as choosing

    gpu, _ = _tune_three_gemvs(store)
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: "cublasLt-130100")
    here = (gpu.driver, gpu.cuda)  # this machine's GPU: its own library answers
    far = choosing.Selector(store).choose(Problem("gemv", "float16", 3, 100003), gpu.name, *here)
    assert far.config == {"cublas_algo": 0} and "octaves from every tuned shape" in far.notes[-1]
    near = choosing.Selector(store).choose(Problem("gemv", "float16", 4000, 6000), gpu.name, *here)
    assert near.config != {"cublas_algo": 0}
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: None)  # no cuBLASLt here: ours
    assert choosing.Selector(store).choose(Problem("gemv", "float16", 3, 100003), gpu.name, *here).config != far.config


@pytest.mark.vendor
def test_a_pick_of_ours_never_timed_as_it_would_run_gets_cublas(monkeypatch: Any, store: Any) -> None:
    """An odd row length makes the tuned shapes' leaders drop to scalar loads: no tuned shape holds the
    config that would run, so the model's prediction rests on other configs' times and cuBLASLt's own
    pick answers; on an aligned shape near them, ours."""
    from autotune.core.fingerprint import GpuInfo, toolchain
    from autotune.core.outcome import Outcome, Status
    from autotune.ops import gemv, source_hash
    from autotune.select import choose as choosing
    from autotune.store.rows import Provenance

    gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 62914560, 150 * 2**30, "580.159.04", "13.0")
    gpu_id = store.upsert_gpu(gpu)
    wide = {**gemv.DEFAULT_CONFIG, "block": 128, "lanes": 128, "vec": 8, "rows": 2, "policy": 1}
    for n in (2048, 4096, 8192):
        problem = Problem("gemv", "float16", 4096, n)
        pid = store.problem_id(problem, gpu.name)
        ours = Provenance(pid, gpu_id, source_hash(problem), toolchain(), gpu.driver, gpu.cuda)
        store.record_trial(ours, wide, Outcome(Status.OK, "", time_us=10.0 * n / 4096, times_us=[10.0]))
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: "cublasLt-130100")
    here = (gpu.driver, gpu.cuda)  # this machine's GPU: its own library answers
    odd = choosing.Selector(store).choose(Problem("gemv", "float16", 4096, 6001), gpu.name, *here)
    assert odd.config == {"cublas_algo": 0} and "never timed as it would run here" in odd.notes[-1]
    aligned = choosing.Selector(store).choose(Problem("gemv", "float16", 4096, 6000), gpu.name, *here)
    assert aligned.config == wide
    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: None)  # no cuBLASLt here: ours, fitted
    mine = choosing.Selector(store).choose(Problem("gemv", "float16", 4096, 6001), gpu.name, *here).config
    assert mine["vec"] == 1


@pytest.mark.vendor
def test_a_question_about_another_machines_gpu_is_answered_with_the_library_its_trials_were_timed_with(
    monkeypatch: Any, store: Any
) -> None:
    """Where cuBLASLt won on some tuned shape, its stored trials name the library version; a shape
    far from every tuned one, asked about from a machine without that GPU (no local driver) and
    without cuBLASLt, gets that library's own pick, as the GPU's machine answers it; none is stored:
    ours."""
    from autotune.core.fingerprint import toolchain
    from autotune.core.outcome import Outcome, Status
    from autotune.select import choose as choosing
    from autotune.store.rows import Provenance

    monkeypatch.setattr(choosing, "vendor_fingerprint", lambda: None)  # no cuBLASLt on this machine
    gpu, gpu_id = _tune_three_gemvs(store)
    far = Problem("gemv", "float16", 3, 100003)
    assert choosing.Selector(store).choose(far, gpu.name).config != {"cublas_algo": 0}  # no library stored
    tuned = Problem("gemv", "float16", 4096, 4096)
    vendor = Provenance(store.problem_id(tuned, gpu.name), gpu_id, "cublasLt-130100", toolchain(), gpu.driver, gpu.cuda)
    store.record_trial(vendor, {"cublas_algo": 0}, Outcome(Status.OK, "", time_us=5.0, times_us=[5.0]))
    answer = choosing.Selector(store).choose(far, gpu.name)
    assert answer.config == {"cublas_algo": 0} and "(cublasLt-130100)" in answer.notes[-1]
    here = choosing.Selector(store).choose(far, gpu.name, gpu.driver, gpu.cuda)  # this machine's GPU: no cuBLASLt
    assert here.config != {"cublas_algo": 0}


def _tune_three_gemvs(store: Any) -> tuple[Any, int]:
    """An H200 with float16 4096x2048, 4096x4096 and 4096x8192 tuned, each holding the selector's own
    pick of ours at 10 us per 4096 columns: the GPU and its row id."""
    from autotune.core.fingerprint import GpuInfo, toolchain
    from autotune.core.outcome import Outcome, Status
    from autotune.ops import source_hash
    from autotune.select import choose as choosing
    from autotune.store.rows import Provenance

    gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 62914560, 150 * 2**30, "580.159.04", "13.0")
    gpu_id = store.upsert_gpu(gpu)
    for n in (2048, 4096, 8192):
        problem = Problem("gemv", "float16", 4096, n)
        pid = store.problem_id(problem, gpu.name)
        ours = Provenance(pid, gpu_id, source_hash(problem), toolchain(), gpu.driver, gpu.cuda)
        config = choosing.Selector(store).choose(problem, gpu.name, vendor=False).config
        store.record_trial(ours, config, Outcome(Status.OK, "", time_us=10.0 * n / 4096, times_us=[10.0]))
    return gpu, gpu_id
