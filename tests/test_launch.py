"""gemv()'s operand checks on the CPU: array descriptions from __cuda_array_interface__ and the
one-line errors for shapes, layouts and dtypes it cannot run (no GPU needed)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autotune.errors import AutotuneError
from autotune.launch import check_gemv_operands, describe


class CudaArray:
    """Any library's GPU array, as far as the CUDA array interface tells (cupy, numba, ...)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        typestr: str = "<f2",
        strides: tuple[int, ...] | None = None,
        pointer: int = 1 << 20,
    ) -> None:
        self.__cuda_array_interface__: dict[str, Any] = {
            "shape": shape,
            "typestr": typestr,
            "data": (pointer, False),
            "strides": strides,
            "version": 3,
        }


def _operands(a: CudaArray, x: CudaArray, out: CudaArray | None = None) -> tuple[int, int]:
    return check_gemv_operands(describe(a, "A"), describe(x, "x"), describe(out, "out") if out else None)


def test_interface_arrays_are_described_in_elements() -> None:
    a = describe(CudaArray((4, 6), "<f4", strides=(24, 4), pointer=4096), "A")
    assert (a.pointer, a.shape, a.strides, a.dtype, a.kind) == (4096, (4, 6), (6, 1), "float32", "cai")
    assert describe(CudaArray((6,)), "x").strides is None  # C-contiguous
    assert _operands(CudaArray((4, 6)), CudaArray((6,)), CudaArray((4,))) == (4, 6)
    assert _operands(CudaArray((4, 6)), CudaArray((6, 1))) == (4, 6)


@pytest.mark.parametrize(
    ("a", "x", "out", "words"),
    [
        (CudaArray((4, 6)), CudaArray((5,)), None, "length 6"),
        (CudaArray((24,)), CudaArray((6,)), None, "2-D"),
        (CudaArray((4, 6), strides=(2, 8)), CudaArray((6,)), None, "row-major"),  # a transposed view
        (CudaArray((4, 6), strides=(24, 2)), CudaArray((6,)), None, "row-major"),  # every other column
        (CudaArray((4, 6)), CudaArray((6,), strides=(4,)), None, "contiguous vector"),
        (CudaArray((4, 6)), CudaArray((6,), "<f4"), None, "share a dtype"),
        (CudaArray((4, 6)), CudaArray((6,)), CudaArray((5,)), "length 4"),
        (CudaArray((4, 6)), CudaArray((6,)), CudaArray((4,), "<f4"), "dtype"),
        (CudaArray((0, 6)), CudaArray((6,)), None, "empty"),
    ],
)
def test_bad_operands_are_one_line_errors(a: CudaArray, x: CudaArray, out: CudaArray | None, words: str) -> None:
    with pytest.raises(AutotuneError, match=words) as error:
        _operands(a, x, out)
    assert "\n" not in str(error.value)


def test_unsupported_arrays_are_named() -> None:
    with pytest.raises(AutotuneError, match="GPU array"):
        describe([1.0, 2.0], "A")
    with pytest.raises(AutotuneError, match="float32 or float16"):
        describe(CudaArray((3,), "<i4"), "x")


def test_gemv_refuses_beta_without_out() -> None:
    import autotune

    with pytest.raises(AutotuneError, match="out="):
        autotune.gemv(CudaArray((4, 6)), CudaArray((6,)), beta=0.5)


def test_tensor_map_slots_write_each_pair_of_arrays_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """TMA kernels' maps hold the arrays' addresses: a pair seen before reuses its slot (no copy to
    the device), a new pair is written, and past SLOTS pairs the least recently used slot is reused."""
    from autotune import gpu, tma

    writes: list[tuple[int, bytes]] = []

    class FakeDriver:
        def mem_alloc(self, size: int) -> int:
            return 1 << 30

        def memcpy_htod(self, address: int, data: Any) -> None:
            writes.append((address, bytes(data)))

    monkeypatch.setattr(gpu, "driver", lambda: FakeDriver())
    monkeypatch.setattr(tma, "encode_operands", lambda maps, dtype, m, n, k, a, b: a.to_bytes(128, "little") * 2)
    monkeypatch.setattr(gpu.TensorMapSlots, "SLOTS", 2)
    maps = tma.OperandMaps(tma.Box(128, 64, 128), tma.Box(64, 64, 128))
    slots = gpu.TensorMapSlots()
    first = slots.get(maps, "float16", (256, 256, 256), 4096, 8192)
    second = slots.get(maps, "float16", (256, 256, 256), 12288, 8192)
    assert second == first + maps.nbytes and len(writes) == 2
    assert slots.get(maps, "float16", (256, 256, 256), 4096, 8192) == first and len(writes) == 2
    # A third pair takes the least recently used slot (the second's), and is written there.
    assert slots.get(maps, "float16", (256, 256, 256), 16384, 8192) == second
    assert writes[-1] == (second, (16384).to_bytes(128, "little") * 2)
    # The same arrays at other sizes are other maps.
    assert slots.get(maps, "float16", (128, 256, 256), 4096, 8192) == first and len(writes) == 4


