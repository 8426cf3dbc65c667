"""What the GPU tests of a kernel family need to launch its instances straight through PyCUDA (not the
launch path: these tests check the kernels themselves, on hand-made operands). PyCUDA's driver is
passed in, so importing this needs no GPU."""

from __future__ import annotations

from typing import Any


def opt_in_shared(cuda: Any, function: Any, shared_bytes: int) -> None:
    """Let `function` launch with `shared_bytes` of dynamic shared memory (needed once static and dynamic
    together pass 48 KiB)."""
    function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)


class Scratch:
    """A split-K workspace (floats) and arrival counters, zeroed when they grow: split-K kernels leave
    both zeroed after every launch."""

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        self._owned: dict[str, tuple[Any, int]] = {}

    def _grown(self, name: str, count: int) -> Any:
        owner, have = self._owned.get(name, (None, 0))
        if count > have:
            owner = self._cuda.mem_alloc(count * 4)
            self._cuda.memset_d32(owner, 0, count)
            self._owned[name] = (owner, count)
        return owner or 0

    def get(self, floats: int, counters: int) -> tuple[Any, Any]:
        """(workspace, counters) with room for at least this many; 0 (a null pointer) for none yet."""
        return self._grown("workspace", floats), self._grown("counters", counters)


class ClusterFunction:
    """A kernel of a cubin launched in thread-block clusters given at launch (Launch.cluster_dims), which
    PyCUDA's launches cannot give: loaded and launched through the driver binding, with PyCUDA's
    prepare() argument notation, on the legacy default stream of the current context."""

    def __init__(
        self, cubin: bytes, name: str, arg_types: str, shared_bytes: int, cluster_dims: tuple[int, int, int]
    ) -> None:
        from autotune.gpu import driver

        self._function = driver.load_function(cubin, name)
        if shared_bytes:
            driver.allow_shared(self._function, shared_bytes)
        self._arg_types = arg_types
        self._cluster_dims = cluster_dims

    def prepared_call(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], *args: Any, shared_size: int
    ) -> None:
        import ctypes

        from autotune.gpu import driver
        from autotune.measure.pdl import argument_values

        values = argument_values(self._arg_types, args)
        params = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values))
        attribute = driver.cluster_attribute(*self._cluster_dims)
        config = driver.LaunchConfig(*grid, *block, shared_size, None, ctypes.pointer(attribute), 1)
        function = ctypes.c_void_p(self._function)
        driver.check(driver.lib().cuLaunchKernelEx(ctypes.byref(config), function, params, None), "cuLaunchKernelEx")
