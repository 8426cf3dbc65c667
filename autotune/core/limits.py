"""The GPU's hardware limits that the Python side checks configs and launches against, each named once.

These are the CUDA limits of compute capability 8.0 and 9.0 (the same on both, except the opt-in
shared memory, which is Hopper's). The kernels do not read them: they bound what the parameter
spaces offer and how a launch is set up. Below them, the bounds of a time any GPU can take for one
kernel call, which every time the store accepts is checked against.
"""

from __future__ import annotations

MAX_THREADS_PER_BLOCK = 1024  # threads in one block
MAX_THREADS_PER_SM = 2048  # threads resident on one SM at once
REGISTERS_PER_SM = 65536  # 32-bit registers of one SM, shared by its resident blocks
MAX_REGISTERS_PER_THREAD = 255  # the most ptxas gives one thread; past this it spills
DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory a block gets without opting in
MAX_SHARED_BYTES_OPT_IN = 227 * 1024  # the most dynamic shared memory one block may opt in to on sm_90
MAX_GRID_Y = 65535  # blocks along grid.y (and grid.z)

# No kernel call completes faster than this: a launch alone takes a microsecond or more on every CUDA
# GPU (the shipped records' fastest call is 1.2 us). A smaller positive time is no measurement, and
# the cost model's 1/t^2 of one (1e-200 us, say) underflows to a division by zero.
MIN_TIME_US = 0.1
MAX_TIME_US = 1e9  # a kernel call of more than a quarter hour is no measurement either


def plausible_time_us(value: object) -> bool:
    """Whether `value` is a number of microseconds one kernel call can take (NaN and bools are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return MIN_TIME_US <= value < MAX_TIME_US
