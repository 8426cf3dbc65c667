"""The clocks and power a timing ran at, read through NVML (the `nvidia-ml-py` package) in the worker.

Optional by design: without the package or without NVML (a driver that does not offer it, a
container without the library) a timing records none, and says why once in the log. The SM and
memory clocks are read as the driver reports them right after each timed sample; the power is
NVML's board power reading, which the driver averages over up to a second on recent GPUs, so it
describes the last second of work, most of it the config being timed."""

from __future__ import annotations

import importlib
import logging
import statistics
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    sm_mhz: float
    mem_mhz: float
    power_w: float


class Sensors:
    """NVML's view of one GPU, found by its UUID; `sample()` is None where NVML is not at hand."""

    def __init__(self, uuid: str, nvml: Any = None) -> None:
        self._nvml, self._handle = None, None
        try:
            if nvml is None:
                nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            self._handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            self._nvml = nvml
        except Exception as exc:  # ImportError, NVMLError of any kind: the timings go on without
            log.info("no clocks or power recorded: NVML is not available (%s: %s)", type(exc).__name__, exc)

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def sample(self) -> Reading | None:
        nvml = self._nvml
        if nvml is None:
            return None
        try:
            return Reading(
                float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)),
                float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_MEM)),
                nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0,  # milliwatts
            )
        except Exception as exc:  # a reading that fails once is left out, not the timing
            log.debug("NVML reading failed: %s", exc)
            return None


def medians(readings: list[Reading | None]) -> dict[str, float | None]:
    """The Outcome fields for the readings taken (None for each where none was taken)."""
    taken = [r for r in readings if r is not None]
    if not taken:
        return {"sm_mhz": None, "mem_mhz": None, "power_w": None}
    return {
        "sm_mhz": statistics.median(r.sm_mhz for r in taken),
        "mem_mhz": statistics.median(r.mem_mhz for r in taken),
        "power_w": statistics.median(r.power_w for r in taken),
    }
