"""The timer's sampling order on the CPU (the GPU timing itself is covered by the GPU tests): benchmarks
take samples of our kernel and cuBLAS in turns, so clocks that drift during a run weigh on both."""

from __future__ import annotations

import math

import pytest

from autotune.measure.worker.timing import SUSTAINED_US, WARMUP_MS, Timer


class _ScriptedTimer(Timer):
    """A Timer whose per-call time is scripted: launcher `name` takes `times[name]` microseconds,
    plus `drift` for every sample taken before (a card slowing down as it heats)."""

    def __init__(self, times: dict[str, float], drift: float) -> None:  # no GPU: skip Timer.__init__
        self.times, self.drift = times, drift
        self.order: list[tuple[str, int]] = []

    def per_call_us(self, launch, calls):  # type: ignore[no-untyped-def]
        name = launch.__name__
        self.order.append((name, calls))
        return self.times[name] + self.drift * (len(self.order) - 1)


def ours(_i: int) -> None: ...
def cublas(_i: int) -> None: ...


def test_samples_alternate_between_launchers() -> None:
    timer = _ScriptedTimer({"ours": 100.0, "cublas": 100.0}, drift=1.0)
    ours_samples, cublas_samples = timer.measure_interleaved([ours, cublas], target_ms=2.0, reps=3)
    # One 8-call estimate each, then the samples in turns, each over about 2 ms of calls.
    assert [name for name, _ in timer.order] == ["ours", "cublas"] + ["ours", "cublas"] * 3
    assert all(calls == 8 for _, calls in timer.order[:2])
    assert [calls for _, calls in timer.order[2:]] == [20, 19] * 3  # 2000 / 100 and 2000 / 101 us
    # Equal kernels on a drifting card get medians one sample apart, not a whole run apart.
    assert ours_samples == [102.0, 104.0, 106.0] and cublas_samples == [103.0, 105.0, 107.0]


def test_measure_is_one_launcher_interleaved_with_nothing() -> None:
    timer = _ScriptedTimer({"ours": 3.0}, drift=0.0)
    assert timer.measure(ours, target_ms=2.0, reps=4) == [3.0] * 4
    # 2 ms of 3 us calls is 666: capped at 200 calls a sample.
    assert timer.order == [("ours", 8)] + [("ours", 200)] * 4


@pytest.mark.parametrize("reps", [1, 5])
def test_every_launcher_gets_reps_samples(reps: int) -> None:
    timer = _ScriptedTimer({"ours": 50.0, "cublas": 40.0}, drift=0.0)
    samples = timer.measure_interleaved([ours, cublas, ours], reps=reps)
    assert [len(s) for s in samples] == [reps] * 3


def test_long_calls_are_timed_after_a_warm_up() -> None:
    """Calls of SUSTAINED_US or more run WARMUP_MS untimed first (clocks settle under load); shorter
    ones do not pay for it."""
    timer = _ScriptedTimer({"ours": 2000.0, "cublas": 100.0}, drift=0.0)
    timer.measure_interleaved([ours, cublas], target_ms=2.0, reps=2)
    warmup_calls = math.ceil(WARMUP_MS * 1000.0 / 2000.0)
    assert timer.order == [("ours", 8), ("cublas", 8), ("ours", warmup_calls)] + [("ours", 8), ("cublas", 20)] * 2
    assert SUSTAINED_US > 100.0  # so the 100 us launcher above had no warm-up
