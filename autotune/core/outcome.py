"""What one measurement of one config ended as: outcomes are data, never escaping exceptions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    RUNNING = "running"  # written before dispatch; a row still running after a sweep died is redone
    OK = "ok"
    INVALID = "invalid"  # ruled out by the constraints: never compiled
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"  # the launch or the kernel failed (illegal address, misaligned, ...)
    WRONG_RESULT = "wrong_result"  # ran, but disagreed with the float64 reference (NaN included)
    TIMEOUT = "timeout"  # did not finish in time; the worker was killed
    CRASHED = "crashed"  # the worker process died
    QUARANTINED = "quarantined"  # killed workers twice: never dispatched again


FINAL_FAILURES = frozenset(Status) - {Status.RUNNING, Status.OK}


@dataclass
class Outcome:
    status: Status
    message: str = ""
    time_us: float | None = None  # median GPU time per call
    times_us: list[float] = field(default_factory=list)  # every repetition, for the record
    gbs: float | None = None  # bytes that must move / time
    rel_error: float | None = None  # worst error against the float64 reference, in its own scale
    # What the GPU ran at while it was timed (NVML, where nvidia-ml-py is installed): the medians
    # over the timed samples of the SM and memory clocks and of the board's power draw.
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    power_w: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK
