"""The tuning worker's runner on inputs of different dtypes (an int4 weight, float16 scales, uint8
zeros), against doubles of PyCUDA and the kernel cache (no GPU): each input gets its own bytes and
its own fill, the float64 reference sees each input as its dtype says, the output stays in the
problem's dtype, and a problem of one dtype is measured exactly as before."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune import ops
from autotune.build.compiler import CompileJob, compile_fixed
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem, input_bytes
from autotune.measure.worker import runner as runner_module
from autotune.measure.worker.fill import BYTE_FILL_FILE, RandomFill
from autotune.measure.worker.runner import Runner
from autotune.ops.base import DeviceReference
from tests.mixed_op import Mixed, inputs_of
from tests.nvcc import wait_for_background
from tests.test_runtime import H200

SUPPORT = Path("support.cubin")
M, N, K = 4, 64, 256
PROBLEM = Problem("mixed", "float16", M, N, K, inputs=inputs_of("float16"))
# x, qweight (two int4 codes a byte), scales, zeros: one of each per group of 32 along K
INPUT_BYTES = [M * K * 2, N * K // 2, N * K // 32 * 2, N * K // 32]


@dataclass
class FakePycuda:
    """The PyCUDA driver calls the runner makes: allocations remembered by address, device-to-host
    copies answered with zeros (no failures, no error)."""

    sizes: dict[int, int] = field(default_factory=dict)
    memsets: list[tuple[int, int, int]] = field(default_factory=list)
    copied_back: list[tuple[int, Any, int]] = field(default_factory=list)  # (address, dtype, count)
    next_address: int = 1 << 20

    class Context:
        @staticmethod
        def synchronize() -> None:
            pass

    def mem_alloc(self, size: int) -> int:
        address, self.next_address = self.next_address, self.next_address + (size + 255) // 256 * 256
        self.sizes[address] = size
        return address

    def memset_d8(self, buffer: int, value: int, count: int) -> None:
        self.memsets.append((int(buffer), value, count))

    def memset_d32(self, buffer: int, value: int, count: int) -> None:
        self.memsets.append((int(buffer), value, 4 * count))

    def memcpy_dtoh(self, dest: np.ndarray, source: int) -> None:
        dest[...] = 0
        self.copied_back.append((int(source), dest.dtype, dest.size))

    def memcpy_htod(self, dest: int, source: np.ndarray) -> None:
        pass

    def memcpy_dtod(self, dest: int, source: int, nbytes: int) -> None:
        pass


@dataclass
class Launched:
    cubin: str
    kernel: str
    args: tuple[Any, ...]


class FakeKernels:
    """Kernels: every launch of every function recorded, in order."""

    def __init__(self) -> None:
        self.launches: list[Launched] = []

    def function(self, cubin: Path, name: str, arg_types: str, *, programmatic: bool = False) -> Any:
        kernels = self

        class Function:
            def prepared_async_call(self, grid: Any, block: Any, stream: Any, *args: Any) -> None:
                kernels.launches.append(Launched(cubin.name, name, args))

        return Function()

    def fills(self) -> list[Launched]:
        return [launch for launch in self.launches if launch.kernel.startswith("at_fill")]


@pytest.fixture
def pycuda(monkeypatch: pytest.MonkeyPatch) -> FakePycuda:
    fake = FakePycuda()
    monkeypatch.setattr(runner_module, "driver", lambda: fake)
    return fake


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernels/ files the runner compiles (each 'compiles' to a cubin named after it)."""
    files: list[str] = []

    def fixed(file_name: str, arch: str) -> Path:
        files.append(file_name)
        return Path(f"{Path(file_name).stem}.cubin")

    monkeypatch.setattr(runner_module, "_fixed_kernels", fixed)
    return files


@pytest.fixture
def mixed() -> Iterator[Mixed]:
    op = Mixed()
    ops.register(op)
    yield op
    ops.unregister(op.name)


def test_input_bytes_round_a_half_filled_int4_byte_up() -> None:
    assert [input_bytes(3, dtype) for dtype in ("int4", "uint8", "float16", "float32")] == [2, 3, 6, 12]


