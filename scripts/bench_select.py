"""Benchmark: what the selector picks on shapes no record covers, beside the shape's tuned best and cuBLAS.

For every shape of a fixed held-out set (HELD_OUT below: 26 GEMVs and 25 GEMMs in three dtypes, none
in the shipped records of the GPU, checked at the start), on this machine's GPU:
  pick      the selector's answer from the shipped records alone (`autotune best`: source measured,
            estimate or default, and whatever source later selectors report), as a user gets it;
  sweep     a --trials (default 40) trial sweep of that shape into a scratch database of its own,
            seeded with the shipped records (so it starts where a user's `autotune sweep` would:
            the nearest tuned shapes' configs first); its best config is what the shape's tuning finds;
  cuBLAS    through torch: the faster of torch.mv and F.linear for a GEMV (of torch.mv(A.t(), x) and
            x @ A for the transposed one), of torch.mm and F.linear for a GEMM (TF32 off),
and times the pick, the sweep's best and cuBLAS in one measurement, samples taken in turns, on the
same rotating buffers, as scripts/bench_gemv.py and bench_gemm.py time ours beside cuBLAS (each of
ours first checked against float64). Per shape:
  tuned_us = min(the sweep's best, pick_us, cublas_us)    regret = pick_us / tuned_us - 1 (>= 0)
and per op: the regret's geometric mean (of 1 + regret, minus 1), the worst regret, and the shapes
below 0.98x cuBLAS (pick_us > cublas_us / 0.98); issue 30's goal is a geometric mean <= 5%, worst
<= 15% and none below 0.98x.

Every finished shape is saved at once to select_state.json in --out; --resume continues from such a
file, so that several GPU calls of under 10 minutes finish the set, and each call starts no shape
that could not end before --deadline-s. --gpus N runs N processes at once, one a GPU
(CUDA_VISIBLE_DEVICES), the shapes split between them by their estimated time. The estimates
(ESTIMATE_S, conservative) add up to about 41 minutes on one GPU, 11 with --gpus 4; --dry-run prints
them with the plan.

    python scripts/bench_select.py --out results [--gpus 4] [--trials 40]
    python scripts/bench_select.py --out results --resume results/select_state.json
    python scripts/bench_select.py --dry-run [--gpu "NVIDIA H200"]     # no GPU: the set and the picks
    python scripts/bench_select.py --dry-run --changed-state state.json   # then, on the GPU:
    python scripts/bench_select.py --out OUT --resume state.json          # the changed picks timed again

A dry run answers as the GPU's machine does, cuBLASLt included (the library version its stored
trials were timed with), and names the picks that changed since the last run's file in --out.

Writes results/select_<gpu>.json (and .png where matplotlib is installed).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import api, ops
from autotune.bench import compare, harness
from autotune.bench.harness import geomean, gpu_names, plot_or_say_why_not, run_script, visible_devices, write_json
from autotune.core import paths
from autotune.core.fingerprint import slugify
from autotune.core.problem import Problem
from autotune.ops import make_problem

FORMAT = 1
STATE_FILE = "select_state.json"
DEFAULT_TRIALS = 40
DEADLINE_S = 540.0  # a GPU call is cut at 600 s: start no shape that could end past this
REPS = 7  # samples of each launcher, as the other benchmarks take
# Issue 30's goal for shapes the tuner never saw, per op.
GOAL_REGRET_GEOMEAN = 0.05
GOAL_WORST_REGRET = 0.15
CUBLAS_FLOOR = 0.98  # a pick below this fraction of cuBLAS's speed misses the goal
# Seconds a shape is expected to take (pick, sweep, timing), for the deadline and the split over GPUs:
# a 40-trial GEMV sweep took 5-8 s on an H200 (issue 30), a skinny GEMM's 9 s; tiled GEMMs compile
# and warm up longer. Replaced by 1.25x the slowest shape of the same kind already done in this set.
ESTIMATE_S = {"gemv": 25.0, "gemm-skinny": 45.0, "gemm": 90.0}
ESTIMATE_MARGIN = 1.25
TIMING_RESERVE_S = 20.0  # kept out of a sweep's timeout for the timing that follows it
STARTUP_S = 15.0  # a GPU process's start: torch, the CUDA context, the records copied
SKINNY_MAX_M = 16  # GEMM rows served by the skinny families (autotune.ops.gemm.SKINNY_MAX_M)


# -- the held-out set ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One held-out problem. GEMV: A is M x N (`trans`: y = Aᵀx); GEMM: A M x K, B K x N ("kn"),
    or B stored N x K ("nk", `trans`: nn.Linear's weight)."""

    op: str  # "gemv" | "gemm"
    dtype: str
    m: int
    n: int
    k: int | None
    trans: bool
    why: str

    @property
    def id(self) -> str:
        sizes = "x".join(str(s) for s in (self.m, self.n, self.k) if s is not None)
        tail = ("/t" if self.trans else "") if self.op == "gemv" else f"/{self.layout}"
        return f"{self.op}/{self.dtype}/{sizes}{tail}"

    @property
    def layout(self) -> str | None:
        """B's layout for a GEMM ("kn": K x N, "nk": N x K), None for a GEMV."""
        if self.op != "gemm":
            return None
        return "nk" if self.trans else "kn"

    def problem(self) -> Problem:
        return make_problem(self.op, self.dtype, self.m, self.n, self.k, self.trans)


