"""Benchmark: the first call of a shipped problem in a fresh process, on this GPU; writes
results/first_call_<gpu>.json and prints a table.

Run on the GPU machine:  python scripts/bench_first_call.py --out results
Each timing is one new Python process: torch and autotune imported, the operands made on the GPU and
the CUDA context created (torch.cuda.synchronize()) before the clock starts; it stops once the result
of autotune.gemv() or gemm() is synchronized. So it holds the config's selection, finding its kernel
(shipped, cached or compiled: the launcher logs which), loading it, and the launch. Two settings:

- `no database`: a data folder of its own with no database in it, as on a machine autotune was just
  installed on: the shipped selection table answers (db/selection.json);
- `database`: a default database made (shipped records imported) and its selection table written by
  an earlier process, as on a machine that has used autotune before.

Each setting starts from an empty kernel cache (AUTOTUNE_CACHE_DIR of its own): the first process of a
problem unpacks its shipped kernel and checks the records, the table and the database's change count
in full, the later ones read the unpacked copy and trust those checks while the files are unchanged
(autotune/store/stamps.py). The problems are taken from the shipped records of this GPU (one GEMV per
dtype and a GEMM); nothing should compile.

Without a GPU, `--cpu` times the selection alone (from the call to the Choice, the GPU named "NVIDIA
H200" as the launcher would read it from the driver), the part of a first call that is Python work:

    python scripts/bench_first_call.py --cpu --repeats 20
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.bench.harness import require_cuda_torch, run_script

GOAL_MS = 5.0
# Preferred problems (op, dtype, m, n, k): where the shipped records of this GPU hold them.
WANTED = [
    ("gemv", "float16", 4096, 8192, 0),
    ("gemv", "bfloat16", 4096, 8192, 0),
    ("gemv", "float32", 4096, 8192, 0),
    ("gemm", "float16", 8, 4096, 4096),
]


def child(op: str, dtype: str, m: int, n: int, k: int, profile: bool = False) -> dict[str, Any]:
    """One first call in this (fresh) process; with `profile`, under cProfile, whose table of the
    functions that took longest comes back as "profile" (its times are inflated by the profiler)."""
    import torch

    import autotune
    from autotune import api

    origins: list[tuple[str, str]] = []

    class Origins(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:  # the launcher's "..., <source> config), <origin>"
            if record.args and len(record.args) >= 2:
                origins.append((str(record.args[-2]), str(record.args[-1])))

    launcher_log = logging.getLogger("autotune.runtime.launcher")
    launcher_log.addHandler(Origins())
    launcher_log.setLevel(logging.DEBUG)
    launcher_log.propagate = False

    phases = phase_timers(api)
    kind = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    if op == "gemv":
        a, b = torch.randn(m, n, generator=gen, device="cuda"), torch.randn(n, generator=gen, device="cuda")
    else:
        a, b = torch.randn(m, k, generator=gen, device="cuda"), torch.randn(k, n, generator=gen, device="cuda")
    a, b = a.to(kind), b.to(kind)
    torch.cuda.synchronize()  # the context exists and the operands are on the GPU
    collections = garbage_collections()
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    out = autotune.gemv(a, b) if op == "gemv" else autotune.gemm(a, b)
    torch.cuda.synchronize()
    if profiler is not None:
        profiler.disable()
    ms = (time.perf_counter() - start) * 1e3
    gc_ms, generations = collections()
    reference = a.double() @ b.double()
    error = float((out.double() - reference).abs().max() / reference.abs().max().clamp_min(1e-30))
    return {
        "ms": ms,
        "source": origins[0][0] if origins else None,
        "origin": origins[0][1] if origins else None,
        "selected_by": "store" if api.default_store_opened() else "table",
        "phases_ms": phases,
        "gc_ms": gc_ms,  # Python's garbage collections during the call (inside the phases, not beside them)
        "gc_generations": generations,
        "rel_error": error,
        "pycuda_loaded": "pycuda" in sys.modules,
        "sqlalchemy_loaded": "sqlalchemy" in sys.modules,
        **({"profile": profile_table(profiler)} if profiler is not None else {}),
    }


def profile_table(profiler: cProfile.Profile, rows: int = 30) -> str:
    """The profiled call's functions by their own time, then by their time with what they call, in
    milliseconds (pstats prints seconds to three places, too coarse for a call of a few ms)."""
    stats: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    entries = [
        (f"{Path(file).name}:{line}({name})", calls, own, total)
        for (file, line, name), (_, calls, own, total, _) in stats.items()
    ]
    lines = []
    for title, index in (("own time", 2), ("with callees", 3)):
        lines.append(f"{'ms':>8} {'calls':>6}  function   (by {title})")
        for where, calls, own, total in sorted(entries, key=lambda e: -e[index])[:rows]:
            lines.append(f"{(own if index == 2 else total) * 1e3:8.3f} {calls:6d}  {where}")
    return "\n".join(lines) + "\n"


def garbage_collections() -> Callable[[], tuple[float, list[int]]]:
    """Start noting Python's garbage collections; the function returned stops and gives their total
    milliseconds and generations. Which call a collection lands in depends on what the process
    allocated before; one of generation 1 took about 1 ms of a first call on the 2-core CPU of the
    machine without a GPU (tests' driver doubles)."""
    noted: list[tuple[int, float]] = []
    started: list[float] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            noted.append((info["generation"], (time.perf_counter() - started.pop()) * 1e3))

    gc.callbacks.append(note)

    def stop() -> tuple[float, list[int]]:
        gc.callbacks.remove(note)
        return sum(ms for _, ms in noted), [generation for generation, _ in noted]

    return stop


def phase_timers(api: Any) -> dict[str, float]:
    """Milliseconds the first call spends in each step, filled in as it runs: the launch path's
    functions wrapped with a clock (a few microseconds each); the rest of the call is "other"."""
    from autotune.gpu import device
    from autotune.runtime import launcher

    phases: dict[str, float] = {}

    def clock(owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                phases[label] = phases.get(label, 0.0) + (time.perf_counter() - begin) * 1e3

        setattr(owner, name, timed)

    clock(api.launch_path(), "chooser", "select config")
    clock(launcher, "find_kernel", "find kernel")
    clock(device.Device, "function", "load module")
    clock(launcher, "Device", "open device")
    return phases


CPU_GPU = ("NVIDIA H200", "GPU-bench", "9.0", 132, 60 << 20, 141 << 30, "580.159.04", "13.0")


def cpu_child(op: str, dtype: str, m: int, n: int, k: int) -> dict[str, Any]:
    """The selection of one first call in this (fresh) process, the device faked as the CPU tests do."""
    from types import SimpleNamespace

    import autotune  # noqa: F401  (the clock starts after the import, as on the GPU)
    from autotune import api
    from autotune.core.fingerprint import GpuInfo
    from autotune.ops import make_problem

    problem = make_problem(op, dtype, m, n, k or None)
    device = SimpleNamespace(gpu=GpuInfo(*CPU_GPU))
    before = set(sys.modules)
    collections = garbage_collections()
    start = time.perf_counter()
    choice = api.choose_on(problem, device, None)
    ms = (time.perf_counter() - start) * 1e3
    gc_ms, _ = collections()
    imported = sorted({name.split(".")[0] for name in set(sys.modules) - before})
    selected_by = "store" if api.default_store_opened() else "table"
    return {"ms": ms, "gc_ms": gc_ms, "source": choice.source, "selected_by": selected_by, "imported": imported}


def setting_env(scratch: Path, setting: str) -> tuple[Path, dict[str, str]]:
    """A folder of its own for one setting, and the environment of its processes: a data folder
    (with a default database made in it for the "database" setting) and an empty kernel cache."""
    folder = scratch / setting.replace(" ", "-")
    env = {**os.environ, "XDG_DATA_HOME": str(folder / "data"), "AUTOTUNE_CACHE_DIR": str(folder / "cache")}
    env.pop("AUTOTUNE_DB", None)
    if setting == "database":
        make_database(env)
    return folder, env


def cpu_main(repeats: int) -> int:
    """Medians of the selection's time in fresh processes, with and without a default database."""
    problems = shipped_problems(CPU_GPU[0])
    print(f"selection of a first call on this CPU ({CPU_GPU[0]} faked), {repeats} fresh processes each")
    with tempfile.TemporaryDirectory(prefix="first-call-cpu-") as scratch:
        for setting in ("no database", "database"):
            _, env = setting_env(Path(scratch), setting)
            for problem in problems:
                command = [sys.executable, __file__, "--cpu-child", *map(str, problem)]
                runs = []
                for _ in range(repeats):
                    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
                    runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                times = [run["ms"] for run in runs]
                op, dtype, m, n, k = problem
                name = f"{dtype} {op} {m}x{n}" + (f"x{k}" if k else "")
                chosen = ",".join(sorted({run["selected_by"] for run in runs}))
                imported = ",".join(sorted({name for run in runs[1:] for name in run["imported"]})) or "nothing"
                print(
                    f"{setting:12} {name:28} median {statistics.median(times):6.2f} ms  first {times[0]:6.2f}"
                    f"  max {max(times):6.2f}  {runs[0]['source']}, by {chosen}; later ones imported {imported}",
                    flush=True,
                )
    return 0


def shipped_problems(gpu: str) -> list[tuple[str, str, int, int, int]]:
    """The WANTED problems the shipped records hold for `gpu`, else the first of each (op, dtype)."""
    from autotune.store import selection_table as table

    path = table.shipped_path()
    held = table.read(path).table.problems() if path is not None and path.is_file() else []
    mine = [(p.op, p.dtype, p.m, p.n, p.k) for name, p in held if name == gpu and not p.trans]
    chosen = []
    for want in WANTED:
        if want in mine:
            chosen.append(want)
        else:
            chosen.extend([p for p in mine if p[:2] == want[:2]][:1])
    return chosen or WANTED  # a GPU without records: the defaults, shipped for compute capability 8.0-9.0


def run_child(problem: tuple[str, str, int, int, int], env: dict[str, str], profile: bool = False) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child-profile" if profile else "--child", *map(str, problem)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": last[0]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def make_database(env: dict[str, str]) -> None:
    """The default database of `env`'s data folder, made and its selection table written, looked at
    once by a process without the store (as a launch does: SQLite makes the write-ahead log's files)
    and left alone until its files are older than the stamps' racy window, as on a machine that has
    used autotune before."""
    code = (
        "from autotune import api; api.best('hgemv', 4096, 8192, gpu='NVIDIA H200'); "
        "from autotune.store import selection_table as table; assert table.default_table() is not None"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    code = "from autotune.store import selection_table as table; assert table.default_table() is not None"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    from autotune.store import stamps

    time.sleep(stamps.RACY_NS / 1e9 + 0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for first_call_<gpu>.json")
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per problem and setting")
    parser.add_argument("--cpu", action="store_true", help="time the selection alone, without a GPU")
    parser.add_argument("--profile", action="store_true", help="and one call each under cProfile")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--cpu-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    require_cuda_torch()
    if args.child or args.child_profile:
        op, dtype, m, n, k = args.child or args.child_profile
        print(json.dumps(child(op, dtype, int(m), int(n), int(k), profile=bool(args.child_profile))))
        return 0
    if args.cpu_child:
        op, dtype, m, n, k = args.cpu_child
        print(json.dumps(cpu_child(op, dtype, int(m), int(n), int(k))))
        return 0
    if args.cpu:
        return cpu_main(args.repeats)

    import torch

    from autotune.bench.harness import report_path, write_json
    from autotune.core.fingerprint import slugify

    gpu = torch.cuda.get_device_name(0)
    problems = shipped_problems(gpu)
    print(f"{gpu}: first call in a fresh process, {args.repeats} processes each (goal {GOAL_MS} ms)", flush=True)
    print(f"{'setting':12} {'problem':28} {'median ms':>9} {'first ms':>8} {'max ms':>7} {'origin':9} selected by")
    settings: dict[str, list[dict[str, Any]]] = {}
    profiles: list[str] = []
    with tempfile.TemporaryDirectory(prefix="first-call-") as scratch:
        for setting in ("no database", "database"):
            folder, env = setting_env(Path(scratch), setting)
            if setting == "database":
                shutil.rmtree(folder / "cache", ignore_errors=True)  # the kernels still to unpack
            rows = settings.setdefault(setting, [])
            for problem in problems:
                runs = [run_child(problem, env) for _ in range(args.repeats)]
                rows.append(summary(problem, runs))
                print_row(setting, rows[-1])
                if args.profile:
                    profiled = run_child(problem, env, profile=True)
                    profiles.append(f"=== {setting}: {problem}\n{profiled.get('profile', profiled.get('error'))}")
    compiled = any(
        run.get("origin") not in ("shipped", None) for rows in settings.values() for r in rows for run in r["runs"]
    )
    worst = max(
        (r["median_ms"] for rows in settings.values() for r in rows if r["median_ms"] is not None), default=None
    )
    result = {
        "gpu": gpu,
        "goal_ms": GOAL_MS,
        "repeats": args.repeats,
        "nvcc_on_path": shutil.which("nvcc") is not None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "compiled_any": compiled,
        "worst_median_ms": worst,
        "settings": settings,
    }
    path = write_json(report_path(args.out, "first_call", gpu), result)
    if profiles:  # where the time goes, not a result: beside the JSON for whoever asked
        (args.out / f"first_call_profile_{slugify(gpu)}.txt").write_text("\n".join(profiles))
    verdict = "meets" if worst is not None and worst <= GOAL_MS else "misses"
    print(f"wrote {path}: worst median {worst} ms ({verdict} the {GOAL_MS} ms goal); compiled anything: {compiled}")
    return 0


def summary(problem: tuple[str, str, int, int, int], runs: list[dict[str, Any]]) -> dict[str, Any]:
    op, dtype, m, n, k = problem
    times = [run["ms"] for run in runs if "ms" in run]
    return {
        "problem": {"op": op, "dtype": dtype, "m": m, "n": n, "k": k},
        "median_ms": statistics.median(times) if times else None,
        "first_ms": times[0] if times else None,
        "max_ms": max(times) if times else None,
        "runs": runs,
    }


def print_row(setting: str, row: dict[str, Any]) -> None:
    p = row["problem"]
    name = f"{p['dtype']} {p['op']} {p['m']}x{p['n']}" + (f"x{p['k']}" if p["k"] else "")
    runs = row["runs"]
    if row["median_ms"] is None:
        print(f"{setting:12} {name:28} failed: {runs[0].get('error')}", flush=True)
        return
    origins = ",".join(sorted({str(run.get("origin")) for run in runs}))
    chosen = ",".join(sorted({str(run.get("selected_by")) for run in runs}))
    times = f"{row['median_ms']:9.2f} {row['first_ms']:8.2f} {row['max_ms']:7.2f}"
    print(f"{setting:12} {name:28} {times} {origins:9} {chosen}", flush=True)
    later = [run["phases_ms"] for run in runs[1:] if run.get("phases_ms")]  # the kernel unpacked already
    if later:
        steps = {label: statistics.median(p.get(label, 0.0) for p in later) for label in later[0]}
        steps["other"] = statistics.median(run["ms"] for run in runs[1:]) - sum(steps.values())
        collected = [run.get("gc_ms", 0.0) for run in runs[1:]]
        hit = sum(1 for ms in collected if ms)
        gc_note = f"; garbage collection in {hit} of {len(collected)} calls, up to {max(collected):.2f}"
        print(" " * 13 + ", ".join(f"{label} {ms:.2f}" for label, ms in steps.items()) + gc_note, flush=True)


if __name__ == "__main__":
    run_script(main, "bench_first_call")
