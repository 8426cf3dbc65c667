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