def _v(dtype: str, m: int, n: int, why: str, trans: bool = False) -> Shape:
    return Shape("gemv", dtype, m, n, None, trans, why)


def _g(dtype: str, m: int, n: int, k: int, layout: str, why: str) -> Shape:
    return Shape("gemm", dtype, m, n, k, layout == "nk", why)


F32, F16, BF16 = "float32", "float16", "bfloat16"

# Shapes no shipped record covers, nor any shape of the standard sets (autotune/ops/*/shapes.txt, in
# any dtype) or of the LLM GEMM set issue 30 plans to ship (M in {2, 8, 32, 128, 512, 4096} x the
# Llama-3-8B and Qwen2-7B projections in the N x K layout), so that later records are unlikely to
# cover them: odd sizes (primes, 1001x999), short-and-wide (M <= 8, N >= 65536), tall-and-narrow
# (N <= 8), the shapes issue 30 found served badly, and projections of models whose shapes do not
# ship. Fixed: the order is the order of a sequential run (GEMVs, the cheapest, first).
HELD_OUT: tuple[Shape, ...] = (
    # GEMV, y = A x
    _v(F16, 1001, 999, "odd; issue 30: worst regret, 46%"),
    _v(BF16, 1001, 999, "odd"),
    _v(F32, 1001, 999, "odd"),
    _v(F16, 3072, 768, "BERT-base / GPT-2 MLP; issue 30: regret 35%"),
    _v(F16, 512, 512, "small, latency-bound; issue 30: regret 14%"),
    _v(F16, 4096, 1, "tall-and-narrow, N = 1; issue 30: regret 18%"),
    _v(F16, 3, 100003, "short-and-wide, prime N; issue 30: 0.27-0.30x cuBLAS"),
    _v(BF16, 3, 100003, "short-and-wide, prime N; issue 30"),
    _v(F32, 3, 100003, "short-and-wide, prime N; issue 30"),
    _v(BF16, 5, 65537, "short-and-wide, prime N"),
    _v(F32, 8, 262144, "short-and-wide, N = 2^18"),
    _v(F16, 100003, 3, "tall-and-narrow, prime M; issue 30: 0.90-0.97x cuBLAS"),
    _v(F32, 100003, 3, "tall-and-narrow, prime M; issue 30"),
    _v(BF16, 200003, 5, "tall-and-narrow, prime M"),
    _v(BF16, 37888, 3584, "Qwen2-7B gate_up, decode; issue 30: 0.97x cuBLAS"),
    _v(F16, 3584, 18944, "Qwen2-7B down, decode"),
    _v(F32, 4608, 3584, "Qwen2-7B qkv, decode"),
    _v(F16, 152064, 3584, "Qwen2-7B lm head, decode (1.1 GB)"),
    _v(F32, 5003, 7001, "primes"),
    _v(BF16, 12289, 4099, "primes"),
    # GEMV, y = Aᵀx
    _v(F16, 4096, 1, "transposed, N = 1; issue 30: 0.89x cuBLAS", trans=True),
    _v(BF16, 1001, 999, "transposed, odd", trans=True),
    _v(F32, 3, 100003, "transposed: y of 100003 from 3 rows", trans=True),
    _v(F16, 100003, 3, "transposed: 3 sums over 100003 rows", trans=True),
    _v(BF16, 11008, 4096, "transposed Llama-2-7B gate", trans=True),
    _v(F32, 4099, 12289, "transposed, primes", trans=True),
    # GEMM, M <= 16 (skinny families)
    _g(F32, 5, 4096, 4096, "kn", "no float32 skinny record; issue 30: float32 8x4096x4096 got the default, 0.10x"),
    _g(F32, 12, 4099, 1021, "nk", "primes"),
    _g(F16, 8, 11008, 4096, "kn", "Llama-2-7B gate, batch 8; issue 30: 0.80x cuBLAS"),
    _g(F16, 4, 3584, 18944, "kn", "Qwen2-7B down, batch 4; issue 30: 0.67x cuBLAS"),
    _g(BF16, 6, 4096, 4096, "kn", "no bfloat16 GEMM record"),
    _g(BF16, 3, 14336, 4096, "nk", "Llama-3-8B gate (unfused), batch 3"),
    _g(F16, 7, 1001, 999, "nk", "odd"),
    _g(F16, 3, 131071, 1024, "kn", "short-and-wide, prime N"),
    _g(BF16, 4, 128256, 4096, "nk", "Llama-3-8B lm head, batch 4: short-and-wide"),
    _g(F32, 7, 65537, 1000, "kn", "short-and-wide, prime N"),
    # GEMM, 17 <= M <= 256
    _g(F16, 33, 4096, 4096, "kn", "issue 30: 0.66x cuBLAS"),
    _g(F16, 48, 4096, 11008, "nk", "Llama-2-7B down, batch 48"),
    _g(BF16, 64, 12288, 4096, "kn", "Llama-2-7B fused qkv, batch 64"),
    _g(BF16, 100, 4608, 3584, "nk", "Qwen2-7B qkv, batch 100"),
    _g(F32, 200, 3000, 2000, "nk", "float32, mid M"),
    _g(F16, 255, 1001, 999, "kn", "odd"),
    _g(BF16, 17, 8191, 8191, "nk", "primes"),
    _g(F16, 96, 5003, 7001, "nk", "primes"),
    _g(F32, 129, 7001, 1009, "kn", "primes"),
    # GEMM, tall-and-narrow (N <= 8)
    _g(F16, 65536, 8, 512, "kn", "tall-and-narrow: 8 outputs for 65536 rows"),
    _g(F32, 100003, 3, 256, "nk", "tall-and-narrow, prime M"),
    _g(BF16, 30011, 7, 1024, "kn", "tall-and-narrow, primes"),
    # GEMM, large
    _g(F16, 3000, 5000, 2000, "kn", "issue 30: 0.66x cuBLAS"),
    _g(F16, 4096, 11008, 4096, "kn", "Llama-2-7B gate, prefill; issue 30: 0.92x cuBLAS"),
    _g(BF16, 5120, 5120, 5120, "nk", "no bfloat16 tiled record; issue 30: bfloat16 8192^3 ran the default"),
)


