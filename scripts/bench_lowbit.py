"""Benchmark: our int4 weight-only linear beside float16 (ours and torch's), torch's tinygemm and gemlite, on
this GPU; writes results/lowbit_<gpu>.json and a plot beside it.

Run on the GPU machine (gemlite and torchao install from .whl/):
    python scripts/bench_lowbit.py --out results            # every case, shape and M
    python scripts/bench_lowbit.py --quick                  # two shapes, M 1 and 16, g128 float16 and bfloat16
    python scripts/bench_lowbit.py --summary results/lowbit_nvidia-h200.json   # the goal figures of a file

For each case (group, symmetric or not, activation dtype) and (N, K) pair of autotune/ops/gemm/llm_shapes.txt,
the weight is quantized with autotune.quantize and, for every M, these run on the same inputs:
ours (autotune.linear on the QuantizedWeight), ours_fp16 (autotune.linear on the dequantized weight),
torch_fp16 (the faster of torch.mv at M = 1 and F.linear on it), tinygemm (torch's _weight_int4pack_mm,
bfloat16 activations only, the best of innerKTiles 2, 4, 8) and gemlite (A16W4, autotuned here). All are timed
in turns in one process by the benchmarks' timer (scripts/lowbit_runs.py), the weights rotating over copies
that together exceed the L2 several times, so every call reads them from DRAM. `*_us` are isolated times:
each call followed by an empty non-PDL kernel, so no call overlaps its neighbour's tail, less that kernel's
own time; `*_b2b_us` are the same calls back to back. `bytes` counts what must move once (packed weight,
scales, zeros, x, y); `copy_gbs` is a device-to-device copy of the same run. max_rel_err is
max|y - y64| / max|y64| of ours against a float64 product on the exact dequantized weight; peer_max_rel_err
the same for F.linear on the weight rounded to the activations' dtype, against that weight's float64 product.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.bench.harness import read_json
from autotune.core.errors import AutotuneError
from autotune.core.problem import input_bytes, read_shapes_file
from autotune.ops.gemm import LLM_SHAPES_FILE

LLM_SHAPES = LLM_SHAPES_FILE
MS = (1, 4, 8, 16, 32, 64)
# What the shipped records cover: g128 symmetric and asymmetric with float16, g128 symmetric with bfloat16.
CASES = ("g128:float16", "g128a:float16", "g128:bfloat16")
QUICK_MS, QUICK_PAIRS, QUICK_CASES = (1, 16), 2, ("g128:float16", "g128:bfloat16")
GROUPS = (32, 64, 128)
ACTIVATION_DTYPES = ("float16", "bfloat16")
BIG_PACKED_BYTES = 32 * 2**20  # matrices this big (packed) are held to the copy-bandwidth goal
LARGE_M = 1024  # batches this large (a prefill) dequantize the weight and run the GEMM: held to 0.8x torch
PEERS = ("torch_fp16", "ours_fp16", "tinygemm", "gemlite")


@dataclass(frozen=True)
class Case:
    group: int
    sym: bool
    dtype: str  # the activations' (and scales', and output's)

    @property
    def variant(self) -> str:
        return f"g{self.group}" if self.sym else f"g{self.group}a"


def parse_case(text: str) -> Case:
    """'g128:float16' (symmetric) or 'g64a:bfloat16' (asymmetric) -> a Case."""
    variant, _, dtype = text.partition(":")
    sym = not variant.endswith("a")
    digits = variant[1:] if sym else variant[1:-1]
    if not (variant.startswith("g") and digits.isdigit() and int(digits) in GROUPS and dtype in ACTIVATION_DTYPES):
        groups = "/".join(str(g) for g in GROUPS)
        raise argparse.ArgumentTypeError(
            f"case {text!r}: want g<group>[a]:<dtype>, group {groups}, 'a' for asymmetric, dtype "
            f"{' or '.join(ACTIVATION_DTYPES)} (e.g. g128a:float16)"
        )
    return Case(int(digits), sym, dtype)


def unique_bytes(m: int, n: int, k: int, case: Case) -> int:
    """DRAM bytes a call must move once: the packed weight, its scales and zeros, x and y."""
    groups = n * (k // case.group)
    weight = input_bytes(n * k, "int4") + input_bytes(groups, case.dtype)
    zeros = 0 if case.sym else input_bytes(groups, "uint8")
    return weight + zeros + input_bytes(m * k, case.dtype) + input_bytes(m * n, case.dtype)


def packed_bytes(n: int, k: int) -> int:
    return input_bytes(n * k, "int4")


def nk_pairs(shapes: Iterable[Sequence[int]]) -> list[tuple[int, int]]:
    """The distinct (N, K) pairs of 'M N K' shapes, in the file's order."""
    return list(dict.fromkeys((int(s[1]), int(s[2])) for s in shapes))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for lowbit_<gpu>.json")
    parser.add_argument("--shapes", type=Path, default=LLM_SHAPES, help="'M N K' lines; their (N, K) pairs are used")
    parser.add_argument("--m", type=int, nargs="+", default=list(MS), help="rows of x (default: 1 4 8 16 32 64)")
    parser.add_argument("--cases", type=parse_case, nargs="+", help=f"default: {' '.join(CASES)}")
    parser.add_argument("--quick", action="store_true", help="two (N, K) pairs, M 1 and 16, g128 float16, bfloat16")
    parser.add_argument("--gemlite", choices=["max", "fast", "off"], default="max", help="gemlite's autotune mode")
    parser.add_argument(
        "--gemlite-configs",
        type=Path,
        metavar="JSON",
        help="gemlite's autotuned configs: loaded where the file exists, written after each (N, K) pair",
    )
    parser.add_argument("--merge", action="store_true", help="keep the file's rows of other cases, shapes and M")
    parser.add_argument(
        "--keep-gemlite",
        action="store_true",
        help="with --merge --gemlite off: a re-measured row keeps gemlite's times from the file's row, with a note",
    )
    parser.add_argument("--reps", type=int, default=7, help="timed samples per variant (median kept)")
    parser.add_argument("--summary", type=Path, metavar="JSON", help="print the goal figures of a report, nothing run")
    args = parser.parse_args(argv)
    if args.quick:
        args.m, args.cases = list(QUICK_MS), args.cases or [parse_case(c) for c in QUICK_CASES]
    args.cases = args.cases or [parse_case(c) for c in CASES]
    if any(m < 1 for m in args.m) or args.reps < 1:
        parser.error("--m and --reps must be positive")
    if args.keep_gemlite and not (args.merge and args.gemlite == "off"):
        parser.error("--keep-gemlite carries the file's gemlite times into a --merge run with --gemlite off")
    return args


