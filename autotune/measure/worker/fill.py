"""Fresh random operands on the GPU for the runners (worker side)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.problem import DTYPES, input_bytes
from autotune.measure.pycuda_gpu import Kernels

# Inputs held as packed integers (int4 codes two to a byte, int8, uint8 zero points): every bit
# pattern is a value, so they are filled with uniformly random bytes; float8 e4m3 codes with the same
# bytes, its two NaN codes made finite (kernels/measure/fill_bytes.cu, at_fill_fp8e4m3).
BYTE_FILLED = ("int4", "int8", "uint8", "fp8e4m3")
BYTE_FILL_FILE = "measure/fill_bytes.cu"  # under kernels/; a file of its own, so support.cu stays as it is


class RandomFill:
    """Fills device buffers of any input dtype with fresh random data: float dtypes with uniform values
    in [-1, 1) (kernels/measure/support.cu, at_fill_<dtype>), packed integers with uniformly random
    bytes (kernels/measure/fill_bytes.cu, at_fill_bytes). Each call takes the next seed, whatever
    its dtype, so every fill of a run is new data, no two buffers share a seed, and a run repeats
    exactly. Each dtype's kernel is loaded on its first fill; `byte_kernels` compiles fill_bytes.cu
    (called only where a problem has packed integer inputs)."""

    THREADS = 256
    BLOCKS_PER_SM = 32  # a grid-stride loop: enough blocks to fill the card, no more

    def __init__(
        self, kernels: Kernels, support: Path, byte_kernels: Callable[[], Path], sm_count: int, seed: int
    ) -> None:
        self.seed = seed
        self._kernels, self._support, self._byte_kernels = kernels, support, byte_kernels
        self._sm_count = sm_count
        self._fills: dict[str, Any] = {}

    def __call__(self, buffer: Any, count: int, dtype: str) -> None:
        """Fill `count` elements of `dtype` at `buffer`."""
        fill = self._fill(dtype)
        self.seed += 1
        # The byte kernel counts bytes (an int4 buffer holds two elements to a byte).
        n = count if dtype in DTYPES else input_bytes(count, dtype)
        blocks = max(1, min(math.ceil(n / self.THREADS), self.BLOCKS_PER_SM * self._sm_count))
        fill.prepared_async_call((blocks, 1, 1), (self.THREADS, 1, 1), None, buffer, n, self.seed)

    def _fill(self, dtype: str) -> Any:
        """The fill kernel of `dtype`: its own for a float, one for every packed integer dtype, one for
        float8 e4m3 codes."""
        if dtype not in DTYPES and dtype not in BYTE_FILLED:  # e5m2: no fill keeps its NaNs and infinities out
            filled = ", ".join((*DTYPES, *BYTE_FILLED))
            raise AutotuneError(f"the tuner cannot fill {dtype} inputs with random data (it fills {filled})")
        kernels = {"fp8e4m3": "at_fill_fp8e4m3"}
        kernel = f"at_fill_{dtype}" if dtype in DTYPES else kernels.get(dtype, "at_fill_bytes")
        if kernel not in self._fills:
            cubin = self._support if dtype in DTYPES else self._byte_kernels()
            self._fills[kernel] = self._kernels.function(cubin, kernel, "PQQ")
        return self._fills[kernel]