def _prime(value: int) -> bool:
    return value > 1 and all(value % d for d in range(2, math.isqrt(value) + 1))


def categories(shape: Shape) -> set[str]:
    """What a shape stands for, from its sizes alone."""
    sizes = [s for s in (shape.m, shape.n, shape.k) if s is not None]
    found = {shape.op, shape.dtype}
    if any(s >= 17 and s % 2 for s in sizes):
        found.add("odd")
    if any(s >= 17 and _prime(s) for s in sizes):
        found.add("prime")
    if shape.m <= 8 and shape.n >= 65536:
        found.add("short_wide")
    if shape.n <= 8:
        found.add("tall_narrow")
    if shape.op == "gemv" and shape.trans:
        found.add("trans")
    if shape.op == "gemm":
        found.add(f"layout_{shape.layout}")
        found.add("m_le_16" if shape.m <= SKINNY_MAX_M else "m_17_256" if shape.m <= 256 else "m_gt_256")
    return found


def select_shapes(only: Sequence[str]) -> list[Shape]:
    """The held-out shapes whose id matches one of `only` (fnmatch patterns), all without."""
    return [s for s in HELD_OUT if not only or any(fnmatch.fnmatch(s.id, pattern) for pattern in only)]


def shipped_problems(records: Path | None = None) -> dict[str, set[Problem]]:
    """Every problem the shipped records files hold, per GPU name (read from the files, no database)."""
    found: dict[str, set[Problem]] = {}
    for path in sorted((records or paths.db_dir() / "records").glob("*.jsonl")):
        gpu = ""
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("kind") == "gpu":
                gpu = entry["name"]
            elif entry.get("kind") == "trial":
                problem = Problem(entry["op"], entry["dtype"], entry["m"], entry["n"], entry["k"], entry["trans"])
                found.setdefault(gpu, set()).add(problem)
    return found


def check_not_stored(gpu: str, db: str, shapes: Iterable[Shape] = HELD_OUT) -> list[Problem]:
    """The held-out problems the database holds for `gpu`; raises SystemExit naming them where any."""
    stored = set(api.stored_problems(gpu=gpu, db=db))
    clash = [shape.problem() for shape in shapes if shape.problem() in stored]
    if clash:
        named = ", ".join(str(p) for p in clash)
        raise SystemExit(
            f"held-out shapes stored for {gpu}: {named}: replace them in HELD_OUT (scripts/bench_select.py)"
        )
    return clash


def estimate_s(shape: Shape, done: Iterable[Mapping[str, Any]] = ()) -> float:
    """Seconds the shape is expected to take: ESTIMATE_S, or 1.25x the slowest done shape of its kind."""
    kind = _kind(shape.op, shape.m)
    seen = [float(r["seconds"]) for r in done if r.get("seconds") is not None and _kind(r["op"], r["m"]) == kind]
    return max(ESTIMATE_S[kind], ESTIMATE_MARGIN * max(seen)) if seen else ESTIMATE_S[kind]


def _kind(op: str, m: int) -> str:
    return "gemv" if op == "gemv" else "gemm-skinny" if m <= SKINNY_MAX_M else "gemm"


def split_over(shapes: Sequence[Shape], gpus: int, done: Sequence[Mapping[str, Any]] = ()) -> list[list[Shape]]:
    """The shapes split between `gpus` processes, longest first to the least loaded (each list keeps
    the set's order)."""
    loads = [0.0] * gpus
    parts: list[list[Shape]] = [[] for _ in range(gpus)]
    for shape in sorted(shapes, key=lambda s: -estimate_s(s, done)):
        slot = loads.index(min(loads))
        parts[slot].append(shape)
        loads[slot] += estimate_s(shape, done)
    order = {shape.id: index for index, shape in enumerate(shapes)}
    return [sorted(part, key=lambda s: order[s.id]) for part in parts]


# -- regret and the summary -----------------------------------------------------------------------------


def regret_of(pick_us: float, sweep_best_us: float | None, cublas_us: float) -> tuple[float, float]:
    """(tuned_us, regret): the least of the sweep's best, the pick and cuBLAS, and pick / that - 1."""
    tuned_us = min(t for t in (sweep_best_us, pick_us, cublas_us) if t is not None)
    return tuned_us, pick_us / tuned_us - 1.0


def below_cublas(row: Mapping[str, Any]) -> bool:
    """Whether the pick runs below CUBLAS_FLOOR of cuBLAS's speed."""
    return bool(row["pick_us"] > row["cublas_us"] / CUBLAS_FLOOR)


