"""Benchmark: our 8-bit weight-only product (int8 and float8 e4m3 codes, a scale a row) beside float16 (our
GEMV/GEMM and torch's) on the dequantized weight and gemlite's A16W8 kernels, on this GPU; writes
results/lowbit8_<gpu>.json.

Run on the GPU machine (needs torch with CUDA and PyCUDA; gemlite, optional, installs from .whl/):
    python scripts/bench_lowbit8.py --out results                 # both kinds, the 8 (N, K) pairs, M = 1
    python scripts/bench_lowbit8.py --m 1 4 16 --kinds int8 --merge   # some M, one kind, other rows kept
    python scripts/bench_lowbit8.py --gemlite-configs results/gemlite8_configs.json   # gemlite's tuning kept
    python scripts/bench_lowbit8.py --summary results/lowbit8_nvidia-h200.json

For each kind, activation dtype and (N, K) pair of autotune/ops/q8gemm/shapes.txt, a random weight
(normal, 1/sqrt(K)) is quantized with format.quantize8 and, for every M, these run on the same x: ours
(autotune.call("q8gemm") on the codes and scales), ours_fp16 (autotune.linear on the dequantized weight in
the activations' dtype), torch_fp16 (the faster of torch.mv at M = 1 and F.linear on it) and gemlite
(gemlite.helper.A16W8_INT8 or A16W8_FP8 on the same codes and scales, pre-quantized: both compute
x (codes * scales)^T; gemlite's first call autotunes, in the mode --gemlite names, and is timed apart as
gemlite_autotune_s). All are timed in turns by the benchmarks' isolated clock (autotune/bench/harness.py:
each call followed by an empty non-PDL kernel, less its own time; `*_b2b_us` back to back), the weights
rotating over copies that together exceed the L2 several times, so every call reads them from DRAM.
`bytes` counts what must move once (codes, scales, x, y); `copy_gbs` is a device-to-device copy of the
same run. max_rel_err is max|y - y64| / max|y64| of ours against a float64 product on the exact weight
(codes times scales), gemlite_max_rel_err the same for gemlite; peer_max_rel_err the same for F.linear on
the weight rounded to the activations' dtype. A row's gemlite fields are null where gemlite is off or
cannot run, and its notes say why.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.bench.harness import read_json
from autotune.core.errors import AutotuneError
from autotune.core.problem import read_shapes_file
from autotune.ops.q8gemm import OP

KINDS = ("int8", "fp8")
DTYPES = ("float16",)
BIG_BYTES = 32 * 2**20  # matrices this big (one byte a weight) are held to the copy-bandwidth goal
# Issue 51's goals at M = 1 (geometric means over the pairs; every big matrix's share of copy; gemlite's
# worst pair).
GOALS = {"torch_fp16": 1.9, "ours_fp16": 1.6, "copy_pct": 90.0, "gemlite": 1.0}
GEMLITE_OFF = "gemlite: off (--gemlite off)"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for lowbit8_<gpu>.json")
    parser.add_argument("--m", type=int, nargs="+", default=[1], help="rows of x (default: 1)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--dtypes", nargs="+", choices=("float16", "bfloat16"), default=list(DTYPES))
    parser.add_argument("--reps", type=int, default=7, help="timed samples per variant (median kept)")
    parser.add_argument("--gemlite", choices=["max", "fast", "off"], default="max", help="gemlite's autotune mode")
    parser.add_argument(
        "--gemlite-configs",
        type=Path,
        metavar="JSON",
        help="gemlite's autotuned configs, a file a kind beside it (X.int8.json, X.fp8.json): loaded where "
        "it exists, written after each (N, K) pair",
    )
    parser.add_argument("--merge", action="store_true", help="keep the file's rows of other kinds, dtypes and M")
    parser.add_argument(
        "--keep-gemlite",
        action="store_true",
        help="with --merge --gemlite off: a re-measured row keeps gemlite's times from the file's row, with a note",
    )
    parser.add_argument(
        "--pairs", nargs="+", metavar="NxK", type=pair, help="only these (N, K) pairs of the op's shapes (default: all)"
    )
    parser.add_argument("--summary", type=Path, metavar="JSON", help="print the goal figures of a report, nothing run")
    args = parser.parse_args(argv)
    if any(m < 1 for m in args.m) or args.reps < 1:
        parser.error("--m and --reps must be positive")
    if args.gemlite_configs is not None and args.gemlite == "fast":
        parser.error("--gemlite-configs keeps gemlite's max-mode configs only")
    if args.keep_gemlite and not (args.merge and args.gemlite == "off"):
        parser.error("--keep-gemlite carries the file's gemlite times into a --merge run with --gemlite off")
    return args


def pair(text: str) -> tuple[int, int]:
    """An --pairs argument, NxK, one of the op's standard pairs."""
    try:
        n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not NxK (for example 4096x14336)") from None
    if (n, k) not in pairs():
        known = " ".join(f"{a}x{b}" for a, b in pairs())
        raise argparse.ArgumentTypeError(f"{n}x{k} is not one of the op's pairs: {known}")
    return n, k


