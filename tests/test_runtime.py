"""The launch path against a double of the CUDA driver (no GPU): packed arguments, streams, scratch
per stream, graph capture (nothing allocated or copied while a stream captures), contexts, threads."""

from __future__ import annotations

import contextlib
import ctypes
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune.build.compiler import CompileJob, job_key
from autotune.build.shipped import Kernel
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.gpu import device as device_module
from autotune.gpu import driver
from autotune.ops import gemv
from autotune.ops.gemm import wgmma as gemm_wgmma
from autotune.runtime import launcher as launcher_module
from autotune.runtime.launcher import Runtime
from autotune.runtime.misses import COUNT_ENV, Misses, OnMiss
from autotune.select.choose import Choice

H200 = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 60 << 20, 141 << 30, "580.159.04", "13.0")
SPLIT_K = {**gemv.DEFAULT_CONFIG, "block": 64, "lanes": 64, "vec": 8, "split": 16, "persist": 4, "policy": 1}


@dataclass
class Launched:
    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    stream: int
    programmatic: bool
    args: list[Any]


@dataclass
class FakeCuda:
    """What the launch path asks of the driver, recorded; `capturing` maps a stream to its capture id."""

    capturing: dict[int, int] = field(default_factory=dict)
    current: int = 1000
    events: list[tuple[str, Any]] = field(default_factory=list)
    launches: list[Launched] = field(default_factory=list)
    arg_types: str = "PPPiiiffPP"
    next_address: int = 1 << 32
    owners: dict[int, int] = field(default_factory=dict)  # function -> the context it was loaded into
    pinned: list[Any] = field(default_factory=list)
    loaded: list[CompileJob] = field(default_factory=list)  # every job whose kernel was asked for

    def __getitem__(self, name: str) -> Any:
        return {"cuLaunchKernelEx": self.launch, "cuCtxGetCurrent": self.get_current}[name]

    def get_current(self, ref: Any) -> int:
        ref._obj.value = self.current
        return 0

    def launch(self, config_ref: Any, function: Any, params: Any, extra: Any) -> int:
        if self.owners.get(function.value) != self.current:
            return 201  # CUDA_ERROR_INVALID_CONTEXT: the function belongs to another context
        config = config_ref._obj
        kinds = {"P": ctypes.c_uint64, "i": ctypes.c_int32, "f": ctypes.c_float}
        args = [kinds[k].from_address(params[i]).value for i, k in enumerate(self.arg_types)]
        self.launches.append(
            Launched(
                function.value,
                (config.grid_x, config.grid_y, config.grid_z),
                (config.block_x, config.block_y, config.block_z),
                config.stream or 0,
                config.num_attrs == 1,
                args,
            )
        )
        self.events.append(("launch", config.stream or 0))
        return 0

    def mem_alloc(self, nbytes: int) -> int:
        self.events.append(("alloc", (nbytes, self._while_capturing())))
        self.next_address += 1 << 20
        return self.next_address

    def _while_capturing(self) -> bool:
        return any(self.capturing.values())


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeCuda:
    fake = FakeCuda()

    @contextlib.contextmanager
    def in_context(context: int) -> Iterator[None]:
        fake.events.append(("push", context))
        before, fake.current = fake.current, context
        try:
            yield
        finally:
            fake.current = before

    def load_function(cubin: bytes, name: str) -> int:
        function = (hash(name) & 0xFFFFFF) + fake.current  # one handle per context, as the driver's
        fake.owners[function] = fake.current
        return function

    monkeypatch.setattr(driver, "lib", lambda: fake)
    monkeypatch.setattr(driver, "device_count", lambda: 2)
    monkeypatch.setattr(driver, "primary_context", lambda index: 1000 + index)
    monkeypatch.setattr(driver, "in_context", in_context)

    def adopt_context(context: int) -> None:
        fake.events.append(("adopt", context))
        fake.current = context

    monkeypatch.setattr(driver, "adopt_context", adopt_context)
    monkeypatch.setattr(driver, "relaxed_capture", contextlib.nullcontext)
    monkeypatch.setattr(driver, "capture_id", lambda stream: fake.capturing.get(stream, 0))
    monkeypatch.setattr(driver, "mem_alloc", fake.mem_alloc)
    monkeypatch.setattr(
        driver, "memset_d32_async", lambda p, v, n, s: fake.events.append(("memset", (s, fake._while_capturing())))
    )
    monkeypatch.setattr(
        driver,
        "memcpy_htod_async",
        lambda p, source, n, s: fake.events.append(("copy", (source, s, fake._while_capturing()))),
    )
    pinned: list[Any] = []

    def mem_host_alloc(nbytes: int) -> int:
        pinned.append(ctypes.create_string_buffer(nbytes))  # host memory the test can write
        return ctypes.addressof(pinned[-1])

    monkeypatch.setattr(driver, "mem_host_alloc", mem_host_alloc)
    fake.pinned = pinned
    monkeypatch.setattr(driver, "load_function", load_function)
    monkeypatch.setattr(driver, "allow_shared", lambda function, size: None)
    monkeypatch.setattr(driver, "stream_synchronize", lambda stream: fake.events.append(("sync", stream)))
    monkeypatch.setattr(device_module, "gpu_info", lambda index: H200)

    def find_kernel(job: CompileJob) -> Kernel:
        fake.loaded.append(job)
        return Kernel(b"\x7fELF", job_key(job), "compiled")

    monkeypatch.setattr(launcher_module, "find_kernel", find_kernel)
    return fake


