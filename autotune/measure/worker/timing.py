"""GPU time per call of back-to-back launches, with host launch overhead kept out of the numbers.

A spin kernel holds the stream while the host queues the launches, so the GPU then runs them
back to back; events around them give GPU time only. The same method times cuBLAS in benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from autotune.measure.pycuda_gpu import Kernels, driver
from autotune.measure.sensors import Reading, Sensors

Launcher = Callable[[int], None]  # launches call number i (which picks the rotating buffer)

_HOST_US_PER_LAUNCH = 20  # a launch costs the host 5-10 us; a spin too short is detected and redone
_MAX_SPIN_NS = 200_000_000
# Calls this long are timed at the clocks the card holds under sustained load, after WARMUP_MS of
# them: a rested H200 runs hgemm 8192^3 at boost clocks for about the first 50 ms, then settles 5-13%
# slower, by how much depending on the config (its power per flop). Timed from rest, two configs
# 11% apart in steady use measured the same, and the tuner kept the slower.
SUSTAINED_US = 200.0
WARMUP_MS = 200.0


class Timer:
    def __init__(self, kernels: Kernels, support_cubin: Path, sensors: Sensors | None = None) -> None:
        cuda = driver()
        self.sensors = sensors  # read after every timed sample where given
        self._spin = kernels.function(support_cubin, "at_spin", "Q")
        self._start = cuda.Event()
        self._end = cuda.Event()

    def per_call_us(self, launch: Launcher, calls: int) -> float:
        """Mean GPU time per call over `calls` queued launches."""
        spin_ns = calls * _HOST_US_PER_LAUNCH * 1000 + 200_000
        while True:
            self._spin.prepared_async_call((1, 1, 1), (32, 1, 1), None, spin_ns)
            self._start.record()
            for i in range(calls):
                launch(i)
            self._end.record()
            # If the spin is still running, every launch was queued before the timed region began.
            covered = not self._start.query()
            self._end.synchronize()
            if covered or spin_ns >= _MAX_SPIN_NS:
                return float(self._start.time_till(self._end)) * 1000.0 / calls
            spin_ns = min(spin_ns * 4, _MAX_SPIN_NS)

    def launch_empty(self) -> None:
        """Queue one kernel that does nothing: the floor any launch pays (benchmarks report it)."""
        self._spin.prepared_async_call((1, 1, 1), (32, 1, 1), None, 0)

    def measure(
        self, launch: Launcher, *, target_ms: float = 2.0, reps: int = 5, readings: list[Reading | None] | None = None
    ) -> list[float]:
        """`reps` samples of time per call, each over enough calls to fill about `target_ms`; with
        `readings`, the sensors' reading after each sample is added to it."""
        taken: list[list[Reading | None]] | None = None if readings is None else [readings]
        return self.measure_interleaved([launch], target_ms=target_ms, reps=reps, readings=taken)[0]

    def measure_interleaved(
        self,
        launches: list[Launcher],
        *,
        target_ms: float = 2.0,
        reps: int = 5,
        readings: list[list[Reading | None]] | None = None,
    ) -> list[list[float]]:
        """`reps` samples of each launcher's time per call, taken in turns (A, B, A, B, ...), so that
        clocks drifting with power and heat during the run weigh on every launcher alike. Launchers
        whose calls take SUSTAINED_US or more first run for WARMUP_MS, untimed."""
        estimates = [self.per_call_us(launch, 8) for launch in launches]
        for launch, estimate in zip(launches, estimates, strict=True):
            if estimate >= SUSTAINED_US:
                self.per_call_us(launch, math.ceil(WARMUP_MS * 1000.0 / estimate))
        # Calls a sample: about target_ms of them, 8 at least, 200 at most.
        calls = [max(8, min(200, int(target_ms * 1000.0 / max(estimate, 0.5)))) for estimate in estimates]
        samples: list[list[float]] = [[] for _ in launches]
        for _ in range(reps):
            for index, (launch, count, taken) in enumerate(zip(launches, calls, samples, strict=True)):
                taken.append(self.per_call_us(launch, count))
                if readings is not None:
                    # Right after the sample: the clocks the GPU still holds, the power it just drew.
                    readings[index].append(self.sensors.sample() if self.sensors is not None else None)
        return samples
