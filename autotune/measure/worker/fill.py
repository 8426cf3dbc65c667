"""Fresh random operands on the GPU for the runners (worker side)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from autotune.measure.gpu import Kernels


class RandomFill:
    """Fills device buffers with uniform values in [-1, 1) (kernels/measure/support.cu, at_fill_<dtype>).
    Each call takes the next seed, so every fill of a run is new data and a run repeats exactly."""

    THREADS = 256
    BLOCKS_PER_SM = 32  # a grid-stride loop: enough blocks to fill the card, no more

    def __init__(self, kernels: Kernels, support: Path, dtype: str, sm_count: int, seed: int) -> None:
        self.seed = seed
        self._sm_count = sm_count
        self._fill = kernels.function(support, f"at_fill_{dtype}", "PQQ")

    def __call__(self, buffer: Any, count: int) -> None:
        self.seed += 1
        blocks = max(1, min(math.ceil(count / self.THREADS), self.BLOCKS_PER_SM * self._sm_count))
        self._fill.prepared_async_call((blocks, 1, 1), (self.THREADS, 1, 1), None, buffer, count, self.seed)
