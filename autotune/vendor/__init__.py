"""The vendor library as a tuning candidate: cuBLASLt's algorithms for a problem, timed like our
configs and stored as the trials of the `cublas` family (config {"cublas_algo": rank}), launched on
the caller's stream when they win."""

import os

ENABLE_VARIABLE = "AUTOTUNE_VENDOR"


def enabled() -> bool:
    """Whether cuBLASLt takes part: AUTOTUNE_VENDOR=0 keeps it out of sweeps and selection alike (our
    kernels only, as the test suite runs them)."""
    return os.environ.get(ENABLE_VARIABLE, "1").strip() != "0"
