"""The launch path in the caller's process: the driver API by ctypes, per-device state, launch plans.

Nothing here imports PyCUDA or torch at import time; autotune.api's gemv(), gemm() and warmup() are
its entry points.
"""