def _runtime(choice: Choice) -> Runtime:
    return Runtime(lambda problem, device, db: choice)


def test_a_plan_packs_the_kernels_arguments_and_launches_with_pdl(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float16", 4096, 8192)
    config = {**gemv.DEFAULT_CONFIG, "block": 128, "lanes": 128, "vec": 8, "unroll": 8, "rows": 2, "policy": 1}
    runtime = _runtime(Choice(problem, H200.name, config, "measured"))
    device = runtime.device(0)
    choice = Choice(problem, H200.name, config, "measured")
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 0.5, 2.0, stream=77)
    runtime.run(choice, device, (4 << 20, 5 << 20, 6 << 20), 1.0, 0.0, stream=78)
    first, second = cuda.launches
    assert first.args == [1 << 20, 2 << 20, 3 << 20, 4096, 8192, 8192, 0.5, 2.0, 0, 0]  # M, N, lda
    assert second.args == [4 << 20, 5 << 20, 6 << 20, 4096, 8192, 8192, 1.0, 0.0, 0, 0]
    geom = gemv.OP.launch(problem, config, H200.sm_count)
    assert first.grid == geom.grid and first.block == geom.block
    assert (first.stream, second.stream) == (77, 78)
    assert first.programmatic and first.function == second.function
    assert not [e for e in cuda.events if e[0] == "alloc"]  # no scratch for a config without split


def test_the_transposed_gemv_passes_x_first_and_its_one_row_sizes(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float32", 300, 500, trans=True)
    from autotune.ops.gemv import transposed as gemv_t

    config = gemv_t.TRANSPOSED.default_config(problem)
    cuda.arg_types = "PPPiiiffPP"  # a one-row GEMM's arguments
    runtime = _runtime(Choice(problem, H200.name, config, "default"))
    # The call's order (A, x, y); the kernel's (x, A, y)
    runtime.run(Choice(problem, H200.name, config, "default"), runtime.device(0), (16, 32, 48), 1.0, 0.0)
    assert cuda.launches[0].args[:6] == [32, 16, 48, 1, 500, 300]


def test_split_k_scratch_belongs_to_one_stream(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float16", 256, 131072)
    assert gemv.OP.space(problem).check(SPLIT_K) is None
    choice = Choice(problem, H200.name, SPLIT_K, "measured")
    runtime = _runtime(choice)
    device = runtime.device(0)
    pointers = (1 << 20, 2 << 20, 3 << 20)
    for stream in (5, 6, 5, 6):
        runtime.run(choice, device, pointers, 1.0, 0.0, stream)
    by_stream = {launch.stream: launch.args[-2:] for launch in cuda.launches}
    assert by_stream[5] != by_stream[6] and all(by_stream[5]) and all(by_stream[6])
    # Each stream's buffers were zeroed once, in that stream's order, then reused.
    assert [e for e in cuda.events if e[0] == "memset"] == [("memset", (5, False))] * 2 + [("memset", (6, False))] * 2


def test_a_capture_without_warmup_is_a_clear_error_and_allocates_nothing(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float16", 256, 131072)
    choice = Choice(problem, H200.name, SPLIT_K, "measured")
    runtime = _runtime(choice)
    device = runtime.device(0)
    runtime.plan(choice, device, True)  # loaded before: only scratch is missing
    cuda.capturing[9] = 41
    with pytest.raises(AutotuneError, match="warmup") as error:
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=9)
    assert "\n" not in str(error.value)
    assert not [e for e in cuda.events if e[0] in ("alloc", "memset", "copy")]
    assert not cuda.launches


def test_a_capture_after_warmup_takes_the_scratch_set_aside_and_allocates_nothing(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float16", 256, 131072)
    choice = Choice(problem, H200.name, SPLIT_K, "measured")
    runtime = _runtime(choice)
    device = runtime.device(0)
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=5)  # eager, stream 5
    runtime.warmup_scratch(choice, device, captures=2)
    before = len(cuda.events)
    cuda.capturing[9] = 41
    for _ in range(2):  # two launches in one capture share its scratch (they are in stream order)
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=9)
    cuda.capturing[9] = 42  # a second graph captured on the same stream gets scratch of its own
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=9)
    during = cuda.events[before:]
    assert [e for e in during if e[0] != "launch"] == []
    eager, first, again, second = (launch.args[-2:] for launch in cuda.launches)
    assert first == again and len({tuple(eager), tuple(first), tuple(second)}) == 3
    cuda.capturing[9] = 43  # both reserved blocks are taken: a third capture needs warmup again
    with pytest.raises(AutotuneError, match="warmup"):
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=9)


