"""The read floor: the least GPU time in which this card reads a buffer of a given size.

A GEMV must read its whole matrix, so no GEMV config can beat the fastest kernel that only reads
that many bytes. Benchmarks time the read kernels of kernels/measure/read_floor.cu over a grid of block
sizes, loads per thread and L2 prefetches before the wait, the way they time a GEMV (launched back to back, with
programmatic dependent launch on sm_90+, on buffers rotating beyond the L2), and keep the fastest.
Set beside cuBLAS, it bounds the speedup any GEMV kernel could reach on that shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.build.compiler import compile_fixed
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.measure.pycuda_gpu import Kernels, has_programmatic_launch

WORD_BYTES = 16  # every load is one 16-byte vector
LOADS_PER_THREAD = (1, 2, 4, 8)
THREADS_PER_BLOCK = (128, 256, 512)
ARG_TYPES = "PQPi"  # words, word count, out (2 x uint32), check


@dataclass(frozen=True)
class ReadKernel:
    """One variant of the read kernel: its launch shape and what it prefetches into L2 before the
    wait (PREFETCH_KINDS, as the GEMV's `prefetch`)."""

    loads: int
    threads: int
    prefetch: int

    @property
    def name(self) -> str:
        return f"at_read_l{self.loads}_p{self.prefetch}"

    def blocks(self, words: int) -> int:
        return max(1, math.ceil(words / (self.threads * self.loads)))

    def describe(self) -> str:
        kind = PREFETCH_KINDS[self.prefetch]
        return f"{self.threads} threads x {self.loads} loads{', L2 prefetch of ' + kind if kind else ''}"


# What each read kernel prefetches into L2 before its wait (kernels/measure/read_floor.cu): as GEMVs may
# (prefetch=2 and 3), each thread's first words too, so that a GEMV doing so cannot pass the floor.
PREFETCH_KINDS = ("", "the block's chunk", "each thread's first word", "each thread's first 2 words")

VARIANTS = tuple(
    ReadKernel(loads, threads, prefetch)
    for threads in THREADS_PER_BLOCK
    for loads in LOADS_PER_THREAD
    for prefetch in range(len(PREFETCH_KINDS))
)


def words_for(nbytes: int) -> int:
    """16-byte words a read of `nbytes` covers (a partial last word counts whole)."""
    if nbytes <= 0:
        raise AutotuneError(f"a read floor needs a positive size, got {nbytes} bytes")
    return math.ceil(nbytes / WORD_BYTES)


class ReadKernels:
    """The loaded read kernels of one GPU, launched as a GEMV is launched there."""

    def __init__(self, gpu: GpuInfo, kernels: Kernels) -> None:
        cubin = compile_fixed("measure/read_floor.cu", gpu.arch, "the read-floor kernels")
        # Launched as the GEMVs are: programmatically where the GPU can (the kernels wait before reading).
        programmatic = has_programmatic_launch(gpu)
        self._functions = {
            variant.name: kernels.function(cubin, variant.name, ARG_TYPES, programmatic=programmatic)
            for variant in VARIANTS
        }

    def launch(self, variant: ReadKernel, address: int, words: int, out: int, *, check: bool = False) -> None:
        """Queue one read of `words` 16-byte words at device `address`; `out` is two uint32 of scratch
        (with `check`, out[0] ends XOR-ed with every word read: zero it first)."""
        self._functions[variant.name].prepared_async_call(
            (variant.blocks(words), 1, 1), (variant.threads, 1, 1), None, address, words, out, int(check)
        )