def test_scratch_passes_tma_kernels_their_maps_in_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import gpu, tma
    from autotune.ops.geometry import Launch

    class FakeDriver:
        def mem_alloc(self, size: int) -> int:
            return 1 << 30

        def memset_d32(self, buffer: int, value: int, count: int) -> None:
            pass

        def memcpy_htod(self, address: int, data: Any) -> None:
            pass

    monkeypatch.setattr(gpu, "driver", lambda: FakeDriver())
    monkeypatch.setattr(tma, "encode_operands", lambda *args: bytes(256))
    maps = tma.OperandMaps(tma.Box(128, 64, 128), tma.Box(64, 64, 128))
    plain = Launch(grid=(1, 1, 1), block=(128, 1, 1), shared_bytes=0, workspace_floats=0, counters=0)
    scratch = gpu.Scratch()
    assert scratch.for_launch(plain, "float16", (64, 64, 64), 4096, 8192) == (0, 0)
    slot = scratch.for_launch(replace(plain, operand_maps=maps), "float16", (64, 64, 64), 4096, 8192)
    assert slot == (1 << 30, 0)


def test_unaligned_arrays_run_the_fitted_scalar_config_fitted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A view that is not 16-byte aligned runs the tuned tiling with scalar loads (its prefetch, which
    needs 16-byte loads, dropped), and the fit is worked out once per config, not on every call."""
    from autotune import launch
    from autotune.fingerprint import GpuInfo
    from autotune.ops import gemv
    from autotune.problem import Problem
    from autotune.select import Choice

    launched: list[tuple[str, tuple[int, ...]]] = []

    class FakeFunction:
        def __init__(self, name: str) -> None:
            self.name = name

        def prepared_async_call(self, grid: tuple[int, ...], block: tuple[int, ...], *args: Any, **kw: Any) -> None:
            launched.append((self.name, grid))

    class FakeScratch:
        def for_launch(self, *args: Any) -> tuple[int, int]:
            return 0, 0

    fits: list[dict[str, int]] = []
    real_scalar_loads = launch.scalar_loads

    def counting_scalar_loads(problem: Problem, config: dict[str, int]) -> Any:
        fits.append(config)
        return real_scalar_loads(problem, config)

    h200 = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 60 << 20, 141 << 30, "580", "13.0")
    monkeypatch.setattr(launch, "context", lambda: None)
    monkeypatch.setattr(launch, "device_info", lambda: h200)
    monkeypatch.setattr(launch, "Kernels", lambda: None)
    monkeypatch.setattr(launch, "Scratch", FakeScratch)
    monkeypatch.setattr(launch, "scalar_loads", counting_scalar_loads)
    monkeypatch.setattr(
        launch.Launcher, "_load", lambda self, op, problem, config: FakeFunction(op.kernel_name(problem, config))
    )
    launcher = launch.Launcher()

    problem = Problem("gemv", "float16", 1024, 1024)
    tuned = {**gemv.DEFAULT_CONFIG, "block": 512, "lanes": 128, "vec": 8, "unroll": 4, "rows": 2, "prefetch": 1}
    choice = Choice(problem, h200.name, tuned, "measured")
    a = describe(CudaArray((1024, 1024), pointer=(1 << 20) + 2), "A")
    x, y = describe(CudaArray((1024,), pointer=1 << 22), "x"), describe(CudaArray((1024,), pointer=1 << 23), "y")
    for _ in range(3):
        launcher.gemv(choice, a, x, y, 1.0, 0.0)
    launcher.gemv(choice, replace(a, pointer=1 << 21), x, y, 1.0, 0.0)  # aligned: the tuned kernel
    scalar_name = gemv.kernel_name(problem, {**tuned, "vec": 1, "prefetch": 0})
    assert [name for name, _ in launched] == [scalar_name] * 3 + [gemv.kernel_name(problem, tuned)]
    assert len(fits) == 1
