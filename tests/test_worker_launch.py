"""The tuning worker launches each candidate through the launch path's own plan (autotune/gpu/plan.py),
against a fake driver and a fake PyCUDA (no GPU): the kernel's arguments packed as Runtime.call packs
them, each rotating copy's arrays, alpha and beta of both checks, programmatic launch where the GPU has
it, split-K scratch from the Device, the legacy default stream the timer's events record on; and a
launch the driver refuses is a launch error, not a failed request. tests/test_gpu*.py run the same
path on a GPU."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune import ops
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.gpu import device as device_module
from autotune.gpu import driver
from autotune.gpu.driver import DriverError
from autotune.measure import pycuda_gpu as measure_gpu
from autotune.measure.worker import runner as runner_module
from autotune.measure.worker import server
from autotune.measure.worker.runner import ALPHA, BETA, Runner
from autotune.ops import gemv
from autotune.ops.library import Library
from tests.test_runner_dtypes import SUPPORT, FakeKernels, FakePycuda, compiled, pycuda  # noqa: F401 (fixtures)
from tests.test_runtime import H200, SPLIT_K, FakeCuda, cuda  # noqa: F401 (fixture)

PROBLEM = Problem("gemv", "float16", 256, 131072)


class CallingTimer:
    """The worker's Timer as far as the runner sees it: each sample launches calls 0 .. 2 * copies."""

    def __init__(self, copies: Callable[[], int]) -> None:
        self._copies = copies

    def measure(self, launch: Callable[[int], None], *, readings: list[Any] | None = None) -> list[float]:
        for i in range(2 * self._copies()):
            launch(i)
        return [1.0, 1.0, 1.0]