def test_a_capture_takes_scratch_from_the_callers_allocator(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float16", 256, 131072)
    choice = Choice(problem, H200.name, SPLIT_K, "measured")
    runtime = _runtime(choice)
    device = runtime.device(0)
    runtime.plan(choice, device, True)
    given: list[int] = []

    def allocate(nbytes: int, index: int) -> tuple[int, Any]:
        given.append(nbytes)
        return (1 << 40) + len(given) * (1 << 20), object()

    cuda.capturing[9] = 7
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=9, allocator=allocate)
    assert len(given) == 2 and not [e for e in cuda.events if e[0] == "alloc"]
    # Zeroed by a memset in the capture's own stream, which the graph replays before the kernel.
    assert ("memset", (9, True)) in cuda.events
    assert cuda.launches[0].args[-2:] == [(1 << 40) + (1 << 20), (1 << 40) + (2 << 20)]


def test_tma_maps_are_written_in_stream_order_and_pinned_by_a_capture(cuda: FakeCuda) -> None:
    problem = Problem("gemm", "float16", 520, 264, 1000)
    config = {**gemm_wgmma.default_config(problem), "tma": 1}
    assert gemm_wgmma.space(problem).check(config) is None
    cuda.arg_types = "PPPiiiiiiffPP"
    choice = Choice(problem, H200.name, config, "default")
    runtime = _runtime(choice)
    monkey_encode = pytest.MonkeyPatch()
    monkey_encode.setattr(device_module.tma, "encode_operands", lambda maps, dtype, sizes, a, b: bytes(256))
    try:
        device = runtime.device(0)
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=5)
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=5)
        copies = [e for e in cuda.events if e[0] == "copy"]
        assert len(copies) == 1 and copies[0][1][1:] == (5, False)  # written once, on the caller's stream
        cuda.capturing[9] = 3
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0, stream=9)
        assert cuda.launches[-1].args[-2] == cuda.launches[0].args[-2]  # the maps written before
        # Arrays never seen before the capture: their maps go to a slot of the capture slab, which
        # the graph fills by a copy from pinned host memory set aside before the capture.
        runtime.run(choice, device, (7 << 20, 8 << 20, 9 << 20), 1.0, 0.0, stream=9)
        captured_copies = [e for e in cuda.events if e[0] == "copy" and e[1][-1] is True]
        assert captured_copies == [("copy", (ctypes.addressof(cuda.pinned[0]), 9, True))]
        cuda.capturing.clear()
        # The pinned slot is no longer stream 5's: new arrays there get another slot.
        runtime.run(choice, device, (7 << 20, 8 << 20, 9 << 20), 1.0, 0.0, stream=5)
        assert cuda.launches[-1].args[-2] not in (cuda.launches[0].args[-2], cuda.launches[-2].args[-2])
        assert not [e for e in cuda.events if e[0] == "alloc" and e[1][-1] is True]
    finally:
        monkey_encode.undo()


def _gemv_planned_on_gpu_1(cuda: FakeCuda) -> tuple[Runtime, Choice, Any]:
    """A GEMV's runtime, choice and GPU 1's device, its plan made and the fake driver's events cleared."""
    choice = Choice(Problem("gemv", "float32", 512, 512), H200.name, gemv.DEFAULT_CONFIG, "default")
    runtime = _runtime(choice)
    device = runtime.device(1)
    runtime.plan(choice, device, True)
    cuda.events.clear()
    return runtime, choice, device


