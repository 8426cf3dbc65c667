"""The runtime selector: exact measurement, nearest tuned shape, safe default, and its cache."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.select.choose import DEFAULT, ESTIMATE, MEASURED, Selector, choose, nearest, shape_distance
from autotune.store import Store
from tests.fakes import record

GPU = "NVIDIA H200"
H200 = GpuInfo(GPU, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)
FAST = {**gemv.DEFAULT_CONFIG, "block": 256, "vec": 8}
SLOW = {**gemv.DEFAULT_CONFIG, "block": 64}


@dataclass
class Row:
    """A stored best trial as the selector reads it (select.TunedRow)."""

    m: int
    n: int
    config: dict[str, Any]
    time_us: float
    gbs: float | None = 100.0
    driver: str = "13.0"
    cuda: str = "13.0"

    @property
    def problem(self) -> Problem:
        return Problem("gemv", "float16", self.m, self.n)


def row(m: int, n: int, config: dict[str, int], time_us: float = 5.0) -> Row:
    return Row(m, n, dict(config), time_us)


# --- pure decision ---------------------------------------------------------------------------------


def test_exact_measurement_wins() -> None:
    exact = row(4096, 8192, FAST, 3.0)
    choice = choose(SHAPE, GPU, exact, [row(4096, 4096, SLOW, 1.0)])
    assert (choice.source, choice.config, choice.time_us, choice.from_shape) == (MEASURED, FAST, 3.0, None)
    assert choice.notes == ()


def test_untuned_shape_takes_the_nearest_tuned_config() -> None:
    tuned = [row(1024, 1024, SLOW), row(4096, 4096, FAST, 7.0), row(16384, 16384, SLOW)]
    choice = choose(SHAPE, GPU, None, tuned)
    assert (choice.source, choice.config, choice.from_shape, choice.time_us) == (ESTIMATE, FAST, (4096, 4096), 7.0)
    assert len(choice.notes) == 1 and "4096x4096" in choice.notes[0] and "4096x8192" in choice.notes[0]


def test_a_neighbour_config_this_shape_cannot_run_is_fitted_to_it() -> None:
    odd = Problem("gemv", "float16", 1024, 999)  # odd N: only scalar loads (vec=1) are valid
    assert gemv.OP.space(odd).check(FAST) is not None
    nearer, further = row(1024, 1024, FAST, 3.0), row(2048, 1024, SLOW)
    assert shape_distance((1024, 1024), (1024, 999)) < shape_distance((2048, 1024), (1024, 999))
    choice = choose(odd, GPU, None, [further, nearer])
    assert (choice.source, choice.config, choice.from_shape) == (ESTIMATE, {**FAST, "vec": 1}, (1024, 1024))
    # That config was never timed: no time is shown for it, and the note says what changed.
    assert (choice.time_us, choice.gbs) == (None, None)
    assert len(choice.notes) == 1 and "vec=1 in place of vec=8" in choice.notes[0] and "1024x1024" in choice.notes[0]


def test_a_neighbour_config_of_another_space_is_skipped() -> None:
    foreign, further = row(1024, 1024, {"block": 2}), row(2048, 1024, SLOW, 4.0)
    choice = choose(Problem("gemv", "float16", 1024, 999), GPU, None, [foreign, further])
    assert (choice.source, choice.config, choice.from_shape, choice.time_us) == (ESTIMATE, SLOW, (2048, 1024), 4.0)


def test_invalid_exact_config_falls_back_to_a_neighbour() -> None:
    stale_exact = row(4096, 8192, {"block": 2})  # keys of another space: not runnable
    choice = choose(SHAPE, GPU, stale_exact, [row(4096, 4096, FAST)])
    assert (choice.source, choice.config) == (ESTIMATE, FAST)


def test_nothing_tuned_gives_the_default() -> None:
    choice = choose(SHAPE, GPU, None, [])
    assert (choice.source, choice.config, choice.time_us) == (DEFAULT, gemv.DEFAULT_CONFIG, None)
    assert choice.config is not gemv.DEFAULT_CONFIG  # a copy: callers cannot corrupt the default
    assert len(choice.notes) == 1 and "hgemv" in choice.notes[0] and GPU in choice.notes[0]
    assert gemv.OP.space(SHAPE).check(choice.config) is None


def test_no_neighbour_that_fits_gives_the_default_and_keeps_given_notes() -> None:
    odd = Problem("gemv", "float16", 1024, 999)
    choice = choose(odd, GPU, None, [row(1024, 1024, {"block": 2})], notes=["first"])
    assert choice.source == DEFAULT and choice.notes[0] == "first" and len(choice.notes) == 2
    assert "no config tuned for hgemv" in choice.notes[1] and "1024x999" in choice.notes[1]


def test_distance_is_symmetric_and_in_log_space() -> None:
    assert shape_distance((1024, 1), (2048, 1)) == pytest.approx(shape_distance((4096, 1), (8192, 1))) == 1.0
    assert shape_distance((1, 1024), (1, 2048)) == pytest.approx(shape_distance((1, 4096), (1, 8192)))
    assert shape_distance((100, 3000), (7000, 20)) == shape_distance((7000, 20), (100, 3000))
    assert shape_distance((512, 512), (512, 512)) == 0.0
    assert shape_distance((1024, 1024), (2048, 2048)) == pytest.approx(2**0.5)


def test_nearest_orders_outwards_and_drops_the_exact_shape() -> None:
    rows = [row(64, 64, SLOW), row(4096, 8192, SLOW), row(4096, 4096, SLOW), row(8192, 8192, SLOW)]
    shapes = [(r.m, r.n) for r in nearest(rows, (4096, 8192))]
    assert shapes[0] in {(4096, 4096), (8192, 8192)} and shapes[-1] == (64, 64)
    assert (4096, 8192) not in shapes and len(shapes) == 3
    # Equal distance: ties broken by the shape, so the answer never depends on row order.
    assert shapes == [(r.m, r.n) for r in nearest(list(reversed(rows)), (4096, 8192))]


def test_choice_to_dict() -> None:
    data = choose(SHAPE, GPU, None, [row(4096, 4096, FAST)]).to_dict()
    assert data["op"] == "hgemv" and data["dtype"] == "float16" and (data["m"], data["n"]) == (4096, 8192)
    assert data["source"] == ESTIMATE and data["from_shape"] == [4096, 4096] and data["config"] == FAST


# --- Selector on a real store ----------------------------------------------------------------------


class CountingStore:
    """Delegates to a Store and counts the selector's queries."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def best(self, *args: Any) -> Any:
        self.calls["best"] += 1
        return self._store.best(*args)

    def vendor_best(self, *args: Any) -> Any:
        self.calls["vendor_best"] += 1
        return self._store.vendor_best(*args)

    def tuned(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["tuned"] += 1
        return self._store.tuned(*args, **kwargs)

    def gpus(self) -> Any:
        self.calls["gpus"] += 1
        return self._store.gpus()


def measure(
    store: Store,
    problem: Problem,
    config: dict[str, int],
    time_us: float,
    *,
    src: str | None = None,
    gpu: GpuInfo = H200,
) -> None:
    record(store, problem, config, Outcome(Status.OK, time_us=time_us, times_us=[time_us]), gpu, src)


def test_selector_answers_from_the_store(store: Store) -> None:
    measure(store, SHAPE, SLOW, 9.0)
    measure(store, SHAPE, FAST, 4.0)
    selector = Selector(store)
    exact = selector.choose(SHAPE, GPU)
    assert (exact.source, exact.config, exact.time_us) == (MEASURED, FAST, 4.0)
    near = selector.choose(Problem("gemv", "float16", 4096, 4096), GPU)
    assert (near.source, near.config, near.from_shape) == (ESTIMATE, FAST, (4096, 8192))
    other_dtype = selector.choose(Problem("gemv", "float32", 4096, 8192), GPU)
    assert other_dtype.source == DEFAULT
    assert selector.choose(SHAPE, "NVIDIA A100").source == DEFAULT


def test_selector_caches_answers_until_forget(store: Store) -> None:
    measure(store, SHAPE, SLOW, 9.0)
    counting = CountingStore(store)
    selector = Selector(counting)
    first = selector.choose(SHAPE, GPU)
    queries = sum(counting.calls.values())
    assert queries >= 1
    assert selector.choose(SHAPE, GPU) is first
    assert sum(counting.calls.values()) == queries  # answered from the cache
    measure(store, SHAPE, FAST, 2.0)
    assert selector.choose(SHAPE, GPU).config == SLOW  # still cached
    selector.forget()
    again = selector.choose(SHAPE, GPU)
    assert sum(counting.calls.values()) > queries
    assert (again.config, again.time_us) == (FAST, 2.0)


def test_selector_ignores_other_kernel_sources(store: Store) -> None:
    measure(store, SHAPE, FAST, 1.0, src="an-older-kernel")
    measure(store, Problem("gemv", "float16", 4096, 4096), FAST, 1.0, src="an-older-kernel")
    assert Selector(store).choose(SHAPE, GPU).source == DEFAULT
    measure(store, SHAPE, SLOW, 9.0)
    choice = Selector(store).choose(SHAPE, GPU)
    assert (choice.source, choice.config, choice.time_us) == (MEASURED, SLOW, 9.0)


def test_selector_notes_a_driver_mismatch(store: Store) -> None:
    measure(store, SHAPE, FAST, 4.0)
    same = Selector(store).choose(SHAPE, GPU, local_driver=H200.driver)
    assert same.source == MEASURED and same.notes == ()
    other = Selector(store).choose(SHAPE, GPU, local_driver="999.1")
    assert other.source == MEASURED and len(other.notes) == 1
    assert "--stale" in other.notes[0] and "13.0" in other.notes[0] and "999.1" in other.notes[0]


def test_selector_invalid_exact_row_falls_back_to_a_neighbour(store: Store) -> None:
    measure(store, SHAPE, {"block": 2}, 1.0)  # a config of another space version, same kernel source
    measure(store, Problem("gemv", "float16", 4096, 4096), FAST, 4.0)
    choice = Selector(store).choose(SHAPE, GPU)
    assert (choice.source, choice.config) == (ESTIMATE, FAST)


def test_answers_are_for_the_gpu_asked_about_not_this_machines(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine whose GPU is an A100 (8.0), a question about the H200 gets the H200's kernel
    family (wgmma, sm_90a only) and its source hash: the measurement, not the safe default."""
    from autotune.core import fingerprint
    from autotune.core.target import targeting
    from autotune.ops import gemm

    square = Problem("gemm", "float16", 4096, 4096, 4096)
    with targeting(H200.compute_capability):
        assert gemm.family(square).NAME == "wgmma"
        config = gemm.OP.default_config(square)
        measure(store, square, config, 197.3)
    monkeypatch.setattr(fingerprint, "local_compute_capabilities", lambda: ("8.0",))
    assert gemm.family(square).NAME == "mma"  # what this machine would run
    choice = Selector(store).choose(square, GPU)
    assert (choice.source, choice.config, choice.time_us) == (MEASURED, config, 197.3)
