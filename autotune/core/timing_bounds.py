"""The range a measured kernel time can lie in, shared by everything that accepts one from outside.

A time below the floor is no measurement but a broken timer or a forged value: kept, it wins every
selection, and the cost model's roofline fit divides by its square (0.0 for 1e-200). A time above
the ceiling is a hang that was not noticed. Worker replies and records files are both checked
against these bounds, so neither can store what the other would refuse.
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