def test_a_launch_from_a_thread_without_the_devices_context_makes_it_current(cuda: FakeCuda) -> None:
    runtime, choice, device = _gemv_planned_on_gpu_1(cuda)
    cuda.current = 1000  # GPU 0's context is current on this thread
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0)
    cuda.current = 1001
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0)
    assert [e for e in cuda.events if e[0] == "push"] == [("push", 1001)]
    assert len(cuda.launches) == 2 and cuda.current == 1001


def test_a_thread_with_no_context_keeps_the_devices_after_a_launch(cuda: FakeCuda) -> None:
    # torch's autograd threads have no context until torch's first call there: a launch that pushed
    # and popped one would leave them without, and torch would set it again, warning.
    runtime, choice, device = _gemv_planned_on_gpu_1(cuda)
    cuda.current = 0
    for _ in range(2):
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 1.0, 0.0)
    assert [e for e in cuda.events if e[0] in ("push", "adopt")] == [("adopt", 1001)]
    assert len(cuda.launches) == 2 and cuda.current == 1001


def test_concurrent_calls_never_mix_their_arguments(cuda: FakeCuda) -> None:
    problem = Problem("gemv", "float16", 1024, 1024)
    choice = Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "default")
    runtime = _runtime(choice)
    device = runtime.device(0)
    errors: list[BaseException] = []

    def caller(thread: int) -> None:
        try:
            for call in range(300):
                base = (thread * 1000 + call + 1) << 8
                runtime.run(choice, device, (base, base + 16, base + 32), float(thread), 0.0, stream=thread)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cuda.launches) == 1200
    for launch in cuda.launches:
        a, x, y = launch.args[:3]
        assert (x - a, y - a) == (16, 32) and launch.args[-4] == float(launch.stream)  # alpha
        assert (a >> 8) // 1000 == launch.stream


