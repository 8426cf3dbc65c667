"""autotune.tune_model's orchestration on the CPU (skipped without torch): which problems a run met, which
are swept (untuned ones, a prefill's rows bucketed), generate's steps, and the errors. The launch path
and the sweep are doubles here; tests/test_gpu_patch.py tunes a real model on the GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import autotune
from autotune import api
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.select.choose import DEFAULT, ESTIMATE, MEASURED, Choice

torch = pytest.importorskip("torch")
tune = pytest.importorskip("autotune.model.tune")

GPU = "NVIDIA H200"


@dataclass
class Sig:
    choice: Choice
    index: int = 0


@dataclass
class FakeRuntime:
    """The launch path's signatures: a call adds one for its problem, forget() drops them all."""

    tuned: set[Problem] = field(default_factory=set)
    sigs: dict[Problem, Sig] = field(default_factory=dict)
    forgotten: int = 0

    def forget(self) -> None:
        self.forgotten += 1
        self.sigs = {}

    def signatures(self) -> list[Sig]:
        return list(self.sigs.values())

    def launch(self, problem: Problem) -> None:
        source = MEASURED if problem in self.tuned else ESTIMATE if problem.m < 100 else DEFAULT
        self.sigs.setdefault(problem, Sig(Choice(problem, GPU, {}, source)))


class TwoLinears(torch.nn.Module):  # type: ignore[misc]
    """Launches a GEMV (one row) or a GEMM (more) per linear, as autotune.linear would."""

    def __init__(self, runtime: FakeRuntime) -> None:
        super().__init__()
        self.runtime = runtime
        self.sizes = [(64, 32), (32, 64)]  # (N, K)

    def forward(self, x: Any) -> Any:
        rows = x.shape[0]
        for n, k in self.sizes:
            if rows == 1:
                self.runtime.launch(Problem("gemv", "float16", n, k))
            else:
                self.runtime.launch(Problem("gemm", "float16", rows, n, k, trans=True))
        return x


class Generating(TwoLinears):
    """A transformers-like model: generate() runs a prefill and then a decode step per new token."""

    def generate(self, input_ids: Any, max_new_tokens: int, min_new_tokens: int, do_sample: bool) -> None:
        assert min_new_tokens == max_new_tokens and not do_sample
        self(input_ids)
        for _ in range(max_new_tokens - 1):
            self(input_ids[:1])


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime:
    fake = FakeRuntime()
    monkeypatch.setattr(api, "launch_path", lambda: fake)
    monkeypatch.setattr(tune, "_cuda_device", lambda model: 0)
    monkeypatch.setattr(tune.torch.cuda, "synchronize", lambda: None)
    return fake


@dataclass
class Sweeps:
    """What tune_model asked of the sweep: each call's problems (an empty list: the choices forgotten
    after it) and options."""

    calls: list[list[Problem]] = field(default_factory=list)
    options: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> Sweeps:
    sweeps = Sweeps()

    def sweep_problems(problems: list[Problem], **options: Any) -> str:
        sweeps.calls.append(problems)
        sweeps.options.append(options)
        return "report"

    monkeypatch.setattr(api, "sweep_problems", sweep_problems)
    monkeypatch.setattr(api, "forget_choices", lambda: sweeps.calls.append([]))
    return sweeps


def test_the_untuned_problems_met_are_swept_and_a_prefill_bucketed(runtime: FakeRuntime, swept: Sweeps) -> None:
    runtime.tuned = {Problem("gemv", "float16", 64, 32)}
    runtime.launch(Problem("gemv", "float16", 999, 999))  # before the run: not the model's
    model = Generating(runtime)
    result = autotune.tune_model(model, {"input_ids": torch.zeros(100, 4)}, decode_steps=2, timeout=30, show=False)
    assert runtime.forgotten == 1
    met = [c.problem for c in result.met]
    assert met == [
        Problem("gemm", "float16", 100, 64, 32, trans=True),
        Problem("gemm", "float16", 100, 32, 64, trans=True),
        Problem("gemv", "float16", 64, 32),
        Problem("gemv", "float16", 32, 64),
    ]
    # The prefill's 100 rows become 128; the tuned GEMV is left; the other decode GEMV is swept.
    assert list(result.swept) == [
        Problem("gemm", "float16", 128, 64, 32, trans=True),
        Problem("gemm", "float16", 128, 32, 64, trans=True),
        Problem("gemv", "float16", 32, 64),
    ]
    assert swept.calls == [list(result.swept), []]  # swept, then the choices forgotten
    assert swept.options[0]["timeout"] == 10.0  # the model's 30 s over its three problems
    assert result.report == "report"


def test_a_model_without_generate_runs_once_and_nothing_tuned_needs_no_sweep(
    runtime: FakeRuntime, swept: Sweeps
) -> None:
    runtime.tuned = {Problem("gemm", "float16", 8, n, k, trans=True) for n, k in ((64, 32), (32, 64))}
    result = autotune.tune_model(TwoLinears(runtime), torch.zeros(8, 4), decode_steps=3, show=False)
    assert len(result.met) == 2 and result.swept == () and result.report is None and swept.calls == []


def test_errors_are_one_line(runtime: FakeRuntime, swept: Sweeps) -> None:
    class Plain(torch.nn.Module):  # type: ignore[misc]
        def forward(self, x: Any) -> Any:
            return x

    with pytest.raises(AutotuneError, match=r"launched no autotune kernel: patch it first"):
        autotune.tune_model(Plain(), torch.zeros(2), show=False)
    with pytest.raises(AutotuneError, match="decode_steps must be a whole number"):
        autotune.tune_model(Plain(), torch.zeros(2), decode_steps=-1, show=False)
    with pytest.raises(AutotuneError, match="timeout must be a positive number of seconds"):
        autotune.tune_model(Plain(), torch.zeros(2), timeout=0, show=False)


def test_a_model_off_the_gpu_is_refused() -> None:
    with pytest.raises(AutotuneError, match=r"no weights on a GPU: move it there first"):
        tune._cuda_device(torch.nn.Linear(4, 4))
