"""The range a measured kernel time can lie in, shared by everything that accepts one from outside.

A time below the floor is no measurement but a broken timer or a forged value: kept, it wins every
selection, and the cost model's roofline fit divides by its square (0.0 for 1e-200). A time above
the ceiling is a hang that was not noticed. Worker replies and records files are both checked
against these bounds, so neither can store what the other would refuse. A records line names its
problem too, so its time is also held to what moving that problem's bytes and computing its flops
allows (impossible_speed); a worker's reply is checked against the problem's float64 result instead.
"""

from __future__ import annotations

import math

# No GPU kernel call times under 0.1 us: the launch alone takes longer (the fastest stored calls
# take about 1.2 us), so the floor leaves every real measurement room.
MIN_TIME_US = 0.1
MAX_TIME_US = 1e9  # a kernel call of more than a quarter hour is no measurement


def is_plausible_time_us(value: object) -> bool:
    """Whether `value` is a number (not a bool) of microseconds within [MIN_TIME_US, MAX_TIME_US]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and MIN_TIME_US <= value <= MAX_TIME_US


# What no GPU does: move 100 TB/s (an H200's memory: 4.8 TB/s; an L2, whose hits the measurement's
# rotating buffers avoid anyway, well under 20) or compute 20 PFLOP/s in the dtypes tuned here (an
# H200's dense float16: 0.99). A time that implies more for its problem is forged, not measured.
MAX_BYTES_PER_US = 1e8  # 100 TB/s
MAX_FLOPS_PER_US = 2e10  # 20 PFLOP/s


def impossible_speed(bytes_moved: int, flops: int, time_us: float) -> str | None:
    """Why `time_us` is too short for a call that must move `bytes_moved` and compute `flops`; None
    where some GPU could take it."""
    if bytes_moved > MAX_BYTES_PER_US * time_us:
        return f"{bytes_moved / time_us / 1e6:,.0f} TB/s, more than any memory moves ({MAX_BYTES_PER_US / 1e6:g})"
    if flops > MAX_FLOPS_PER_US * time_us:
        return f"{flops / time_us / 1e9:,.0f} PFLOP/s, more than any GPU computes ({MAX_FLOPS_PER_US / 1e9:g})"
    return None