def plan(args: argparse.Namespace) -> list[tuple[int, int]]:
    pairs = nk_pairs(read_shapes_file(args.shapes, ("M", "N", "K")))
    return pairs[:QUICK_PAIRS] if args.quick else pairs


# -- the goal figures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    name: str
    value: float | None  # None: no row had both times
    goal: float | None  # the target, where it sets one (a floor)

    def line(self) -> str:
        value = "n/a" if self.value is None else f"{self.value:.3f}"
        verdict = "" if self.goal is None or self.value is None else ("  ok" if self.value >= self.goal else "  MISSED")
        goal = "" if self.goal is None else f"  (goal >= {self.goal:g})"
        return f"{self.name:58} {value:>8}{goal}{verdict}"


def _ratios(rows: Iterable[Mapping[str, Any]], peer: str) -> list[float]:
    return [r[f"{peer}_us"] / r["ours_us"] for r in rows if r.get(f"{peer}_us") and r.get("ours_us")]


def _geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean(values) if values else None


def case_label(row: Mapping[str, Any]) -> str:
    return f"g{row['group']}{'' if row['sym'] else 'a'} {row['dtype']}"


def goal_figures(report: Mapping[str, Any]) -> list[Figure]:
    """The issue's goals, per case of the g128 rows: M = 1 speedups (geometric mean over the (N, K) pairs),
    gemlite's worst shape, the share of copy bandwidth of big matrices, and M = 4, 16, 64 over torch."""
    figures: list[Figure] = []
    rows = [r for r in report["rows"] if r["group"] == 128]
    for label in dict.fromkeys(case_label(r) for r in rows):
        case_rows = [r for r in rows if case_label(r) == label]
        at_1 = [r for r in case_rows if r["m"] == 1]
        goals = {"torch_fp16": 3.2, "ours_fp16": 2.7, "tinygemm": 1.8, "gemlite": 1.5}
        for peer, goal in goals.items():
            figures.append(Figure(f"{label} M=1 geomean speedup over {peer}", _geomean(_ratios(at_1, peer)), goal))
        gemlite = _ratios(at_1, "gemlite")
        figures.append(Figure(f"{label} M=1 worst speedup over gemlite", min(gemlite, default=None), 1.2))
        big = [r for r in at_1 if packed_bytes(r["n"], r["k"]) >= BIG_PACKED_BYTES and r.get("ours_us")]
        shares = [100.0 * r["bytes"] / (r["ours_us"] * 1e3) / report["copy_gbs"] for r in big]
        figures.append(Figure(f"{label} M=1 worst % of copy_gbs, >= 32 MiB packed", min(shares, default=None), 85.0))
        for m, goal in ((4, 2.5), (16, 2.0), (64, 1.3)):
            at_m = [r for r in case_rows if r["m"] == m]
            figures.append(
                Figure(f"{label} M={m} geomean speedup over torch_fp16", _geomean(_ratios(at_m, "torch_fp16")), goal)
            )
        # Past qgemm.MAX_M rows the weight is dequantized for the GEMM: the goal holds at every M >= 1024 run.
        large = sorted({r["m"] for r in case_rows if r["m"] >= LARGE_M})
        per_m = [_geomean(_ratios([r for r in case_rows if r["m"] == m], "torch_fp16")) for m in large]
        worst = min((v for v in per_m if v is not None), default=None)
        figures.append(Figure(f"{label} M>={LARGE_M} worst geomean speedup over torch_fp16", worst, 0.8))
    return figures


