"""Re-time the shipped records' best configs on this machine's GPU, through the tuning worker as it is.

For a change to how the worker loads and launches candidates (not to the kernels): every shipped
problem of this GPU's GEMV and GEMM records measured with the current kernel source gets its best
config compiled, checked and timed once more, and the time is set beside the stored one. Running it
from two trees in one call on the GPU machine (PYTHONPATH pointing at an older checkout's autotune/
and kernels/) separates what the worker change does from how this machine differs from the one that
tuned (scripts/gpu_steps.sh retime-shipped with OLD_TREE does this):

    python scripts/retime_shipped.py --out $OUT --label new
    PYTHONPATH=/tmp/old python scripts/retime_shipped.py --out $OUT --label old
    python scripts/retime_shipped.py --compare $OUT/retime_new.json $OUT/retime_old.json \
        [--keep results/retime_nvidia-h200.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune import ops
from autotune.build.compiler import CompilePool
from autotune.core.fingerprint import slugify
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.measure.worker.client import Worker

RECORDS = Path(__file__).resolve().parent.parent / "db" / "records"
FILES = ("gemv", "gemv-trans", "gemm", "gemm-nt")  # the GEMV and GEMM records (not int4, not cuBLAS)
WITHIN = 0.02  # sweep --retime's tolerance


def problem_of(line: dict[str, Any]) -> Problem:
    return ops.make_problem(
        line["op"],
        line["dtype"],
        line["m"],
        line["n"],
        line.get("k") or None,
        line.get("trans", False),
        inputs=line.get("inputs", ()),
        variant=line.get("variant", ""),
    )


def shipped_best(gpu_slug: str, per_file: int) -> list[tuple[Problem, dict[str, int], float]]:
    """(problem, best config, its stored time) for at most `per_file` current problems of each file,
    spread evenly over it; the files taken in turns, so that a deadline cuts all of them alike."""
    files = [list(_file_best(gpu_slug, name)) for name in FILES]
    picked = [found[:: max(1, -(-len(found) // per_file))] for found in files]
    return [row for turn in itertools.zip_longest(*picked) for row in turn if row is not None]


def _file_best(gpu_slug: str, name: str) -> Iterator[tuple[Problem, dict[str, int], float]]:
    """The best stored trial of each problem of one records file measured with the current kernel source."""
    path = RECORDS / (f"{gpu_slug}.jsonl" if name == "gemv" else f"{gpu_slug}-{name}.jsonl")
    if not path.exists():
        return  # no such records for this GPU
    best: dict[Problem, tuple[dict[str, int], float]] = {}
    for text in path.read_text().splitlines():
        line = json.loads(text)
        if line.get("kind") != "trial" or line.get("time_us") is None:
            continue
        problem = problem_of(line)
        if line["source_hash"] != ops.source_hash(problem):
            continue  # stale: not what the current kernels run
        if problem not in best or line["time_us"] < best[problem][1]:
            best[problem] = (line["config"], line["time_us"])
    yield from ((p, c, t) for p, (c, t) in best.items())


def _report(path: Path) -> Any:
    """An earlier run's report; a ValueError naming the file where it cannot be read. (Read here, not
    by autotune's harness: this script also runs against older checkouts' autotune.)"""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None


def retime(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    out = args.out / f"retime_{args.label}.json"
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with Worker() as worker, CompilePool() as pool:
        gpu = worker.hello()
        todo = shipped_best(slugify(gpu.name), args.per_file)
        futures = [pool.submit(ops.compile_job(p, c, gpu.arch)) for p, c, _ in todo]
        for (problem, config, stored), future in zip(todo, futures, strict=True):
            if time.perf_counter() - start > args.deadline:
                print(f"deadline: {len(rows)} of {len(todo)} problems", flush=True)
                for queued in futures:
                    queued.cancel()
                break
            compiled = future.result()
            worker.setup(problem, seed=len(rows))
            outcome = worker.measure(compiled.cubin, compiled.job.name, config) if compiled.cubin is not None else None
            ok = outcome is not None and outcome.status == Status.OK
            rows.append(
                {
                    "problem": str(problem),
                    "config": config,
                    "stored_us": stored,
                    "now_us": outcome.time_us if ok and outcome is not None else None,
                    "status": "compile failed" if outcome is None else outcome.status.value,
                }
            )
            out.write_text(json.dumps({"gpu": gpu.name, "label": args.label, "rows": rows}, indent=1))
    summarize(rows, args.label)


def summarize(rows: list[dict[str, Any]], label: str) -> None:
    ratios = [r["now_us"] / r["stored_us"] for r in rows if r["now_us"]]
    failed = [r for r in rows if not r["now_us"]]
    if not ratios:
        print(f"{label}: {len(rows)} problems, none timed")
        return
    within = sum(ratio <= 1 + WITHIN for ratio in ratios)
    print(
        f"{label}: {len(rows)} problems, {within} within {WITHIN:.0%} of the stored time, "
        f"median now/stored {statistics.median(ratios):.4f}, worst {max(ratios):.4f}, {len(failed)} failed"
    )
    for r in failed:
        print(f"  failed: {r['problem']} {r['config']}: {r['status']}")


def compare(first: Path, second: Path, keep: Path | None = None) -> None:
    """Print how the first run's times compare with the second's, problem by problem; with `keep`, write
    both runs' times and the summary there (results/retime_<gpu>.json, which docs/design.md quotes)."""
    a, b = (_report(p) for p in (first, second))
    summarize(a["rows"], a["label"])
    summarize(b["rows"], b["label"])
    theirs = {r["problem"]: r["now_us"] for r in b["rows"] if r["now_us"]}
    pairs = [(r, r["now_us"] / theirs[r["problem"]]) for r in a["rows"] if r["now_us"] and r["problem"] in theirs]
    ratios = sorted(ratio for _, ratio in pairs)
    if not ratios:
        print(f"{a['label']} / {b['label']}: no problem timed in both")
        return
    summary = {
        "problems": len(pairs),
        "median": round(statistics.median(ratios), 4),
        "within_2pct": sum(abs(x - 1) <= WITHIN for x in ratios),
        "lowest": round(ratios[0], 4),
        "highest": round(ratios[-1], 4),
    }
    print(
        f"{a['label']} / {b['label']} over {summary['problems']} problems: median {summary['median']:.4f}, "
        f"{summary['within_2pct']} within {WITHIN:.0%}, range {ratios[0]:.4f}-{ratios[-1]:.4f}"
    )
    for row, ratio in sorted(pairs, key=lambda p: -abs(p[1] - 1))[:8]:
        print(f"  {row['problem']}: {ratio:.4f} ({row['now_us']:.2f} us against {theirs[row['problem']]:.2f})")
    if keep is not None:
        rows = [
            {
                **{k: row[k] for k in ("problem", "config", "stored_us")},
                f"{a['label']}_us": row["now_us"],
                f"{b['label']}_us": theirs[row["problem"]],
            }
            for row, _ in pairs
        ]
        report = {"gpu": a["gpu"], "first": a["label"], "second": b["label"], "summary": summary, "rows": rows}
        keep.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {keep}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp"), help="folder for retime_<label>.json")
    parser.add_argument("--label", default="now", help="names this tree's file")
    parser.add_argument("--per-file", type=int, default=1000, help="problems of each records file, spread evenly")
    parser.add_argument("--deadline", type=float, default=1e9, help="seconds after which no problem starts")
    parser.add_argument("--compare", type=Path, nargs=2, metavar="JSON", help="two earlier runs, nothing timed")
    parser.add_argument("--keep", type=Path, metavar="JSON", help="with --compare: write both runs and the summary")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out} is a file: give the folder retime_<label>.json goes in", file=sys.stderr)
        return 2
    if args.compare:
        try:
            compare(*args.compare, keep=args.keep)
        except ValueError as error:
            print(f"error: --compare: {error}", file=sys.stderr)
            return 2
    else:
        retime(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