def test_each_input_gets_the_bytes_and_the_fill_of_its_own_dtype(
    pycuda: FakePycuda, compiled: list[str], mixed: Mixed
) -> None:
    kernels = FakeKernels()
    runner = Runner(kernels, None, SUPPORT, PROBLEM, H200, seed=7)  # type: ignore[arg-type]
    assert runner.copies > 1
    for copy in runner._inputs:
        assert [pycuda.sizes[int(buffer)] for buffer in copy] == INPUT_BYTES
    assert compiled == ["measure/fill_bytes.cu"]  # once, however many byte inputs and copies
    first = kernels.fills()[:4]
    assert [(f.cubin, f.kernel) for f in first] == [
        ("support.cubin", "at_fill_float16"),
        ("fill_bytes.cubin", "at_fill_bytes"),
        ("support.cubin", "at_fill_float16"),
        ("fill_bytes.cubin", "at_fill_bytes"),
    ]
    # Floats count elements, the byte fill bytes; every fill of the run takes a seed of its own.
    assert [f.args[1] for f in first] == [M * K, N * K // 2, N * K // 32, N * K // 32]
    seeds = [f.args[2] for f in kernels.fills()]
    assert seeds == list(range(8, 8 + 4 * runner.copies))


def test_a_device_reference_of_its_own_file_gets_its_own_sizes_and_the_output_stays_float16(
    pycuda: FakePycuda, compiled: list[str], mixed: Mixed
) -> None:
    mixed.reference = DeviceReference("mixed_reference", "PPPPPPii", (N, 1, 1), (256, 1, 1), "mixed/ref.cu", 2)
    kernels = FakeKernels()
    runner = Runner(kernels, None, SUPPORT, PROBLEM, H200, seed=7)  # type: ignore[arg-type]
    kernels.launches.clear()
    assert runner.verify(lambda copy, alpha, beta: None) == (None, 0.0)
    (reference,) = [launch for launch in kernels.launches if launch.kernel == "mixed_reference"]
    assert reference.cubin == "ref.cubin" and "mixed/ref.cu" in compiled
    assert reference.args == (*runner._inputs[0], runner._ref, runner._absref, M, N)  # sizes[:2]
    # The output is poisoned, refilled and compared as float16: 2 bytes an element.
    assert (int(runner._out), 0xFF, M * N * 2) in pycuda.memsets
    assert [(f.kernel, f.args[1]) for f in kernels.fills()][-1] == ("at_fill_float16", M * N)
    assert {launch.kernel for launch in kernels.launches if "compare" in launch.kernel} == {"at_compare_float16"}


def test_the_host_reference_gets_floats_decoded_and_packed_integers_as_raw_bytes(
    pycuda: FakePycuda, compiled: list[str], mixed: Mixed
) -> None:
    runner = Runner(FakeKernels(), None, SUPPORT, PROBLEM, H200, seed=7)  # type: ignore[arg-type]
    runner.verify(lambda copy, alpha, beta: None)
    got = [(array.dtype, array.size) for array in mixed.host_inputs]
    assert got == [(np.float64, M * K), (np.uint8, N * K // 2), (np.float64, N * K // 32), (np.uint8, N * K // 32)]
    copied = [(address, dtype) for address, dtype, _ in pycuda.copied_back[:4]]
    assert copied == list(zip(map(int, runner._inputs[0]), [np.float16, np.uint8, np.float16, np.uint8], strict=True))


def test_a_problem_of_one_dtype_fills_as_before(pycuda: FakePycuda, compiled: list[str]) -> None:
    kernels = FakeKernels()
    runner = Runner(kernels, None, SUPPORT, Problem("gemv", "bfloat16", 256, 512), H200, seed=3)  # type: ignore[arg-type]
    fills = kernels.fills()
    assert {(f.cubin, f.kernel) for f in fills} == {("support.cubin", "at_fill_bfloat16")}
    assert [f.args[1:] for f in fills] == [(n, 4 + i) for i, n in enumerate([256 * 512, 512] * runner.copies)]
    assert [pycuda.sizes[int(b)] for b in runner._inputs[0]] == [256 * 512 * 2, 512 * 2]
    assert compiled == []  # no byte fill to compile


def test_an_input_dtype_without_a_fill_is_a_one_line_error() -> None:
    fill = RandomFill(FakeKernels(), SUPPORT, lambda: Path("fill_bytes.cubin"), 132, 0)  # type: ignore[arg-type]
    with pytest.raises(AutotuneError, match=r"^the tuner cannot fill fp8e5m2 inputs with random data \(it fills "):
        fill(1 << 20, 64, "fp8e5m2")
    assert fill.seed == 0


def test_float8_e4m3_codes_get_the_fill_without_nans_and_integers_the_plain_bytes() -> None:
    kernels = FakeKernels()
    fill = RandomFill(kernels, SUPPORT, lambda: Path("fill_bytes.cubin"), 132, 0)  # type: ignore[arg-type]
    fill(1 << 20, 64, "fp8e4m3")
    fill(1 << 21, 64, "int8")
    assert [(f.cubin, f.kernel, f.args[1]) for f in kernels.fills()] == [
        ("fill_bytes.cubin", "at_fill_fp8e4m3", 64),
        ("fill_bytes.cubin", "at_fill_bytes", 64),
    ]


def _byte_fill_job() -> list[CompileJob]:
    """The job compile_fixed() builds for the byte fill."""
    stem = Path(BYTE_FILL_FILE).stem
    return [CompileJob(stem, (kernels_dir() / BYTE_FILL_FILE).read_text(), "sm_90", stem)]


@pytest.mark.nvcc(jobs=_byte_fill_job)
def test_the_byte_fill_kernel_compiles() -> None:
    wait_for_background()
    assert b"at_fill_bytes" in compile_fixed(BYTE_FILL_FILE, "sm_90", "the byte fill").read_bytes()
