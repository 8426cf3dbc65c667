"""autotune.tune_model: run a patched model once the way it will be used (a prefill, then decode steps),
take every GEMV/GEMM problem its linears met on the launch path, and sweep those this GPU has not
tuned; optionally write their records to a file a deployment ships (`autotune import`).

The problems are the launch path's own: its call signatures are forgotten first, so that afterwards it
holds exactly the calls the run made, each with the choice it made (measured, estimated or default).
That is also what the launch path counts for `autotune sweep --pending` and AUTOTUNE_TUNE_ON_MISS: one
list, three ways to tune it. A prefill's rows (M above PREFILL_ROWS) are rounded up to a power of two,
since prompt lengths vary and the selector estimates a length between two tuned ones from both; decode
rows stay as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from autotune import api
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.select.choose import MEASURED, Choice
from autotune.tune.tuner import SweepReport

PREFILL_ROWS = 64  # more rows than this: a prefill, its M rounded up to a power of two


@dataclasses.dataclass(frozen=True)
class ModelTuning:
    """What tune_model found and did."""

    met: tuple[Choice, ...]  # each problem the run launched, with the choice it launched with
    swept: tuple[Problem, ...]  # those not tuned on this GPU (prefill rows bucketed), swept
    report: SweepReport | None  # the sweep's, None when nothing needed one
    exported: int = 0  # records written to `export`


def tune_model(
    model: Any,
    example_inputs: Any,
    *,
    decode_steps: int,
    trials: int,
    timeout: float | None,
    patience: int | None,
    db: str | None,
    export: Path | str | None,
    show: bool,
) -> ModelTuning:
    """Run `model` on `example_inputs` (a tensor, a tuple of positional arguments or a dict of keyword
    arguments), record the problems its linears launch, and sweep the untuned ones (`trials` per problem,
    counting stored ones, within `timeout` seconds for them all). A model with `generate` (transformers')
    runs a prefill and `decode_steps` decode steps by greedy generation; any other model runs one forward
    call. `show`: progress bars and the closing table, as `autotune sweep` prints them. `export`: the
    records file of every problem met (the three fastest current trials of each), for `autotune import`
    on the machines that deploy."""
    if isinstance(decode_steps, bool) or not isinstance(decode_steps, int) or decode_steps < 0:
        raise AutotuneError(f"decode_steps must be a whole number >= 0, got {decode_steps!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0):
        raise AutotuneError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(model, torch.nn.Module):
        raise AutotuneError(f"tune_model takes a torch.nn.Module, got {type(model).__name__}")
    device = _cuda_device(model)
    runtime = api.launch_path()
    runtime.forget()  # from here on its signatures are this run's calls
    _run(model, example_inputs, decode_steps)
    met = _met(runtime.signatures(), device)
    if not met:
        raise AutotuneError(
            "the model launched no autotune kernel: patch it first (autotune.patch(model)), with its weights on a GPU"
        )
    swept = _untuned(met)
    report = None
    if swept:
        # The model's time budget, split evenly: a problem that finishes early leaves its share unused
        # rather than growing the next one's past what the caller planned for it.
        each = None if timeout is None else timeout / len(swept)
        options: dict[str, Any] = dict(trials=trials, timeout=each, patience=patience, db=db, device=device)
        if show:
            from autotune.cli import sweep_with_bar

            report = sweep_with_bar(lambda progress: api.sweep_problems(list(swept), progress=progress, **options))
        else:
            report = api.sweep_problems(list(swept), **options)
        api.forget_choices()  # the next calls select again, now from the new measurements
    exported = 0
    if export is not None:
        problems = {choice.problem for choice in met} | set(swept)
        exported = api.store(db).export_records(met[0].gpu, Path(export), current_only=True, problems=problems)
    return ModelTuning(met, swept, report, exported)


def _cuda_device(model: Any) -> int:
    """The index of the GPU the model's weights are on (the sweep runs there)."""
    devices = {t.device for t in (*model.parameters(), *model.buffers()) if t.device.type == "cuda"}
    if not devices:
        raise AutotuneError("the model has no weights on a GPU: move it there first (model.cuda())")
    if len(devices) > 1:
        names = ", ".join(sorted(str(d) for d in devices))
        raise AutotuneError(f"the model's weights are on several GPUs ({names}): tune_model tunes one GPU's")
    return int(next(iter(devices)).index or 0)


def _run(model: Any, example_inputs: Any, decode_steps: int) -> None:
    if isinstance(example_inputs, Mapping):
        args: tuple[Any, ...] = ()
        kwargs = dict(example_inputs)
    elif isinstance(example_inputs, (tuple, list)):
        args, kwargs = tuple(example_inputs), {}
    else:
        args, kwargs = (example_inputs,), {}
    with torch.no_grad():
        if decode_steps and callable(getattr(model, "generate", None)):
            # The first new token comes from the prefill's logits: decode_steps more take decode steps.
            new = decode_steps + 1
            model.generate(*args, **kwargs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        else:
            model(*args, **kwargs)
    torch.cuda.synchronize()


def _met(signatures: list[Any], device: int) -> tuple[Choice, ...]:
    """The choices of the calls made on `device`, one per problem, in the order first met."""
    found: dict[Problem, Choice] = {}
    for sig in signatures:
        if sig.index == device:
            found.setdefault(sig.choice.problem, sig.choice)
    return tuple(found.values())


def _untuned(met: tuple[Choice, ...]) -> tuple[Problem, ...]:
    """The problems to sweep: those not measured on this GPU, a prefill's rows bucketed."""
    wanted: dict[Problem, None] = {}
    for choice in met:
        problem = choice.problem
        if problem.m > PREFILL_ROWS and problem.op == "gemm":
            bucket = 1 << (problem.m - 1).bit_length()
            if bucket != problem.m:
                wanted[dataclasses.replace(problem, m=bucket)] = None  # measured or not: sweep counts stored trials
                continue
        if choice.source != MEASURED:
            wanted[problem] = None
    return tuple(wanted)
