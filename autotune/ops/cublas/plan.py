"""A plan that runs cuBLASLt: where the selection policy picks the `cublas` family, the launch path runs
the algorithm of the stored rank through it, on the caller's stream, capturable, like a LaunchPlan;
the worker times each rank through the same plan.

Everything is made once per (problem, leading dimensions, alignment, device): the descriptors, the
heuristic's answer for the alignment the arrays have (16 bytes: the rank that was timed; less: the
heuristic's first, since its answer for unaligned arrays is another list) and the chosen algorithm.
"""

from __future__ import annotations

import ctypes
import threading

from autotune.core.problem import ITEMSIZE, Problem
from autotune.gpu import driver
from autotune.gpu.device import Allocator, Device
from autotune.ops.cublas import binding
from autotune.ops.cublas.mapping import ALIGNED_BYTES, matmul_for

HANDLE = "cuBLASLt"  # the device's handle of this library (Device.library_handle)


class CublasPlan:
    """One cuBLASLt algorithm ready to run on one device for one problem and layout."""

    needs_scratch = False  # its workspace is its own (Device.library_workspace), never split-K scratch

    def __init__(
        self,
        device: Device,
        problem: Problem,
        rank: int,
        aligned: bool,
        leading: tuple[int, ...] | None,
        order: tuple[int, ...] = (0, 1),
    ) -> None:
        self.device = device
        self.problem = problem
        self._first, self._second = order  # which call input our kernels (and the mapping) take first
        alignment = ALIGNED_BYTES if aligned else ITEMSIZE[problem.dtype]
        handle = device.library_handle(HANDLE, binding.create_handle)
        with driver.in_context(device.context):
            self._call = binding.LtCall(handle, matmul_for(problem, leading), alignment)
        # The timed rank where the heuristic's list can be the one that was timed; a view with other
        # leading dimensions may get a shorter list, and then the heuristic's first serves too.
        self._call.choose(rank if aligned and rank < len(self._call.algos) else 0)
        self.workspace_bytes = self._call.workspace_bytes
        self._context = device.context
        self._current = ctypes.c_void_p()
        self._current_ref = ctypes.byref(self._current)
        self._get_context = driver.lib()["cuCtxGetCurrent"]  # made once, as LaunchPlan's driver calls
        self._lock = threading.Lock()

    @staticmethod
    def candidates(device: Device, problem: Problem) -> int:
        """How many algorithms the heuristic offers for `problem` with 16-byte aligned contiguous
        arrays (the ranks a sweep times, and the list an aligned plan chooses from)."""
        handle = device.library_handle(HANDLE, binding.create_handle)
        with driver.in_context(device.context):
            return len(binding.LtCall(handle, matmul_for(problem), ALIGNED_BYTES).algos)

    def launch(
        self, pointers: tuple[int, ...], alpha: float, beta: float, stream: int, allocator: Allocator | None
    ) -> None:
        """Run on `stream` with arrays at `pointers` (the call's inputs, then the output) from any thread."""
        a, b, c = pointers[self._first], pointers[self._second], pointers[2]
        with self._lock:
            workspace = 0
            if self.workspace_bytes:
                workspace = self.device.library_workspace(self.workspace_bytes, stream, allocator)
            self._get_context(self._current_ref)
            if not self._current.value:
                driver.adopt_context(self._context)
                self._current.value = self._context
            if self._current.value == self._context:
                self._call.run((a, b, c), alpha, beta, workspace, stream)
            else:  # cuBLASLt runs in the context current on the calling thread: make it this GPU's
                with driver.in_context(self._context):
                    self._call.run((a, b, c), alpha, beta, workspace, stream)
