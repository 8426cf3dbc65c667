"""The timing harness the benchmarks in scripts/ share: how they take samples, check our results and
write their reports. A benchmark script holds its command line, its shapes and its report's fields;
what it measures with comes from here, so that every published number is taken the same way.

- Samples in turns: every variant of a comparison is timed in the same rounds (the GPU's clocks and
  the host's speed drift within a run by more than the differences measured, so drift must weigh on
  all alike), on operands rotated over enough copies to be cold in L2 (`rotation_copies`): GPU time
  by CUDA events (`median_event_ms`, `steps_in_turns_us`) or by the worker's spin-kernel timer
  (`IsolatedClock`), host time per call behind a held stream (`host_us_per_call`).
- The vendor baseline: cuBLAS through torch, on the same buffers as ours (`time_in_turns`).
- Checks of ours: one call into an output poisoned with NaN, its worst error against the float64
  product relative to the sum of |terms| of each output (`max_error`, `MAX_ERROR`).
- The report tail: the JSON written (`report_path`, `write_json`) and the figure drawn beside it
  (`plot_or_say_why_not`), and the GPU names a run is planned by (`gpu_names`, `visible_devices`).

torch and matplotlib are imported by the caller or on first use: the package needs neither.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from autotune.core.errors import AutotuneError
from autotune.core.file_kinds import refuse_to_read
from autotune.core.fingerprint import slugify
from autotune.core.output import write_atomically

Launcher = Callable[[int], Any]  # call i of a timed launcher reads copy i % copies of its operands

# The rotating buffers of one operand together hold this many times the L2's bytes, so that every
# call reads its operand from memory, as a call in a model does; never more than MAX_COPIES copies.
ROTATION_BYTES_PER_L2 = 4
MAX_COPIES = 256
# Worst error against float64 relative to sum |a||x| that passes: float16 rounding of y is 5e-4.
MAX_ERROR = 1e-2
HELD_CALLS = 100  # calls queued behind one held stream per host-time sample (host_us_per_call)
WARM_S = 0.5  # seconds every variant runs before steps_in_turns_us starts timing


# -- samples -------------------------------------------------------------------------------------------


def rotation_copies(operand_bytes: int, l2_bytes: int) -> int:
    """Copies of an operand of `operand_bytes` that together hold ROTATION_BYTES_PER_L2 times the L2
    (at least one, at most MAX_COPIES)."""
    return max(1, min(MAX_COPIES, math.ceil(ROTATION_BYTES_PER_L2 * l2_bytes / operand_bytes)))


def median_event_ms(torch: Any, run: Callable[[], None], reps: int) -> float:
    """Median GPU-visible time of `run` (host work included when the host is the bottleneck)."""
    samples: list[float] = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def host_us_per_call(torch: Any, calls: dict[str, Callable[[], None]], rounds: int = 40) -> dict[str, float]:
    """Median host time per call of each callable, HELD_CALLS at a time queued behind a sleeping
    kernel (the calls never wait for the GPU), taken in turns so that drift weighs on all alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            torch.cuda._sleep(50_000_000)  # about 25 ms of GPU time: longer than the calls below
            begin = time.perf_counter_ns()
            for _ in range(HELD_CALLS):
                call()
            samples[name].append((time.perf_counter_ns() - begin) / 1e3 / HELD_CALLS)
            torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def steps_in_turns_us(
    torch: Any, runs: Mapping[str, Callable[[], Any]], steps: int, rounds: int = 10
) -> dict[str, float]:
    """Median step time of each callable, in microseconds: each variant's per-round median over
    `rounds` rounds of steps / rounds steps, the variants taking turns. The host's speed (an eager
    step is bound by it) and the GPU's clocks drift within a run by more than the differences being
    measured, so drift must weigh on all alike; and every variant first runs for WARM_S together, as
    the clocks take tens of milliseconds from rest to settle (docs/method.md)."""
    begin = time.perf_counter()
    while time.perf_counter() - begin < WARM_S:
        for run in runs.values():
            run()
        torch.cuda.synchronize()
    medians: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            medians[name].append(median_event_ms(torch, run, max(1, steps // rounds)) * 1e3)
    return {name: statistics.median(values) for name, values in medians.items()}


class WithTimer(Protocol):
    """What IsolatedClock takes from autotune.bench.compare's Bench (not imported: compare imports
    this module): its timer, with the empty kernel and the interleaved measurement."""

    @property
    def timer(self) -> Any: ...


class IsolatedClock:
    """Isolated and back-to-back median times of named launchers, all taken in turns. Isolated: each
    call followed by the timer's empty kernel, which cannot start before the call has finished, less
    that separator's own time (timed alone in the same turns, as "separator_us")."""

    def __init__(self, bench: WithTimer, reps: int) -> None:
        self.timer, self.reps = bench.timer, reps

    def _isolated(self, run: Launcher, i: int) -> None:
        run(i)
        self.timer.launch_empty()

    def time(self, runs: Mapping[str, Launcher]) -> dict[str, float]:
        launchers: list[Launcher] = [lambda _i: self.timer.launch_empty()]
        for run in runs.values():
            launchers += [run, functools.partial(self._isolated, run)]
        medians = [statistics.median(s) for s in self.timer.measure_interleaved(launchers, reps=self.reps)]
        times = {"separator_us": medians[0]}
        for j, name in enumerate(runs):
            times[f"{name}_b2b_us"] = medians[1 + 2 * j]
            times[f"{name}_us"] = medians[2 + 2 * j] - medians[0]
        return times


# -- checks of ours against float64 --------------------------------------------------------------------


def float64_reference(left: Any, right: Any) -> tuple[Any, Any]:
    """The float64 product and the sum of |terms| of each of its elements."""
    return left @ right, left.abs() @ right.abs()


def max_error(got: Any, want: Any, scale: Any) -> float:
    """Worst |got - want| relative to the float64 sum of |terms| of that output."""
    return float(((got - want).abs() / scale.clamp_min(1e-30)).max())


def checked_call_error(torch: Any, launch: Callable[[int], Any], out: Any, want: Any, scale: Any) -> float:
    """One call into an output poisoned with NaN (which never passes), its worst error against float64
    relative to the sum of |terms| (max_error)."""
    out.fill_(float("nan"))
    launch(0)
    torch.cuda.synchronize()
    return float(max_error(out.double(), want, scale))


# -- ours beside cuBLAS, in turns on the same buffers ---------------------------------------------------


def geomean(values: Sequence[float]) -> float:
    """The geometric mean, the summary of ratios every report gives."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def report_path(folder: Path, name: str, gpu: str) -> Path:
    """Where a benchmark's report for `gpu` goes: <folder>/<name>_<gpu as a slug>.json."""
    return folder / f"{name}_{slugify(gpu)}.json"


def read_json(path: Path) -> Any:
    """A report written earlier, read back (to summarize it, or to carry on a run cut short); a file that
    cannot be read or is not JSON is refused with one line."""
    refuse_to_read(path, "JSON file")
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise AutotuneError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise AutotuneError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    except UnicodeDecodeError:
        raise AutotuneError(f"{path} is not JSON: not UTF-8 text") from None


def write_json(path: Path, data: Mapping[str, Any], indent: int = 1) -> Path:
    """Write `data` as JSON (and a last newline) in one step: a file that is read while a run is cut
    short holds the old report or the new one, never part of one. Makes the folder where missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=indent) + "\n", what="JSON file")
    return path


def run_script(main: Callable[[], int], name: str) -> None:
    """A benchmark script's entry point: what it refuses (AutotuneError: no GPU, a bad argument or
    file) is one line, `name: message`, and exit 2, not a traceback."""
    try:
        code = main()
    except AutotuneError as error:
        print(f"{name}: {error}", file=sys.stderr)
        code = 2
    sys.exit(code)


def report_script(name: str, doc: str | None, action: Callable[[Path], object], default: str | None = None) -> None:
    """The entry point of a script that reads one report (a plot, a table): `--help` from the script's
    docstring, and a missing, unreadable or foreign file is one line and exit 2, not a traceback.
    Prints what `action` returns (the file it wrote, the table)."""
    parser = argparse.ArgumentParser(prog=name, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, nargs="?" if default else None, default=default, help="a report (.json)")
    path: Path = parser.parse_args().report

    def main() -> int:
        try:
            print(action(path))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # JSON of another shape
            raise AutotuneError(f"{path} is not a report {name} reads ({type(exc).__name__}: {exc})") from None
        except ImportError as exc:  # pyplot(): the package needs no matplotlib, its plots do
            raise AutotuneError(f"drawing needs matplotlib (pip install matplotlib): {exc}") from None
        return 0

    run_script(main, name)


def require_cuda_torch() -> None:
    """Refuse, before any work, where torch sees no CUDA GPU (torch's own error is a traceback)."""
    import torch

    if not torch.cuda.is_available():
        raise AutotuneError("torch sees no CUDA GPU: this benchmark runs on one")


def out_folder(path: Path, flag: str = "--out") -> Path:
    """The folder a script writes its reports in, checked before it works (not after): where it is a
    file, one line and exit 2."""
    if path.exists() and not path.is_dir():
        print(f"error: {flag} {path} is a file: give the folder the report goes in", file=sys.stderr)
        raise SystemExit(2)
    return path


def out_file(path: Path, flag: str = "--out") -> Path:
    """The file a script writes its report to, checked before it works: where it is a folder, one line
    and exit 2."""
    if path.is_dir():
        print(f"error: {flag} {path} is a folder: give the report's file", file=sys.stderr)
        raise SystemExit(2)
    return path


def partial_path(path: Path) -> Path:
    """Where a run keeps its report while it measures: beside the report (gemv_nvidia-h200.partial.json),
    so that a run cut short keeps what it measured and never replaces an earlier whole report with part
    of one (write_report, at the end, replaces it and removes this)."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def write_progress(path: Path, data: Mapping[str, Any]) -> Path:
    """The report of a run under way, at partial_path(path)."""
    return write_json(partial_path(path), data)


def write_report(path: Path, data: Mapping[str, Any]) -> Path:
    """A whole report, at `path`; the run's partial one is removed."""
    write_json(path, data)
    partial_path(path).unlink(missing_ok=True)
    return path


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display); imported on first use, so that a
    script's tables need no matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars_beside(axis: Any, ours: Sequence[float], theirs: Sequence[float], our_label: str, their_label: str) -> None:
    """A pair of bars at each position 0, 1, ...: ours on the left, theirs (cuBLAS's) on the right."""
    positions = range(len(ours))
    axis.bar([p - 0.2 for p in positions], ours, 0.4, label=our_label)
    axis.bar([p + 0.2 for p in positions], theirs, 0.4, label=their_label)


def save_beside(fig: Any, report: Path) -> Path:
    """Lay the figure out and write it next to its report, as the report's name with .png."""
    fig.tight_layout()
    out = report.with_suffix(".png")
    fig.savefig(out, dpi=110)
    return out


def plot_or_say_why_not(
    draw: Callable[[Mapping[str, Any], Path], Path], report: Mapping[str, Any], path: Path, say: Callable[[str], None]
) -> None:
    """A benchmark's last step: draw its plot and say where it went, or say why there is none (no
    matplotlib on the GPU machine is no reason to lose the JSON written before)."""
    try:
        say(f"wrote {draw(report, path)}")
    except ImportError as exc:
        say(f"no plot: {exc}")


# -- the GPUs a run is planned by --------------------------------------------------------------------------


def gpu_names() -> list[str]:
    """This machine's GPUs as nvidia-smi names them (no CUDA context), [] without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def visible_devices(count: int) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each of `count` runs at once: the first `count` GPUs this
    process may use (its own CUDA_VISIBLE_DEVICES where set)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d.strip() for d in given.split(",") if d.strip()] if given else [str(i) for i in range(count)]
    if len(devices) < count:
        raise SystemExit(f"--gpus {count}, but CUDA_VISIBLE_DEVICES={given} leaves {len(devices)}")
    return devices[:count]
