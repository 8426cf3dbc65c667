"""Tuning speed beside Kernel Tuner (GPU machine): the float16 GEMV template (kernels/gemv/gemv.cu,
the `hgemv` op) tuned over the same space by Kernel Tuner and by autotune, each run for a budget of
seconds, then every config either tool settled on re-timed by one harness (autotune's worker).

What the two tools share, by construction:
- the space: Kernel Tuner's `tune_params` are the op's `Space` choices, its restrictions the Space's
  constraint (as strings in Kernel Tuner's restriction language, checked equal to the constraint, or
  with --kt-restrictions callable the constraint function itself), so both search the same points;
- the kernels: Kernel Tuner's kernel source is a code generator that returns the translation unit
  autotune's compiler builds for that config (the op's `kernel_source`: template arguments baked in),
  compiled by nvcc with autotune's options and include folders; no defines are added;
- the launch: grid, block and dynamic shared memory come from the op's `launch` (problem_size is a
  callable, grid divisors empty), the split-K workspace and counters are arguments as in autotune;
- matrices of 256 MiB or more, so that no timing sees a warm L2; a budget of wall seconds per run,
  compiling and search-space construction included (the latter also reported, `space_build_s`).

Runs, for each shape: Kernel Tuner `random_sample`, Kernel Tuner `bayes_opt`, autotune from an empty
database, autotune with the shipped records of other shapes (none of this one), each `--repeats`
times. Each run is a subprocess pinned to one GPU (CUDA_VISIBLE_DEVICES); `--gpus N` runs N at once.
Finished runs are saved as they come (`tuning_vs_kernel_tuner_runs.json` in --out) and `--resume`
continues from such a file, so that several GPU calls of under 10 minutes finish the set; each call
stops starting runs that could not end before `--deadline-s`. Once every run of a shape is done, the
configs each run held as its best at some moment (its incumbents) are measured again by autotune's
worker on one GPU, the shape's optimum is the fastest of them, and a run's `seconds_to_2pct` is the
first moment its incumbent, as re-timed, was within 2% of that optimum (null if never: the medians
count it as the whole budget).

    python scripts/bench_tuning_vs_kernel_tuner.py --out results --gpus 4
    python scripts/bench_tuning_vs_kernel_tuner.py --out results --resume results/tuning_vs_kernel_tuner_runs.json
    python scripts/bench_tuning_vs_kernel_tuner.py --dry-run --out /tmp/kt-plan     # no GPU: the plan
    python scripts/bench_tuning_vs_kernel_tuner.py --out /tmp/kt --sampler tpe-fresh --only '*/autotune-*'

autotune's runs search with `tpe` unless --sampler names another (the committed report's runs used `tpe`;
a sweep's default is `tpe-fresh`), and their rows and summary name the sampler they used.

Writes results/tuning_vs_kernel_tuner_<gpu>.json and .png. Kernel Tuner (PyPI `kernel-tuner`) is a
dependency of this benchmark only, imported inside the functions that run it.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autotune import api
from autotune.bench.harness import (
    gpu_names,
    plot_or_say_why_not,
    pyplot,
    report_path,
    run_script,
    visible_devices,
    write_json,
)
from autotune.core.fingerprint import slugify
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Space, config_key
from autotune.core.target import targeting
from autotune.ops import gemv

DTYPE = "float16"
OP = "gemv"
SHAPES: tuple[tuple[int, int], ...] = ((16384, 8192), (8192, 16384), (65536, 2048))  # 256 MiB each
MIN_MATRIX_BYTES = 256 * 2**20
BUDGET_S = 60.0
REPEATS = 2
TOLERANCE = 0.02  # within 2% of the optimum
DEADLINE_S = 540.0  # a GPU call is cut at 600 s: start nothing that could end past this
RUN_OVERHEAD_S = 30.0  # a run's process start, data and teardown beyond its budget (for the deadline)
RUN_GRACE_S = 90.0  # a run still going this long after its budget is killed (what it logged is kept)
RETIME_PASSES = 3
RETIME_SECONDS_PER_MEASURE = 0.6  # for the deadline: one verified, timed measurement of a 256 MiB GEMV
KT_KERNEL_NAME = "at_gemv_kt"
KT_MAX_FEVALS = 2000  # never reached in a budget of minutes (Kernel Tuner compiles one config at a time)
RUNS_FILE = "tuning_vs_kernel_tuner_runs.json"
FORMAT = 1


@dataclass(frozen=True)
class Kind:
    """One of the four ways a shape is tuned."""

    label: str
    tool: str  # "kernel_tuner" | "autotune"
    strategy: str
    records: str | None  # autotune: "none" | "other_shapes"; Kernel Tuner: None


# The sampler autotune's runs use unless --sampler names another: the one the committed report was
# measured with (runs of another sampler are keyed by its name in the report).
AUTOTUNE_SAMPLER = "tpe"
KINDS = (
    Kind("kt-random_sample", "kernel_tuner", "random_sample", None),
    Kind("kt-bayes_opt", "kernel_tuner", "bayes_opt", None),
    Kind("autotune-empty", "autotune", AUTOTUNE_SAMPLER, "none"),
    Kind("autotune-other_shapes", "autotune", AUTOTUNE_SAMPLER, "other_shapes"),
)
KIND_BY_LABEL = {kind.label: kind for kind in KINDS}


# -- the shared space ----------------------------------------------------------------------------


def problem_of(m: int, n: int) -> Problem:
    return Problem(OP, DTYPE, m, n)


def shape_key(m: int, n: int) -> str:
    return f"{m}x{n}"


def parse_shape(text: str) -> tuple[int, int]:
    m, _, n = text.lower().partition("x")
    try:
        shape = int(m), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxN, got {text!r}") from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"a shape is MxN with M, N >= 1, got {text!r}")
    return shape


def op_space(problem: Problem, capability: str = "9.0") -> Space:
    """The op's space for a GPU of `capability` (clusters from 9.0 on), as a sweep there builds it."""
    with targeting(capability):
        return gemv.OP.space(problem)


def kt_tune_params(space: Space) -> dict[str, list[int]]:
    """Kernel Tuner's tune_params: the Space's parameters and choices, in the Space's order."""
    return {p.name: list(p.choices) for p in space.params}


def kt_restriction_callable(space: Space) -> Callable[[Mapping[str, int]], bool]:
    """The Space's constraint as Kernel Tuner's single restriction function (a dict of params in, True
    where the config is in the space). Kernel Tuner reads the source of restriction callables to find
    lambdas it can rewrite: this one holds none, so it is called as it is."""
    constraint = space.constraint

    def restriction(params: Mapping[str, int]) -> bool:
        return constraint(params) is None

    return restriction