def test_unaligned_arrays_run_the_fitted_scalar_config_fitted_once(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view that is not 16-byte aligned runs the tuned tiling with scalar loads (its prefetch, which
    needs 16-byte loads, dropped), and the fit is worked out once per config, not on every call."""
    problem = Problem("gemv", "float16", 1024, 1024)
    tuned = {**gemv.DEFAULT_CONFIG, "block": 512, "lanes": 128, "vec": 8, "unroll": 4, "rows": 2, "prefetch": 1}
    choice = Choice(problem, H200.name, tuned, "measured")
    fits: list[dict[str, int]] = []
    real = launcher_module.scalar_loads

    def counting(problem: Problem, config: dict[str, int]) -> Any:
        fits.append(config)
        return real(problem, config)

    monkeypatch.setattr(launcher_module, "scalar_loads", counting)
    loaded: list[str] = []

    def load_function(cubin: bytes, name: str) -> int:
        loaded.append(name)
        cuda.owners[len(loaded)] = cuda.current
        return len(loaded)

    monkeypatch.setattr(driver, "load_function", load_function)
    runtime = _runtime(choice)
    device = runtime.device(0)
    for _ in range(3):
        runtime.run(choice, device, ((1 << 20) + 2, 1 << 22, 1 << 23), 1.0, 0.0)
    runtime.run(choice, device, (1 << 21, 1 << 22, 1 << 23), 1.0, 0.0)  # aligned: the tuned kernel
    scalar_name = gemv.OP.kernel_name(problem, {**tuned, "vec": 1, "prefetch": 0})
    assert loaded == [scalar_name, gemv.OP.kernel_name(problem, tuned)]
    assert [launch.function for launch in cuda.launches] == [1, 1, 1, 2]
    assert len(fits) == 1


def test_operands_on_two_gpus_are_refused(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_launch import CudaArray

    monkeypatch.setattr(driver, "pointer_device", lambda pointer: 1 if pointer >= 1 << 30 else 0)
    problem = Problem("gemv", "float16", 4, 6)
    runtime = _runtime(Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "default"))
    with pytest.raises(AutotuneError, match="different GPUs"):
        runtime.gemv(CudaArray((4, 6)), CudaArray((6,), pointer=1 << 31), CudaArray((4,)))
    runtime.gemv(
        CudaArray((4, 6), pointer=1 << 31),
        CudaArray((6,), pointer=(1 << 31) + 64),
        CudaArray((4,), pointer=(1 << 31) + 128),
    )
    assert cuda.launches[-1].args[:3] == [1 << 31, (1 << 31) + 64, (1 << 31) + 128]
    assert ("push", 1001) in cuda.events  # loaded into GPU 1's context


class _Dtype:
    def __str__(self) -> str:
        return "torch.float16"


class FakeTensor:
    """As much of a CUDA torch tensor as the launch path reads."""

    dtype = _Dtype()
    is_cuda = True

    def __init__(self, shape: tuple[int, ...], pointer: int, strides: tuple[int, ...] | None = None) -> None:
        self.shape, self._pointer, self._strides = shape, pointer, strides

    def stride(self) -> tuple[int, ...]:
        if self._strides is not None:
            return self._strides
        return (self.shape[1], 1) if len(self.shape) == 2 else (1,)

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return self._pointer


FakeTensor.__module__ = "torch"  # described as a torch tensor


@pytest.mark.parametrize("with_out", [False, True])
def test_the_checked_path_registers_the_key_the_short_path_looks_up(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, with_out: bool
) -> None:
    """A second call of a torch signature takes the short path: no description, no checks."""
    from autotune.runtime import operands

    problem = Problem("gemv", "float16", 64, 128)
    runtime = _runtime(Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "default"))
    runtime._tensor = FakeTensor
    runtime._raw_stream = lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(operands, "empty_like", lambda a, shape, device: FakeTensor(shape, 9 << 20))
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    FakeTensor.new_empty = lambda self, shape: FakeTensor(shape, 9 << 20)  # type: ignore[attr-defined]
    described: list[str] = []
    real_describe = operands.describe
    monkeypatch.setattr(operands, "describe", lambda obj, name: described.append(name) or real_describe(obj, name))
    A, x = FakeTensor((64, 128), 1 << 20), FakeTensor((128,), 2 << 20)
    out = FakeTensor((64,), 3 << 20) if with_out else None
    runtime.gemv(A, x, out)
    assert described
    described.clear()
    for _ in range(3):
        runtime.gemv(A, x, out)
    assert described == [] and len(cuda.launches) == 4


# --- row-strided views: the kernels get A's lda, vector loads only where rows stay 16-byte aligned --


def _wide(problem: Problem) -> dict[str, int]:
    """A tuned-looking config with 16-byte loads (and the bulk prefetch that needs them) where N allows."""
    vec = 16 // (4 if problem.dtype == "float32" else 2)
    wide = {**gemv.DEFAULT_CONFIG, "lanes": 128, "vec": vec, "unroll": 4, "rows": 2, "policy": 1, "prefetch": 1}
    return wide if gemv.OP.space(problem).check(wide) is None else dict(gemv.DEFAULT_CONFIG)


def _scalar(config: dict[str, int]) -> dict[str, int]:
    return {**config, "vec": 1, "prefetch": 0}


def _loads(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernel names loaded, in order; the function handle of the i-th is i + 1."""
    loaded: list[str] = []

    def load_function(cubin: bytes, name: str) -> int:
        loaded.append(name)
        cuda.owners[len(loaded)] = cuda.current
        return len(loaded)

    monkeypatch.setattr(driver, "load_function", load_function)
    return loaded


@pytest.mark.parametrize(
    ("dtype", "n", "lda", "vector"),
    [
        ("float16", 1024, 3072, True),  # a third of a fused qkv weight's columns
        ("float16", 1016, 1024, True),  # A[:, :1016]: rows 2048 bytes apart
        ("float16", 1016, 1020, False),  # 2040 bytes apart: 8-byte aligned rows only
        ("float16", 1016, 1018, False),
        ("bfloat16", 4096, 4104, True),  # 8208 bytes apart
        ("float32", 1020, 1024, True),
        ("float32", 1020, 1022, False),  # 4088 bytes apart
    ],
)
def test_rows_lda_apart_reach_the_kernel_and_keep_vector_loads_only_where_rows_stay_aligned(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, dtype: str, n: int, lda: int, vector: bool
) -> None:
    problem = Problem("gemv", dtype, 64, n)
    config = _wide(problem)
    assert config["vec"] > 1
    choice = Choice(problem, H200.name, config, "measured")
    loaded = _loads(cuda, monkeypatch)
    runtime = _runtime(choice)
    device = runtime.device(0)
    for _ in range(2):  # the plan is built once per (config, aligned, lda)
        runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 0.5, 0.0, leading=(lda,))
    runtime.run(choice, device, (1 << 20, 2 << 20, 3 << 20), 0.5, 0.0)  # contiguous rows: lda = N
    assert [launch.args[3:6] for launch in cuda.launches] == [[64, n, lda], [64, n, lda], [64, n, n]]
    assert cuda.launches[0].args[:3] == [1 << 20, 2 << 20, 3 << 20] and cuda.launches[0].args[6:8] == [0.5, 0.0]
    strided = config if vector else _scalar(config)
    assert loaded == [gemv.OP.kernel_name(problem, strided)] + (
        [] if vector else [gemv.OP.kernel_name(problem, config)]
    )
    assert cuda.launches[0].function == cuda.launches[1].function
    assert (cuda.launches[0].function == cuda.launches[2].function) == vector
    # Unaligned arrays run scalar loads whatever lda is.
    runtime.run(choice, device, ((1 << 20) + 2, 2 << 20, 3 << 20), 0.5, 0.0, leading=(lda,))
    scalar_function = loaded.index(gemv.OP.kernel_name(problem, _scalar(config))) + 1
    assert cuda.launches[-1].function == scalar_function and cuda.launches[-1].args[5] == lda