def summarize(rows: Sequence[Mapping[str, Any]], planned: Sequence[Shape] = HELD_OUT) -> dict[str, Any]:
    """Per op: regret geometric mean and worst, shapes below 0.98x cuBLAS, wrong picks, and whether
    issue 30's goal holds on the shapes measured (`complete`: every planned shape of the op is)."""
    summary: dict[str, Any] = {}
    for op in ("gemv", "gemm"):
        got = [r for r in rows if r["op"] == op]
        wanted = [s for s in planned if s.op == op]
        if not got:
            if wanted:
                summary[op] = {"shapes": 0, "planned": len(wanted), "complete": False, "goal_met": None}
            continue
        worst = max(got, key=lambda r: r["regret"])
        geo = geomean([1.0 + r["regret"] for r in got]) - 1.0
        below = [r["id"] for r in got if below_cublas(r)]
        wrong = [r["id"] for r in got if not r.get("pick_correct", True)]
        goal = {
            "regret_geomean": geo <= GOAL_REGRET_GEOMEAN,
            "worst_regret": worst["regret"] <= GOAL_WORST_REGRET,
            "none_below_cublas": not below,
            "picks_correct": not wrong,
        }
        summary[op] = {
            "shapes": len(got),
            "planned": len(wanted),
            "complete": {s.id for s in wanted} <= {r["id"] for r in got},
            "regret_geomean": geo,
            "worst_regret": worst["regret"],
            "worst_shape": worst["id"],
            "below_098_cublas": len(below),
            "below_098_shapes": below,
            "wrong_picks": wrong,
            "vs_cublas_geomean": geomean([r["cublas_us"] / r["pick_us"] for r in got]),
            "vs_cublas_worst": min(r["cublas_us"] / r["pick_us"] for r in got),
            "sources": dict(Counter(r["source"] for r in got)),
            "goal": goal,
            "goal_met": all(goal.values()),
        }
    return summary


ROW_KEYS = ("op", "dtype", "m", "n", "k", "trans", "layout", "source", "pick_us", "tuned_us", "cublas_us", "regret")


def make_row(
    shape: Shape,
    pick: Mapping[str, Any],
    timing: Mapping[str, Any],
    sweep: Mapping[str, Any],
    gpu: str,
    seconds: float,
) -> dict[str, Any]:
    """A report row: the keys issue 30 names (ROW_KEYS) first, then what explains them."""
    sweep_ok = sweep.get("config") is not None and timing.get("sweep_correct") is not False
    sweep_best = timing.get("sweep_best_us") if sweep_ok else None
    tuned_us, regret = regret_of(timing["pick_us"], sweep_best, timing["cublas_us"])
    return {
        "op": shape.op,
        "dtype": shape.dtype,
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "trans": shape.trans,
        "layout": shape.layout,
        "source": pick["source"],
        "pick_us": timing["pick_us"],
        "tuned_us": tuned_us,
        "cublas_us": timing["cublas_us"],
        "regret": regret,
        "id": shape.id,
        "why": shape.why,
        "categories": sorted(categories(shape) - {shape.op, shape.dtype}),
        "gpu": gpu,
        "vs_cublas": timing["cublas_us"] / timing["pick_us"],
        "tuned_by": "pick" if tuned_us == timing["pick_us"] else "sweep" if tuned_us == sweep_best else "cublas",
        "config": pick["config"],
        "predicted_us": pick.get("predicted_us"),
        "basis": pick.get("basis"),
        "from_shape": pick.get("from_shape"),
        "pick_error": timing.get("pick_error"),
        "pick_correct": timing.get("pick_correct", True),
        "sweep_best_us": sweep_best,
        "sweep_config": sweep.get("config"),
        "sweep_stored_us": sweep.get("stored_us"),
        "sweep_same_as_pick": sweep.get("config") == pick["config"],
        "sweep_error": timing.get("sweep_error"),
        "sweep_trials": sweep.get("trials"),
        "sweep_stopped": sweep.get("stopped"),
        "sweep_seconds": sweep.get("seconds"),
        "cublas_call": timing.get("cublas_call"),
        "cublas_calls_us": timing.get("cublas_calls_us"),
        "seconds": seconds,
    }


# -- on the GPU -----------------------------------------------------------------------------------------


def _choice_fields(choice: Any) -> dict[str, Any]:
    from autotune import ops

    return {
        "source": choice.source,
        "config": ops.in_space_order(choice.problem, choice.config),
        "predicted_us": choice.predicted_us,
        "basis": choice.basis,
        "from_shape": list(choice.from_shape) if choice.from_shape else None,
        "time_us": choice.time_us,
    }


def time_together(bench: Any, pick: Any, tuned: Any | None, reps: int = REPS) -> dict[str, Any]:
    """The pick, the sweep's best (where it is another config) and cuBLAS's calls timed in turns on the
    same rotating buffers with Bench's timer, as Bench.compare / compare_gemm time one config beside
    cuBLAS; each of ours is first run once into a NaN-poisoned output and checked against float64.
    The buffers are handed back to the GPU after (the sweeps' worker needs the memory)."""
    timing = compare.time_in_turns(bench, pick, tuned, reps)
    bench.torch.cuda.empty_cache()
    return timing


