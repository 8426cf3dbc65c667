"""Kernel launches with programmatic dependent launch (PDL), through the CUDA driver API by ctypes, for
the worker's read-floor kernels (measure/floor.py; candidates launch through autotune/gpu/plan.py).

Back to back, a kernel normally starts only once the one before it in the stream has finished: each
call pays its launch and the ramp-up of its blocks in full (about 1.3 µs for an empty kernel on the
H200). Launched with the PDL attribute, a kernel's blocks may start as soon as every block of the
kernel before has executed `griddepcontrol.launch_dependents`, and they wait in
`griddepcontrol.wait` until that kernel has finished and its writes are visible. Only kernels that
wait before reading anything may be launched this way (ops modules say so with PROGRAMMATIC_LAUNCH).

PyCUDA has no cuLaunchKernelEx, and its Function does not expose the CUfunction handle, so a
programmatic read-floor kernel is loaded here, from its cubin into the current context, through the
one driver binding (autotune/gpu/driver.py). ProgrammaticFunction offers the one method of PyCUDA's
Function that measure/floor.py calls, prepared_async_call.
"""

from __future__ import annotations

import ctypes
from typing import Any

from autotune.gpu import driver
from autotune.gpu.driver import LaunchConfig, programmatic_attribute

_CTYPES: dict[str, Any] = {
    "P": ctypes.c_uint64,
    "Q": ctypes.c_uint64,
    "i": ctypes.c_int32,
    "I": ctypes.c_uint32,
    "f": ctypes.c_float,
    "d": ctypes.c_double,
}


def argument_values(arg_types: str, args: tuple[Any, ...]) -> list[Any]:
    """ctypes values of a launch's arguments, typed as in PyCUDA's prepare() notation."""
    if len(args) != len(arg_types):
        raise TypeError(f"the kernel takes {len(arg_types)} arguments ({arg_types}), got {len(args)}")
    values: list[Any] = []
    for kind, arg in zip(arg_types, args, strict=True):
        # int() of a PyCUDA DeviceAllocation is its device address.
        values.append(_CTYPES[kind](float(arg) if kind in "fd" else int(arg)))
    return values


def _check(result: int, what: str) -> None:
    if result == 0:
        return
    import pycuda.driver

    # PyCUDA's own error class, so that callers handle these like any other launch failure.
    raise pycuda.driver.LaunchError(f"{what} failed: {driver.error_name(result)}")


class ProgrammaticFunction:
    """A kernel of a cubin, launched with the PDL attribute on the legacy default stream or `stream`."""

    def __init__(self, cubin: bytes, name: str, arg_types: str) -> None:
        lib = driver.lib()
        self._module = ctypes.c_void_p()  # never unloaded: kernels stay loaded for the process's life
        _check(lib.cuModuleLoadData(ctypes.byref(self._module), cubin), "cuModuleLoadData")
        self._function = ctypes.c_void_p()
        _check(lib.cuModuleGetFunction(ctypes.byref(self._function), self._module, name.encode()), name)
        self._arg_types = arg_types
        self._attribute = programmatic_attribute()

    def prepared_async_call(
        self, grid: tuple[int, ...], block: tuple[int, ...], stream: Any, *args: Any, shared_size: int = 0
    ) -> None:
        values = argument_values(self._arg_types, args)
        params = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values))
        config = LaunchConfig(
            *grid,
            *block,
            shared_size,
            None if stream is None else int(stream.handle),
            ctypes.pointer(self._attribute),
            1,
        )
        _check(driver.lib().cuLaunchKernelEx(ctypes.byref(config), self._function, params, None), "cuLaunchKernelEx")