def kt_restriction_strings(problem: Problem) -> list[str]:
    """The GEMV constraint (autotune/ops/gemv: Gemv.space) in Kernel Tuner's restriction language,
    one expression per clause over the parameters it reads, with the problem's numbers filled in:
    python-constraint then applies each clause as soon as its parameters are assigned, instead of
    calling one function on every point of the product. `restrictions_agree` checks them against the
    constraint itself (tests: every point of sub-spaces; each run: a random sample of the space)."""
    item = ITEMSIZE[problem.dtype]
    n = problem.n
    # gemv._per_split_vectors, in integer arithmetic: ceil(ceil((N // vec) / split) / lanes) * lanes.
    per_split = f"(((({n} // vec) + split - 1) // split + lanes - 1) // lanes) * lanes"
    return [
        "lanes <= block",
        f"vec * {item} * unroll * rows <= {gemv.MAX_BYTES_IN_FLIGHT}",
        f"split == 1 or split * lanes <= {n} // vec",
        "cluster == 1 or split == cluster",
        # x slice (x_smem 0 or 1) plus the cluster's row sums (cluster 1: none; min() is 0 or 1 there).
        f"x_smem * {per_split} * vec * {item} + min(cluster - 1, 1) * (block // lanes) * rows * 4"
        f" <= {gemv.MAX_SHARED_BYTES}",
        f"prefetch != 1 or vec * {item} == 16",
        "order == 0 or unroll * rows > 1",
    ]


def strings_accept(restrictions: Sequence[str], config: Mapping[str, int]) -> bool:
    """Whether a config passes every restriction string, read as Kernel Tuner reads them (Python
    expressions over the parameter names)."""
    names = dict(config)
    return all(bool(eval(_compiled(expression), _EVAL_GLOBALS, names)) for expression in restrictions)


_EVAL_GLOBALS: dict[str, Any] = {"__builtins__": {"min": min, "max": max}}


@functools.cache
def _compiled(expression: str) -> Any:
    return compile(expression, "<restriction>", "eval")


def restrictions_agree(
    space: Space, restrictions: Sequence[str], configs: Iterable[Mapping[str, int]]
) -> list[tuple[Config, bool, bool]]:
    """Configs on which the strings and the Space's constraint disagree: (config, constraint, strings)."""
    wrong = []
    for config in configs:
        ours = space.constraint(config) is None
        theirs = strings_accept(restrictions, config)
        if ours != theirs:
            wrong.append((dict(config), ours, theirs))
    return wrong


def random_points(space: Space, count: int, seed: int) -> list[Config]:
    """Points of the space's full product (valid or not), drawn uniformly."""
    rng = random.Random(seed)
    choices = space.choices()
    return [{name: rng.choice(values) for name, values in choices.items()} for _ in range(count)]


def kt_kernel_source(problem: Problem) -> Callable[[Mapping[str, int]], str]:
    """Kernel Tuner's code generator: the translation unit autotune compiles for the config, its
    extern "C" instance named KT_KERNEL_NAME (Kernel Tuner looks one name up for every config)."""

    def source(params: Mapping[str, int]) -> str:
        config = {name: int(value) for name, value in params.items()}
        return gemv.OP.kernel_source(problem, config).replace(gemv.OP.kernel_name(problem, config), KT_KERNEL_NAME)

    return source


def kt_compiler_options() -> list[str]:
    """nvcc options as autotune's compiler passes them: its flags and its include folders."""
    from autotune.build.compiler import INCLUDE_FOLDERS, NVCC_OPTIONS
    from autotune.core.paths import kernels_dir

    root = kernels_dir()
    return [*NVCC_OPTIONS, *(f"-I{root / folder}" for folder in INCLUDE_FOLDERS)]


def kt_geometry(
    problem: Problem, sm_count: int
) -> tuple[Callable[[Mapping[str, int]], tuple[int, int, int]], Callable[[Mapping[str, int]], int]]:
    """(problem_size, shared bytes) callables: with grid divisors [] Kernel Tuner's grid is the
    problem size itself, here the op's launch grid for the config; block is (block, 1, 1) through
    block_size_names=["block"]."""

    def launch(params: Mapping[str, int]) -> Any:
        return gemv.OP.launch(problem, {name: int(value) for name, value in params.items()}, sm_count)

    def grid(params: Mapping[str, int]) -> tuple[int, int, int]:
        x, y, z = launch(params).grid
        return int(x), int(y), int(z)

    def shared(params: Mapping[str, int]) -> int:
        return int(launch(params).shared_bytes)

    return grid, shared


def workspace_sizes(problem: Problem, space: Space) -> tuple[int, int]:
    """The split-K workspace (floats) and counters every config of the space fits in: the largest split
    times M, and one counter per row tile at one row a tile."""
    splits = max(space.choices()["split"])
    return splits * problem.m, problem.m


def kt_arguments(problem: Problem, space: Space, seed: int) -> list[Any]:
    """The kernel's arguments in its order (A, x, y, M, N, lda, alpha, beta, partial, counters) as
    Kernel Tuner takes them: numpy arrays, copied to the GPU once, and numpy scalars."""
    import numpy as np

    rng = np.random.default_rng(seed)
    m, n = problem.m, problem.n
    a = rng.standard_normal(m * n, dtype=np.float32).astype(np.float16)
    x = rng.standard_normal(n, dtype=np.float32).astype(np.float16)
    y = np.zeros(m, dtype=np.float16)
    floats, counters = workspace_sizes(problem, space)
    return [
        a,
        x,
        y,
        np.int32(m),
        np.int32(n),
        np.int32(n),
        np.float32(1.0),
        np.float32(0.0),
        np.zeros(floats, dtype=np.float32),
        np.zeros(counters, dtype=np.uint32),
    ]


# -- timelines and the arithmetic of the report ----------------------------------------------------


Trial = tuple[float, float, Config]  # (seconds since the run started, its own measured us, config)


def incumbents(trials: Iterable[Trial], budget_s: float) -> list[Trial]:
    """The moments a run's own best changed, within the budget: (t, its measured us, config)."""
    best: list[Trial] = []
    for t, us, config in sorted(trials, key=lambda trial: trial[0]):
        if t > budget_s:
            break
        if not best or us < best[-1][1]:
            best.append((t, us, dict(config)))
    return best


def seconds_to_target(
    steps: Sequence[Mapping[str, Any]], retimed: Mapping[str, float | None], optimum_us: float, tolerance: float
) -> float | None:
    """The first moment the run's incumbent, as re-timed, was within `tolerance` of the optimum;
    None where it never was. `steps` are {"t", "config"} in time order."""
    limit = (1 + tolerance) * optimum_us
    for step in steps:
        us = retimed.get(config_key(step["config"]))
        if us is not None and us <= limit:
            return float(step["t"])
    return None


