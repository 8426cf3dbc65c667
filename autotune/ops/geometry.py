"""Launch geometry every op module returns: what the worker and the library need to launch a kernel."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int  # dynamic shared memory; above 48 KiB the launcher opts the kernel in first
    workspace_floats: int  # split-K partial sums (0 without split)
    counters: int  # split-K arrival counters, zero between launches (0 without split)