def test_gemv_runs_sliced_views_in_place_with_their_lda(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """A[:, :1021] and A[:, 1:] of a 1000 x 1024 matrix, the k part of a fused qkv weight and the
    transpose of a slice with trans=True, as __cuda_array_interface__ arrays (strides in bytes):
    the plain GEMV of the view's own shape, on its own memory, with its row stride."""
    from tests.test_launch import CudaArray

    monkeypatch.setattr(driver, "pointer_device", lambda pointer: 0)
    asked: list[Problem] = []

    def choose(problem: Problem, device: Any, db: str | None) -> Choice:
        asked.append(problem)
        return Choice(problem, H200.name, _wide(problem), "measured")

    loaded = _loads(cuda, monkeypatch)
    runtime = Runtime(choose)
    base, x, y = 1 << 20, 1 << 30, (1 << 30) + (1 << 20)
    views = [
        (CudaArray((1000, 1021), strides=(2048, 2), pointer=base), 1021, 1000, 1024, False),
        (CudaArray((1000, 1023), strides=(2048, 2), pointer=base + 2), 1023, 1000, 1024, False),
        (CudaArray((4096, 4096), strides=(3 * 8192, 2), pointer=base + 8192), 4096, 4096, 12288, False),
        (CudaArray((1024, 512), strides=(2, 3 * 2048), pointer=base + 2048), 1024, 512, 3072, True),
    ]
    for a, x_len, y_len, lda, trans in views:
        runtime.gemv(a, CudaArray((x_len,), pointer=x), CudaArray((y_len,), pointer=y), 2.0, trans=trans)
        pointer = a.__cuda_array_interface__["data"][0]
        assert cuda.launches[-1].args == [pointer, x, y, y_len, x_len, lda, 2.0, 0.0, 0, 0]
    assert asked == [
        Problem("gemv", "float16", 1000, 1021),
        Problem("gemv", "float16", 1000, 1023),
        Problem("gemv", "float16", 4096, 4096),
        Problem("gemv", "float16", 512, 1024),  # Wᵀ of the view with trans: the view times x
    ]
    # 1021 and 1023 columns allow scalar loads only (the default config); the qkv part and the slice
    # of the transpose keep the 16-byte loads of the config tuned for their shape (one kernel: names
    # hold no shape).
    assert [_wide(p)["vec"] for p in asked] == [1, 1, 8, 8]
    assert loaded == [
        gemv.OP.kernel_name(asked[0], gemv.DEFAULT_CONFIG),
        gemv.OP.kernel_name(asked[2], _wide(asked[2])),
    ]
    assert [launch.function for launch in cuda.launches] == [1, 1, 2, 2]


def test_the_short_path_keeps_each_strided_signatures_lda_and_plan(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A's strides are part of a torch signature: a view whose rows break 16-byte alignment runs the
    scalar plan on every call, aligned addresses or not, and every call passes its own lda."""
    from autotune.runtime import operands

    problem = Problem("gemv", "float16", 64, 128)
    config = _wide(problem)
    runtime = _runtime(Choice(problem, H200.name, config, "measured"))
    runtime._tensor = FakeTensor
    runtime._raw_stream = lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    loaded = _loads(cuda, monkeypatch)
    described: list[str] = []
    real_describe = operands.describe
    monkeypatch.setattr(operands, "describe", lambda obj, name: described.append(name) or real_describe(obj, name))
    x, out = FakeTensor((128,), 2 << 20), FakeTensor((64,), 3 << 20)
    qkv_part = FakeTensor((64, 128), 1 << 20, strides=(384, 1))  # rows 768 bytes apart
    odd_rows = FakeTensor((64, 128), 1 << 20, strides=(132, 1))  # rows 264 bytes apart
    contiguous = FakeTensor((64, 128), 1 << 20)
    for A in (qkv_part, odd_rows, contiguous):
        for _ in range(3):
            runtime.gemv(A, x, out)
    assert described == ["A", "x", "out"] * 3  # once per signature: later calls take the short path
    assert [launch.args[5] for launch in cuda.launches] == [384] * 3 + [132] * 3 + [128] * 3
    vector, scalar = gemv.OP.kernel_name(problem, config), gemv.OP.kernel_name(problem, _scalar(config))
    assert loaded == [vector, scalar]
    assert [launch.function for launch in cuda.launches] == [1] * 3 + [2] * 3 + [1] * 3


# --- untuned problems the launch path meets (autotune/runtime/misses.py) -----------------------------


def _counting_runtime(
    monkeypatch: pytest.MonkeyPatch,
    choice: Choice,
    written: list[tuple[Any, ...]],
    on_miss: OnMiss | None = None,
    choices: list[Choice] | None = None,
) -> tuple[Runtime, Misses]:
    """A runtime over fake tensors that counts misses into `written`; with `choices`, it selects the
    last of them at each selection and appends its problem to `choices`' caller's view."""
    from autotune.runtime import operands

    misses = Misses(lambda db, gpu, asked: written.append((db, gpu, dict(asked))), every_s=3600, on_miss=on_miss)
    runtime = Runtime(lambda problem, device, db: (choices or [choice])[-1], misses)
    runtime._tensor = FakeTensor
    runtime._raw_stream = lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(operands, "empty_like", lambda a, shape, device: FakeTensor(shape, 9 << 20))
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    FakeTensor.new_empty = lambda self, shape: FakeTensor(shape, 9 << 20)  # type: ignore[attr-defined]
    return runtime, misses


def test_every_call_of_an_untuned_problem_is_counted_and_written_once(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = Problem("gemv", "float16", 64, 128)
    written: list[tuple[Any, ...]] = []
    runtime, misses = _counting_runtime(
        monkeypatch, Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "estimate"), written
    )
    A, x = FakeTensor((64, 128), 1 << 20), FakeTensor((128,), 2 << 20)
    for _ in range(5):  # the first call takes the checked path, the others the short one
        runtime.gemv(A, x, db="x.db")
    assert not written  # nothing on the launch path
    misses.flush()
    [(db, gpu, asked)] = written
    assert (db, gpu, list(asked), asked[problem].count) == ("x.db", H200.name, [problem], 5)
    misses.flush()
    assert len(written) == 1  # nothing new: nothing written
    runtime.gemv(A, x, db="x.db")
    misses.flush()
    assert written[-1][2][problem].count == 1  # only what is new since


def test_a_measured_problem_is_not_counted_and_counting_can_be_turned_off(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = Problem("gemv", "float16", 64, 128)
    A, x = FakeTensor((64, 128), 1 << 20), FakeTensor((128,), 2 << 20)
    written: list[tuple[Any, ...]] = []
    runtime, misses = _counting_runtime(
        monkeypatch, Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "measured"), written
    )
    runtime.gemv(A, x)
    runtime.gemv(A, x)
    misses.flush()
    assert written == []
    monkeypatch.setenv(COUNT_ENV, "0")
    runtime, misses = _counting_runtime(
        monkeypatch, Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "default"), written
    )
    runtime.gemv(A, x)
    misses.flush()
    assert written == []


def test_tuning_on_a_miss_hears_of_each_untuned_signature_and_forget_makes_calls_select_again(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Misses tells its on_miss hook (tuning on a miss) of an untuned problem's signature once, also
    with counting off; after Runtime.forget() (the background sweep stored a measurement) the next
    call selects again and runs the new config, whose measured problem is not heard of."""
    problem = Problem("gemv", "float16", 64, 128)
    monkeypatch.setenv(COUNT_ENV, "0")
    heard: list[tuple[Problem, str | None]] = []
    choices = [Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "estimate")]
    runtime, _ = _counting_runtime(
        monkeypatch, choices[0], [], on_miss=lambda choice, db: heard.append((choice.problem, db)), choices=choices
    )
    A, x = FakeTensor((64, 128), 1 << 20), FakeTensor((128,), 2 << 20)
    for _ in range(3):
        runtime.gemv(A, x, db="x.db")
    assert heard == [(problem, "x.db")] and len(cuda.loaded) == 1
    tuned = {**gemv.DEFAULT_CONFIG, "block": 128, "lanes": 32, "vec": 8}
    choices.append(Choice(problem, H200.name, tuned, "measured"))
    for _ in range(3):
        runtime.gemv(A, x, db="x.db")
    assert len(cuda.loaded) == 1  # the short path still runs the estimate: nothing told it
    runtime.forget()
    for _ in range(3):
        runtime.gemv(A, x, db="x.db")
    assert len(cuda.loaded) == 2 and cuda.loaded[-1].name != cuda.loaded[0].name  # the tuned config's kernel
    assert heard == [(problem, "x.db")]


def test_counts_a_write_failed_on_are_written_with_the_next_flush() -> None:
    problem = Problem("gemv", "float16", 64, 128)
    written: list[int] = []

    def flaky(db: str | None, gpu: str, asked: Any) -> None:
        if not written:
            written.append(0)
            raise AutotuneError("database is locked")
        written.append(asked[problem].count)

    misses = Misses(flaky, every_s=3600)
    tally = misses.tally(Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "default"), None)
    assert tally is not None
    tally.count += 3
    misses.flush()
    tally.count += 2
    misses.flush()
    assert written == [0, 5]


