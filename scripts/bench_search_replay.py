"""Search strategies replayed on public, fully brute-forced spaces (CPU only): how many evaluations each
needs to reach 2% (and 5%) of a space's optimum, over many seeds.

The spaces are Kernel Tuner cache files from github.com/AutoTuningAssociation/benchmark_hub, which
records every config's measured time. They are fetched, not committed; for example
    git clone https://github.com/AutoTuningAssociation/benchmark_hub
    "currently_unused/cachefiles/KernelTuner data/gemm/RTX_3090.json.gz"  (CLBlast Xgemm, RTX 3090)
    "cachefiles/convolution_milo/A4000.json.gz"                          (convolution, RTX A4000)
Configs absent from a file broke its restrictions: they are invalid and cost no evaluation, as our own
constraints rule configs out before compiling. Configs that failed (an error string for a time)
are evaluations with a failed outcome. See scripts/search_replay.py for the replay itself.

Strategies: `default` is what a sweep runs by default (autotune.tune.search.Study with the default
sampler, driven through a replay Measurer); the others name a sampler of the Study (`tpe-valid` proposes
only valid new configs, `tpe-local` adds one-step moves of the best config, `tpe-ranked` and `tpe-fresh`
rank the compiled candidates); `ga` is a plain genetic algorithm after Kernel Tuner's. --workers sets the
trials a Study keeps pending (a sweep's compile pool size; 16 by default, as on a 16-core host). Each run
is replayed up to --cap evaluations, unstopped; `reach_2pct_default_budget` applies the stop a sweep at
the default budget gives a shape nothing stored seeds (128 trials, patience 64: autotune/api.py's unseen
budget) to the same sequence of evaluations, which is exactly where that sweep would have stopped.
With --compile-times, each config compiles in the time its cache file recorded, on --workers compile
slots, and rows also report the simulated seconds to 2% (the recorded measurement times included).

    python scripts/bench_search_replay.py gemm_3090=RTX_3090.json.gz conv_a4000=A4000.json.gz
    python scripts/bench_search_replay.py --seeds 5 --strategies default,ga SPACE=FILE   # a quick look

Writes results/search_replay.json (rows {space, strategy, runs, median_to_2pct, ...}) and .png.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import search_replay as replay_lib

from autotune.bench.harness import write_json


@functools.cache
def _replay(path: str, name: str) -> replay_lib.Replay:
    return replay_lib.load(Path(path), name)


def _one_run(task: tuple[str, str, str, int, int, int, bool]) -> tuple[str, str, replay_lib.Run]:
    name, path, strategy, seed, cap, workers, compile_times = task
    replay = _replay(path, name)
    return name, strategy, replay_lib.STRATEGIES[strategy](replay, seed, cap, workers, compile_times)


def run_all(
    spaces: Mapping[str, Path],
    strategies: Sequence[str],
    seeds: int,
    cap: int,
    processes: int,
    workers: int,
    compile_times: bool = False,
) -> list[dict[str, Any]]:
    tasks = [
        (name, str(path), s, seed, cap, workers, compile_times)
        for name, path in spaces.items()
        for s in strategies
        for seed in range(seeds)
    ]
    runs: dict[tuple[str, str], list[replay_lib.Run]] = {}
    with multiprocessing.Pool(processes) as pool:
        for name, strategy, run in pool.imap_unordered(_one_run, tasks):
            runs.setdefault((name, strategy), []).append(run)
    rows = []
    for name, path in spaces.items():
        replay = _replay(str(path), name)
        for strategy in strategies:
            timed = compile_times and replay.timed
            traces = [r.values for r in runs[name, strategy]]
            row = {
                "space": name,
                "strategy": strategy,
                "sampler": replay_lib.DEFAULT_SAMPLER if strategy == "default" else strategy,  # the GA: "ga"
                # The GA keeps no trials pending; with recorded compile times it compiles each
                # generation on `workers` slots, which its seconds depend on.
                "workers": None if strategy in replay_lib.UNPOOLED and not timed else workers,
                # "recorded": each config compiled in its recorded time on `workers` slots, as a sweep's pool
                # does (the GA: a generation at a time); "instant": every config compiled when asked for.
                "compile": "recorded" if timed else "instant",
                "default_budget": f"{replay_lib.DEFAULT_TRIALS}/{replay_lib.DEFAULT_PATIENCE}",  # trials/patience
                **replay_lib.summarise(traces, replay.optimum),
            }
            if replay.timed:  # the clock: recorded measurement times (and compile times where "recorded")
                row["median_seconds_to_2pct"] = replay_lib.median_seconds_to(runs[name, strategy], replay.optimum, 0.02)
            row["valid_configs"] = len(replay.values)
            row["failing_configs"] = sum(v is None for v in replay.values.values())
            row["optimum"] = replay.optimum
            row["curve_2pct"] = _reach_curve(traces, replay.optimum, cap)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "curve_2pct"}), flush=True)
    return rows


_ROW_KEYS = frozenset({"space", "strategy", "workers"})  # what _row_key reads of every row


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return row["space"], row["strategy"], row["workers"], row.get("compile", "instant")


def _reach_curve(traces: Sequence[Sequence[float | None]], optimum: float, cap: int) -> list[float]:
    """Fraction of runs within 2% of the optimum after 1..cap evaluations (the plot's lines)."""
    hits = [replay_lib.evaluations_to(t, optimum, 0.02) for t in traces]
    return [sum(h is not None and h <= n for h in hits) / len(traces) for n in range(1, cap + 1)]


# The plot's lines: what a sweep runs by default, plain TPE and the genetic algorithm, at a sweep's 16
# pending trials, each compiled at once (solid) and in its recorded time (dashed); the other rows are
# in the report.
PLOTTED = ("default", "tpe", "ga")


def plot(report: Mapping[str, Any], path: Path) -> Path:
    from autotune.bench.harness import pyplot, save_beside

    plt = pyplot()
    rows = [r for r in report["rows"] if r["strategy"] in PLOTTED and r["workers"] in (None, 16)]
    spaces = list(dict.fromkeys(r["space"] for r in rows))
    fig, axes = plt.subplots(1, len(spaces), figsize=(5.0 * len(spaces), 4.2), squeeze=False)
    for axis, space in zip(axes[0], spaces, strict=True):
        for row in (r for r in rows if r["space"] == space):
            curve = row["curve_2pct"]
            timed = row.get("compile", "instant") == "recorded"
            seconds = f", {row['median_seconds_to_2pct']} s" if timed and row.get("median_seconds_to_2pct") else ""
            compiled = row.get("compile", "instant")
            median = row["median_to_2pct"] or "over half the runs never"
            label = f"{row['strategy']} ({row['sampler']}), {compiled}: median {median}{seconds}"
            color = {"default": "C0", "tpe": "C1", "ga": "C2"}[row["strategy"]]
            axis.plot(range(1, len(curve) + 1), curve, "--" if timed else "-", color=color, label=label)
        trials = replay_lib.DEFAULT_TRIALS
        axis.axvline(trials, color="grey", linestyle=":", label=f"budget of an unseen space ({trials} trials)")
        axis.set_xlabel("evaluations (failed configs included)")
        axis.set_ylabel(f"fraction of {report['seeds']} runs within 2% of the optimum")
        axis.set_ylim(0, 1.02)
        axis.set_title(space)
        axis.legend(fontsize=6, loc="lower right")
    return save_beside(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file (.json or .json.gz)")
    parser.add_argument("--strategies", default=",".join(replay_lib.STRATEGIES))
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--cap", type=int, default=200, help="evaluations per run")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--workers",
        type=int,
        default=replay_lib.DEFAULT_WORKERS,
        help="the compile pool's size: trials the Study keeps pending (not the GA's)",
    )
    parser.add_argument(
        "--compile-times",
        action="store_true",
        help="compile each config in the time the cache file recorded for it, on --workers slots (a sweep's "
        "compile pool), instead of at once; its evaluations and seconds to 2%% are reported",
    )
    parser.add_argument("--merge", action="store_true", help="keep the --out report's rows for other runs")
    parser.add_argument("--out", type=Path, default=Path("results/search_replay.json"))
    args = parser.parse_args(argv)
    if args.out.is_dir():
        print(
            f"error: --out {args.out} is a folder: give the report's file (results/search_replay.json)", file=sys.stderr
        )
        return 2
    old: list[dict[str, Any]] = []
    if args.merge and args.out.exists():  # read before hours of replays, not after
        try:
            old = json.loads(args.out.read_text())["rows"]
            if not isinstance(old, list) or not all(isinstance(r, dict) and r.keys() >= _ROW_KEYS for r in old):
                raise ValueError(f"its rows are not objects with {', '.join(sorted(_ROW_KEYS))}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: --merge: {args.out} is not a replay report ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
    spaces = dict(s.split("=", 1) if "=" in s else (Path(s).name, s) for s in args.spaces)
    strategies = args.strategies.split(",")
    unknown = [s for s in strategies if s not in replay_lib.STRATEGIES]
    if unknown:
        print(f"error: unknown strategies {unknown}: choose from {list(replay_lib.STRATEGIES)}", file=sys.stderr)
        return 2
    try:
        for name, path in spaces.items():
            _replay(path, name)
    except replay_lib.ReplayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = run_all(
        {n: Path(p) for n, p in spaces.items()},
        strategies,
        args.seeds,
        args.cap,
        args.processes,
        args.workers,
        args.compile_times,
    )
    new = {_row_key(r) for r in rows}
    rows = [r for r in old if _row_key(r) not in new] + rows
    report = {"seeds": args.seeds, "cap": args.cap, "rows": rows}
    write_json(args.out, report)
    print(args.out, plot(report, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