def print_summary(report: Mapping[str, Any]) -> None:
    print(f"{report.get('gpu', '?')}: copy {report['copy_gbs']:.0f} GB/s")
    for figure in goal_figures(report):
        print(figure.line())
    for note in sorted({n for r in report["rows"] for n in r.get("notes", [])}):
        print(f"note: {note}")


def read_report(path: Path) -> dict[str, Any]:
    report = read_json(path)
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list) or "copy_gbs" not in report:
        raise AutotuneError(f"{path} is not a bench_lowbit report (no copy_gbs and rows)")
    return report


# -- the plot --------------------------------------------------------------------------------------------


def draw(report: Mapping[str, Any], path: Path) -> Path:
    """Per case, bandwidth at M = 1 per (N, K): ours, ours float16, torch float16, tinygemm, gemlite."""
    from autotune.bench.harness import pyplot, save_beside

    plt = pyplot()
    labels = list(dict.fromkeys(case_label(r) for r in report["rows"]))
    fig, axes = plt.subplots(len(labels), 1, figsize=(14, 4.2 * len(labels)), squeeze=False)
    for axis, label in zip(axes[:, 0], labels, strict=True):
        rows = [r for r in report["rows"] if case_label(r) == label and r["m"] == 1]
        width = 0.16
        for i, who in enumerate(("ours", *PEERS)):
            gbs = [r["bytes"] / (r[f"{who}_us"] * 1e3) if r.get(f"{who}_us") else 0.0 for r in rows]
            axis.bar([p + (i - 2) * width for p in range(len(rows))], gbs, width, label=who)
        axis.axhline(report["copy_gbs"], color="black", linestyle="--", linewidth=1, label="device copy")
        axis.set_xticks(range(len(rows)), [f"{r['n']}x{r['k']}" for r in rows], fontsize=8)
        axis.set_ylabel("GB/s (int4 bytes that must move / time)")
        axis.set_title(f"{report['gpu']} int4 {label}, M = 1, isolated calls")
        axis.legend(loc="upper left", fontsize=8, ncols=3)
    return save_beside(fig, path)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.summary:
            print_summary(read_report(args.summary))
            return 0
        from lowbit_runs import run_benchmark

        path = run_benchmark(args, plan(args))
    except AutotuneError as exc:
        print(f"bench_lowbit: {exc}", file=sys.stderr)
        return 2
    report = read_report(path)
    print_summary(report)
    from autotune.bench.harness import plot_or_say_why_not

    plot_or_say_why_not(draw, report, path, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
