"""autotune: tunes GPU linear-algebra kernels for the exact shapes you run, and remembers the answer.

`import autotune` needs neither PyCUDA nor a GPU; tuning needs both, launching a GPU (and nvcc only
for kernels that do not ship precompiled).
"""

from autotune.api import (
    best,
    call,
    from_awq,
    from_gptq,
    gemm,
    gemv,
    linear,
    load_quantized,
    patch,
    prepare,
    problems,
    quantize,
    store,
    sweep,
    tune_model,
    unpatch,
    wait_for_tuning,
    warmup,
)
from autotune.core import log as _log
from autotune.core.errors import AutotuneError
from autotune.select.choose import Choice

__all__ = [
    "AutotuneError",
    "Choice",
    "best",
    "call",
    "from_awq",
    "from_gptq",
    "gemm",
    "gemv",
    "linear",
    "load_quantized",
    "patch",
    "prepare",
    "problems",
    "quantize",
    "store",
    "sweep",
    "tune_model",
    "unpatch",
    "wait_for_tuning",
    "warmup",
]
__version__ = "0.1.0"

_log.configure_from_env()  # the caller's logging configuration decides, or AUTOTUNE_LOG