def median_seconds(values: Iterable[float | None], budget_s: float) -> float | None:
    """Median time to the target, a run that never got there counting as its whole budget; None
    without runs."""
    counted = [budget_s if value is None else value for value in values]
    return statistics.median(counted) if counted else None


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs <= 0:
        return None
    return ours / theirs


def kind_key(row: Mapping[str, Any]) -> str:
    """'kernel_tuner/random_sample', 'autotune/tpe/none', ...: how the summary names a kind of run."""
    parts = [row["tool"], row["strategy"]]
    if row.get("records") is not None:
        parts.append(row["records"])
    return "/".join(parts)


def summarize(rows: Sequence[Mapping[str, Any]], budget_s: float) -> dict[str, Any]:
    """Per shape: the median seconds to 2% of each kind of run, Kernel Tuner's better strategy, and
    the goal's two ratios (ours from an empty database over Kernel Tuner's better, goal <= 1/2; ours
    with other shapes' records over it, goal <= 1/3)."""
    summary: dict[str, Any] = {}
    for key in sorted({shape_key(r["m"], r["n"]) for r in rows}):
        shape_rows = [r for r in rows if shape_key(r["m"], r["n"]) == key]
        kinds = sorted({kind_key(r) for r in shape_rows})
        medians = {
            kind: median_seconds((r["seconds_to_2pct"] for r in shape_rows if kind_key(r) == kind), budget_s)
            for kind in kinds
        }
        reached = {
            kind: sum(1 for r in shape_rows if kind_key(r) == kind and r["seconds_to_2pct"] is not None)
            for kind in kinds
        }
        runs = {kind: sum(1 for r in shape_rows if kind_key(r) == kind) for kind in kinds}
        kt = {kind: value for kind, value in medians.items() if kind.startswith("kernel_tuner/") and value is not None}
        better = min(kt, key=lambda kind: kt[kind]) if kt else None
        better_s = kt[better] if better is not None else None
        empty = ratio(_autotune_median(medians, "none"), better_s)
        other = ratio(_autotune_median(medians, "other_shapes"), better_s)
        summary[key] = {
            "median_seconds_to_2pct": medians,
            "reached_2pct": reached,
            "runs": runs,
            "kernel_tuner_better": better,
            "kernel_tuner_better_s": better_s,
            "ratio_empty_vs_kernel_tuner": empty,
            "ratio_other_shapes_vs_kernel_tuner": other,
            "goal_empty_met": None if empty is None else empty <= 0.5,
            "goal_other_shapes_met": None if other is None else other <= 1 / 3,
        }
    return summary


def _autotune_median(medians: Mapping[str, float | None], records: str) -> float | None:
    """autotune's median seconds with these records, whichever sampler its runs used (one a report)."""
    found = [value for kind, value in medians.items() if kind.startswith("autotune/") and kind.endswith(f"/{records}")]
    return found[0] if len(found) == 1 else None


# -- one run (a subprocess pinned to one GPU) -------------------------------------------------------


