"""One sweep over several GPUs of a machine: a claiming sweep process per GPU. They share the work
through the database's queue (autotune/tune/fleet.py), as machines of a fleet do, so there is no
scheduler here: a GPU that finishes early claims the next problem, a process that dies leaves its
claim to the others once its lease ends, and GPUs of different models each tune their own problems
(a queue row belongs to one GPU model)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue as queues
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from autotune.core.errors import AutotuneError

log = logging.getLogger(__name__)


def parse_devices(text: str, count: int) -> list[int]:
    """'all', or GPU indices separated by commas ('0,1'), checked against the `count` GPUs here."""
    if count < 1:
        raise AutotuneError("--devices needs NVIDIA GPUs, and this machine has none")
    if text.strip().lower() == "all":
        return list(range(count))
    try:
        chosen = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise AutotuneError(f"--devices takes 'all' or GPU indices such as 0,1, not {text!r}") from None
    if not chosen:
        raise AutotuneError("--devices names no GPU")
    wrong = [index for index in chosen if not 0 <= index < count]
    if wrong:
        raise AutotuneError(f"--devices {text}: this machine has GPUs 0 to {count - 1}, not {wrong[0]}")
    if len(set(chosen)) != len(chosen):
        raise AutotuneError(f"--devices {text} names a GPU twice")
    return chosen


@dataclass(frozen=True)
class DeviceResult:
    device: int
    report: Any  # what the job returned (a SweepReport), None where it failed
    error: str | None  # why it failed: its error, or how its process ended


def _child(job: Callable[..., Any], device: int, kwargs: dict[str, Any], results: Any) -> None:
    try:
        results.put((device, job(device=device, **kwargs), None))
    except AutotuneError as exc:
        results.put((device, None, str(exc)))
    except KeyboardInterrupt:
        results.put((device, None, "interrupted"))


@contextmanager
def _no_current_folder_on_module_path() -> Iterator[None]:
    """While processes are spawned (the GPUs' and multiprocessing's resource tracker): a spawned
    process starts as `python -c`, whose module path begins with the current folder, so a
    `multiprocessing/` folder there would run in it. PYTHONSAFEPATH (Python 3.11+, as -P) leaves
    the folder out; set only meanwhile, so the caller's own later children are as they were."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = before


def run_on_devices(devices: Sequence[int], job: Callable[..., Any], **kwargs: Any) -> list[DeviceResult]:
    """Run `job(device=i, **kwargs)` in a process of its own for each GPU index, all at once; each
    process's result (or why it has none), in the order of `devices`. `job` and its arguments cross
    into a fresh interpreter (spawned: CUDA does not survive a fork), so they must pickle."""
    context = multiprocessing.get_context("spawn")
    with _no_current_folder_on_module_path():  # the queue's lock starts multiprocessing's tracker process
        results = context.Queue()
        processes = {
            device: context.Process(target=_child, args=(job, device, kwargs, results), name=f"autotune GPU {device}")
            for device in devices
        }
        for process in processes.values():
            process.start()
    found: dict[int, DeviceResult] = {}
    try:
        while len(found) < len(processes):
            try:
                device, report, error = results.get(timeout=0.5)
                found[device] = DeviceResult(device, report, error)
                continue
            except queues.Empty:
                pass
            for device, process in processes.items():
                if device in found or process.is_alive():
                    continue
                try:  # a result put just before the process ended may still be in the queue's pipe
                    other, report, error = results.get(timeout=1.0)
                    found[other] = DeviceResult(other, report, error)
                except queues.Empty:  # ended without a result: killed, or crashed in the interpreter
                    found[device] = DeviceResult(device, None, f"its process ended with code {process.exitcode}")
                break
    finally:
        for process in processes.values():
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
    return [found[device] for device in devices]
