"""The cost model for shapes never tuned (autotune/select/cost.py) and the selector's use of it."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune import cli, ops
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import config_key
from autotune.ops import gemv
from autotune.ops.gemm import skinny
from autotune.select.choose import DEFAULT, ESTIMATE, Choice, Selector, choose
from autotune.select.cost import LATENCY_SHARE, CostModel, fit_roofline
from autotune.store import Store
from autotune.store import selection_table as table
from tests.fakes import ok, record, run_cli

GPU = "NVIDIA H200"
H200 = GpuInfo(GPU, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SMS = 132
# Two tilings that run on every shape below with 16-byte loads, and a block per row.
A = {**gemv.DEFAULT_CONFIG, "block": 128, "lanes": 128, "vec": 8, "rows": 2, "policy": 1}
B = {**gemv.DEFAULT_CONFIG, "block": 256, "lanes": 64, "vec": 8, "rows": 2, "policy": 1}
C = {**gemv.DEFAULT_CONFIG, "block": 128, "lanes": 32, "vec": 8, "unroll": 2}
WHOLE_ROW = {**gemv.DEFAULT_CONFIG, "block": 512, "lanes": 512, "vec": 8, "policy": 1}  # a block per row
SPLIT = {**gemv.DEFAULT_CONFIG, "block": 64, "lanes": 64, "vec": 8, "policy": 1, "persist": 4, "split": 16}
LATENCY, BANDWIDTH = 2.0, 4e6  # us, bytes per us


@dataclass(frozen=True)
class Trial:
    config: dict[str, int]
    time_us: float


def gemv16(m: int, n: int) -> Problem:
    return Problem("gemv", "float16", m, n)


def gemm16(m: int, n: int, k: int) -> Problem:
    """A float16 GEMM with B K x N (the tensor-core skinny family's for m <= 16)."""
    return ops.make_problem("gemm", "float16", m, n, k)


def roofline_us(problem: Problem) -> float:
    """What a GEMV at a fixed latency and a fixed bandwidth takes."""
    return LATENCY + (problem.m * problem.n + problem.m + problem.n) * ITEMSIZE[problem.dtype] / BANDWIDTH


def stored(*shapes: tuple[Problem, dict[str, int], float]) -> dict[Problem, list[Trial]]:
    """Stored trials: each config at `factor` times the roofline of its shape."""
    found: dict[Problem, list[Trial]] = {}
    for problem, config, factor in shapes:
        found.setdefault(problem, []).append(Trial(config, roofline_us(problem) * factor))
    return found


def every_shape_prefers(config: dict[str, int], other: dict[str, int]) -> dict[Problem, list[Trial]]:
    sizes = [(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (4096, 16384)]
    return stored(*((gemv16(m, n), config, 1.0) for m, n in sizes), *((gemv16(m, n), other, 1.1) for m, n in sizes))


# --- the model -------------------------------------------------------------------------------------


def test_roofline_recovers_latency_and_bandwidth_of_a_memory_bound_op() -> None:
    shapes = [gemv16(m, n) for m, n in [(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192)]]
    roof = fit_roofline([(p, roofline_us(p)) for p in shapes], SMS)
    assert roof is not None and roof.flops_per_us is None  # GEMV: no flops ceiling
    assert roof.latency_us == pytest.approx(LATENCY, rel=1e-6)
    assert roof.bytes_per_us / roof.scale == pytest.approx(BANDWIDTH, rel=1e-6)


def test_predictions_grow_with_the_bytes_of_a_memory_bound_op() -> None:
    model = CostModel(every_shape_prefers(A, B), SMS)
    times = []
    for m in (1000, 1500, 3000, 6000, 12000, 50000):  # none of them tuned
        prediction = model.predict(gemv16(m, 4096), A)
        assert prediction is not None
        times.append(prediction.time_us)
    assert times == sorted(times) and times[-1] > 10 * times[0]
    # Between tuned shapes the model lands on the roofline the trials were made from.
    middle = gemv16(3000, 3000)
    prediction = model.predict(middle, A)
    assert prediction is not None and prediction.time_us == pytest.approx(roofline_us(middle), rel=0.02)


def test_a_config_faster_on_every_tuned_shape_is_predicted_faster() -> None:
    model = CostModel(every_shape_prefers(B, A), SMS)
    fast, slow = model.predict(gemv16(3000, 5000), B), model.predict(gemv16(3000, 5000), A)
    assert fast is not None and slow is not None
    assert slow.time_us / fast.time_us == pytest.approx(1.1, rel=0.01)
    assert fast.timed_on[0] in {(2048, 2048), (4096, 4096)}  # the nearest tuned shapes first


def test_a_config_no_tuned_shape_holds_is_predicted_slower_than_the_stored_ones() -> None:
    model = CostModel(every_shape_prefers(A, B), SMS)
    shape = gemv16(3000, 3000)
    held, unknown = model.predict(shape, B), model.predict(shape, C)
    assert held is not None and unknown is not None
    assert unknown.time_us > held.time_us and unknown.timed_on == ()
    assert "not among the stored trials" in unknown.basis


def test_a_latency_above_the_fastest_call_is_held_below_it_not_dropped() -> None:
    """Shapes of a few kilobytes run at the launch cost alone: the least-squares latency comes out above
    the fastest call, and is held at LATENCY_SHARE of it, so a tiny shape is not predicted at nothing."""
    sizes = [(8192, 1), (65536, 1), (4096, 4096), (8192, 8192), (16384, 16384)]
    # A launch cost of 1.5 us: the fit finds it, above 0.9 of the fastest call (8192x1, 1.504 us).
    best = [(gemv16(m, n), roofline_us(gemv16(m, n)) - 0.5) for m, n in sizes]
    roof = fit_roofline(best, SMS)
    assert roof is not None and roof.latency_us == pytest.approx(LATENCY_SHARE * min(t for _, t in best))
    assert roof.time_us(gemv16(4096, 1)) > 1.3


def test_a_trial_is_evidence_for_the_config_it_timed_only() -> None:
    """N = 4095 runs A with vec=1: A's 16-byte-load times on the tuned shapes say nothing of that."""
    model = CostModel(every_shape_prefers(A, B), SMS)
    odd = gemv16(4096, 4095)
    fitted = {**A, "vec": 1}
    assert gemv.OP.space(odd).check(fitted) is None
    prediction = model.predict(odd, fitted)
    assert prediction is not None and prediction.timed_on == ()
    aligned = model.predict(gemv16(4096, 4096 + 8), A)
    assert aligned is not None and aligned.timed_on  # the same config unchanged: timed there


def test_an_odd_shape_where_wide_loads_cannot_run_is_no_evidence_against_them() -> None:
    """The nearest tuned shapes have odd N: only scalar loads ran there, so their leaders beat nothing
    with 16-byte loads. Counted as slower there, A (vec=8) lost 4096x11008 to the odd shapes' scalar
    leader although it leads the aligned shapes (float16 4096x11008 on the H200, 31.7 us against 21)."""
    scalar, other_scalar = {**A, "vec": 1}, {**B, "vec": 1}
    trials = stored(
        *((gemv16(m, n), scalar, 1.0) for m, n in [(4095, 12287), (4097, 8191)]),
        *((gemv16(m, n), other_scalar, 1.05) for m, n in [(4095, 12287), (4097, 8191)]),
        (gemv16(4096, 8192), A, 1.0),
        (gemv16(4096, 8192), B, 1.1),
        (gemv16(4096, 16384), B, 1.0),
        (gemv16(4096, 16384), A, 1.02),
    )
    model = CostModel(trials, SMS)
    problem = gemv16(4096, 11008)
    wide, narrow = model.predict(problem, A), model.predict(problem, scalar)
    assert wide is not None and narrow is not None
    assert wide.time_us < narrow.time_us and model.rank(problem)[0].config == A
    assert wide.timed_on == ((4096, 8192), (4096, 16384))
    # On an odd shape every candidate runs scalar loads: the odd tuned shapes count for all of them.
    odd = model.predict(gemv16(4095, 10001), scalar)
    assert odd is not None and (4095, 12287) in odd.timed_on


def test_on_an_odd_shape_the_aligned_leaders_say_nothing_where_an_odd_shape_is_near() -> None:
    """A scalar-load config that no tuned shape holds: next to 16-byte-load leaders at the roofline it
    would be 'slower than those', about the roofline; where an odd shape, whose scalar leaders run at
    1.3x, lies within ALIKE_OCTAVES, that shape says how scalar loads run (transposed float32 4099x12289
    on the H200: predicted 1.04x, ran 1.37x). With the odd shape far away, the aligned ones speak."""
    scalar = {**A, "vec": 1, "unroll": 2}  # held by no tuned shape
    aligned = [(4096, 11008), (4096, 13696), (4096, 14336), (3584, 14336)]

    def model_with_odd(m: int, n: int) -> CostModel:
        return CostModel(
            stored(
                *((gemv16(*shape), A, 1.0) for shape in aligned),
                *((gemv16(*shape), B, 1.02) for shape in aligned),
                (gemv16(m, n), {**B, "vec": 1}, 1.3),
                (gemv16(m, n), {**A, "vec": 1}, 1.32),
            ),
            SMS,
        )

    problem = gemv16(4099, 12289)
    near = model_with_odd(4097, 8191).predict(problem, scalar)  # 0.6 octaves
    far = model_with_odd(1025, 1023).predict(problem, scalar)  # 4.1 octaves
    assert near is not None and far is not None
    assert far.time_us < 1.05 * roofline_us(problem) and near.time_us > 1.06 * far.time_us
    assert near.timed_on == far.timed_on == ()


def test_a_grid_that_leaves_most_sms_idle_is_predicted_slower() -> None:
    """3 rows: a block per row runs 3 blocks on 132 SMs; 16 splits of each row give 48."""
    model = CostModel(stored((gemv16(4096, 4096), A, 1.0), (gemv16(8192, 8192), A, 1.0)), SMS)
    short = gemv16(3, 131072)
    whole, split = model.predict(short, WHOLE_ROW), model.predict(short, SPLIT)
    assert whole is not None and split is not None
    assert whole.roofline_us > 5 * split.roofline_us
    # Without the SM count the grid has no say.
    blind = CostModel(stored((gemv16(4096, 4096), A, 1.0), (gemv16(8192, 8192), A, 1.0)))
    assert blind.roofline is not None and blind.roofline.fill(short, WHOLE_ROW) == 1.0


# A split-K tensor-core skinny GEMM config of 8x8192x8192 (one wave of 256 blocks on 132 SMs) and
# one whose blocks are small enough to stay within a wave on 8x11008x4096.
SPLIT_TC = {"wn": 1, "kw": 8, "vec": 4, "unroll": 1, "policy": 1, "prefetch": 1, "cluster": 2, "split": 2, "stages": 0}
TMA_TC = {**SPLIT_TC, "kw": 4, "vec": 8, "prefetch": 0, "stages": 4}


def test_a_grid_that_spills_into_a_second_wave_is_predicted_from_its_threads_path_not_its_bytes() -> None:
    """float16 8x11008x4096 moves two thirds of 8x8192x8192's bytes, but SPLIT_TC's blocks, half the K
    each, take two waves there: each thread's path is as long as on 8x8192x8192 (the H200 ran it at
    34.1 us where the bytes said 26.9). TMA_TC's grid stays within its wave: the roofline speaks."""
    big, small = gemm16(8, 8192, 8192), gemm16(8, 4096, 4096)
    wide = gemm16(8, 11008, 4096)
    model = CostModel({big: [Trial(SPLIT_TC, 37.0), Trial(TMA_TC, 37.4)], small: [Trial(TMA_TC, 12.6)]}, SMS)
    assert model.roofline is not None
    assert (model.roofline.waves(big, SPLIT_TC), model.roofline.waves(wide, SPLIT_TC)) == (1, 2)
    split, tma = model.predict(wide, SPLIT_TC), model.predict(wide, TMA_TC)
    assert split is not None and tma is not None
    assert split.time_us > 36.0 and "2 here" in split.basis
    assert tma.time_us < 30.0 and "wave" not in tma.basis
    assert model.rank(wide)[0].config == TMA_TC


def test_waves_are_unknown_where_the_family_does_not_estimate_its_registers() -> None:
    """A GEMV block of 128 threads may hold 16 to an SM or 4: the waves rule does not speak for it."""
    model = CostModel(every_shape_prefers(A, B), SMS)
    assert model.roofline is not None and model.roofline.waves(gemv16(4608, 3584), A) is None


def test_a_config_its_threads_held_back_is_floored_by_their_path_on_a_shape_twice_as_long() -> None:
    """SCALAR_SPLIT ran at 5x the roofline on 6x32769 (96 blocks of 64 threads: their steps, not the
    memory, set the time); on 5x65537 each thread walks about twice the row for 1.7x the bytes: at
    least its time there scaled by that path (the H200 ran bfloat16's at 6.83 and 10.66 us). A config
    that ran near the roofline gets no floor, and the floor ranks nothing: predict() scales it by the
    steps its threads take (Op.thread_steps: 33 there, 65 here, at 4 a step), not by this floor."""
    scalar_split = {**SPLIT, "vec": 1}
    near, far = gemv16(6, 32769), gemv16(5, 65537)
    model = CostModel(
        stored((gemv16(4096, 4096), A, 1.0), (gemv16(8192, 8192), A, 1.0), (near, scalar_split, 5.0), (near, B, 1.2)),
        SMS,
    )
    assert model.roofline is not None
    growth = model.roofline.critical_path(far, scalar_split) / model.roofline.critical_path(near, scalar_split)  # type: ignore[operator]
    assert 1.9 < growth < 2.2
    floor = model.threads_bound_floor(far, scalar_split)
    latency = model.roofline.latency_us
    assert floor is not None and floor == pytest.approx(latency + (5.0 * roofline_us(near) - latency) * growth)
    assert model.threads_bound_floor(far, B) is None
    prediction = model.predict(far, scalar_split)
    steps = gemv.OP.thread_steps(far, scalar_split, SMS), gemv.OP.thread_steps(near, scalar_split, SMS)
    assert steps == (17, 9) and prediction is not None and "9 steps a thread, 17 here" in prediction.basis
    assert prediction.time_us == pytest.approx(latency + (5.0 * roofline_us(near) - latency) * 17 / 9)


def test_a_librarys_time_on_an_odd_shape_is_predicted_from_the_odd_shapes_alone() -> None:
    """cuBLASLt ran at the roofline on the even shapes and at twice it on the odd ones (no 16-byte loads):
    an odd shape is predicted from the odd shapes' times only (float16 3x131071x1024 on the H200: 67.9 us
    from aligned shapes' times, where it ran 130.1)."""
    model = CostModel(every_shape_prefers(A, B), SMS)
    even = [gemv16(2048, 2048), gemv16(4096, 4096)]
    odd = [gemv16(2049, 2047), gemv16(4097, 4095)]
    timed = {**{p: roofline_us(p) for p in even}, **{p: 2 * roofline_us(p) for p in odd}}
    new = gemv16(3001, 3003)
    predicted = model.predict_config_free(new, timed, {"cublas_algo": 0}, "cuBLASLt's own pick", "cuBLASLt")
    assert predicted is not None
    assert predicted.time_us == pytest.approx(2 * roofline_us(new), rel=1e-6)
    assert "4097x4095" in predicted.basis and "4096x4096" not in predicted.basis
    aligned = model.predict_config_free(gemv16(3000, 3000), timed, {"cublas_algo": 0}, "its pick", "cuBLASLt")
    assert aligned is not None and aligned.time_us == pytest.approx(roofline_us(gemv16(3000, 3000)), rel=1e-6)


# --- the selector ------------------------------------------------------------------------------------


def test_selector_picks_the_lowest_prediction_not_the_nearest_leader() -> None:
    """The nearest tuned shape's leader (A) lost by 10% on the three shapes around it."""
    trials = stored(
        (gemv16(4096, 4096), A, 1.0),
        (gemv16(4096, 4096), B, 1.005),
        *((gemv16(m, n), B, 1.0) for m, n in [(2048, 4096), (8192, 4096), (4096, 8192)]),
        *((gemv16(m, n), A, 1.1) for m, n in [(2048, 4096), (8192, 4096), (4096, 8192)]),
    )
    model = CostModel(trials, SMS)
    problem = gemv16(4000, 4096)
    ranked = model.rank(problem)
    assert ranked[0].time_us == min(p.time_us for p in ranked) and ranked[0].config == B
    choice = choose(problem, GPU, None, [], model=model)
    assert (choice.source, choice.config, choice.from_shape) == (ESTIMATE, B, (4096, 4096))
    assert choice.predicted_us == pytest.approx(ranked[0].time_us) and choice.time_us is None
    # The rule without a model takes the nearest shape's leader.
    nearest_rows = [Row(gemv16(4096, 4096), A, 1.0)]
    assert choose(problem, GPU, None, nearest_rows).config == A


@dataclass(frozen=True)
class Row:
    """A stored best trial as choose() reads it (select.TunedRow)."""

    problem: Problem
    config: dict[str, int]
    time_us: float
    gbs: float | None = None
    driver: str = "13.0"
    cuda: str = "13.0"

    @property
    def m(self) -> int:
        return self.problem.m

    @property
    def n(self) -> int:
        return self.problem.n


def test_one_tuned_shape_is_enough_to_predict() -> None:
    only = gemv16(4096, 4096)
    model = CostModel(stored((only, A, 1.0), (only, B, 1.2)), SMS)
    assert model.roofline is not None and model.roofline.latency_us == 0.0  # one shape fits no latency
    choice = choose(gemv16(8192, 4096), GPU, None, [], model=model)
    assert (choice.source, choice.config, choice.from_shape) == (ESTIMATE, A, (4096, 4096))
    # Twice the bytes of the tuned shape, at its rate.
    assert choice.predicted_us == pytest.approx(2 * roofline_us(only), rel=0.01)
    assert choice.basis is not None and "timed on 4096x4096" in choice.basis


def test_nothing_tuned_gives_the_default() -> None:
    model = CostModel({}, SMS)
    assert model.roofline is None and model.rank(gemv16(4096, 4096)) == []
    choice = choose(gemv16(4096, 4096), GPU, None, [], model=model)
    assert (choice.source, choice.config, choice.predicted_us, choice.basis) == (
        DEFAULT,
        gemv.DEFAULT_CONFIG,
        None,
        None,
    )


def test_a_config_that_does_not_fit_the_shape_is_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    """N = 4095: no 16-byte loads. A stored leader is fitted; a seed the shape cannot run (an op's
    bug) is dropped, however fast the model would have found it."""
    odd = gemv16(4096, 4095)
    space = gemv.OP.space(odd)
    assert space.check(A) is not None and space.check(B) is not None
    monkeypatch.setattr(type(gemv.OP), "seed_configs", lambda self, problem: [dict(B)])
    model = CostModel(every_shape_prefers(B, A), SMS)
    candidates = model.candidates(odd)
    assert candidates and all(space.check(c.config) is None for c in candidates)
    assert B not in [c.config for c in candidates]
    choice = choose(odd, GPU, None, [], model=model)
    assert space.check(choice.config) is None and choice.config == {**B, "vec": 1}
    assert "vec=1" in choice.notes[0]


# --- what `best` shows ---------------------------------------------------------------------------------


@pytest.fixture
def untuned_choice(store: Store) -> Choice:
    for problem, trials in every_shape_prefers(A, B).items():
        for trial in trials:
            record(store, problem, trial.config, ok(trial.time_us), H200)
    return Selector(store).choose(gemv16(3000, 3000), GPU)


def test_best_json_has_the_predicted_time_and_its_basis(untuned_choice: Choice) -> None:
    data = json.loads(json.dumps(untuned_choice.to_dict()))
    assert data["source"] == ESTIMATE and data["config"] == A and data["time_us"] is None
    assert data["predicted_us"] == pytest.approx(roofline_us(gemv16(3000, 3000)), rel=0.02)
    assert "roofline" in data["basis"] and "timed on" in data["basis"]


def test_best_text_shows_the_predicted_time_not_a_neighbours(
    untuned_choice: Choice, capsys: pytest.CaptureFixture[str]
) -> None:
    cli._print_choice(untuned_choice)
    out = capsys.readouterr().out
    assert f"[estimate]: predicted {untuned_choice.predicted_us:.2f} us" in out
    assert "predicted from: roofline" in out and "measured on" not in out


# --- times no kernel call takes ----------------------------------------------------------------------

# Positive and finite, yet 1/t^2 of them is 0 or overflows; and the ones an older store let in.
NO_CALL_TAKES = [5e-324, 1e-200, 1e-160, 0.05, 0.0, -1.0, float("nan"), float("inf")]


@pytest.mark.parametrize("time_us", NO_CALL_TAKES)
def test_a_time_no_kernel_call_takes_is_no_evidence(time_us: float) -> None:
    trials = every_shape_prefers(A, B)
    damaged = gemv16(2048, 2048)
    clean = CostModel(trials, SMS)
    model = CostModel({**trials, damaged: [Trial(C, time_us), *trials[damaged]]}, SMS)
    assert model.roofline == clean.roofline
    problem = gemv16(3000, 3000)
    assert [(p.config, p.time_us) for p in model.rank(problem)] == [(p.config, p.time_us) for p in clean.rank(problem)]
    best = [(shape, roofline_us(shape)) for shape in trials]
    assert fit_roofline([(damaged, time_us), *best], SMS) == fit_roofline(best, SMS)
    assert fit_roofline([(damaged, time_us)], SMS) is None
    vendor = {shape: 1.1 * roofline_us(shape) for shape in trials if shape != damaged}
    assert _library_prediction(model, problem, {**vendor, damaged: time_us}) == _library_prediction(
        model, problem, vendor
    )


@pytest.mark.parametrize("time_us", [5e-324, 1e-200, 1e-160, 0.0])
def test_a_tiny_time_written_into_the_database_leaves_best_and_the_launch_path_answering(
    store: Store,
    db_path: Path,
    tmp_path: Path,
    time_us: float,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Such a trial wins its shape and was the roofline's fastest: `best` of every untuned shape of
    the GPU, op and dtype, and the launch path's selector, divided by its square."""
    for problem, trials in every_shape_prefers(A, B).items():
        for trial in trials:
            pid = record(store, problem, trial.config, ok(trial.time_us), H200)
            if problem == gemv16(2048, 2048):
                damaged = pid
    untuned = gemv16(3000, 3000)
    before = Selector(store).choose(untuned, GPU)
    record(store, gemv16(2048, 2048), C, ok(5.0), H200)
    with sqlite3.connect(db_path) as connection:
        changed = connection.execute(
            "UPDATE trials SET time_us = ? WHERE problem_id = ? AND time_us = 5.0", (time_us, damaged)
        ).rowcount
    assert changed == 1
    assert Selector(store).choose(untuned, GPU) == before
    lines = table.to_lines(store.selection_rows(table.PER_SOURCE), None)  # the launch path's table
    table.write(tmp_path / "t.json", lines)
    assert Selector(table.read(tmp_path / "t.json").table).choose(untuned, GPU) == before
    args = ("best", "--db", str(db_path), "--gpu", "H200", "--op", "hgemv", "--m", "3000", "--n", "3000")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert (code, err) == (0, "") and "[estimate]: predicted" in out
    # The damaged shape itself answers its fastest plausible row, not "measured 0.00 us".
    args = ("best", "--db", str(db_path), "--gpu", "H200", "--op", "hgemv", "--m", "2048", "--n", "2048")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert (code, err) == (0, "") and "[measured]" in out and "0.00 us" not in out


@pytest.mark.parametrize("sm_count", [-5, 0, 10**12, None])
def test_an_sm_count_no_gpu_has_counts_as_unknown(sm_count: int | None) -> None:
    """A GPU row written straight in: -5 SMs made every prediction a third of the roofline, 10**12 a
    quarter hour."""
    trials = every_shape_prefers(A, B)
    problem = gemv16(3000, 3000)
    unknown = [(p.config, p.time_us) for p in CostModel(trials, None).rank(problem)]
    assert [(p.config, p.time_us) for p in CostModel(trials, sm_count).rank(problem)] == unknown
    assert unknown[0] == (A, pytest.approx(roofline_us(problem), rel=0.02))


def _library_prediction(
    model: CostModel, problem: Problem, timed: dict[Problem, float]
) -> tuple[dict[str, int], float] | None:
    """A library's own pick predicted from its times on tuned shapes (cuBLASLt's, as the selector asks)."""
    prediction = model.predict_config_free(problem, timed, {"cublas_algo": 0}, "its own pick", "cuBLASLt")
    return None if prediction is None else (prediction.config, prediction.time_us)


# --- the CUDA-core skinny GEMM's tiles of M (float32 K x N) ------------------------------------------------

# 4x4096x4096's and 8x4096x4096's leaders on the H200: mt rows of A per thread, one tile of M each.
SKINNY_MT4 = {"nt": 32, "kw": 16, "vec": 2, "mt": 4, "unroll": 4, "a_chunk": 2, "policy": 1, "cluster": 1, "split": 4}
SKINNY_MT8 = {**SKINNY_MT4, "kw": 8, "mt": 8, "unroll": 8}


def gemm32(m: int, n: int, k: int) -> Problem:
    return ops.make_problem("gemm", "float32", m, n, k)


def test_a_tile_of_m_below_m_reads_b_again_and_is_predicted_slower() -> None:
    """On 5x4096x4096 mt=4 takes two tiles of M, each reading all of B (the H200 ran 4x4096x4096's
    leader at 31.4 us there and an mt=8 config at 23.4): the second read counts, at REREAD_COST."""
    four, eight, five = gemm32(4, 4096, 4096), gemm32(8, 4096, 4096), gemm32(5, 4096, 4096)
    op = ops.for_problem(five)
    assert op.bytes_streamed(four, SKINNY_MT4) == op.bytes_moved(four)
    b_bytes = 4096 * 4096 * 4
    reread = skinny.REREAD_COST * b_bytes
    assert op.bytes_streamed(five, SKINNY_MT4) == pytest.approx(op.bytes_moved(five) + reread, abs=1)
    assert op.bytes_streamed(five, SKINNY_MT8) == op.bytes_moved(five)
    model = CostModel({four: [Trial(SKINNY_MT4, 23.0)], eight: [Trial(SKINNY_MT8, 24.0)]}, SMS)
    assert [op.space(five).check(c) for c in (SKINNY_MT4, SKINNY_MT8)] == [None, None]
    as_is, one_tile = model.predict(five, SKINNY_MT4), model.predict(five, {**SKINNY_MT4, "mt": 8})
    assert as_is is not None and one_tile is not None and as_is.time_us > one_tile.time_us
    assert model.rank(five)[0].config["mt"] == 8


def test_a_leader_is_evidence_for_itself_tiling_a_taller_m_as_it_tiled_its_own() -> None:
    """8x4096x4096's leader took M in one tile of mt=8; on M = 12 the same tiling is mt=16, and its time
    there speaks for that config (as it is, mt=8 would take two tiles). A config stored as it is keeps
    its own time."""
    eight, twelve = gemm32(8, 4096, 4096), gemm32(12, 4096, 4096)
    op = ops.for_problem(twelve)
    carried = {**SKINNY_MT8, "mt": 16}
    assert op.tiling_for(eight, twelve, SKINNY_MT8) == carried
    assert op.tiling_for(eight, gemm32(8, 8192, 8192), SKINNY_MT8) == SKINNY_MT8
    # N x K keeps its mt: a thread there holds mt rows of A and their sums a step (the H200 ran float32
    # 12x4099x1021 at 35.9 us with mt=16 against 16.8 with two tiles of mt=8).
    nk = {**SKINNY_MT8, "vec": 1, "a_chunk": 0}
    nk_eight, nk_twelve = (ops.make_problem("gemm", "float32", m, 4099, 1021, trans=True) for m in (8, 12))
    assert op.tiling_for(nk_eight, nk_twelve, nk) == nk
    assert op.space(twelve).check(carried) is None
    model = CostModel({eight: [Trial(SKINNY_MT8, 24.0)], gemm32(16, 4096, 4096): [Trial(carried, 30.0)]}, SMS)
    prediction = model.predict(twelve, carried)
    assert prediction is not None and set(prediction.timed_on) == {(8, 4096, 4096), (16, 4096, 4096)}
    assert model.rank(twelve)[0].config == carried
    assert model._stored_as(twelve)[config_key(carried)][gemm32(16, 4096, 4096)] == 30.0


def test_a_persistent_grid_that_takes_its_rows_in_two_passes_is_floored_by_its_steps() -> None:
    """A grid capped at persist blocks an SM: 65536x3's leader (256 rows a block, 2 blocks an SM) takes
    its rows in one pass there and two on 100003x3 for 1.5x the bytes (the H200 ran float16's at 2.33 us
    there against 1.50 on its own shape). Its time there scaled by the steps is a floor; four blocks an
    SM take the rows in one pass and get none."""
    tall = {**gemv.DEFAULT_CONFIG, "block": 256, "lanes": 1, "unroll": 4, "persist": 2, "policy": 1}
    wider = {**tall, "persist": 4}
    near, far = gemv16(65536, 3), gemv16(100003, 3)
    assert (gemv.OP.thread_steps(near, tall, SMS), gemv.OP.thread_steps(far, tall, SMS)) == (1, 2)
    assert gemv.OP.thread_steps(far, wider, SMS) == 1
    model = CostModel(stored((near, tall, 1.5), (near, wider, 1.6), (gemv16(16384, 3), tall, 1.5)), SMS)
    two_passes, one_pass = model.predict(far, tall), model.predict(far, wider)
    assert two_passes is not None and "in 1 steps a thread, 2 here" in two_passes.basis
    latency = model.roofline.latency_us  # type: ignore[union-attr]
    assert two_passes.time_us == pytest.approx(latency + (1.5 * roofline_us(near) - latency) * 2)
    assert one_pass is not None and "steps" not in one_pass.basis
    assert model.rank(far)[0].config == wider


def test_steps_are_unknown_where_a_grid_may_take_more_than_one_wave() -> None:
    """A GEMV grid of more blocks than SMs that is not persistent may hold 16 blocks an SM or 4."""
    assert gemv.OP.thread_steps(gemv16(4096, 4096), A, SMS) is None


def test_a_config_that_sums_its_blocks_keeps_its_fixed_cost_on_a_smaller_shape() -> None:
    """Transposed float16 4096x1 on the H200: 16384x7's leader (32 blocks adding their sums through the
    workspace) ran 3.34 us there, almost all of it the launch and the last block's sum; the roofline
    scaled it to 1.25 us on 4096x1 and it ran 2.92, where 8192x1's one-block leader ran 1.18. Its time
    there less the smaller work is a floor; where the work took most of the time there, none."""
    from autotune.ops.gemv import tall

    def t16(m: int, n: int) -> Problem:
        return ops.make_problem("gemv", "float16", m, n, trans=True)

    many = {"block": 128, "rows": 1, "unroll": 4, "prefetch": 0, "depth": 1, "cluster": 1}
    one = {"block": 256, "rows": 8, "unroll": 4, "prefetch": 1, "depth": 32, "cluster": 1}
    small, near, far = t16(4096, 1), t16(8192, 1), t16(16384, 7)
    assert tall.launch(small, many, SMS).workspace_floats > 0 and tall.launch(far, many, SMS).workspace_floats > 0
    assert tall.launch(small, one, SMS).grid == (1, 1, 1)
    # A large shape streamed at the roofline sets the best rate stored.
    big, streaming = t16(8388608, 8), {"block": 1024, "rows": 1, "unroll": 2, "prefetch": 1, "depth": 64, "cluster": 1}
    model = CostModel(
        {near: [Trial(one, 1.23)], far: [Trial(many, 3.34)], big: [Trial(streaming, roofline_us(big))]}, SMS
    )
    floored = model.predict(small, many)
    assert floored is not None and "it 3.34 us on 16384x7, less" in floored.basis
    assert 3.2 < floored.time_us < 3.34
    assert model.rank(small)[0].config == one
    # A config timed nowhere (a seed: one cluster of 8 blocks) is held to the fastest config that summed
    # its blocks on the nearest tuned shape where one did; a one-block config is not held.
    cluster = {**one, "depth": 1, "cluster": 8}
    seeded = model.predict(small, cluster)
    assert seeded is not None and "a config summing its blocks 3.34 us on 16384x7" in seeded.basis
    assert "of work" not in str(model.predict(small, one).basis)  # type: ignore[union-attr]
    # Where the bytes took most of the time there, the roofline's scaling stands.
    model = CostModel({big: [Trial(many, 1.1 * roofline_us(big))], near: [Trial(one, 1.23)]}, SMS)
    scaled = model.predict(far, many)
    assert scaled is not None and "of work" not in scaled.basis