def run_one(spec: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """Run one tuning run and return its result (also written to folder/result.json)."""
    kind = KIND_BY_LABEL[spec["kind"]]
    folder.mkdir(parents=True, exist_ok=True)
    runner = _run_kernel_tuner if kind.tool == "kernel_tuner" else _run_autotune
    result = runner(spec, folder)
    (folder / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _clock(folder: Path) -> float:
    """Start a run's clock: the wall time (Kernel Tuner stamps its results with it) is noted in the
    run's folder, so that a run killed from outside still has its timeline read."""
    start = time.time()
    (folder / "clock.json").write_text(json.dumps({"start_unix": start}))
    return start


def _base_result(spec: Mapping[str, Any]) -> dict[str, Any]:
    kind = KIND_BY_LABEL[spec["kind"]]
    return {
        "id": spec["id"],
        "kind": kind.label,
        "tool": kind.tool,
        "strategy": spec["strategy"],
        "records": kind.records,
        "dtype": DTYPE,
        "m": spec["m"],
        "n": spec["n"],
        "budget_s": spec["budget_s"],
        "repeat": spec["repeat"],
        "seed": spec["seed"],
        "error": None,
    }


def find_cuda_root(scratch: Path | None = None) -> str | None:
    """A folder holding lib64/libcudadevrt.a, for $CUDA_ROOT: PyCUDA's DynamicSourceModule (Kernel
    Tuner's PyCUDA backend on sm_35 and up) links every kernel against that library and looks for it
    there first, then on LD_LIBRARY_PATH, then beside nvcc. A toolkit that keeps it elsewhere (under
    targets/<arch>/lib) gets a folder of its own in `scratch` with lib64/ linked to it."""
    roots = [os.environ.get(name) for name in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    roots += ["/usr/local/cuda", *sorted(str(p) for p in Path("/usr/local").glob("cuda-*"))]
    found = [root for root in roots if root and (Path(root) / "lib64" / "libcudadevrt.a").is_file()]
    if found:
        return found[0]
    elsewhere = [
        library
        for root in roots
        if root
        for library in (
            *Path(root).glob("targets/*/lib/libcudadevrt.a"),
            Path(root) / "lib" / "libcudadevrt.a",
        )
        if library.is_file()
    ]
    if not elsewhere or scratch is None:
        return None
    link = scratch / "cuda-root" / "lib64"
    link.mkdir(parents=True, exist_ok=True)
    target = link / "libcudadevrt.a"
    if not target.exists():
        target.symlink_to(elsewhere[0].resolve())
    return str(link.parent)


def _run_kernel_tuner(spec: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    import numpy as np
    import pycuda.driver as drv

    result = _base_result(spec)
    problem = problem_of(spec["m"], spec["n"])
    drv.init()
    device = drv.Device(0)
    sm_count = int(device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT))
    capability = "{}.{}".format(*device.compute_capability())
    result.update(gpu=device.name(), sm_count=sm_count, compute_capability=capability)
    space = op_space(problem, capability)
    if spec["kt_restrictions"] == "callable":
        restrictions: Any = kt_restriction_callable(space)
    else:
        restrictions = kt_restriction_strings(problem)
    arguments = kt_arguments(problem, space, spec["seed"])  # test data: before the clock

    import kernel_tuner
    import kernel_tuner.interface as kt_interface

    result["kernel_tuner_version"] = getattr(kernel_tuner, "__version__", None)
    built: dict[str, float | int] = {}

    class TimedSearchspace(kt_interface.Searchspace):  # type: ignore[misc]
        """Kernel Tuner's search space, its construction timed (space_build_s)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            began = time.perf_counter()
            super().__init__(*args, **kwargs)
            built["seconds"] = time.perf_counter() - began
            built["size"] = int(self.size)
            (folder / "space.json").write_text(json.dumps(built))

    kt_interface.Searchspace = TimedSearchspace
    grid, shared = kt_geometry(problem, sm_count)
    cache = folder / "kt_cache.json"
    random.seed(spec["seed"])
    np.random.seed(spec["seed"])
    start = _clock(folder)
    try:
        kernel_tuner.tune_kernel(
            KT_KERNEL_NAME,
            kt_kernel_source(problem),
            grid,
            arguments,
            kt_tune_params(space),
            grid_div_x=[],
            grid_div_y=[],
            grid_div_z=[],
            restrictions=restrictions,
            lang="PyCUDA",
            smem_args={"size": shared},
            compiler_options=kt_compiler_options(),
            defines={},
            block_size_names=["block"],
            strategy=spec["strategy"],
            strategy_options={
                "time_limit": max(1.0, spec["budget_s"] - (time.time() - start)),
                "max_fevals": KT_MAX_FEVALS,
            },
            cache=str(cache),
            quiet=True,
            verbose=False,
        )
    except Exception as exc:  # its startup past the budget, a failed compile or launch: what ran is kept
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    result["wall_s"] = time.time() - start
    result.update(collect_kernel_tuner(folder, spec["budget_s"]))
    return result


def collect_kernel_tuner(folder: Path, budget_s: float) -> dict[str, Any]:
    """A Kernel Tuner run's trials from its cache file (written as each config finishes, so it holds
    what a killed run measured): trial count, incumbents and its space construction time."""
    start = json.loads((folder / "clock.json").read_text())["start_unix"] if (folder / "clock.json").is_file() else None
    space = json.loads((folder / "space.json").read_text()) if (folder / "space.json").is_file() else {}
    entries = read_kt_cache(folder / "kt_cache.json")
    params: list[str] = []
    if (folder / "kt_cache.json").is_file():
        with contextlib.suppress(ValueError, KeyError):
            params = list(_read_kt_json(folder / "kt_cache.json")["tune_params_keys"])
    trials: list[Trial] = []
    measured = 0
    for entry in entries:
        stamp = entry.get("timestamp")
        if start is None or not isinstance(stamp, str):
            continue
        t = datetime.fromisoformat(stamp).timestamp() - start
        if t > budget_s:
            continue
        measured += 1
        value = entry.get("time")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            config = {name: int(entry[name]) for name in params}
            trials.append((t, float(value) * 1000.0, config))  # Kernel Tuner times in ms
    return {**_timeline_fields(trials, measured, space.get("seconds"), budget_s), "space_size": space.get("size")}


def _read_kt_json(path: Path) -> dict[str, Any]:
    text = path.read_text().strip()
    if not text.endswith("}\n}") and not text.endswith("}}}"):
        text = text.rstrip(",") + "}\n}"  # a cache file still open (or cut short): closed as Kernel Tuner does
    data: dict[str, Any] = json.loads(text)
    return data


def read_kt_cache(path: Path) -> list[dict[str, Any]]:
    """The entries of a Kernel Tuner cache file in the order they were written."""
    if not path.is_file():
        return []
    try:
        data = _read_kt_json(path)
    except (ValueError, OSError):
        return []
    return [dict(entry) for entry in data.get("cache", {}).values()]


def _timeline_fields(
    trials: list[Trial], measured: int, space_build_s: float | None, budget_s: float
) -> dict[str, Any]:
    steps = incumbents(trials, budget_s)
    return {
        "trials": measured,
        "ok_trials": sum(1 for t, _, _ in trials if t <= budget_s),
        "space_build_s": space_build_s,
        "incumbents": [{"t": round(t, 3), "own_us": us, "config": config} for t, us, config in steps],
        "own_best_us": steps[-1][1] if steps else None,
    }


def _run_autotune(spec: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    from autotune.store import open_store
    from autotune.tune.search import Budget
    from autotune.tune.tuner import run_sweep

    result = _base_result(spec)
    problem = problem_of(spec["m"], spec["n"])
    db = folder / "autotune.db"
    if spec["records"] == "other_shapes":
        records, gpu_name = filtered_records(problem, spec.get("gpu_name"), folder / "records.jsonl")
        with open_store(str(db), import_shipped=False) as store:
            result["records_imported"] = store.import_records(records)
        result["records_gpu"] = gpu_name
    began = time.perf_counter()
    gemv.OP.space(problem)  # autotune builds no list of points: each proposal is checked as it comes
    result["space_build_s"] = time.perf_counter() - began
    progress = folder / "progress.jsonl"
    start = _clock(folder)

    def on_trial(_problem: Problem, config: Config, outcome: Any) -> None:
        line = {"t": time.time() - start, "status": outcome.status.value, "us": outcome.time_us, "config": config}
        with progress.open("a") as handle:
            handle.write(json.dumps(line) + "\n")

    try:
        report = run_sweep(
            [problem],
            lambda: open_store(str(db), import_shipped=False),
            sampler=spec["strategy"],
            budget=Budget(
                trials=1_000_000, timeout_s=max(1.0, spec["budget_s"] - (time.time() - start)), patience=None
            ),
            seed=spec["seed"],
            device=0,
            on_trial=on_trial,
            compile_workers=spec.get("compile_workers"),
        )
        result.update(
            gpu=report.gpu.name, sm_count=report.gpu.sm_count, compute_capability=report.gpu.compute_capability
        )
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    result["wall_s"] = time.time() - start
    space_build_s = result.pop("space_build_s")
    result.update(collect_autotune(folder, spec["budget_s"], space_build_s))
    return result


def collect_autotune(folder: Path, budget_s: float, space_build_s: float | None) -> dict[str, Any]:
    """An autotune run's trials from its progress file (a line per trial as it finished)."""
    trials: list[Trial] = []
    measured = 0
    path = folder / "progress.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if entry["t"] > budget_s:
            continue
        measured += 1
        if entry["status"] == "ok" and entry["us"] is not None:
            trials.append((float(entry["t"]), float(entry["us"]), {k: int(v) for k, v in entry["config"].items()}))
    return _timeline_fields(trials, measured, space_build_s, budget_s)


def records_file_for(gpu_name: str | None) -> Path:
    """The shipped GEMV records of this GPU (db/records/<slug>.jsonl), else the H200's."""
    from autotune.core.paths import db_dir

    folder = db_dir() / "records"
    if gpu_name:
        own = folder / f"{slugify(gpu_name)}.jsonl"
        if own.is_file():
            return own
    return folder / "nvidia-h200.jsonl"


def filtered_records(problem: Problem, gpu_name: str | None, out: Path) -> tuple[Path, str]:
    """A records file of the shipped trials of this op and dtype (y = A x) on this GPU, without any
    trial of this shape; returns it and the GPU the records are for."""
    source = records_file_for(gpu_name)
    kept: list[str] = []
    records_gpu = ""
    for line in source.read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        if entry.get("kind") == "gpu":
            records_gpu = entry.get("name", "")
            kept.append(line)
        elif (
            entry.get("kind") == "trial"
            and entry.get("op") == problem.op
            and entry.get("dtype") == problem.dtype
            and not entry.get("trans")
            and (entry.get("m"), entry.get("n")) != (problem.m, problem.n)
        ):
            kept.append(line)
    out.write_text("\n".join(kept) + "\n")
    return out, records_gpu


# -- the plan, the schedule and the saved state ------------------------------------------------------


def plan_runs(
    shapes: Sequence[tuple[int, int]],
    repeats: int,
    budget_s: float,
    only: Sequence[str],
    sampler: str = AUTOTUNE_SAMPLER,
) -> list[dict[str, Any]]:
    """Every run, shape by shape (a set cut short holds whole shapes, ready to re-time and report);
    autotune's runs search with `sampler`."""
    specs = []
    for m, n in shapes:
        for repeat in range(repeats):
            for kind in KINDS:
                run_id = f"{shape_key(m, n)}/{kind.label}/r{repeat}"
                if only and not any(fnmatch.fnmatch(run_id, pattern) for pattern in only):
                    continue
                specs.append(
                    {
                        "id": run_id,
                        "kind": kind.label,
                        "strategy": sampler if kind.tool == "autotune" else kind.strategy,
                        "records": kind.records,
                        "m": m,
                        "n": n,
                        "repeat": repeat,
                        "seed": 1 + repeat,
                        "budget_s": budget_s,
                    }
                )
    return specs


def new_state(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "gpu": None,
        "budget_s": args.budget_s,
        "kt_restrictions": args.kt_restrictions,
        "runs": {},
        "retimed": {},
    }


def load_state(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(path.read_text())
    if state.get("format") != FORMAT:
        raise SystemExit(f"{path}: format {state.get('format')!r}, this script writes {FORMAT}")
    for name in ("budget_s", "kt_restrictions"):
        if state[name] != getattr(args, name):
            raise SystemExit(f"{path} was run with {name}={state[name]!r}, not {getattr(args, name)!r}: give the same")
    return state


@dataclass
class Running:
    spec: dict[str, Any]
    gpu: int
    process: subprocess.Popen[bytes]
    folder: Path
    started: float
    log: Any


def launch_run(spec: dict[str, Any], gpu: int, device: str, work: Path, workers: int) -> Running:
    """Start one run as a subprocess that sees only `device` (its CUDA_VISIBLE_DEVICES), in a folder
    of its own (its kernel cache, database, Kernel Tuner cache file, log and result)."""
    folder = work / spec["id"].replace("/", "__")
    if folder.exists():
        shutil.rmtree(folder)  # a run is redone from nothing: no cache, database or progress kept
    folder.mkdir(parents=True)
    spec = {**spec, "compile_workers": workers}
    (folder / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ)
    env.update(
        CUDA_VISIBLE_DEVICES=device,
        AUTOTUNE_CACHE_DIR=str(folder / "cache"),  # a fresh kernel cache: every compile counts
        CUDA_CACHE_DISABLE="1",  # nor does the driver's JIT cache serve one run what another built
        PYCUDA_DISABLE_CACHE="1",
        PYTHONUNBUFFERED="1",
    )
    root = find_cuda_root(work)
    if root is not None:
        env["CUDA_ROOT"] = root
    log = (folder / "run.log").open("wb")
    command = [sys.executable, str(Path(__file__).resolve()), "--run-one", str(folder / "spec.json")]
    process = subprocess.Popen(
        command, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    return Running(spec, gpu, process, folder, time.monotonic(), log)


def finish_run(running: Running, killed: bool) -> dict[str, Any]:
    """The run's result: its own, or for a run that died or was killed, what its files hold."""
    running.log.close()
    result_file = running.folder / "result.json"
    if result_file.is_file():
        result: dict[str, Any] = json.loads(result_file.read_text())
        return result
    spec = running.spec
    result = _base_result(spec)
    tail = (running.folder / "run.log").read_text(errors="replace")[-1500:]
    why = "killed past its budget" if killed else f"exited {running.process.returncode}"
    result["error"] = f"{why}; log ends: {tail}"
    kind = KIND_BY_LABEL[spec["kind"]]
    if kind.tool == "kernel_tuner":
        result.update(collect_kernel_tuner(running.folder, spec["budget_s"]))
    else:
        result.update(collect_autotune(running.folder, spec["budget_s"], None))
    return result


def execute(
    specs: list[dict[str, Any]],
    state: dict[str, Any],
    runs_path: Path,
    work: Path,
    gpus: int,
    deadline: float,
    say: Callable[[str], None],
) -> None:
    """Run `specs`, up to `gpus` at once, one per GPU; each result is saved as it comes."""
    workers = max(1, (os.cpu_count() or 1) // max(1, gpus))
    devices = visible_devices(gpus)
    names = gpu_names()
    queue = list(specs)
    running: dict[int, Running] = {}
    free = list(range(gpus))
    try:
        _schedule(queue, running, free, devices, names, state, runs_path, work, workers, deadline, say)
    finally:  # stopped from outside (SIGTERM, Ctrl-C) or failed: no run outlives this process
        for run in running.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, signal.SIGKILL)
    if queue:
        say(f"{len(queue)} runs left for a later call (deadline): resume from {runs_path}")


def _schedule(
    queue: list[dict[str, Any]],
    running: dict[int, Running],
    free: list[int],
    devices: list[str],
    names: list[str],
    state: dict[str, Any],
    runs_path: Path,
    work: Path,
    workers: int,
    deadline: float,
    say: Callable[[str], None],
) -> None:
    while queue or running:
        now = time.monotonic()
        while queue and free and now + queue[0]["budget_s"] + RUN_OVERHEAD_S <= deadline:
            spec = dict(queue.pop(0))
            gpu = free.pop(0)
            if names:
                spec["gpu_name"] = names[0]
            running[gpu] = launch_run(spec, gpu, devices[gpu], work, workers)
            say(f"started {spec['id']} on GPU {devices[gpu]}")
        if not running:
            break  # nothing more fits before the deadline
        time.sleep(0.5)
        for gpu, run in list(running.items()):
            overdue = time.monotonic() - run.started > run.spec["budget_s"] + RUN_OVERHEAD_S + RUN_GRACE_S
            if run.process.poll() is None and not overdue:
                continue
            if run.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.process.pid, signal.SIGKILL)
                run.process.wait()
            result = finish_run(run, overdue)
            del running[gpu]
            free.append(gpu)
            free.sort()
            if result.get("gpu"):
                if state["gpu"] is None:
                    state["gpu"] = result["gpu"]
                elif result["gpu"] != state["gpu"]:
                    result["error"] = f"ran on {result['gpu']}, the set on {state['gpu']}: not kept"
                    say(f"{run.spec['id']}: {result['error']}")
                    continue
            state["runs"][run.spec["id"]] = result
            write_json(runs_path, state)
            say(describe(result))


def describe(result: Mapping[str, Any]) -> str:
    best = f"{result['own_best_us']:.2f} us" if result.get("own_best_us") is not None else "nothing"
    build = f", space {result['space_build_s']:.1f} s" if result.get("space_build_s") is not None else ""
    error = f"  ERROR {result['error'][:300]}" if result.get("error") else ""
    return f"done {result['id']}: {result.get('trials', 0)} trials, own best {best}{build}{error}"


# -- re-timing with one harness ----------------------------------------------------------------------


def shapes_ready(state: Mapping[str, Any], specs_all: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Shapes all of whose planned runs are done and whose re-timing does not cover exactly them."""
    ready = []
    for m, n in sorted({(s["m"], s["n"]) for s in specs_all}):
        ids = sorted(s["id"] for s in specs_all if (s["m"], s["n"]) == (m, n))
        if not all(i in state["runs"] for i in ids):
            continue
        done = state["retimed"].get(shape_key(m, n))
        if done is None or sorted(done["runs"]) != ids:
            ready.append((m, n))
    return ready


def configs_to_retime(state: Mapping[str, Any], ids: Iterable[str]) -> list[Config]:
    seen: dict[str, Config] = {}
    for run_id in ids:
        for step in state["runs"][run_id].get("incumbents", []):
            seen.setdefault(config_key(step["config"]), dict(step["config"]))
    return list(seen.values())


def retime(
    state: dict[str, Any],
    specs_all: Sequence[Mapping[str, Any]],
    runs_path: Path,
    work: Path,
    passes: int,
    deadline: float,
    say: Callable[[str], None],
    gpus: int = 1,
) -> None:
    """Measure every incumbent of each finished shape again with autotune's worker, each shape on one
    GPU (up to `gpus` shapes at once, one a GPU), in `passes` rounds (every other one in reverse
    order); a config keeps the median of its rounds."""
    ready = shapes_ready(state, specs_all)
    if not ready:
        return
    if time.monotonic() + 60 > deadline:
        say(f"re-timing {', '.join(shape_key(m, n) for m, n in ready)} left for a later call (deadline)")
        return
    cache = work / "retime-cache"
    gather_cubins(work, cache / "cubins")
    lock = threading.Lock()  # the state and its file, shared by the GPUs' threads
    groups = [ready[slot :: max(1, gpus)] for slot in range(min(max(1, gpus), len(ready)))]

    def on_gpu(slot: int) -> None:
        from autotune.build.compiler import CompilePool
        from autotune.measure.worker.client import Worker

        with Worker(slot) as worker, CompilePool(None, cache / "cubins") as pool:
            gpu = worker.hello()
            if state["gpu"] is not None and gpu.name != state["gpu"]:
                say(f"not re-timing on GPU {slot}, a {gpu.name}: the runs ran on {state['gpu']}")
                return
            for m, n in groups[slot]:
                ids = sorted(s["id"] for s in specs_all if (s["m"], s["n"]) == (m, n))
                configs = configs_to_retime(state, ids)
                estimate = 30 + len(configs) * passes * RETIME_SECONDS_PER_MEASURE
                if time.monotonic() + estimate > deadline:
                    say(
                        f"re-timing {shape_key(m, n)} ({len(configs)} configs, ~{estimate:.0f} s) left for a later call"
                    )
                    continue
                try:
                    done = _retime_shape(worker, pool, gpu, problem_of(m, n), configs, passes)
                except Exception as exc:  # a worker that cannot be set up: the other shapes still go on
                    say(f"re-timing {shape_key(m, n)} failed: {type(exc).__name__}: {exc}")
                    continue
                with lock:
                    state["retimed"][shape_key(m, n)] = {"runs": ids, **done}
                    write_json(runs_path, state)
                ok = [value for value in done["configs"].values() if value is not None]
                optimum = f"{min(ok):.2f} us" if ok else "none"
                say(
                    f"re-timed {shape_key(m, n)} on GPU {slot}: {len(configs)} configs in {done['seconds']:.0f} s,"
                    f" optimum {optimum}"
                )

    with ThreadPoolExecutor(max_workers=len(groups)) as threads:
        list(threads.map(on_gpu, range(len(groups))))


def _retime_shape(
    worker: Any, pool: Any, gpu: Any, problem: Problem, configs: Sequence[Config], passes: int
) -> dict[str, Any]:
    from autotune import ops

    began = time.monotonic()
    with targeting(gpu.compute_capability):
        futures = [pool.submit(ops.compile_job(problem, config, gpu.arch)) for config in configs]
    compiled = [future.result() for future in futures]
    worker.setup(problem, seed=12345)
    samples: dict[str, list[float]] = {config_key(c): [] for c in configs}
    failures: dict[str, str] = {}
    for round_index in range(passes):
        order = list(range(len(configs)))
        if round_index % 2:
            order.reverse()
        for index in order:
            config, built = configs[index], compiled[index]
            key = config_key(config)
            if built.cubin is None:
                failures[key] = "compile_error"
                continue
            outcome = worker.measure(built.cubin, built.job.name, config)
            if outcome.ok and outcome.time_us is not None:
                samples[key].append(outcome.time_us)
            else:
                failures[key] = f"{outcome.status.value}: {outcome.message[:200]}"
    return {
        "gpu": gpu.name,
        "passes": passes,
        "seconds": time.monotonic() - began,
        "configs": {key: (statistics.median(values) if values else None) for key, values in samples.items()},
        "samples": samples,
        "failures": failures,
    }


def gather_cubins(work: Path, into: Path) -> None:
    """The cubins autotune's runs compiled, into the re-timing's kernel cache (same keys): what a run
    built is not built again. Each goes with its digest file, without which the cache rebuilds it."""
    from autotune.build.compiler import digest_path

    into.mkdir(parents=True, exist_ok=True)
    for cubin in work.glob("*/cache/cubins/*/*.cubin"):
        target = into / cubin.parent.name / cubin.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copyfile(digest_path(cubin), digest_path(target))
                shutil.copyfile(cubin, target)


# -- the report ---------------------------------------------------------------------------------------

SPACE_NOTE = (
    "Both tools search the op's full float16 GEMV space of each shape, nothing restricted for either: "
    "thread-block clusters are declared in each instance (__cluster_dims__), which a plain launch "
    "honours, so Kernel Tuner runs cluster configs as compiled; Kernel Tuner launches without "
    "programmatic dependent launch, which the kernels tolerate (griddepcontrol.wait returns at once), "
    "so only its own timings differ (no overlap with the call before, launch gaps inside its events); "
    "every time in seconds_to_2pct and best_us is autotune's worker's re-timing, with PDL, of the "
    "configs each run held as its best."
)


def build_report(
    state: Mapping[str, Any],
    specs_all: Sequence[Mapping[str, Any]],
    tolerance: float,
    full_set: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The report over the runs of `specs_all` (the planned ones); `complete` when every run of
    `full_set` (default: the same) is done and every shape re-timed."""
    budget_s = float(state["budget_s"])
    shapes_out = []
    rows = []
    for m, n in dict.fromkeys((s["m"], s["n"]) for s in specs_all):
        key = shape_key(m, n)
        retimed = state["retimed"].get(key)
        space = op_space(problem_of(m, n))
        shape: dict[str, Any] = {
            "m": m,
            "n": n,
            "dtype": DTYPE,
            "matrix_bytes": m * n * ITEMSIZE[DTYPE],
            "space_points": math.prod(len(p.choices) for p in space.params),
            "valid_points": None,
            "optimum_us": None,
            "optimum_config": None,
            "retimed": retimed is not None,
        }
        built = [state["runs"][s["id"]] for s in specs_all if (s["m"], s["n"]) == (m, n) and s["id"] in state["runs"]]
        sizes = [r.get("space_size") for r in built if r.get("space_size")]
        shape["valid_points"] = sizes[0] if sizes else None
        if retimed is not None:
            times = {k: v for k, v in retimed["configs"].items() if v is not None}
            if times:
                best_key = min(times, key=lambda k: times[k])
                shape["optimum_us"] = times[best_key]
                shape["optimum_config"] = json.loads(best_key)
        shapes_out.append(shape)
        if retimed is None or shape["optimum_us"] is None:
            continue
        for run in built:
            steps = run.get("incumbents", [])
            last = steps[-1] if steps else None
            best_us = retimed["configs"].get(config_key(last["config"])) if last else None
            rows.append(
                {
                    "tool": run["tool"],
                    "strategy": run["strategy"],
                    "records": run["records"],
                    "dtype": DTYPE,
                    "m": m,
                    "n": n,
                    "budget_s": run["budget_s"],
                    "repeat": run["repeat"],
                    "seconds_to_2pct": seconds_to_target(steps, retimed["configs"], shape["optimum_us"], tolerance),
                    "best_us": best_us,
                    "trials": run.get("trials", 0),
                    "space_build_s": run.get("space_build_s"),
                    "own_best_us": run.get("own_best_us"),
                    "error": run.get("error"),
                    "timeline": [
                        [step["t"], retimed["configs"].get(config_key(step["config"])), step["own_us"]]
                        for step in steps
                    ],
                }
            )
    return {
        "gpu": state["gpu"],
        "space_note": SPACE_NOTE,
        "kt_restrictions": state["kt_restrictions"],
        "budget_s": budget_s,
        "tolerance": tolerance,
        "shapes": shapes_out,
        "rows": rows,
        "summary": summarize(rows, budget_s),
        "complete": all(s["id"] in state["runs"] for s in (full_set or specs_all))
        and all(s["retimed"] for s in shapes_out),
    }


def plot(report: Mapping[str, Any], path: Path) -> Path:
    """Best config so far (as re-timed) over the optimum against seconds, a panel per shape."""
    plt = pyplot()

    shapes = [s for s in report["shapes"] if s["optimum_us"] is not None]
    colours = {
        "kernel_tuner/random_sample": "C1",
        "kernel_tuner/bayes_opt": "C3",
        "autotune/tpe/none": "C0",
        "autotune/tpe/other_shapes": "C2",
    }
    fig, axes = plt.subplots(1, max(1, len(shapes)), figsize=(6.2 * max(1, len(shapes)), 4.4), squeeze=False)
    budget = report["budget_s"]
    for axis, shape in zip(axes[0], shapes, strict=False):
        highest = 1.0
        for row in (r for r in report["rows"] if (r["m"], r["n"]) == (shape["m"], shape["n"])):
            points = [(t, us / shape["optimum_us"]) for t, us, _ in row["timeline"] if us is not None]
            if not points:
                continue
            highest = max(highest, *(y for _, y in points))
            xs = [t for t, _ in points] + [budget]
            ys = [y for _, y in points] + [points[-1][1]]
            kind = kind_key(row)
            label = kind if row["repeat"] == 0 else None
            axis.step(
                xs,
                ys,
                where="post",
                color=colours.get(kind, "C7"),
                linestyle="-" if row["repeat"] == 0 else "--",
                label=label,
            )
        axis.axhline(1 + report["tolerance"], color="grey", linestyle=":", label="within 2% of the optimum")
        axis.set_xlim(0, budget)
        axis.set_ylim(0.99, max(1.3, min(3.0, 1.05 * highest)))
        axis.set_xlabel("seconds since the run started (space, compiling included)")
        axis.set_ylabel("best config so far (re-timed) / optimum")
        axis.set_title(f"{report['gpu']} hgemv {shape['m']}x{shape['n']} ({shape['optimum_us']:.1f} us)")
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- dry run ----------------------------------------------------------------------------------------


def dry_run(args: argparse.Namespace, specs: list[dict[str, Any]], say: Callable[[str], None]) -> dict[str, Any]:
    """Everything but the GPU: each shape's space, Kernel Tuner's parameters and restrictions (checked
    against the constraint on a sample, and where Kernel Tuner is importable its search space built
    and timed), the kernel source and launch of a sample config, and the runs in order."""
    shapes = []
    for m, n in args.shapes:
        problem = problem_of(m, n)
        space = op_space(problem)
        strings = kt_restriction_strings(problem)
        sample = random_points(space, args.check_points, seed=m + n)
        wrong = restrictions_agree(space, strings, sample)
        if wrong:
            raise SystemExit(f"{shape_key(m, n)}: the restriction strings disagree with the constraint on {wrong[:3]}")
        config = gemv.OP.seed_configs(problem)[0]
        grid, shared = kt_geometry(problem, 132)
        entry: dict[str, Any] = {
            "m": m,
            "n": n,
            "matrix_bytes": m * n * ITEMSIZE[DTYPE],
            "tune_params": kt_tune_params(space),
            "space_points": math.prod(len(p.choices) for p in space.params),
            "restriction_strings": strings,
            "restrictions_checked_points": len(sample),
            "compiler_options": kt_compiler_options(),
            "sample_config": config,
            "sample_source": kt_kernel_source(problem)(config),
            "sample_grid_132_sms": grid(config),
            "sample_shared_bytes": shared(config),
        }
        try:
            if args.skip_kt_space:
                raise ImportError("skipped (--skip-kt-space)")
            from kernel_tuner.searchspace import Searchspace
        except ImportError as exc:
            entry["kernel_tuner_space"] = f"not built: {exc}"
        else:
            restriction: Any = kt_restriction_callable(space) if args.kt_restrictions == "callable" else strings
            began = time.perf_counter()
            built = Searchspace(kt_tune_params(space), restriction, 1024, block_size_names=["block"])
            entry["kernel_tuner_space"] = {"size": built.size, "build_s": time.perf_counter() - began}
        if args.count_space:
            began = time.perf_counter()
            entry["autotune_space_size"] = space.size()
            entry["autotune_space_count_s"] = time.perf_counter() - began
        shapes.append(entry)
        say(f"{shape_key(m, n)}: {entry['space_points']} points, Kernel Tuner space {entry['kernel_tuner_space']}")
    workers = max(1, (os.cpu_count() or 1) // max(1, args.gpus))
    rounds = math.ceil(len(specs) / max(1, args.gpus))
    return {
        "dry_run": True,
        "gpus": args.gpus,
        "compile_workers_per_run": workers,
        "budget_s": args.budget_s,
        "kt_restrictions": args.kt_restrictions,
        "cuda_root": find_cuda_root(),
        "runs": specs,
        "rounds": rounds,
        "estimated_s": rounds * (args.budget_s + RUN_OVERHEAD_S),
        "shapes": shapes,
    }


# -- main ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--shapes", type=parse_shape, nargs="+", default=list(SHAPES), help="MxN ... (float16)")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="seconds a run (space and compiles included)")
    parser.add_argument("--gpus", type=int, default=1, help="runs at once, one per GPU (0..N-1)")
    parser.add_argument("--only", nargs="+", default=[], help="run ids to run (fnmatch), e.g. '16384x8192/*' '*/kt-*'")
    parser.add_argument(
        "--sampler",
        choices=api.SAMPLERS,
        default=AUTOTUNE_SAMPLER,
        help=f"autotune's sampler (a sweep's default: {api.DEFAULT_SAMPLER})",
    )
    parser.add_argument("--resume", type=Path, nargs="?", const=Path(), help=f"continue from a {RUNS_FILE}")
    parser.add_argument(
        "--deadline-s", type=float, default=DEADLINE_S, help="start nothing that could end later (0: none)"
    )
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "kt-bench", help="runs' caches and logs"
    )
    parser.add_argument("--kt-restrictions", choices=("strings", "callable"), default="strings")
    parser.add_argument("--retime-passes", type=int, default=RETIME_PASSES)
    parser.add_argument("--dry-run", action="store_true", help="no GPU: build the spaces, write the plan")
    parser.add_argument("--check-points", type=int, default=20000, help="dry run: points checked per shape")
    parser.add_argument("--count-space", action="store_true", help="dry run: also count the valid points (slow)")
    parser.add_argument("--skip-kt-space", action="store_true", help="dry run: do not build Kernel Tuner's space")
    parser.add_argument("--allow-small", action="store_true", help="allow matrices under 256 MiB (tests)")
    parser.add_argument("--run-one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.run_one is not None:
        spec = json.loads(args.run_one.read_text())
        run_one(spec, args.run_one.parent)
        return 0

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    for m, n in args.shapes:
        if m * n * ITEMSIZE[DTYPE] < MIN_MATRIX_BYTES and not args.allow_small:
            raise SystemExit(f"{m}x{n} float16 is under 256 MiB: a timing could see a warm L2")
    specs_all = plan_runs(args.shapes, args.repeats, args.budget_s, [], args.sampler)
    for spec in specs_all:
        spec["kt_restrictions"] = args.kt_restrictions
    chosen = {s["id"] for s in plan_runs(args.shapes, args.repeats, args.budget_s, args.only, args.sampler)}
    args.out.mkdir(parents=True, exist_ok=True)

    if args.dry_run:
        plan = dry_run(args, [s for s in specs_all if s["id"] in chosen], say)
        path = args.out / "tuning_vs_kernel_tuner_plan.json"
        write_json(path, plan)
        minutes = plan["estimated_s"] / 60
        say(f"wrote {path}: {len(plan['runs'])} runs in {plan['rounds']} rounds, about {minutes:.0f} min")
        return 0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs are ended on the way out (execute)
    started = time.monotonic()
    deadline = started + args.deadline_s if args.deadline_s > 0 else float("inf")
    runs_path = args.out / RUNS_FILE
    resume = args.resume
    if resume is not None and resume == Path():
        resume = runs_path
    if resume is not None and not resume.is_file():
        say(f"nothing to resume at {resume}: a new set")
    state = load_state(resume, args) if resume is not None and resume.is_file() else new_state(args)
    write_json(runs_path, state)
    todo = [s for s in specs_all if s["id"] in chosen and s["id"] not in state["runs"]]
    say(f"{len(todo)} runs to do of {len(specs_all)}, on {args.gpus} GPU(s); state in {runs_path}")
    names = gpu_names()
    if names and args.gpus > len(names):
        raise SystemExit(f"--gpus {args.gpus}, but nvidia-smi lists {len(names)} GPU(s)")
    if len(set(names)) > 1:
        say(f"GPUs of more than one model ({sorted(set(names))}): runs on another model than the first are dropped")
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    execute(todo, state, runs_path, args.work, args.gpus, deadline, say)
    # Re-time the shapes whose every planned run is done (with --only, the planned runs are the chosen ones).
    planned = [s for s in specs_all if s["id"] in chosen or s["id"] in state["runs"]]
    retime(state, planned, runs_path, args.work, args.retime_passes, deadline, say, args.gpus)
    report = build_report(state, planned, TOLERANCE, specs_all)
    if state["gpu"] is None:
        say("no run finished: no report")
        return 1
    path = write_json(report_path(args.out, "tuning_vs_kernel_tuner", state["gpu"]), report)
    say(f"wrote {path} ({'complete' if report['complete'] else 'partial'})")
    for key, line in report["summary"].items():
        say(
            f"{key}: medians {line['median_seconds_to_2pct']}, ratios {line['ratio_empty_vs_kernel_tuner']}, "
            f"{line['ratio_other_shapes_vs_kernel_tuner']}"
        )
    if report["rows"]:
        plot_or_say_why_not(plot, report, path.with_suffix(".png"), say)
    return 0


if __name__ == "__main__":
    run_script(main, "bench_tuning_vs_kernel_tuner")