def copy_database(source: Path, target: Path) -> None:
    """A copy of an SQLite database through SQLite's backup (whatever its journal holds)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(target.name + ".tmp")
    scratch.unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(sqlite3.connect(scratch)) as dst:
        src.backup(dst)
    os.replace(scratch, target)


def make_template(path: Path) -> Path:
    """A database holding the shipped records and nothing else, made afresh."""
    from autotune.store import open_store

    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    with open_store(str(path)):
        pass
    return path


@dataclass
class Context:
    trials: int
    patience: int | None
    seed: int | None
    deadline: float  # time.time() after which no shape is started, inf for none
    work: Path
    template: Path
    compile_workers: int | None
    reps: int
    say: Callable[[str], None]


def run_shape(bench: Any, shape: Shape, ctx: Context) -> dict[str, Any] | None:
    """One shape: the pick, the sweep, the timing; None where the deadline cut the sweep short (its
    trials stay in its database in --work for a later call on the same machine)."""
    from autotune.tune.search import Budget
    from autotune.tune.tuner import run_sweep

    began = time.monotonic()
    gpu = bench.launcher.gpu.name
    pick = api.best(
        shape.op, shape.m, shape.n, shape.k, trans=shape.trans, dtype=shape.dtype, gpu=gpu, db=str(ctx.template)
    )
    scratch = ctx.work / "dbs" / (slugify(shape.id) + ".db")
    if not scratch.exists():
        copy_database(ctx.template, scratch)
    timeout = None
    if math.isfinite(ctx.deadline):
        timeout = max(10.0, ctx.deadline - time.time() - TIMING_RESERVE_S)
    swept = time.monotonic()
    report = run_sweep(
        [shape.problem()],
        lambda: api.store(str(scratch)),
        budget=Budget(ctx.trials, timeout, ctx.patience),
        seed=ctx.seed,
        compile_workers=ctx.compile_workers,
    )
    sweep_seconds = time.monotonic() - swept
    result = report.problems[0].result if report.problems else None
    stopped = result.stopped if result is not None else "not swept"
    if result is not None and stopped == "timeout" and result.reused + result.measured < ctx.trials:
        ctx.say(f"{shape.id}: sweep cut at {result.reused + result.measured} trials by the deadline: left for later")
        return None
    tuned: Any = api.best(
        shape.op, shape.m, shape.n, shape.k, trans=shape.trans, dtype=shape.dtype, gpu=gpu, db=str(scratch)
    )
    sweep: dict[str, Any] = {
        "trials": None if result is None else result.reused + result.measured,
        "stopped": stopped,
        "seconds": sweep_seconds,
    }
    if tuned.source == "measured":
        sweep.update(config=_choice_fields(tuned)["config"], stored_us=tuned.time_us)
    else:  # nothing of the sweep ran correctly: the shape's best is the pick or cuBLAS
        tuned = None
    timing = time_together(bench, pick, tuned, ctx.reps)
    return make_row(shape, _choice_fields(pick), timing, sweep, gpu, time.monotonic() - began)


def run_shapes(
    shapes: Sequence[Shape],
    ctx: Context,
    on_row: Callable[[Shape, dict[str, Any] | None, str | None], None],
    done: list[dict[str, Any]],
    expect_gpu: str | None = None,
) -> None:
    """Each shape in turn in this process (on its first GPU); `on_row(shape, row, error)` after each.
    A shape whose estimate would end past the deadline is not started (a shorter one after it may be)."""
    from autotune.bench.compare import Bench

    bench = Bench()
    gpu = bench.launcher.gpu.name
    if expect_gpu is not None and gpu != expect_gpu:
        raise SystemExit(f"this process's GPU is a {gpu}, the set's a {expect_gpu}")
    check_not_stored(gpu, str(ctx.template))
    for shape in shapes:
        need = estimate_s(shape, done)
        if time.time() + need > ctx.deadline:
            ctx.say(f"{shape.id}: ~{need:.0f} s would end past the deadline: left for a later call")
            continue
        ctx.say(f"{shape.id}: started")
        try:
            row = run_shape(bench, shape, ctx)
        except Exception as exc:  # one shape's failure (a compile, a launch) does not end the set
            on_row(shape, None, f"{type(exc).__name__}: {exc}"[:2000])
            continue
        if row is not None:
            done.append(row)
            on_row(shape, row, None)


def describe_row(row: Mapping[str, Any]) -> str:
    sweep = f"{row['sweep_best_us']:.2f}" if row.get("sweep_best_us") is not None else "-"
    flag = "" if row.get("pick_correct", True) else "  WRONG"
    return (
        f"{row['id']:34} {row['source']:9} pick {row['pick_us']:9.2f} us  sweep {sweep:>9}  "
        f"cuBLAS {row['cublas_us']:9.2f} ({row['cublas_call']})  regret {100 * row['regret']:6.1f}%  "
        f"vs cuBLAS {row['vs_cublas']:5.2f}  {row['seconds']:.0f} s{flag}"
    )


# -- state, the parallel runs, the report -----------------------------------------------------------------


def new_state(args: argparse.Namespace) -> dict[str, Any]:
    return {"format": FORMAT, "gpu": None, "trials": args.trials, "patience": args.patience, "rows": {}, "errors": {}}


def load_state(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(path.read_text())
    if state.get("format") != FORMAT:
        raise SystemExit(f"{path}: format {state.get('format')!r}, this script writes {FORMAT}")
    for name in ("trials", "patience"):
        if state[name] != getattr(args, name):
            raise SystemExit(f"{path} was run with --{name} {state[name]}, not {getattr(args, name)}: give the same")
    return state


def add_result(
    state: dict[str, Any], shape_id: str, row: dict[str, Any] | None, error: str | None, say: Callable[[str], None]
) -> bool:
    """Keep one shape's row (or error) in the state; False where it ran on another GPU than the set."""
    if row is not None:
        if state["gpu"] is None:
            state["gpu"] = row["gpu"]
        elif row["gpu"] != state["gpu"]:
            say(f"{shape_id} ran on a {row['gpu']}, the set on a {state['gpu']}: not kept")
            return False
        state["rows"][shape_id] = row
        state["errors"].pop(shape_id, None)
        say(describe_row(row))
    elif error is not None:
        state["errors"][shape_id] = error
        say(f"{shape_id}: ERROR {error[:500]}")
    return True


