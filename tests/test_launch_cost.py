"""What one short-path launch costs the host, counted rather than timed: the Python functions a
call of a seen signature runs, through a double of the driver (a deterministic bound that a slower
launch path cannot pass; the microseconds are benchmarked on the GPU by scripts/bench_decode.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import autotune
from autotune.core.problem import Problem
from autotune.ops import gemm, gemv
from autotune.ops.gemm import shared as gemm_shared
from autotune.runtime import operands
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice
from tests.test_runtime import H200, SPLIT_K, FakeCuda, FakeTensor, cuda  # noqa: F401

PACKAGE = str(Path(autotune.__file__).parent)
# autotune's own Python functions per launch of a seen torch signature: two, as many as when gemv()
# and gemm() each wrote out their own short path and called the plan's launch (the entry point and
# Runtime._call, which launches a plan without scratch itself).
MOST_CALLS = 2
# With split-K scratch, three more: binding the scratch, the device's scratch of the stream, its size check.
MOST_CALLS_WITH_SCRATCH = 5


def _ready(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state a first torch call leaves, without torch."""
    monkeypatch.setattr(operands, "default_stream", lambda array, device: 0)
    monkeypatch.setattr(operands, "empty_like", lambda a, shape, device: FakeTensor(shape, 9 << 20))
    runtime._tensor = FakeTensor
    runtime._raw_stream = lambda index: 0
    runtime._allocators[0] = lambda nbytes, index: (0, None)


def _autotune_calls(call: Callable[[], Any], also: str | None = None) -> list[str]:
    """The autotune functions `call` enters (Python frames whose code lies in the package), and those
    whose qualified name starts with `also` (a test's stand-in for a class of torch's)."""
    entered: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and (code.co_filename.startswith(PACKAGE) or (also and code.co_qualname.startswith(also))):
            entered.append(code.co_qualname)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.parametrize("with_out", [False, True])
def test_a_gemm_of_a_seen_signature_runs_no_more_python_than_its_entry_and_launch(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    with_out: bool,
) -> None:
    problem = Problem("gemm", "float16", 8, 128, 256)  # a skinny GEMM, a decode step's batch
    config = gemm.OP.default_config(problem)
    runtime = Runtime(lambda p, device, db: Choice(problem, H200.name, config, "default"))
    _ready(runtime, monkeypatch)
    cuda.arg_types = gemm_shared.ARG_TYPES
    FakeTensor.new_empty = lambda self, shape: FakeTensor(shape, 9 << 20)  # type: ignore[attr-defined]
    A, B = FakeTensor((8, 256), 1 << 20), FakeTensor((256, 128), 2 << 20)
    out = FakeTensor((8, 128), 3 << 20) if with_out else None
    runtime.gemm(A, B, out)
    calls = _autotune_calls(lambda: runtime.gemm(A, B, out))
    assert len(cuda.launches) == 2
    assert len(calls) <= MOST_CALLS, calls


@pytest.mark.parametrize("with_out", [False, True])
@pytest.mark.parametrize("split", [False, True])
def test_a_gemv_of_a_seen_signature_runs_no_more_python_than_its_entry_and_launch(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    with_out: bool,
    split: bool,
) -> None:
    problem = Problem("gemv", "float16", 1024, 1024)
    config = SPLIT_K if split else gemv.DEFAULT_CONFIG
    runtime = Runtime(lambda p, device, db: Choice(problem, H200.name, config, "default"))
    _ready(runtime, monkeypatch)
    FakeTensor.new_empty = lambda self, shape: FakeTensor(shape, 9 << 20)  # type: ignore[attr-defined]
    A, x = FakeTensor((1024, 1024), 1 << 20), FakeTensor((1024,), 2 << 20)
    out = FakeTensor((1024,), 3 << 20) if with_out else None
    runtime.gemv(A, x, out)  # the checked path: the signature is kept
    calls = _autotune_calls(lambda: runtime.gemv(A, x, out))
    assert len(cuda.launches) == 2 and cuda.launches[-1].args[:3] == [
        1 << 20,
        2 << 20,
        9 << 20 if out is None else 3 << 20,
    ]
    assert len(calls) <= (MOST_CALLS_WITH_SCRATCH if split else MOST_CALLS), calls