def pairs() -> list[tuple[int, int]]:
    """The (N, K) pairs of the op's standard shapes, in file order."""
    return list(dict.fromkeys((n, k) for _, n, k in read_shapes_file(OP.shapes_file, ("M", "N", "K"))))


def unique_bytes(m: int, n: int, k: int, item: int = 2) -> int:
    """Codes (a byte a weight), a scale a row, x and y."""
    return n * k + n * item + (m * k + m * n) * item


def kind_configs(path: Path | None, kind: str) -> Path | None:
    """gemlite's config file for one kind: X.json -> X.int8.json. gemlite keys a config by (M, N, K, group,
    values a word, activations' dtype * 100 + bits): int8 and fp8 weights share keys, so each has a file."""
    return None if path is None else path.with_name(f"{path.stem}.{kind}{path.suffix}")


def _geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean(values) if values else None


def _verdict(value: float | None, goal: float) -> tuple[str, str]:
    return ("n/a", "") if value is None else (f"{value:.3f}", "  ok" if value >= goal else "  MISSED")


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The goal figures at M = 1, per kind and dtype."""
    lines = [f"{report.get('gpu', '?')}: copy {report['copy_gbs']:.0f} GB/s"]
    cases = dict.fromkeys((r["format"], r["dtype"]) for r in report["rows"])
    for kind, dtype in cases:
        rows = [r for r in report["rows"] if (r["format"], r["dtype"]) == (kind, dtype) and r["m"] == 1]
        for peer in ("torch_fp16", "ours_fp16"):
            shown, verdict = _verdict(_geomean([r[f"{peer}_us"] / r["ours_us"] for r in rows]), GOALS[peer])
            lines.append(
                f"{kind} {dtype} M=1 geomean speedup over {peer:10} {shown:>7} (goal >= {GOALS[peer]}){verdict}"
            )
        gemlite = [r["gemlite_us"] / r["ours_us"] for r in rows if r.get("gemlite_us")]
        shown, verdict = _verdict(min(gemlite, default=None), GOALS["gemlite"])
        lines.append(f"{kind} {dtype} M=1 worst speedup over gemlite {shown:>12} (goal >= {GOALS['gemlite']}){verdict}")
        big = [r for r in rows if r["n"] * r["k"] >= BIG_BYTES]
        shares = [100.0 * r["bytes"] / (r["ours_us"] * 1e3) / report["copy_gbs"] for r in big]
        worst = min(shares, default=None)
        shown = "n/a" if worst is None else f"{worst:.1f}"
        verdict = "" if worst is None else ("  ok" if worst >= GOALS["copy_pct"] else "  MISSED")
        lines.append(
            f"{kind} {dtype} M=1 worst % of copy, >= 32 MiB {shown:>22} (goal >= {GOALS['copy_pct']}){verdict}"
        )
    return lines


def _quantized_copies(torch: Any, kind: str, dtype: str, n: int, k: int, copies: int) -> list[dict[str, Any]]:
    """`copies` weights: codes and scales on the GPU and the dense weight rounded to `dtype`; the first
    also holds the exact weight in float64 (codes times scales), for the errors."""
    import numpy as np

    from autotune.core import dtypes
    from autotune.ops.q8gemm import format as q8format

    made = []
    rng = np.random.default_rng(n * 7 + k)
    for copy in range(copies):
        w = (rng.standard_normal((n, k), dtype=np.float32) / math.sqrt(k)).astype(np.float32)
        weight = q8format.quantize8(w, kind, dtype)
        scales = dtypes.decode(weight.scales, dtype).astype(np.float32)
        exact = torch.from_numpy(q8format.codes_values(weight.codes, kind)).cuda().double()
        exact *= torch.from_numpy(scales).cuda().double()[:, None]
        made.append(
            {
                "codes": torch.from_numpy(weight.codes).cuda(),
                "scales": torch.from_numpy(scales).to(getattr(torch, dtype)).cuda(),
                "exact": exact if copy == 0 else None,
                "rounded": exact.to(getattr(torch, dtype)),
            }
        )
        del exact
    return made


def gemlite_layer(gemlite: Any, torch: Any, kind: str, dtype: str, codes: Any, scales: Any) -> Any:
    """gemlite's A16W8 layer on our codes and scales (gemlite/helper.py's A16W8.from_weights, pre-quantized:
    an int8 or float8_e4m3fn weight (N, K) and a scale a row, w = code * scale[n], no bias), with its
    defaults: the weight scaled before the dot product, gemlite's own A16W8 layout."""
    make = gemlite.helper.A16W8_INT8 if kind == "int8" else gemlite.helper.A16W8_FP8
    weight = codes.view(torch.int8 if kind == "int8" else torch.float8_e4m3fn)  # the same bytes, no copy
    return make(device=str(codes.device), dtype=getattr(torch, dtype)).from_weights(weight, bias=None, scales=scales)


