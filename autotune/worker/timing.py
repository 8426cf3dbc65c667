"""GPU time per call of back-to-back launches, with host launch overhead kept out of the numbers.

A spin kernel holds the stream while the host queues the launches, so the GPU then runs them
back to back; events around them give GPU time only. The same method times cuBLAS in benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.gpu import Kernels, driver

Launcher = Callable[[int], None]  # launches call number i (which picks the rotating buffer)

_HOST_US_PER_LAUNCH = 20  # PyCUDA needs ~10 us per launch; a spin too short is detected and redone
_MAX_SPIN_NS = 200_000_000


class Timer:
    def __init__(self, kernels: Kernels, support_cubin: Path) -> None:
        cuda = driver()
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

    def measure(self, launch: Launcher, *, target_ms: float = 2.0, reps: int = 5) -> list[float]:
        """`reps` samples of time per call, each over enough calls to fill about `target_ms`."""
        return self.measure_interleaved([launch], target_ms=target_ms, reps=reps)[0]

    def measure_interleaved(
        self, launches: list[Launcher], *, target_ms: float = 2.0, reps: int = 5
    ) -> list[list[float]]:
        """`reps` samples of each launcher's time per call, taken in turns (A, B, A, B, ...), so that
        clocks drifting with power and heat during the run weigh on every launcher alike."""
        calls = [self._calls_for(launch, target_ms) for launch in launches]
        samples: list[list[float]] = [[] for _ in launches]
        for _ in range(reps):
            for launch, count, taken in zip(launches, calls, samples, strict=True):
                taken.append(self.per_call_us(launch, count))
        return samples

    def _calls_for(self, launch: Launcher, target_ms: float) -> int:
        """Calls a sample takes to fill about `target_ms` (8 at least, 200 at most)."""
        estimate = self.per_call_us(launch, 8)
        return max(8, min(200, int(target_ms * 1000.0 / max(estimate, 0.5))))
