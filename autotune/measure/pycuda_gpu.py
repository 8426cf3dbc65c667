"""The only module that imports PyCUDA: the primary context, device facts, loading cubins, timing.

Used by the tuning worker subprocess and by `autotune bench` in the caller's own process (where
torch shares the same primary context); the launch path binds the driver itself (autotune/gpu/).
Named for PyCUDA so as not to read as that GPU layer. Nothing here runs at import time.
"""

from __future__ import annotations

import atexit
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.errors import PYCUDA_HINT, AutotuneError
from autotune.core.fingerprint import GpuInfo, LocalGpu, cuda_release, local_gpus

if TYPE_CHECKING:
    from autotune.core.problem import Problem
    from autotune.ops.base import Op


def driver() -> Any:
    """pycuda.driver, initialised; a clear one-line error where PyCUDA or a CUDA driver is missing."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        if "pycuda" in str(exc) and "libcuda" not in str(exc):
            raise AutotuneError(
                f"PyCUDA is not installed, and tuning and timing need it: {PYCUDA_HINT} "
                "(built against the CUDA toolkit; `autotune doctor` says what is missing)"
            ) from None
        raise AutotuneError(f"PyCUDA cannot load the CUDA driver ({exc}); is this a GPU machine?") from None
    try:
        cuda.init()
        count = cuda.Device.count()
    except cuda.Error as exc:
        raise AutotuneError(f"no usable CUDA driver: {exc}") from None
    if count == 0:
        raise AutotuneError("no CUDA GPU on this machine")
    return cuda


@functools.cache
def context(device_index: int = 0) -> Any:
    """Make the device's primary context current (the one torch and cupy use), once per process."""
    cuda = driver()
    if device_index >= cuda.Device.count():
        raise AutotuneError(f"GPU {device_index} does not exist ({cuda.Device.count()} found)")
    ctx = cuda.Device(device_index).retain_primary_context()
    ctx.push()
    # PyCUDA aborts the interpreter at exit if a context is still on its stack.
    atexit.register(ctx.pop)
    return ctx


def _smi_entry(pci_bus_id: str) -> LocalGpu | None:
    # nvidia-smi writes 8 hex digits of PCI domain, the driver API 4: compare the common tail.
    for entry in local_gpus():
        if entry.pci_bus_id.lower()[-12:] == pci_bus_id.lower()[-12:]:
            return entry
    return None


def device_info(device_index: int = 0) -> GpuInfo:
    cuda = driver()
    context(device_index)
    dev = cuda.Device(device_index)
    attr = cuda.device_attribute
    major, minor = dev.compute_capability()
    smi = _smi_entry(dev.pci_bus_id())
    version = cuda.get_driver_version()
    return GpuInfo(
        name=dev.name(),
        uuid=smi.uuid if smi else f"pci:{dev.pci_bus_id()}",
        compute_capability=f"{major}.{minor}",
        sm_count=dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
        l2_bytes=dev.get_attribute(attr.L2_CACHE_SIZE),
        memory_bytes=dev.total_memory(),
        driver=smi.driver if smi else f"cuda-{version // 1000}.{version % 1000 // 10}",
        cuda=cuda_release(),
    )


def has_programmatic_launch(gpu: GpuInfo) -> bool:
    """Whether `gpu` has programmatic dependent launch (the launch plan's attribute, and
    autotune/measure/pdl.py for the read-floor kernels): sm_90 and up."""
    return int(gpu.compute_capability.split(".")[0]) >= 9


def programmatic_launch(op: Op, gpu: GpuInfo, problem: Problem) -> bool:
    """Whether the kernels of `op` serving `problem` run on `gpu` with programmatic dependent launch:
    they wait for the kernel before them, and the GPU has PDL."""
    return op.waits_for_prior_grid(problem) and has_programmatic_launch(gpu)


class Kernels:
    """Loaded cubins and their functions, each loaded once per process."""

    def __init__(self) -> None:
        self._modules: dict[Path, Any] = {}
        self._functions: dict[tuple[Path, str, bool], Any] = {}

    def function(self, cubin: Path, name: str, arg_types: str, *, programmatic: bool = False) -> Any:
        """A PyCUDA Function, prepared; with `programmatic`, a pdl.ProgrammaticFunction (same calls).
        The worker's own kernels: random fill, reference, comparison, the timer's spin and the read
        floor's (programmatic, as GEMVs launch). Candidates load and launch through the launch path's
        plan instead (worker/runner.py)."""
        key = (cubin, name, programmatic)
        if key not in self._functions:
            cuda = driver()
            if programmatic:
                from autotune.measure.pdl import ProgrammaticFunction

                self._functions[key] = ProgrammaticFunction(cubin.read_bytes(), name, arg_types)
            else:
                if cubin not in self._modules:
                    self._modules[cubin] = cuda.module_from_buffer(cubin.read_bytes())
                function = self._modules[cubin].get_function(name)
                function.prepare(arg_types)
                self._functions[key] = function
        return self._functions[key]