@pytest.fixture
def worker_device(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:  # noqa: F811
    """A fresh Device a test, made on the fake driver."""
    devices: dict[int, device_module.Device] = {}
    monkeypatch.setattr(
        runner_module, "launch_device", lambda index: devices.setdefault(index, device_module.Device(index))
    )
    return cuda


def test_a_candidate_is_checked_and_timed_through_the_launch_plan(
    worker_device: FakeCuda,
    pycuda: FakePycuda,  # noqa: F811
    compiled: list[str],  # noqa: F811
    tmp_path: Path,
) -> None:
    runner: Runner
    runner = Runner(FakeKernels(), CallingTimer(lambda: runner.copies), SUPPORT, PROBLEM, H200, seed=3)  # type: ignore[arg-type]
    cubin = tmp_path / "candidate.cubin"
    cubin.write_bytes(b"\x7fELF candidate")
    assert gemv.OP.space(PROBLEM).check(SPLIT_K) is None  # a config with split-K scratch

    outcome = runner.measure(cubin, "gemv_candidate", SPLIT_K)

    assert outcome.status == Status.OK, outcome.message
    launches = worker_device.launches
    arrays = [(*(int(b) for b in copy), int(runner._out)) for copy in runner._inputs]
    geom = gemv.OP.launch(PROBLEM, SPLIT_K, H200.sm_count)
    sizes = list(gemv.OP.operands(PROBLEM).sizes)
    # The two checks on copy 0 (beta = 0 into the poisoned output, then alpha and beta both in play),
    # then the timed calls rotating over every copy: A, x, y, the sizes, alpha, beta, the scratch.
    assert [launch.args[:3] for launch in launches] == [list(arrays[0])] * 2 + [
        list(arrays[i % runner.copies]) for i in range(2 * runner.copies)
    ]
    assert [launch.args[3 : 3 + len(sizes)] for launch in launches] == [sizes] * len(launches)
    assert [launch.args[-4:-2] for launch in launches[:3]] == [[1.0, 0.0], [ALPHA, BETA], [1.0, 0.0]]
    workspace, counters = launches[0].args[-2:]
    assert workspace and counters and all(launch.args[-2:] == [workspace, counters] for launch in launches)
    assert {(launch.grid, launch.block) for launch in launches} == {(geom.grid, geom.block)}
    assert all(launch.stream == 0 and launch.programmatic for launch in launches)  # GEMVs wait: PDL on sm_90
    # The scratch was zeroed once, on the stream that uses it, before the first launch.
    memsets = [event for event in worker_device.events if event[0] == "memset"]
    assert memsets and all(stream == 0 for _, (stream, _capturing) in memsets)


def test_a_cubin_is_loaded_once_by_its_bytes(
    worker_device: FakeCuda,
    pycuda: FakePycuda,  # noqa: F811
    compiled: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[tuple[bytes, str]] = []
    monkeypatch.setattr("autotune.gpu.driver.load_function", lambda data, name: loads.append((data, name)) or 1000)
    runner = Runner(FakeKernels(), None, SUPPORT, PROBLEM, H200, seed=3)  # type: ignore[arg-type]
    first, again, other = tmp_path / "a.cubin", tmp_path / "b.cubin", tmp_path / "c.cubin"
    first.write_bytes(b"one")
    again.write_bytes(b"one")  # the same bytes under another name: the same kernel
    other.write_bytes(b"two")
    for cubin in (first, again, other, first):
        runner.plan(cubin, "k", gemv.DEFAULT_CONFIG)
    assert loads == [(b"one", "k"), (b"two", "k")]


def test_a_launch_the_driver_refuses_is_a_launch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeError(Exception):
        pass

    class Refusing:
        def measure(self, cubin: Path, kernel: str, config: dict[str, int]) -> Any:
            raise DriverError("launching the kernel (cuLaunchKernelEx) failed: CUDA_ERROR_INVALID_VALUE", 1)

    monkeypatch.setattr(measure_gpu, "driver", lambda: type("Cuda", (), {"Error": FakeError}))
    monkeypatch.setattr(server, "_context_is_poisoned", lambda: False)
    state = server._State(0)
    state.runner = Refusing()
    reply = server._measure(state, {"cubin": "k.cubin", "kernel": "k", "config": {}})
    assert reply["status"] == Status.LAUNCH_ERROR.value
    assert "CUDA_ERROR_INVALID_VALUE" in reply["message"] and not state.poisoned


def test_clusters_given_at_launch_join_the_programmatic_attribute(
    worker_device: FakeCuda,
    pycuda: FakePycuda,  # noqa: F811
    compiled: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A family that gives its clusters at launch (Launch.cluster_dims) gets both attributes, in the
    worker as in the launch path; the shipped families' plans keep PDL alone."""
    runner = Runner(FakeKernels(), None, SUPPORT, PROBLEM, H200, seed=3)  # type: ignore[arg-type]
    cubin = tmp_path / "candidate.cubin"
    cubin.write_bytes(b"\x7fELF")
    plain = runner.plan(cubin, "k", SPLIT_K)
    assert (
        plain.config.num_attrs == 1 and plain.config.attrs[0].id == driver.ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    )
    geom = gemv.OP.launch(PROBLEM, SPLIT_K, H200.sm_count)
    clustered = replace(geom, cluster_dims=(1, geom.grid[1], 1))
    monkeypatch.setattr(gemv.OP, "launch", lambda problem, config, sm_count: clustered)
    plan = runner.plan(cubin, "k", SPLIT_K)
    ids = [plan.config.attrs[i].id for i in range(plan.config.num_attrs)]
    assert ids == [driver.ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, driver.ATTRIBUTE_CLUSTER_DIMENSION]
    dims = ctypes.string_at(ctypes.addressof(plan.config.attrs[1]) + driver.LaunchAttribute.value.offset, 12)
    assert [int.from_bytes(dims[i : i + 4], "little") for i in (0, 4, 8)] == [1, geom.grid[1], 1]


def test_each_problem_starts_on_fresh_scratch(
    worker_device: FakeCuda,
    pycuda: FakePycuda,  # noqa: F811
    compiled: list[str],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A problem's setup frees the scratch earlier problems' candidates used (after the stream drains),
    so the next candidate's launch zeroes new buffers: what the launch path's first call sees."""
    freed: list[int] = []
    monkeypatch.setattr(driver, "mem_free", freed.append)
    monkeypatch.setattr(driver, "stream_synchronize", lambda stream: worker_device.events.append(("sync", stream)))
    cubin = tmp_path / "candidate.cubin"
    cubin.write_bytes(b"\x7fELF candidate")
    runner = Runner(FakeKernels(), CallingTimer(lambda: runner.copies), SUPPORT, PROBLEM, H200, seed=3)  # type: ignore[arg-type]
    runner.measure(cubin, "gemv_candidate", SPLIT_K)
    first = worker_device.launches[-1].args[-2:]
    device = runner_module.launch_device(0)

    device.release_scratch(0)

    assert sorted(freed) == sorted(first) and worker_device.events[-1] == ("sync", 0)
    runner.measure(cubin, "gemv_candidate", SPLIT_K)
    assert worker_device.launches[-1].args[-2:] != first  # new buffers, zeroed again before use
    assert [event for event in worker_device.events if event[0] == "memset"][-1][1] == (0, False)
    device.release_scratch(7)  # a stream that never launched: nothing to free
    assert len(freed) == 2


def test_the_worker_frees_scratch_before_each_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[tuple[int, int]] = []

    class FakeDevice:
        def __init__(self, index: int) -> None:
            self.index = index

        def release_scratch(self, stream: int) -> None:
            released.append((self.index, stream))

    monkeypatch.setattr(runner_module, "launch_device", FakeDevice)
    monkeypatch.setattr(runner_module, "Runner", lambda *args: type("R", (), {"copies": 1})())
    state = server._State(1)
    monkeypatch.setattr(state, "support", lambda: SUPPORT)
    monkeypatch.setattr(state, "gpu", lambda: H200)
    state.setup(PROBLEM, seed=3)
    state.setup(PROBLEM, seed=4)
    assert released == [(1, 0), (1, 0)]


class RecordingLibrary(Library):
    """A library family as a test double: three candidates, plans that record where they were made
    and what they launched."""

    name, label, config_key, source_prefix, max_candidates = "fakelib", "FakeLib", "fakelib_rank", "fakelib-", 8

    def __init__(self) -> None:
        self.plans: list[tuple[Any, ...]] = []
        self.launches: list[tuple[tuple[int, ...], float, float, int]] = []

    def serves(self, problem: Problem) -> bool:
        return problem.op == "gemv"

    def enabled(self) -> bool:
        return True

    def fingerprint(self) -> str | None:
        return "fakelib-1"

    def candidates(self, device: Any, problem: Problem) -> int:
        return 3

    def plan(self, device: Any, problem: Problem, config: Any, aligned: bool, leading: Any, order: Any) -> Any:
        self.plans.append((device, problem, self.rank_of(config), aligned, leading, order))
        library = self

        class Plan:
            needs_scratch, workspace_bytes = False, 0

            def launch(self, pointers: tuple[int, ...], alpha: float, beta: float, stream: int, allocator: Any) -> None:
                library.launches.append((pointers, alpha, beta, stream))

        return Plan()


def test_a_library_candidate_is_timed_through_the_plan_the_launch_path_runs(
    worker_device: FakeCuda,
    pycuda: FakePycuda,  # noqa: F811
    compiled: list[str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker measures a library family's rank through that family's plan, made on the worker's
    Device as the launch path makes it for callers; a rank beyond the library's offer is invalid."""
    library = RecordingLibrary()
    monkeypatch.setitem(ops._LIBRARIES, library.name, library)
    runner: Runner
    runner = Runner(FakeKernels(), CallingTimer(lambda: runner.copies), SUPPORT, PROBLEM, H200, seed=3)  # type: ignore[arg-type]

    outcome = runner.measure_library(library.name, library.config(2))

    assert outcome.status == Status.OK, outcome.message
    device = runner_module.launch_device(0)
    assert library.plans == [(device, PROBLEM, 2, True, None, (0, 1))]
    arrays = [(*(int(b) for b in copy), int(runner._out)) for copy in runner._inputs]
    assert [launch[0] for launch in library.launches] == [arrays[0]] * 2 + [
        arrays[i % runner.copies] for i in range(2 * runner.copies)
    ]
    assert [launch[1:] for launch in library.launches[:3]] == [(1.0, 0.0, 0), (ALPHA, BETA, 0), (1.0, 0.0, 0)]
    assert runner.measure_library(library.name, library.config(3)).status == Status.INVALID

    # The launch path asks the same family for the plan of a choice of its config.
    from autotune.runtime.launcher import Runtime
    from autotune.select.choose import Choice

    choice = Choice(PROBLEM, H200.name, library.config(1), "measured")
    runtime = Runtime(lambda problem, dev, db: choice)
    plan = runtime.plan(choice, device, True)
    assert library.plans[-1] == (device, PROBLEM, 1, True, None, (0, 1)) and plan is runtime.plan(choice, device, True)