def gemlite_layers(gemlite: Any, torch: Any, weights: list[dict[str, Any]], kind: str, dtype: str) -> list[Any]:
    """A layer per rotating copy; AutotuneError with gemlite's reason where it takes none of them."""
    from lowbit_runs import first_line

    try:
        return [gemlite_layer(gemlite, torch, kind, dtype, w["codes"], w["scales"]) for w in weights]
    except Exception as exc:  # a shape or dtype gemlite refuses: the row says so, the run goes on
        raise AutotuneError(f"gemlite: {first_line(exc)}") from None


def _rel_err(torch: Any, y: Any, want: Any) -> float:
    got = y.double().reshape(want.shape)
    if not bool(torch.isfinite(got).all()):
        return math.nan
    return float((got - want).abs().max() / want.abs().max())


def _first_gemlite_call(torch: Any, runs: dict[str, Any], exact: Any, notes: list[str]) -> dict[str, float]:
    """gemlite's first call (its autotune, timed) and its error; where it fails, dropped with a note."""
    from lowbit_runs import first_line

    if "gemlite" not in runs:
        return {}
    begin = time.perf_counter()
    try:
        y = runs["gemlite"](0)
        torch.cuda.synchronize()
    except Exception as exc:  # gemlite cannot run this shape: reported, not fatal
        notes.append(f"gemlite: {first_line(exc)}")
        del runs["gemlite"]
        return {}
    return {"gemlite_autotune_s": time.perf_counter() - begin, "gemlite_max_rel_err": _rel_err(torch, y, exact)}


