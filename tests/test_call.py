"""Runtime.call, the one launch path of every op, against a double of the CUDA driver (no GPU): an op
that lives in its own folder (tests/op_rowsum) is bound and launched with its own argument list, and
calls from several threads stay whole while another thread makes the runtime forget its choices."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.gpu import driver
from autotune.ops import gemv
from autotune.runtime import operands
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice
from tests.op_rowsum import OP as ROWSUM
from tests.test_launch import CudaArray
from tests.test_runtime import H200, FakeCuda, FakeTensor, cuda  # noqa: F401


@pytest.fixture
def rowsum() -> Iterator[None]:
    ops.register(ROWSUM, module="tests.op_rowsum.registered")
    yield
    ops.unregister(ROWSUM.name)


def _fixed(config: dict[str, int]) -> Runtime:
    """A runtime whose selector answers the op's own problem with `config`."""
    return Runtime(lambda problem, device, db: Choice(problem, H200.name, config, "default"))


def _rowsum_on_gpu_0(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> tuple[Runtime, CudaArray, CudaArray]:  # noqa: F811
    """A runtime answering rowsum with one config, and its A (300 x 500) and y on device 0."""
    monkeypatch.setattr(driver, "pointer_device", lambda pointer: 0)
    cuda.arg_types = ROWSUM.arg_types  # A, y, M, N, alpha, beta, workspace, counters
    runtime = _fixed({"threads": 64, "unroll": 2})
    return runtime, CudaArray((300, 500), pointer=1 << 24), CudaArray((300,), pointer=2 << 24)


@pytest.mark.usefixtures("rowsum")
def test_an_op_of_one_folder_is_bound_and_launched_with_its_own_arguments(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime, a, y = _rowsum_on_gpu_0(cuda, monkeypatch)
    assert runtime.call(ROWSUM, a, out=y, alpha=2.0) is y
    (launch,) = cuda.launches
    assert launch.args == [1 << 24, 2 << 24, 300, 500, 2.0, 0.0, 0, 0]
    assert (launch.grid, launch.block) == ((300, 1, 1), (64, 1, 1))
    assert cuda.loaded[-1].name == "rowsum_float16_t64_u2"


@pytest.mark.usefixtures("rowsum")
def test_a_call_with_the_wrong_arrays_is_a_one_line_error(cuda: FakeCuda) -> None:  # noqa: F811
    runtime = _fixed({"threads": 64, "unroll": 2})
    a = CudaArray((300, 500))
    with pytest.raises(AutotuneError, match=r"^rowsum takes 1 array \(A\), got 2$"):
        runtime.call(ROWSUM, a, a)
    with pytest.raises(AutotuneError, match="out must be a contiguous float16 vector of length 300"):
        runtime.call(ROWSUM, a, out=CudaArray((500,)))
    with pytest.raises(AutotuneError, match=r"^beta != 0 reads y: pass it as out=$"):
        runtime.call(ROWSUM, a, beta=1.0)
    assert cuda.launches == []


@pytest.mark.usefixtures("rowsum")
def test_an_alpha_that_is_no_number_is_a_one_line_error(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """float() read alpha="2" as 2.0 on the first call, and the short path's ctypes field refused it."""
    runtime, a, y = _rowsum_on_gpu_0(cuda, monkeypatch)
    for alpha, said in (("2", "alpha is a number, got '2'"), ([2.0], "alpha is a number, got list")):
        with pytest.raises(AutotuneError, match=re.escape(said)):
            runtime.call(ROWSUM, a, out=y, alpha=alpha)  # type: ignore[arg-type]
    assert cuda.launches == []


def test_an_out_that_shares_an_inputs_memory_is_refused_on_both_paths(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """y = A x written into x (or into A) reads what it writes: a wrong result, which torch refuses for
    F.linear. Refused on the first call of a signature and on the short path after it."""
    runtime = _fixed(gemv.DEFAULT_CONFIG)
    runtime._tensor, runtime._raw_stream = FakeTensor, lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    square, x = FakeTensor((128, 128), 1 << 24), FakeTensor((128,), 2 << 24)
    shared = FakeTensor((128,), (2 << 24) + 64)  # inside x's 256 bytes
    with pytest.raises(AutotuneError, match=r"^out shares memory with x: the kernel would read what it writes"):
        runtime.call(ops.get("gemv"), square, x, out=shared)
    runtime.call(ops.get("gemv"), square, x, out=FakeTensor((128,), 3 << 24))  # the signature, now stored
    for out, name in ((FakeTensor((128,), 2 << 24), "x"), (FakeTensor((128,), (1 << 24) + 512), "A")):
        with pytest.raises(AutotuneError, match=f"^out shares memory with {name}:"):
            runtime.call(ops.get("gemv"), square, x, out=out)
    assert len(cuda.launches) == 1


def test_calls_from_threads_stay_whole_while_another_thread_forgets(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tuning on a miss calls forget() from its own thread while the caller's threads launch: no call
    fails, each launch carries its own thread's arrays and alpha, and the signatures come back."""
    problem = Problem("gemv", "float16", 64, 128)
    runtime = _fixed(gemv.DEFAULT_CONFIG)
    runtime._tensor, runtime._raw_stream = FakeTensor, lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    errors: list[BaseException] = []
    stop = threading.Event()

    def caller(thread: int) -> None:
        A = FakeTensor((64, 128), (thread + 1) << 24)
        x, y = FakeTensor((128,), ((thread + 1) << 24) + (1 << 20)), FakeTensor((64,), ((thread + 1) << 24) + (2 << 20))
        try:
            for _ in range(300):
                runtime.call(ops.get("gemv"), A, x, out=y, alpha=float(thread))
        except BaseException as error:
            errors.append(error)

    def forgetter() -> None:
        while not stop.is_set():
            runtime.forget()

    callers = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    forgetting = threading.Thread(target=forgetter)
    forgetting.start()
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    stop.set()
    forgetting.join()
    assert not errors and len(cuda.launches) == 1200
    for launch in cuda.launches:
        a, x, y = launch.args[:3]
        assert (x - a, y - a) == (1 << 20, 2 << 20) and launch.args[-4] == float((a >> 24) - 1)  # alpha
    assert runtime._generation > 0
    runtime.call(
        ops.get("gemv"), FakeTensor((64, 128), 1 << 24), FakeTensor((128,), 2 << 24), out=FakeTensor((64,), 3 << 24)
    )
    assert [s.choice.problem for s in runtime.signatures()] == [problem]