def child_main(spec_path: Path) -> int:
    """A GPU process of a parallel run: its shapes in turn, each result a line of its rows file."""
    spec = json.loads(spec_path.read_text())
    wanted = set(spec["ids"])
    shapes = [s for s in HELD_OUT if s.id in wanted]
    rows_file = Path(spec["rows_file"])
    label = spec["label"]

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] [{label}] {text}", flush=True)

    template = Path(spec["work"]) / "shipped.db"
    copy_database(Path(spec["template"]), template)  # a copy of its own: no two processes open one file
    ctx = Context(
        spec["trials"],
        spec["patience"],
        spec["seed"],
        spec["deadline"] if spec["deadline"] is not None else math.inf,
        Path(spec["work"]),
        template,
        spec["compile_workers"],
        spec["reps"],
        say,
    )

    def on_row(shape: Shape, row: dict[str, Any] | None, error: str | None) -> None:
        with rows_file.open("a") as handle:
            handle.write(json.dumps({"id": shape.id, "row": row, "error": error}) + "\n")

    run_shapes(shapes, ctx, on_row, list(spec["done"]), spec.get("gpu"))
    return 0


def run_parallel(
    parts: list[list[Shape]],
    state: dict[str, Any],
    state_path: Path,
    args: argparse.Namespace,
    template: Path,
    deadline: float,
    gpu: str | None,
    say: Callable[[str], None],
) -> None:
    """One process per GPU (CUDA_VISIBLE_DEVICES), each with its part of the shapes; their rows are
    merged into the state as they come."""
    devices = visible_devices(len(parts))
    workers = max(1, (os.cpu_count() or 1) // len(parts))
    running: list[tuple[subprocess.Popen[bytes], Path, list[int]]] = []
    try:
        for slot, part in enumerate(parts):
            if not part:
                continue
            folder = args.work / f"gpu{slot}"
            folder.mkdir(parents=True, exist_ok=True)
            rows_file = folder / "rows.jsonl"
            rows_file.unlink(missing_ok=True)
            spec = {
                "ids": [s.id for s in part],
                "label": f"GPU {devices[slot]}",
                "trials": args.trials,
                "patience": args.patience,
                "seed": args.seed,
                "deadline": deadline if math.isfinite(deadline) else None,
                "work": str(folder),
                "template": str(template),
                "rows_file": str(rows_file),
                "compile_workers": workers,
                "reps": args.reps,
                "done": list(state["rows"].values()),
                "gpu": gpu,
            }
            (folder / "spec.json").write_text(json.dumps(spec))
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": devices[slot], "PYTHONUNBUFFERED": "1"}
            command = [sys.executable, str(Path(__file__).resolve()), "--child", str(folder / "spec.json")]
            process = subprocess.Popen(command, env=env, start_new_session=True)
            running.append((process, rows_file, [0]))
            say(f"GPU {devices[slot]}: {len(part)} shapes, ~{sum(estimate_s(s) for s in part):.0f} s")
        while running:
            time.sleep(1.0)
            for process, rows_file, seen in list(running):
                finished = process.poll() is not None
                lines = rows_file.read_text().splitlines() if rows_file.is_file() else []
                for line in lines[seen[0] :]:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        break  # a line still being written: read again next time
                    add_result(state, entry["id"], entry["row"], entry["error"], say)
                    seen[0] += 1
                    write_json(state_path, state)
                if finished:
                    if process.returncode:
                        say(f"a GPU process exited {process.returncode}")
                    running.remove((process, rows_file, seen))
    finally:  # stopped from outside or failed: no GPU process outlives this one
        for process, _, _ in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


def build_report(state: Mapping[str, Any], shapes: Sequence[Shape] = HELD_OUT) -> dict[str, Any]:
    order = {shape.id: index for index, shape in enumerate(HELD_OUT)}
    rows = sorted(state["rows"].values(), key=lambda r: order.get(r["id"], len(order)))
    return {
        "gpu": state["gpu"],
        "trials": state["trials"],
        "patience": state["patience"],
        "goal": {
            "regret_geomean_at_most": GOAL_REGRET_GEOMEAN,
            "worst_regret_at_most": GOAL_WORST_REGRET,
            "none_below_cublas_fraction": CUBLAS_FLOOR,
        },
        "held_out": dict(Counter(s.op for s in shapes)),
        "complete": all(s.id in state["rows"] for s in shapes),
        "missing": [s.id for s in shapes if s.id not in state["rows"]],
        "rows": rows,
        "summary": summarize(rows, shapes),
        "errors": dict(state["errors"]),
    }


def plot(report: Mapping[str, Any], path: Path) -> Path:
    """Regret per shape as bars, a panel per op, coloured by the pick's source; a red edge: the pick
    is below 0.98x cuBLAS. Linear up to 20%, logarithmic above (a default config can be 10x off)."""
    from matplotlib.patches import Patch

    plt = harness.pyplot()
    ops = [op for op in ("gemv", "gemm") if any(r["op"] == op for r in report["rows"])]
    fig, axes = plt.subplots(len(ops), 1, figsize=(14, 4.4 * len(ops)), squeeze=False)
    colours = {"measured": "C2", "estimate": "C0", "default": "C1"}
    for axis, op in zip(axes[:, 0], ops, strict=True):
        rows = [r for r in report["rows"] if r["op"] == op]
        sources = sorted({r["source"] for r in rows})
        bars = axis.bar(range(len(rows)), [100 * r["regret"] for r in rows])
        for bar, row in zip(bars, rows, strict=True):
            bar.set_color(colours.get(row["source"], "C4"))
            if below_cublas(row):
                bar.set_edgecolor("red")
                bar.set_linewidth(2)
        axis.set_yscale("symlog", linthresh=20)
        axis.axhline(100 * GOAL_REGRET_GEOMEAN, color="grey", linestyle=":")
        axis.axhline(100 * GOAL_WORST_REGRET, color="grey", linestyle="--")
        axis.set_xticks(range(len(rows)))
        axis.set_xticklabels([r["id"].split("/", 1)[1] for r in rows], rotation=60, ha="right", fontsize=7)
        axis.set_ylabel("regret, % (pick / tuned - 1)")
        line = report["summary"].get(op, {})
        title = f"{report['gpu']} {op}: {len(rows)} held-out shapes"
        if line.get("regret_geomean") is not None:
            title += (
                f"; regret geometric mean {100 * line['regret_geomean']:.1f}%, worst {100 * line['worst_regret']:.1f}%"
                f", {line['below_098_cublas']} below 0.98x cuBLAS"
            )
        axis.set_title(title, fontsize=10)
        handles = [Patch(color=colours.get(s, "C4"), label=f"pick: {s}") for s in sources]
        handles += [Patch(facecolor="white", edgecolor="red", linewidth=2, label="below 0.98x cuBLAS")]
        handles += [
            plt.Line2D([], [], color="grey", linestyle=":", label="5%: goal for the geometric mean"),
            plt.Line2D([], [], color="grey", linestyle="--", label="15%: goal for the worst"),
        ]
        axis.legend(handles=handles, fontsize=7, loc="upper right")
    out = harness.save_beside(fig, path)
    plt.close(fig)
    return out


# -- dry run ------------------------------------------------------------------------------------------------


def dry_run(args: argparse.Namespace, shapes: Sequence[Shape], say: Callable[[str], None]) -> dict[str, Any]:
    """No GPU: the set, checked against the shipped records of --gpu, and the selector's pick of each
    from them (as `autotune best --gpu` answers), with the time each shape is expected to take."""
    with tempfile.TemporaryDirectory(prefix="bench-select-") as folder:
        db = str(make_template(Path(folder) / "shipped.db"))
        gpu = api.match_gpu(args.gpu, api.store(db).gpu_names())
        check_not_stored(gpu, db)
        picks = []
        for shape in shapes:
            choice = api.best(shape.op, shape.m, shape.n, shape.k, trans=shape.trans, dtype=shape.dtype, gpu=gpu, db=db)
            picks.append(choice)
            predicted = f"{choice.predicted_us:9.2f} us" if choice.predicted_us is not None else f"{'-':>12}"
            tags = ",".join(sorted(categories(shape) - {shape.op, shape.dtype}))
            say(
                f"{shape.id:34} {tags:40} ~{estimate_s(shape):3.0f} s  {choice.source:9} {predicted}  "
                f"{json.dumps(choice.config)}"
            )
        api.store(db).close()
    changed_since(args, gpu, shapes, picks, say)
    parts = split_over(shapes, max(1, args.gpus))
    longest = max(sum(estimate_s(s) for s in part) for part in parts)
    sequential = sum(estimate_s(s) for s in shapes)
    plan = {
        "gpu": gpu,
        "shapes": len(shapes),
        "per_op": dict(Counter(s.op for s in shapes)),
        "per_dtype": dict(Counter(f"{s.op}/{s.dtype}" for s in shapes)),
        "sources": dict(Counter(f"{s.op}/{c.source}" for s, c in zip(shapes, picks, strict=True))),
        "estimated_s_one_gpu": sequential,
        "estimated_s": STARTUP_S + longest,
        "gpus": args.gpus,
    }
    say(
        f"{len(shapes)} shapes ({plan['per_op']}), none stored for {gpu}; picks {plan['sources']}; about "
        f"{sequential / 60:.0f} min on one GPU, {plan['estimated_s'] / 60:.0f} min with --gpus {args.gpus}"
    )
    return plan


def _as_named_now(shape: Shape, config: Mapping[str, Any]) -> dict[str, Any]:
    """A config of an earlier run's file as today's space names it: a parameter that joined the space
    since, at the value its kernels had before (Op.stored_config), is no change of pick."""
    problem = shape.problem()
    return ops.for_problem(problem).stored_config(problem, config)


def changed_since(
    args: argparse.Namespace, gpu: str, shapes: Sequence[Shape], picks: Sequence[Any], say: Callable[[str], None]
) -> list[str]:
    """The shapes whose pick differs from the last run's (select_<gpu>.json in --out, where there is
    one): a change to the selection or the records since. With --changed-state, a state of the last
    run's other rows, so that `--resume` on the GPU times only these again."""
    path = args.out / f"select_{slugify(gpu)}.json"
    if not path.is_file():
        return []
    report = json.loads(path.read_text())
    rows = {row["id"]: row for row in report["rows"]}
    changed = [
        shape.id
        for shape, choice in zip(shapes, picks, strict=True)
        if shape.id not in rows or _as_named_now(shape, rows[shape.id]["config"]) != dict(choice.config)
    ]
    say(f"picks changed since {path}: {' '.join(changed) if changed else 'none'}")
    if args.changed_state is not None:
        kept = {shape_id: row for shape_id, row in rows.items() if shape_id not in changed}
        state = {**new_state(args), "gpu": report["gpu"], "trials": report["trials"], "patience": report["patience"]}
        write_json(args.changed_state, {**state, "rows": kept})
        say(f"wrote {args.changed_state}: {len(kept)} rows kept; on the GPU, --resume it to time the changed ones")
    return changed


# -- main -----------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for select_<gpu>.json and the state")
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="trials of each shape's sweep (>= 40)")
    parser.add_argument("--patience", type=int, help="stop a sweep after this many trials without a 1%% gain (off)")
    parser.add_argument("--seed", type=int, help="the sweeps' sampler seed (default: none, as a user's sweep)")
    parser.add_argument("--gpus", type=int, default=1, help="processes at once, one a GPU (CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--only", nargs="+", default=[], help="shape ids to run (fnmatch), e.g. 'gemv/*' '*/nk'")
    parser.add_argument("--resume", type=Path, nargs="?", const=Path(), help=f"continue from a {STATE_FILE}")
    parser.add_argument("--deadline-s", type=float, default=DEADLINE_S, help="start no shape that could end later")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-select")
    parser.add_argument("--reps", type=int, default=REPS, help="samples of each timed call")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: the set, its check and the picks, printed")
    parser.add_argument("--gpu", default="NVIDIA H200", help="dry run: the GPU whose records answer")
    parser.add_argument(
        "--changed-state",
        type=Path,
        help="dry run: write the last run's rows whose picks still stand, as a state to --resume on the GPU",
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trials < 1 or args.gpus < 1 or args.reps < 1:
        parser.error("--trials, --gpus and --reps take positive integers")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return child_main(args.child)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    shapes = select_shapes(args.only)
    if not shapes:
        raise SystemExit(f"--only {' '.join(args.only)} matches no held-out shape")
    if args.dry_run:
        dry_run(args, shapes, say)
        return 0
    if args.trials < DEFAULT_TRIALS:
        say(f"--trials {args.trials}: issue 30's regret is judged after sweeps of {DEFAULT_TRIALS} trials or more")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    deadline = time.time() + args.deadline_s if args.deadline_s > 0 else math.inf
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work.resolve()
    state_path = args.out / STATE_FILE
    resume = state_path if args.resume == Path() else args.resume
    if resume is not None and not resume.is_file():
        say(f"nothing to resume at {resume}: a new set")
    state = load_state(resume, args) if resume is not None and resume.is_file() else new_state(args)
    write_json(state_path, state)
    todo = [s for s in shapes if s.id not in state["rows"]]
    names = gpu_names()
    say(f"{len(todo)} of {len(shapes)} shapes to do on {args.gpus} GPU(s) ({', '.join(names) or 'nvidia-smi: none'})")
    if names and args.gpus > len(names):
        raise SystemExit(f"--gpus {args.gpus}, but nvidia-smi lists {len(names)} GPU(s)")
    gpu = state["gpu"] or (names[0] if names else None)
    template = make_template(args.work / "shipped.db")
    if gpu is not None:
        check_not_stored(gpu, str(template))
        say(f"none of the {len(HELD_OUT)} held-out shapes is stored for {gpu}")
    if todo and args.gpus == 1:
        ctx = Context(args.trials, args.patience, args.seed, deadline, args.work, template, None, args.reps, say)

        def on_row(shape: Shape, row: dict[str, Any] | None, error: str | None) -> None:
            add_result(state, shape.id, row, error, say)
            write_json(state_path, state)

        run_shapes(todo, ctx, on_row, list(state["rows"].values()), state["gpu"])
    elif todo:
        parts = split_over(todo, args.gpus, list(state["rows"].values()))
        run_parallel(parts, state, state_path, args, template, deadline, state["gpu"] or gpu, say)
    left = [s.id for s in shapes if s.id not in state["rows"]]
    if left:
        say(f"{len(left)} shapes left for a later call: resume from {state_path}")
    if state["gpu"] is None:
        say("no shape finished: no report")
        return 1
    report = build_report(state)
    path = args.out / f"select_{slugify(state['gpu'])}.json"
    write_json(path, report)
    say(f"wrote {path} ({'complete' if report['complete'] else 'partial'}, {len(report['rows'])} shapes)")
    for op, line in report["summary"].items():
        if line.get("shapes"):
            say(
                f"{op}: {line['shapes']} of {line['planned']} shapes, regret geometric mean "
                f"{100 * line['regret_geomean']:.1f}%, worst {100 * line['worst_regret']:.1f}% "
                f"({line['worst_shape']}), "
                f"{line['below_098_cublas']} below 0.98x cuBLAS, pick/cuBLAS geometric mean "
                f"{line['vs_cublas_geomean']:.3f}; goal {'met' if line['goal_met'] else 'missed'}"
                f"{'' if line['complete'] else ' so far'} {line['goal']}"
            )
    if report["errors"]:
        say(f"{len(report['errors'])} shapes failed: {sorted(report['errors'])}")
    if report["rows"] and not args.no_plot:
        plot_or_say_why_not(plot, report, path, say)
    return 0


if __name__ == "__main__":
    run_script(main, "bench_select")
