"""The GPU's hardware limits that the Python side checks configs and launches against, each named once.

These are the CUDA limits of compute capability 8.0 and 9.0 (the same on both, except the opt-in
shared memory, which is Hopper's). The kernels do not read them: they bound what the parameter
spaces offer and how a launch is set up.
"""

from __future__ import annotations

MAX_THREADS_PER_BLOCK = 1024  # threads in one block
MAX_THREADS_PER_SM = 2048  # threads resident on one SM at once
REGISTERS_PER_SM = 65536  # 32-bit registers of one SM, shared by its resident blocks
MAX_REGISTERS_PER_THREAD = 255  # the most ptxas gives one thread; past this it spills
DEFAULT_SHARED_BYTES = 48 * 1024  # dynamic shared memory a block gets without opting in
MAX_SHARED_BYTES_OPT_IN = 227 * 1024  # the most dynamic shared memory one block may opt in to on sm_90
MAX_GRID_Y = 65535  # blocks along grid.y (and grid.z)
# The most SMs a GPU may report: today's largest have under 200, so a count above this (or below 1)
# is a damaged record, not a GPU.
MAX_SM_COUNT = 1024