def measure_row(
    torch: Any,
    clock: Any,
    weights: list[dict[str, Any]],
    kind: str,
    dtype: str,
    m: int,
    gemlite: Sequence[Any] = (),
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """Every variant at M rows of x, timed in turns; `gemlite`: its layers, one a copy (none: not run)."""
    import autotune

    n, k = weights[0]["codes"].shape
    c = len(weights)
    xs = [torch.randn(m, k, device="cuda", dtype=getattr(torch, dtype)) for _ in weights]
    F = torch.nn.functional
    runs = {
        "ours": lambda i: autotune.call(
            "q8gemm", xs[i % c], weights[i % c]["codes"], weights[i % c]["scales"], options=(kind,)
        ),
        "ours_fp16": lambda i: autotune.linear(xs[i % c], weights[i % c]["rounded"]),
        "torch_linear": lambda i: F.linear(xs[i % c], weights[i % c]["rounded"]),
    }
    if m == 1:
        y = torch.empty(n, device="cuda", dtype=xs[0].dtype)
        runs["torch_mv"] = lambda i: torch.mv(weights[i % c]["rounded"], xs[i % c][0], out=y)
    if gemlite:
        runs["gemlite"] = lambda i: gemlite[i % c](xs[i % c])  # (M, K) in, (M, N) out
    exact = xs[0].double() @ weights[0]["exact"].T
    rounded = xs[0].double() @ weights[0]["rounded"].double().T
    errors = {
        "ours": _rel_err(torch, runs["ours"](0), exact),
        "peer": _rel_err(torch, runs["torch_linear"](0), rounded),
    }
    runs["ours_fp16"](0)
    row_notes = list(notes)
    found = _first_gemlite_call(torch, runs, exact, row_notes)
    torch.cuda.synchronize()
    times = clock.time(runs)
    torch_name = min(
        (name for name in ("torch_mv", "torch_linear") if f"{name}_us" in times), key=lambda s: times[f"{s}_us"]
    )
    return {
        "format": kind,
        "dtype": dtype,
        "m": m,
        "n": n,
        "k": k,
        "ours_us": times["ours_us"],
        "ours_fp16_us": times["ours_fp16_us"],
        "torch_fp16_us": times[f"{torch_name}_us"],
        "gemlite_us": times.get("gemlite_us"),
        "torch_fp16_call": torch_name,
        "bytes": unique_bytes(m, n, k),
        "max_rel_err": errors["ours"],
        "peer_max_rel_err": errors["peer"],
        "gemlite_max_rel_err": found.get("gemlite_max_rel_err"),
        "gemlite_autotune_s": found.get("gemlite_autotune_s"),
        "ours_b2b_us": times["ours_b2b_us"],
        "ours_fp16_b2b_us": times["ours_fp16_b2b_us"],
        "torch_fp16_b2b_us": times[f"{torch_name}_b2b_us"],
        "gemlite_b2b_us": times.get("gemlite_b2b_us"),
        "separator_us": times["separator_us"],
        "copies": c,
        "notes": row_notes,
    }


def measured(args: argparse.Namespace, row: Mapping[str, Any]) -> bool:
    """Whether this run measures `row`'s kind, dtype, M and (N, K) pair again."""
    again = row["format"] in args.kinds and row["dtype"] in args.dtypes and row["m"] in args.m
    return again and (row["n"], row["k"]) in chosen_pairs(args)


def chosen_pairs(args: argparse.Namespace) -> list[tuple[int, int]]:
    """The pairs this run measures: --pairs, or all of the op's."""
    return pairs() if args.pairs is None else args.pairs


def run(args: argparse.Namespace) -> Path:
    try:
        import torch
    except ImportError:
        raise AutotuneError("needs torch with CUDA (the GPU machine)") from None
    from lowbit_runs import gemlite_holds, keep_gemlite, setup_gemlite

    from autotune.bench.compare import Bench
    from autotune.bench.harness import IsolatedClock, report_path, rotation_copies, write_progress, write_report

    bench = Bench()
    gpu = bench.launcher.gpu
    copy_gbs = bench.copy_gbs()
    report: dict[str, Any] = {"gpu": gpu.name, "copy_gbs": copy_gbs, "l2_bytes": gpu.l2_bytes, "gemlite": {}}
    path: Path = report_path(args.out, "lowbit8", gpu.name)
    before = read_json(path) if args.merge and path.exists() else {"rows": []}
    earlier = before["rows"]
    report["rows"] = [r for r in earlier if not measured(args, r)]
    if args.keep_gemlite:  # the file's gemlite run (version, mode) stands for the times kept
        report["gemlite"] = dict(before.get("gemlite", {}))
    clock = IsolatedClock(bench, args.reps)
    print(f"{gpu.name}: device-to-device copy {copy_gbs:.0f} GB/s", flush=True)
    for kind in args.kinds:
        # Afresh for each kind: gemlite's config keys do not tell int8 from fp8 (kind_configs).
        configs = kind_configs(args.gemlite_configs, kind) if args.gemlite == "max" else None
        gemlite, info = setup_gemlite(args.gemlite, configs)
        if not args.keep_gemlite:
            report["gemlite"].update({key: value for key, value in info.items() if key != "configs"})
        if configs is not None:
            report["gemlite"].setdefault("configs", {})[kind] = configs.name
        if gemlite is not None:
            print(f"gemlite for {kind}: {info}", flush=True)
        elif kind == args.kinds[0]:  # one line: why there is no gemlite
            print(f"bench_lowbit8: {info.get('note', GEMLITE_OFF)}", flush=True)
        for dtype in args.dtypes:
            for n, k in chosen_pairs(args):
                weights = _quantized_copies(
                    torch, kind, dtype, n, k, rotation_copies(unique_bytes(1, n, k), gpu.l2_bytes)
                )
                layers: list[Any] = []
                notes = [] if gemlite is not None else [info.get("note", GEMLITE_OFF)]
                if gemlite is not None:
                    try:
                        layers = gemlite_layers(gemlite, torch, weights, kind, dtype)
                    except AutotuneError as exc:
                        notes.append(str(exc))
                for m in args.m:
                    held = bool(layers) and gemlite_holds(gemlite, m, n, k, k)  # A16W8: one group a row
                    row = measure_row(torch, clock, weights, kind, dtype, m, layers, notes)
                    row["gemlite_mode"] = args.gemlite if row["gemlite_us"] is not None else None
                    row["gemlite_config"] = None if row["gemlite_us"] is None else ("loaded" if held else "autotuned")
                    if args.keep_gemlite:
                        keep_gemlite(row, earlier)
                    report["rows"].append(row)
                    print(json.dumps(row), flush=True)
                del weights, layers
                torch.cuda.empty_cache()
                if gemlite is not None and configs is not None:
                    gemlite.cache_config(str(configs))  # this pair's autotune kept for later runs
                report["gemlite"]["autotune_s"] = sum(r.get("gemlite_autotune_s") or 0.0 for r in report["rows"])
                write_progress(path, report)  # a run cut short keeps the pairs it finished
    return write_report(path, report)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        path = args.summary or run(args)
        report = read_json(path)
        if not isinstance(report, dict) or "copy_gbs" not in report or not isinstance(report.get("rows"), list):
            raise AutotuneError(f"{path} is not a bench_lowbit8 report (no copy_gbs and rows)")
    except AutotuneError as exc:
        print(f"bench_lowbit8: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(report)))
    for note in sorted({note for r in report["rows"] for note in r.get("notes", [])}):
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