def test_the_api_writes_the_counts_into_the_databases_queue(tmp_path: Path) -> None:
    from autotune import api
    from autotune.store import open_store

    problem = Problem("gemv", "float16", 1000, 999)
    db = str(tmp_path / "asked.db")
    misses = Misses(api._note_asked, every_s=3600)
    tally = misses.tally(Choice(problem, H200.name, gemv.DEFAULT_CONFIG, "estimate"), db)
    assert tally is not None
    tally.count += 7
    misses.flush()
    with open_store(db, import_shipped=False) as store:
        [row] = store.queue_rows(H200.name)
    assert (row.problem, row.asked, row.state) == (problem, 7, "pending")


def test_the_launch_path_loads_a_shipped_kernel_without_nvcc(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The runtime's own look-up (not the double above): a config the H200's records select is
    loaded from db/kernels/, with no nvcc on PATH and no database behind the look-up."""
    from autotune.build import shipped

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: repo / "db")
    monkeypatch.setattr(launcher_module, "find_kernel", shipped.find_kernel)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    images: list[bytes] = []
    load = driver.load_function
    monkeypatch.setattr(driver, "load_function", lambda image, name: images.append(image) or load(image, name))
    kernels = json.loads((repo / "db" / "kernels" / "manifest.json").read_text())["kernels"].values()
    use = next(e["use"] for e in kernels if e["use"]["problem"]["op"] == "gemv" and e["use"]["capability"] == "9.0")
    choice = Choice(Problem(**use["problem"]), H200.name, use["config"], use["source"])
    runtime = _runtime(choice)
    runtime.plan(choice, runtime.device(0), not use["unaligned"])
    assert len(images) == 1 and images[0][:4] == bytes.fromhex("50ed55ba")  # a fatbin, loaded as it is


def test_any_dynamic_shared_memory_opts_the_kernel_in_and_a_larger_launch_again(
    cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kernel's static shared memory (the int4 cluster's partial sums, 32 KiB) counts toward the 48 KiB
    # a block gets without the opt-in, so 44 KiB of dynamic memory must opt in too (a launch error on
    # the H200 before).
    allowed: list[tuple[int, int]] = []
    monkeypatch.setattr(driver, "allow_shared", lambda function, size: allowed.append((function, size)))
    device = _runtime(Choice(Problem("gemv", "float16", 8, 8), H200.name, {}, "measured")).device(0)
    none = device.function(b"\x7fELF", "key", "plain", 0)
    first = device.function(b"\x7fELF", "key", "staged", 45056)
    device.function(b"\x7fELF", "key", "staged", 45056)
    device.function(b"\x7fELF", "key", "staged", 1024)
    device.function(b"\x7fELF", "key", "staged", 90112)
    assert none != first and allowed == [(first, 45056), (first, 90112)]
