"""Write docs/results.md and the README's headline tables from results/*.json, so no figure is typed by hand.

python scripts/docs_results.py            # rewrites docs/results.md, the README's marked blocks and FIGURES
python scripts/docs_results.py --check    # exits 1 if any of them differs from what the sources give

The README's headline tables sit between `<!-- results:NAME -->` and `<!-- /results:NAME -->` lines, where
NAME is a results file's stem (gemv_nvidia-h200, gemm_nvidia-h200, ...); everything else in the README is
left as it is. FIGURES are the figures in running text (README.md, docs/*.md) that come from a results file
or the shipped kernels: each is found by the sentence around it and rewritten or checked in place.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts below are not a package

from bench_lowbit import case_label, goal_figures
from bench_lowbit8 import summary_lines as lowbit8_summary
from plot_decode import table as decode_table
from results_table import FAMILY_BY_PARAM, gemm_table
from results_table import table as gemv_table

from autotune.ops.gemm import llm_nk_pairs

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOC = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
KERNEL_INDEX = ROOT / "db" / "kernels" / "index.json"
KERNELS_SOURCE = "db/kernels/index.json"

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DASH, TIMES = "\u2013", "\u00d7"  # en dash and multiplication sign, as the docs write ranges and shapes
LARGE = 64 * 2**20  # matrices of 64 MB or more are expected near the copy bandwidth


def _load(stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / f"{stem}.json").read_text())
    return data


def _stems(prefix: str) -> list[str]:
    """Stems of results/<prefix>_<gpu>.json, one per GPU (gemv_ does not take gemv_trans_, nor a benchmark's
    resume file such as tuning_vs_kernel_tuner_runs.json)."""
    pattern = re.compile(rf"^{prefix}_(?!trans_)(?!(?:runs|state)$)[a-z0-9-]+$")
    return sorted(p.stem for p in RESULTS.glob(f"{prefix}_*.json") if pattern.match(p.stem))


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _image(stem: str, prefix: str) -> str:
    return f"![{stem}]({prefix}{stem}.png)\n\n" if (RESULTS / f"{stem}.png").is_file() else ""


# --- headline tables (README) ----------------------------------------------------------------------


def gemv_headline(report: dict[str, Any]) -> str:
    """One line per dtype: speedup over cuBLAS, how close the large matrices come to the copy bandwidth,
    and the share of the read floor (`autotune bench`'s floor kernel, in the same run) reached."""
    from autotune.ops import standard_shapes

    standard = set(map(tuple, standard_shapes()))
    measured = {(r["m"], r["n"]) for r in report["rows"]}
    missing = sorted(standard - measured)
    which = (
        "every standard shape"
        if not missing
        else (f"the standard shapes but {', '.join(f'{m}x{n}' for m, n in missing)} (measured before it joined)")
    )
    lines = [
        f"GEMV on one {report['gpu']}, {which} against cuBLAS (best of `torch.mv` and `F.linear`):",
        "",
        "| dtype | shapes | geometric-mean speedup | slowest, fastest | matrices ≥ 64 MB: % of copy bandwidth "
        "| share of the read floor, lowest (median) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows = report["rows"]
    for dtype in [d for d in BYTES if any(r["dtype"] == d for r in rows)] + ["all"]:
        mine = [r for r in rows if dtype in ("all", r["dtype"])]
        speedups = [r["speedup"] for r in mine]
        large = [r["pct_copy"] for r in mine if r["m"] * r["n"] * BYTES[r["dtype"]] >= LARGE]
        copy = f"{min(large):.1f}{DASH}{max(large):.1f}% ({len(large)} shapes)" if large else DASH
        shares = [r["floor_us"] / r["ours_us"] for r in mine if r.get("floor_us")]
        floor = f"{100 * min(shares):.0f}% ({100 * statistics.median(shares):.0f}%)" if shares else DASH
        name = "**all**" if dtype == "all" else dtype
        lines.append(
            f"| {name} | {len(mine)} | {_geomean(speedups):.3f} | "
            f"{min(speedups):.2f}{DASH}{max(speedups):.2f} | {copy} | {floor} |"
        )
    return "\n".join(lines)


def _family(config: dict[str, Any]) -> str:
    return next((f for key, f in FAMILY_BY_PARAM.items() if key in config), "?")


def gemm_headline(report: dict[str, Any]) -> str:
    """One line per kernel family: how our time compares with cuBLAS's (torch.mm)."""
    lines = [
        f"GEMM on one {report['gpu']} against cuBLAS (`torch.mm`), cuBLAS time over ours (above 1: we are faster):",
        "",
        "| family | dtype | M | shapes | cuBLAS / ours | best TFLOP/s (ours) |",
        "|---|---|---|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in report["rows"]:
        groups.setdefault((_family(r["config"]), r["dtype"]), []).append(r)
    for (family, dtype), rows in groups.items():
        ms = sorted({r["m"] for r in rows})
        m = str(ms[0]) if len(ms) == 1 else f"{ms[0]}{DASH}{ms[-1]}"
        ratios = [r["ratio"] for r in rows]
        spread = f"{min(ratios):.2f}{DASH}{max(ratios):.2f}" if len(rows) > 1 else f"{ratios[0]:.2f}"
        best = max(r["ours_tflops"] for r in rows)
        lines.append(f"| `{family}` | {dtype} | {m} | {len(rows)} | {spread} | {best:.1f} |")
    return "\n".join(lines)


# --- full tables (docs/results.md) -----------------------------------------------------------------


def linear_table(report: dict[str, Any]) -> str:
    """µs per decode step of scripts/bench_linear.py's stack, and torch's time over ours (above 1: we are faster)."""
    lines = [
        "| batch | layers | KV cache | torch eager µs | ours eager µs | eager: torch / ours "
        "| torch compiled µs | ours compiled µs | compiled: torch / ours |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['batch']} | {r['layers']} | {r['kv_len']} | {r['torch_eager_us']:.0f} | {r['ours_eager_us']:.0f} | "
            f"{r['torch_eager_us'] / r['ours_eager_us']:.2f} | {r['torch_compiled_us']:.0f} | "
            f"{r['ours_compiled_us']:.0f} | {r['torch_compiled_us'] / r['ours_compiled_us']:.2f} |"
        )
    lines += ["", f'{report.get("dtype", "float16")}, Llama-3-8B widths; `torch.compile(mode="reduce-overhead")`.']
    return "\n".join(lines)


def _summed_mark(row: dict[str, Any]) -> str:
    """'†' for a decode row whose linears are its kernels' durations summed (measured before
    bench_model.py counted each kernel's time alone), '' otherwise."""
    return "" if row.get("kernel_split") == "exclusive" else "†"


def model_table(report: dict[str, Any]) -> str:
    """scripts/bench_model.py: GPU µs per decode step (a captured step replayed), the linears' kernels,
    eager generate's wall µs per token, and the teacher-forced logits beside a float32 run."""
    lines = [
        "| layers | weights | fused | mode | torch GPU µs | ours GPU µs | torch / ours (95% interval) "
        "| torch linears µs | ours linears µs | torch wall µs | ours wall µs | max abs Δlogit ours / torch "
        "| tokens agree |",
        "|---:|---|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in report["rows"]:
        low, high = r["gpu_ratio_ci95"]
        walls = ["-", "-"] if r["torch_wall_us"] is None else [f"{r['torch_wall_us']:.0f}", f"{r['ours_wall_us']:.0f}"]
        cells = [
            r["layers"],
            r["weights"],
            "yes" if r["fused"] else "no",
            r["mode"],
            f"{r['torch_gpu_us']:.0f}",
            f"{r['ours_gpu_us']:.0f}",
            f"{r['gpu_ratio']:.3f} ({low:.3f}-{high:.3f})",
            *(
                "-" if r[key] is None else f"{r[key]:.0f}{_summed_mark(r)}"
                for key in ("torch_linear_us", "ours_linear_us")
            ),
            *walls,
            f"{r['logit_dev']:.3f} / {r['torch_logit_dev']:.3f}",
            f"{r['tokens_agree']:.3f}",
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    lines += [
        "",
        f"transformers {report['transformers']}'s Llama at Llama-3-8B widths, batch 1, a {report['prompt']}-token "
        f"prompt; GPU time of one decode step captured into a CUDA graph, {report['rounds']} rounds in turns; "
        "compiled: the step under `torch.compile` before the capture ([models.md](models.md)). Linears: each "
        "kernel's time alone on the GPU; † rows measured before that, their kernels' durations summed (a PDL "
        "launch's wait under the kernel before it counted in).",
    ]
    hosts = [(r["layers"], r["host"]) for r in report["rows"] if r.get("host")]
    for layers, host in hosts:
        lines += [
            "",
            f"Host µs per call of each distinct linear ({layers} layers, float16, unfused, eager, a decode step's "
            "(1, 1, K) x, calls queued behind a sleeping kernel):",
            "",
            "| linear | N | K | torch host µs | ours host µs |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {h['name']} | {h['n']} | {h['k']} | {h['torch_host_us']:.1f} | {h['ours_host_us']:.1f} |"
                for h in host
            ),
        ]
    return "\n".join(lines)


def tune_model_table(report: dict[str, Any]) -> str:
    """scripts/bench_tune_model.py: a patched model's decode step before and after autotune.tune_model."""
    lines = [
        "| stage | sweep s | problems | torch GPU µs | ours GPU µs | torch / ours |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        sweep = "-" if r["sweep_s"] is None else f"{r['sweep_s']:.0f}"
        problems = "-" if r["problems"] is None else str(r["problems"])
        lines.append(
            f"| {r['stage']} | {sweep} | {problems} | {r['torch_gpu_us']:.1f} | {r['ours_gpu_us']:.1f} "
            f"| {r['torch_gpu_us'] / r['ours_gpu_us']:.3f} |"
        )
    lines += [
        "",
        f"transformers' Phi-3 at Phi-3-mini widths ({report['layers']} layers, random float16 weights), patched, "
        "in a new database: the decode step's GPU time with the selector's untuned picks, after `tune_model` "
        "(five minutes at most), and after 64 trials of every problem it met ([models.md](models.md)).",
    ]
    return "\n".join(lines)


def linear_grad_table(report: dict[str, Any]) -> str:
    """scripts/bench_linear_grad.py: forward and backward of one linear, one step at a time and queued."""
    lines = [
        "| dtype | M | N | K | torch ms | ours ms | torch / ours | torch queued ms | ours queued ms "
        "| torch / ours queued |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['dtype']} | {r['m']} | {r['n']} | {r['k']} | {r['torch_ms']:.3f} | {r['ours_ms']:.3f} | "
            f"{r['ratio']:.2f} | {r['torch_gpu_ms']:.3f} | {r['ours_gpu_ms']:.3f} | {r['gpu_ratio']:.2f} |"
        )
    lines += [
        "",
        "x, W and b requiring gradients; one step from an idle GPU (host included), and steps queued behind a "
        "sleeping kernel (the GPU's time alone) ([launch.md](launch.md#gradients)).",
    ]
    return "\n".join(lines)


def _lowbit_name(name: str, dtype: str) -> str:
    """bench_lowbit's figure name in words; its `_fp16` peers run in the activations' dtype."""
    words = {"M=": "M = ", "torch_fp16": f"torch {dtype}", "ours_fp16": f"our {dtype}", "copy_gbs": "copy", ">=": "≥"}
    for raw, word in words.items():
        name = name.replace(raw, word)
    return name


def lowbit_summary(report: dict[str, Any], label: str, dtype: str) -> str:
    """One case's goal figures (scripts/bench_lowbit.py's goal_figures), each with its goal met or missed;
    the figures no row measured are named as such."""
    stated: list[str] = []
    absent: list[str] = []
    for figure in goal_figures(report):
        if not figure.name.startswith(f"{label} "):
            continue
        name = _lowbit_name(figure.name.removeprefix(f"{label} "), dtype)
        if figure.value is None:
            absent.append(name)
            continue
        unit = "x" if "speedup" in name else "%"
        # Near the goal one more digit: 0.798 shown as 0.80 would read as a goal of 0.8 met.
        digits = 2 if unit == "x" else 1
        if figure.goal is not None and round(figure.value, digits) >= figure.goal > figure.value:
            digits += 1
        text = f"{name}: {figure.value:.{digits}f}{unit}"
        if figure.goal is not None:
            met = "met" if figure.value >= figure.goal else "missed"
            text += f" (goal ≥ {figure.goal:g}{unit}, **{met}**)"
        stated.append(text)
    return "; ".join(stated) + (f". Not measured: {'; '.join(absent)}." if absent else ".")


def _lowbit_row(r: dict[str, Any], copy_gbs: float) -> str:
    def us(key: str) -> str:
        return f"{r[key]:.2f}" if r.get(key) else DASH

    gbs = r["bytes"] / (r["ours_us"] * 1e3)
    error = f"{r['max_rel_err'] / r['peer_max_rel_err']:.2f}" if r.get("peer_max_rel_err") else DASH
    return (
        f"| {r['m']} | {r['n']}{TIMES}{r['k']} | {us('ours_us')} | {us('ours_fp16_us')} | {us('torch_fp16_us')} | "
        f"{us('tinygemm_us')} | {us('gemlite_us')} | {gbs:.0f} | {100 * gbs / copy_gbs:.1f} | {error} |"
    )


def lowbit_table(report: dict[str, Any]) -> str:
    """scripts/bench_lowbit.py: int4 weight-only linear per case (activations' dtype, group, symmetric or
    not) beside the dequantized weight's 16-bit linear (ours and torch's), tinygemm and gemlite; the goal
    figures above each table."""
    gemlite = report.get("gemlite") or {}
    lines = [
        "**ours**: `autotune.linear` on the `QuantizedWeight`; **ours float16** (or bfloat16): `autotune.linear` "
        "on the weight dequantized to the activations' dtype (our GEMV at M = 1, our GEMM above); **torch "
        "float16** (or bfloat16): the faster of `torch.mv` and `F.linear` on it; **tinygemm**: torch's "
        "`_weight_int4pack_mm` (bfloat16 only); **gemlite**: A16W4"
        + (f" {gemlite['version']}, autotune `{gemlite['mode']}`" if gemlite.get("version") else "")
        + f". µs of isolated calls, weights cold in L2; {DASH} where not measured. **GB/s**: the bytes that "
        f"must move once (packed weight, scales, zeros, x, y) over ours µs; **% of copy**: of the device copy's "
        f"{report['copy_gbs']:.0f} GB/s; **error / F.linear's**: our max relative error over `F.linear`'s on "
        "the weight rounded to the activations' dtype, both against float64. Speedups are a peer's time over "
        "ours, geometric means over the (N, K) pairs.",
        "",
    ]
    for label in dict.fromkeys(case_label(r) for r in report["rows"]):
        rows = sorted((r for r in report["rows"] if case_label(r) == label), key=lambda r: r["m"])
        first = rows[0]
        lines += [
            f"#### int4, {first['dtype']}, group {first['group']}, {'symmetric' if first['sym'] else 'asymmetric'}",
            "",
            lowbit_summary(report, label, first["dtype"]),
            "",
            f"| M | N {TIMES} K | ours µs | ours {first['dtype']} µs | torch {first['dtype']} µs | tinygemm µs "
            "| gemlite µs | GB/s (ours) | % of copy | error / F.linear's |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [_lowbit_row(r, report["copy_gbs"]) for r in rows]
        notes = sorted({note for r in rows for note in r.get("notes", [])})
        lines += ["", f"Notes: {'; '.join(notes)}.", ""] if notes else [""]
    return "\n".join(lines).rstrip()


def untuned_table(report: dict[str, Any]) -> str:
    names = {
        "default": "safe default",
        "fitted": "nearest tuned shape's config, fitted",
        "fitted_u8": "the same with `unroll=8`",
        "tuned": "a 16-trial sweep of the shape",
    }
    lines = [
        "| problem | config | ours µs | cuBLAS µs | cuBLAS / ours | % of copy | correct |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['problem']} | {names.get(r['candidate'], r['candidate'])} | {r['ours_us']:.2f} | "
            f"{r['cublas_us']:.2f} | {r['speedup']:.2f} | {r['pct_copy']:.1f} | {'yes' if r['correct'] else 'NO'} |"
        )
    return "\n".join(lines)


def tuning_table(report: dict[str, Any]) -> str:
    lines = [
        "| problem | space | optimum µs | sampler | to within 2%, compile pool | trials | the same, serial nvcc |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in sorted(report["rows"], key=lambda r: (-r["m"] * r["n"], r["m"], r["sampler"])):
        serial = (
            f"{r['serial_seconds_to_2pct']:.1f} s"
            if r["serial_reached"]
            else f"> {r['serial_seconds_run']:.1f} s (stopped)"
        )
        pooled = f"{r['seconds_to_2pct']:.1f} s" if r["reached"] else "not reached"
        lines.append(
            f"| {r['op']} {r['m']}{TIMES}{r['n']} | {r['space_size']:,} | {r['optimum_us']:.2f} | {r['sampler']} | "
            f"{pooled} | {r['trials_to_2pct']} | {serial} |"
        )
    return "\n".join(lines)


def faults_table(report: dict[str, Any]) -> str:
    lines = ["| planted fault | expected | recorded as | survived |", "|---|---|---|---|"]
    for f in report["faults"]:
        lines.append(
            f"| {f['kind'].replace('_', ' ')} | `{f['expected']}` | `{f['recorded_as']}` | "
            f"{'yes' if f['survived'] else 'NO'} |"
        )
    lines += [
        "",
        f"Problem {report['problem']}; sweep killed midway: {report['sweep_killed_midway']} "
        f"({report['rows_before_kill']} rows before the kill); resumed with exit code {report['resumed_exit_code']}; "
        f"{report['rows_found']} rows of our kernels found of {report['rows_expected']} expected"
        + (f" (and {report['vendor_rows']} of cuBLASLt's algorithms)" if report.get("vendor_rows") else "")
        + f", {report['duplicates']} duplicates; "
        f"rows finished before the kill kept as they were: {report['completed_rows_kept']}.",
    ]
    return "\n".join(lines)


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _select_shape(r: dict[str, Any]) -> str:
    dims = [r["m"], r["n"]] + ([r["k"]] if r.get("k") is not None else [])
    return TIMES.join(str(d) for d in dims)


def _select_layout(r: dict[str, Any]) -> str:
    if r["op"] == "gemv":
        return "Aᵀx" if r["trans"] else "A x"
    return {"kn": f"B K{TIMES}N", "nk": f"B N{TIMES}K"}.get(r.get("layout") or "", str(r.get("layout")))


def select_summary(report: dict[str, Any], op: str) -> str:
    """One op's line: regret and speed against cuBLAS over its shapes, and issue 30's goal, met or missed."""
    rows = [r for r in report["rows"] if r["op"] == op]
    goal = report["goal"]
    floor = goal["none_below_cublas_fraction"]
    regret = _geomean([1 + r["regret"] for r in rows]) - 1
    worst = max(rows, key=lambda r: r["regret"])
    below = [r for r in rows if r["cublas_us"] / r["pick_us"] < floor]
    vs_cublas = [r["cublas_us"] / r["pick_us"] for r in rows]
    sweeps = [r for r in rows if r.get("sweep_best_us") is not None]
    sweep_wins = sum(1 for r in sweeps if r["sweep_best_us"] < r["cublas_us"])
    sources: dict[str, int] = {}
    for r in rows:
        sources[r["source"]] = sources.get(r["source"], 0) + 1
    wrong = sum(1 for r in rows if r.get("pick_correct") is False)
    met = (
        regret <= goal["regret_geomean_at_most"]
        and worst["regret"] <= goal["worst_regret_at_most"]
        and not below
        and not wrong
    )
    return (
        f"**{op.upper()}**, {len(rows)} shapes (picks from "
        + ", ".join(f"`{source}` {count}" for source, count in sorted(sources.items()))
        + f"): regret geometric mean {_percent(regret)}, worst {_percent(worst['regret'])} "
        f"({worst['dtype']} {_select_shape(worst)}, {_select_layout(worst)}); "
        f"{len(below)} of {len(rows)} below {floor:.2f}{TIMES} cuBLAS; "
        f"cuBLAS / pick geometric mean {_geomean(vs_cublas):.3f} (worst {min(vs_cublas):.2f}); "
        f"the sweep's best faster than cuBLAS on {sweep_wins} of {len(sweeps)}; "
        f"{'every pick correct' if not wrong else f'{wrong} of {len(rows)} picks wrong'}. "
        f"Goal (geometric mean ≤ {_percent(goal['regret_geomean_at_most'])}, worst ≤ "
        f"{_percent(goal['worst_regret_at_most'])}, none below {floor:.2f}{TIMES} cuBLAS): "
        f"**{'met' if met else 'missed'}**."
    )


def select_table(report: dict[str, Any]) -> str:
    """scripts/bench_select.py: the selector's pick on held-out shapes beside a sweep of the shape and cuBLAS."""
    ops = list(dict.fromkeys(r["op"] for r in report["rows"]))
    lines = [
        f"**pick**: the selector's answer from the shipped records alone (source `estimate`: the cost model's "
        f"choice; `default`: the safe default config); **sweep**: the best of a {report['trials']}-trial sweep of "
        f"the shape; **tuned**: the least of pick, sweep and cuBLAS; **regret**: pick / tuned {DASH} 1; "
        "**cuBLAS / pick**: above 1, the pick is faster than cuBLAS.",
        "",
    ]
    for op in ops:
        lines += [select_summary(report, op), ""]
    lines += [
        "| op | dtype | shape | layout | source | pick µs | sweep µs | tuned µs | cuBLAS µs | regret | cuBLAS / pick |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        sweep = f"{r['sweep_best_us']:.2f}" if r.get("sweep_best_us") is not None else DASH
        lines.append(
            f"| {r['op']} | {r['dtype']} | {_select_shape(r)} | {_select_layout(r)} | `{r['source']}` | "
            f"{r['pick_us']:.2f} | {sweep} | {r['tuned_us']:.2f} | {r['cublas_us']:.2f} | {_percent(r['regret'])} | "
            f"{r['cublas_us'] / r['pick_us']:.2f} |"
        )
    return "\n".join(lines)


# Issue 32's goal: ours from an empty database in at most 1/2 of Kernel Tuner's better strategy's median
# seconds to 2%, ours with other shapes' records in at most 1/3.
KT_GOAL_EMPTY, KT_GOAL_RECORDS = 1 / 2, 1 / 3
KT_EMPTY, KT_RECORDS = "autotune/tpe/none", "autotune/tpe/other_shapes"
KT_NAMES = {
    "kernel_tuner/random_sample": "Kernel Tuner `random_sample`",
    "kernel_tuner/bayes_opt": "Kernel Tuner `bayes_opt`",
    KT_EMPTY: "autotune (TPE), empty database",
    KT_RECORDS: "autotune (TPE), other shapes' records",
}


def _kt_kind(r: dict[str, Any]) -> str:
    """'kernel_tuner/bayes_opt', 'autotune/tpe/none', ...: as scripts/bench_tuning_vs_kernel_tuner.py names them."""
    return "/".join(str(part) for part in (r["tool"], r["strategy"], r.get("records")) if part is not None)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def kt_summary(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per shape (in the report's order): each kind of run's runs, runs within 2%, median seconds to 2% (a run
    that never got there counts as the whole budget), median trials and best µs; Kernel Tuner's better strategy
    and our two ratios against it."""
    budget = report["budget_s"]
    out: dict[str, dict[str, Any]] = {}
    for shape in report["shapes"]:
        key = f"{shape['m']}{TIMES}{shape['n']}"
        rows = [r for r in report["rows"] if (r["m"], r["n"]) == (shape["m"], shape["n"])]
        kinds: dict[str, dict[str, Any]] = {}
        for kind in sorted({_kt_kind(r) for r in rows}):
            mine = [r for r in rows if _kt_kind(r) == kind]
            kinds[kind] = {
                "runs": len(mine),
                "reached": sum(1 for r in mine if r["seconds_to_2pct"] is not None),
                "median_s": _median([budget if r["seconds_to_2pct"] is None else r["seconds_to_2pct"] for r in mine]),
                "trials": _median([r["trials"] for r in mine]),
                "best_us": _median([r["best_us"] for r in mine if r.get("best_us") is not None] or [math.nan]),
            }
        kt = {kind: line["median_s"] for kind, line in kinds.items() if kind.startswith("kernel_tuner/")}
        better = min(kt, key=lambda kind: kt[kind]) if kt else None
        ratios = {
            ours: kinds[ours]["median_s"] / kt[better] if better is not None and ours in kinds else None
            for ours in (KT_EMPTY, KT_RECORDS)
        }
        out[key] = {"optimum_us": shape.get("optimum_us"), "kinds": kinds, "better": better, "ratios": ratios}
    return out


def _kt_ratio(value: float | None, goal: float) -> str:
    if value is None:
        return DASH
    return f"{value:.3f} ({'met' if value <= goal else 'missed'})"


def _kt_median(kinds: dict[str, Any], kind: str) -> str:
    return f"{kinds[kind]['median_s']:.1f} s" if kind in kinds else DASH


def kt_table(report: dict[str, Any]) -> str:
    """scripts/bench_tuning_vs_kernel_tuner.py: seconds to 2% of the optimum, ours against Kernel Tuner's."""
    summary = kt_summary(report)
    budget, tolerance = report["budget_s"], report["tolerance"]
    lines = [
        f"Kernel Tuner's better strategy is the one of smaller median; **ratio** is our median over it (goal "
        f"≤ 1/2 from an empty database, ≤ 1/3 with other shapes' records). A run that never came within "
        f"{100 * tolerance:.0f}% counts as its whole budget of {budget:.0f} s.",
        "",
        "| shape | optimum µs | Kernel Tuner's better | its median | ours, empty database | ratio "
        "| ours, other shapes' records | ratio |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for key, line in summary.items():
        kinds, better = line["kinds"], line["better"] or ""
        optimum = f"{line['optimum_us']:.2f}" if line["optimum_us"] is not None else DASH
        lines.append(
            f"| {key} | {optimum} | {KT_NAMES.get(better, better or DASH)} | {_kt_median(kinds, better)} | "
            f"{_kt_median(kinds, KT_EMPTY)} | {_kt_ratio(line['ratios'][KT_EMPTY], KT_GOAL_EMPTY)} | "
            f"{_kt_median(kinds, KT_RECORDS)} | {_kt_ratio(line['ratios'][KT_RECORDS], KT_GOAL_RECORDS)} |"
        )
    lines += [
        "",
        f"| shape | runs of | within {100 * tolerance:.0f}% | median seconds to {100 * tolerance:.0f}% "
        "| median trials per run | best found µs (median) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for key, line in summary.items():
        for kind, k in line["kinds"].items():
            seconds = f"{k['median_s']:.1f} s" if k["reached"] else f"never ({budget:.0f} s)"
            lines.append(
                f"| {key} | {KT_NAMES.get(kind, kind)} | {k['reached']} of {k['runs']} | {seconds} | "
                f"{k['trials']:.0f} | {k['best_us']:.2f} |"
            )
    dtypes = sorted({s.get("dtype", "float16") for s in report["shapes"]})
    lines += [
        "",
        f"{', '.join(dtypes)} GEMV, the op's whole space for both tools; seconds from each run's start, building "
        "the space and compiling included. Every time is autotune's worker's re-timing of the configs each run "
        "held as its best.",
    ]
    return "\n".join(lines)


def pick_line(report: dict[str, Any]) -> str:
    """Under a GEMV or GEMM benchmark's table: how the selector's own answer (`pick_us`, timed in the same
    turns: our kernel, or cuBLASLt where it was measured faster) compares with cuBLAS; empty without it."""
    rows = [r for r in report.get("rows", []) if r.get("pick_us") and r.get("cublas_us") and r.get("ours_us")]
    if not rows:
        return ""
    ratios = [r["cublas_us"] / r["pick_us"] for r in rows]
    worst = min(range(len(rows)), key=ratios.__getitem__)
    below = [_bench_shape(r) for r, q in zip(rows, ratios, strict=True) if q < 0.98]
    vendor = sum(1 for r in rows if r.get("pick_source") == "cublas" or "cublas_algo" in (r.get("pick_config") or {}))
    return (
        f"\n**The selector's pick** (`pick_us`; cuBLASLt on {vendor} of {len(rows)} shapes): cuBLAS / pick "
        f"geometric mean {_geomean(ratios):.3f}, worst {ratios[worst]:.2f} ({_bench_shape(rows[worst])}); "
        + (f"below 0.98x cuBLAS: {', '.join(below)}.\n" if below else "none below 0.98x cuBLAS.\n")
    )


def _bench_shape(r: dict[str, Any]) -> str:
    shape = TIMES.join(str(r[d]) for d in ("m", "n", "k") if r.get(d))
    return f"{r['dtype']} {shape}"


def lowbit8_table(report: dict[str, Any]) -> str:
    """scripts/bench_lowbit8.py: the 8-bit weight-only product per kind and activations' dtype beside the
    dequantized weight's 16-bit GEMV (ours and torch's) and gemlite's A16W8; the goal figures above the table."""
    gemlite = report.get("gemlite") or {}
    lines = [
        '**ours**: `autotune.call("q8gemm", ...)` on the codes and a scale a row; **ours float16**: '
        "`autotune.linear` on the weight dequantized to float16; **torch float16**: the faster of `torch.mv` and "
        "`F.linear` on it; **gemlite**: A16W8 (`A16W8_INT8`, `A16W8_FP8`) on the same codes and scales"
        + (f", {gemlite['version']}, autotune `{gemlite['mode']}`" if gemlite.get("version") else "")
        + f". µs of isolated calls, weights cold in L2; {DASH} where not measured. **GB/s**: the bytes that must "
        f"move once (codes, scales, x, y) over ours µs; **% of copy**: of the device copy's {report['copy_gbs']:.0f} "
        "GB/s; **error / F.linear's**: our max relative error over `F.linear`'s on the weight rounded to float16, "
        "both against float64 on the exact weight.",
        "",
        "```",
        *lowbit8_summary(report)[1:],
        "```",
        "",
        f"| codes | M | N {TIMES} K | ours µs | ours float16 µs | torch float16 µs | gemlite µs | GB/s (ours) "
        "| % of copy | error / F.linear's |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        gbs = r["bytes"] / (r["ours_us"] * 1e3)
        error = r["max_rel_err"] / r["peer_max_rel_err"] if r.get("peer_max_rel_err") else None
        gemlite_us = f"{r['gemlite_us']:.2f}" if r.get("gemlite_us") else DASH
        lines.append(
            f"| {r['format']} {r['dtype']} | {r['m']} | {r['n']}{TIMES}{r['k']} | {r['ours_us']:.2f} | "
            f"{r['ours_fp16_us']:.2f} | {r['torch_fp16_us']:.2f} | {gemlite_us} | {gbs:.0f} | "
            f"{100 * gbs / report['copy_gbs']:.1f} | " + (f"{error:.2f} |" if error is not None else f"{DASH} |")
        )
    notes = sorted({note for r in report["rows"] for note in r.get("notes", [])})
    return "\n".join(lines + ([f"\nNotes: {'; '.join(notes)}."] if notes else []))


SECTIONS: list[tuple[str, str, Any]] = [
    ("gemv", "GEMV `y = alpha·A x + beta·y`", gemv_table),
    ("gemv_trans", "Transposed GEMV `y = alpha·Aᵀx + beta·y` (`--trans`)", gemv_table),
    ("gemv_llm", "GEMV on open models' decode shapes (`autotune/ops/gemv/llm_shapes.txt`)", gemv_table),
    ("gemv_llm_trans", "Transposed GEMV on open models' decode shapes (`--trans`)", gemv_table),
    ("gemv_edge_trans", "Transposed GEMV on tall matrices of 1 to 8 columns (the tall family)", gemv_table),
    ("gemm", "GEMM `C = alpha·A B + beta·C`", gemm_table),
    ("gemm_nt", "GEMM with B stored N x K `C = alpha·A Wᵀ + beta·C` (`--trans`, nn.Linear's layout)", gemm_table),
    ("decode", "Decode steps (a model's GEMVs in sequence, eager and in a CUDA graph)", decode_table),
    ("linear", "A decoder stack: its linears as `F.linear` against `autotune.linear`", linear_table),
    ("lowbit", "Int4 weight-only linear (`autotune.linear` on a `QuantizedWeight`)", lowbit_table),
    ("lowbit8", "8-bit weight-only GEMV (int8 and float8 e4m3 codes, `q8gemm`)", lowbit8_table),
    ("model", "A transformers model's decode step: `autotune.patch(model)` against torch", model_table),
    ("tune_model", "Tuning a model's shapes: `autotune.tune_model`", tune_model_table),
    (
        "linear_grad",
        "Training: one linear's forward and backward, `autotune.linear` against `F.linear`",
        linear_grad_table,
    ),
    ("untuned", "Shapes no tuned config fits", untuned_table),
    ("select", "Selection on shapes never tuned", select_table),
    ("tuning", "Tuning speed: seconds until the best config found is within 2% of the optimum", tuning_table),
    ("tuning_vs_kernel_tuner", "Tuning speed beside Kernel Tuner", kt_table),
    ("faults", "Fault drill: faults planted into a real sweep", faults_table),
]

INTRO = """# Results

Generated by `python scripts/docs_results.py` from `results/*.json`; do not edit by hand (see
[development.md](development.md)). How the numbers are taken: [method.md](method.md). What they mean and
how they were reached: [findings.md](findings.md).

Columns: **ours µs** and **cuBLAS µs** are GPU time per call, median of the benchmark's repetitions, matrix
cold in L2, ours and cuBLAS timed in turns on the same buffers. **speedup** is cuBLAS's time over ours.
**% of copy** is the bandwidth the bytes that must move reach, over a device-to-device copy timed in the same
run. **read floor** is the fastest of the read-only kernels for that many bytes, timed like the GEMVs;
**bound** is cuBLAS's time over the lesser of the floor and ours (the most speedup any kernel could show).
"""


# Results measured with kernels the tool no longer runs on that GPU, kept because no such GPU is at hand to
# measure again: each gets its note under its heading.
SUPERSEDED = {
    "gemv_trans_nvidia-h100-80gb-hbm3": (
        "Measured with the `skinny` and `strips` families, which the `narrow` family replaced from 16 columns "
        "on. Their H100 records went with them (the configs are no point of narrow's space) and no H100 was "
        "at hand to sweep again: on an H100 these shapes now run cuBLASLt, timed there, where it is installed, "
        "else narrow's default tiling, until a sweep there measures them."
    ),
    "untuned_nvidia-h100-80gb-hbm3": (
        "Its transposed GEMV rows (5000x7001) ran the `skinny` family, which the `narrow` family replaced "
        "there; the other rows stand."
    ),
}


def results_doc() -> str:
    parts = [INTRO]
    for prefix, title, render in SECTIONS:
        stems = _stems(prefix)
        if not stems:
            continue
        parts.append(f"## {title}\n")
        for stem in stems:
            report = _load(stem)
            parts.append(f"### {report.get('gpu', stem)}\n")
            parts.append(f"Data: [`results/{stem}.json`](../results/{stem}.json).\n")
            if stem in SUPERSEDED:
                parts.append(f"**Superseded.** {SUPERSEDED[stem]}\n")
            parts.append(_image(stem, "../results/") + render(report) + pick_line(report) + "\n")
    return "\n".join(parts)


HEADLINES = {"gemv": gemv_headline, "gemm": gemm_headline}


def readme_with_headlines(text: str) -> str:
    """The README with every marked block replaced by the headline table of its results file."""

    def block(match: re.Match[str]) -> str:
        stem = match.group(1)
        render = HEADLINES[stem.split("_", 1)[0]]
        return f"<!-- results:{stem} -->\n{render(_load(stem))}\n<!-- /results:{stem} -->"

    return re.sub(r"<!-- results:([\w.-]+) -->\n.*?<!-- /results:\1 -->", block, text, flags=re.S)


# --- figures in running text ---------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """Figures in a doc's prose: `pattern` finds the sentence, each of its named groups is a figure, and
    `compute` gives what the source says for each group (as the doc writes it)."""

    path: Path
    pattern: str
    compute: Callable[[], dict[str, str]]
    source: str  # where the figures come from, for the message


def _span(values: list[float], digits: int = 1) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def host_cost() -> dict[str, str]:
    """Host time of a call, ours with `out=` and torch.mv's, over every float16 results/decode_*.json row
    (an int4 row's call, autotune.linear, takes no out=)."""
    rows = [r for stem in _stems("decode") for r in _load(stem)["rows"] if "format" not in r]
    return {
        "ours": _span([r["host_us_per_call"]["ours"] for r in rows]),
        "torch": _span([r["host_us_per_call"]["torch"] for r in rows]),
    }


def first_call() -> dict[str, str]:
    """A shipped problem's first call in a fresh process (results/first_call_nvidia-h200.json): the span of
    the medians, and of the first process of each problem (the one that unpacks its kernel)."""
    rows = [r for rows in _load("first_call_nvidia-h200")["settings"].values() for r in rows]
    return {"medians": _span([r["median_ms"] for r in rows]), "first": _span([r["first_ms"] for r in rows])}


def worker_retime() -> dict[str, str]:
    """The shipped problems re-timed through the launch-plan worker against the PyCUDA one
    (results/retime_nvidia-h200.json, scripts/retime_shipped.py --compare --keep)."""
    summary = _load("retime_nvidia-h200")["summary"]
    return {
        "median": f"{summary['median']:.3f}",
        "within": str(summary["within_2pct"]),
        "problems": str(summary["problems"]),
        "range": f"{summary['lowest']:.3f}-{summary['highest']:.3f}",
    }


def transposed_gemv() -> dict[str, str]:
    """The transposed GEMV against cuBLAS (results/gemv_trans_nvidia-h200.json): the geometric mean, the
    span and the shapes within 2% or faster."""
    report = _load("gemv_trans_nvidia-h200")
    rows = report["rows"]
    return {
        "geomean": f"{report['geomean_speedup']:.3f}",
        "range": f"{min(r['speedup'] for r in rows):.2f}{DASH}{max(r['speedup'] for r in rows):.2f}",
        "within": str(sum(r["speedup"] >= 0.98 for r in rows)),
        "rows": str(len(rows)),
    }


def transposed_gemv_headline() -> dict[str, str]:
    """The README's line: the transposed GEMV's geometric mean over cuBLAS on the H200, two decimals."""
    return {"geomean": f"{_load('gemv_trans_nvidia-h200')['geomean_speedup']:.2f}"}


def llm_gemv_headline() -> dict[str, str]:
    """The README's line: the open-model GEMV set's shape count and geometric means over cuBLAS on the H200,
    plain and transposed, two decimals."""
    plain, trans = _load("gemv_llm_nvidia-h200"), _load("gemv_llm_trans_nvidia-h200")
    return {
        "shapes": str(len({(r["m"], r["n"]) for r in plain["rows"]})),
        "plain": f"{plain['geomean_speedup']:.2f}",
        "trans": f"{trans['geomean_speedup']:.2f}",
    }


def compile_slot_replays() -> dict[str, str]:
    """Replays with recorded compile times on 4, 8 and 16 slots (results/search_replay.json): the default
    sampler's evaluations, reach and seconds to 2%, the genetic algorithm's, and tpe-ranked's on 16."""
    rows = {
        (r["space"], r["strategy"], r["workers"]): r
        for r in _load("search_replay")["rows"]
        if r.get("compile") == "recorded"
    }

    def count(value: float) -> str:  # evaluations: a median of 50 runs, a whole or a half
        return f"{value:g}"

    figures: dict[str, str] = {}
    for space, short in (("conv_a4000", "conv"), ("gemm_rtx3090", "gemm")):
        ga = rows[space, "ga", 16]
        for slots in (4, 8, 16):
            ours = rows[space, "default", slots]
            figures[f"{short}{slots}"] = count(ours["median_to_2pct"])
            figures[f"{short}{slots}_reach"] = f"{100 * ours['reach_2pct_default_budget']:.0f}"
            figures[f"{short}{slots}_s"] = f"{ours['median_seconds_to_2pct']:.1f}"
        figures[f"{short}_ga"] = count(ga["median_to_2pct"])
        ranked = rows[space, "tpe-ranked", 16]
        figures[f"{short}_ranked"], figures[f"{short}_ranked_s"] = (
            count(ranked["median_to_2pct"]),
            f"{ranked['median_seconds_to_2pct']:.1f}",
        )
    conv_ga = rows["conv_a4000", "ga", 16]["median_to_2pct"]  # the GA's evaluations do not depend on slots
    for slots in (4, 8, 16):
        figures[f"conv{slots}_vs_ga"] = f"{rows['conv_a4000', 'default', slots]['median_to_2pct'] / conv_ga:.2f}"
        figures[f"conv{slots}_ga_s"] = f"{rows['conv_a4000', 'ga', slots]['median_seconds_to_2pct']:.1f}"
    figures["gemm16_ga_s"] = f"{rows['gemm_rtx3090', 'ga', 16]['median_seconds_to_2pct']:.1f}"
    return figures


def shipped_kernels() -> dict[str, str]:
    """How many kernel instances ship precompiled (db/kernels/index.json)."""
    return {"count": str(len(json.loads(KERNEL_INDEX.read_text())["files"]))}


def cost_model_over_records() -> dict[str, str]:
    """The cost model against the nearest rule over the GEMV and GEMM groups of
    results/cost_model_loso.json (the low-bit ops' are docs/lowbit.md's): shapes, groups, hits of the
    stored top 3, and the lower-bound regret's geometric mean over all shapes."""
    loso = _load("cost_model_loso")["groups"]
    groups = [g["summary"] for g in loso if g["op"] in ("gemv", "gemm")]
    shapes = sum(g["shapes"] for g in groups)

    def regret(rule: str) -> str:
        logs = sum(g["shapes"] * math.log(g[rule]["regret_geomean_at_least"]) for g in groups)
        return f"{100 * (math.exp(logs / shapes) - 1):.1f}"

    return {
        "shapes": str(shapes),
        "groups": str(len(groups)),
        "model_hits": str(sum(g["new"]["in_stored_top3"] for g in groups)),
        "nearest_hits": str(sum(g["old"]["in_stored_top3"] for g in groups)),
        "model_regret": regret("new"),
        "nearest_regret": regret("old"),
    }


def decode_graph_headline() -> dict[str, str]:
    """The README's decode line: the Llama-like step's CUDA graph against torch.mv's, H200 and H100."""
    ratio = {}
    for card, stem in (("h200", "decode_nvidia-h200"), ("h100", "decode_nvidia-h100-80gb-hbm3")):
        row = {r["model"]: r for r in _load(stem)["rows"]}["llama-like"]
        ratio[card] = f"{row['torch_graph_us'] / row['ours_graph_us']:.2f}"
    return ratio


def decode_h200() -> dict[str, str]:
    """docs/launch.md's H200 findings (results/decode_nvidia-h200.json): graph and eager times and ratios,
    the Llama-like graph over the read floor, and host time per call beside the bare launch and torch.mv."""
    rows = {r["model"]: r for r in _load("decode_nvidia-h200")["rows"]}
    llama, narrow = rows["llama-like"], rows["narrow"]

    def host(row: dict[str, Any], key: str) -> float:
        return float(row["host_us_per_call"][key])

    bare = "bare launch (ctypes)"
    return {
        "graph": f"{llama['torch_graph_us'] / llama['ours_graph_us']:.2f}",
        "ours_graph": f"{llama['ours_graph_us']:.0f}",
        "torch_graph": f"{llama['torch_graph_us']:.0f}",
        "above_floor": f"{100 * (llama['ours_graph_us'] / llama['floor_us'] - 1):.1f}",
        "floor": f"{llama['floor_us']:.0f}",
        "narrow_graph": f"{narrow['torch_graph_us'] / narrow['ours_graph_us']:.2f}",
        "narrow_ours_graph": f"{narrow['ours_graph_us']:.0f}",
        "narrow_torch_graph": f"{narrow['torch_graph_us']:.0f}",
        "ours_eager": f"{llama['ours_eager_us']:.0f}",
        "torch_eager": f"{llama['torch_eager_us']:.0f}",
        "narrow_ours_eager": f"{narrow['ours_eager_us']:.0f}",
        "narrow_torch_eager": f"{narrow['torch_eager_us']:.0f}",
        "host": f"{host(llama, 'ours'):.1f}",
        "narrow_host": f"{host(narrow, 'ours'):.1f}",
        "above_bare": f"{host(llama, 'ours') - host(llama, bare):.1f}",
        "narrow_above_bare": f"{host(narrow, 'ours') - host(narrow, bare):.1f}",
        "bare": f"{host(llama, bare):.1f}",
        "narrow_bare": f"{host(narrow, bare):.1f}",
        "vs_torch": _span([host(r, "ours") / host(r, "torch") for r in (llama, narrow)], 2),
        "torch_host": f"{host(llama, 'torch'):.1f}",
        "narrow_torch_host": f"{host(narrow, 'torch'):.1f}",
    }


LOWBIT_H200 = "lowbit_nvidia-h200"


def lowbit_prose() -> dict[str, str]:
    """The H200's int4 figures in prose (results/lowbit_nvidia-h200.json, goal_figures): g128 float16 over
    torch's float16 at M = 1, 4, 16 and over ours at M = 1; g128 bfloat16 over torch's bfloat16, and
    tinygemm's and gemlite's speedup over ours; the (N, K) pairs at M = 1."""
    report = _load(LOWBIT_H200)
    value = {f.name: f.value for f in goal_figures(report)}

    def at(name: str, invert: bool = False) -> str:
        figure = value[name]
        if figure is None:
            return "n/a"
        return f"{1 / figure if invert else figure:.2f}"

    def over_torch(m: int) -> str:
        """g128 float16 at M = m over torch's float16 (M = 8 and 32 have no goal figure)."""
        rows = [r for r in report["rows"] if case_label(r) == "g128 float16" and r["m"] == m and r.get("ours_us")]
        ratios = [r["torch_fp16_us"] / r["ours_us"] for r in rows if r.get("torch_fp16_us")]
        return f"{_geomean(ratios):.2f}" if ratios else "n/a"

    f16, bf16 = "g128 float16 M=", "g128 bfloat16 M=1 geomean speedup over "
    return {
        "pairs": str(sum(1 for r in report["rows"] if case_label(r) == "g128 float16" and r["m"] == 1)),
        "f16_torch": at(f"{f16}1 geomean speedup over torch_fp16"),
        "f16_ours": at(f"{f16}1 geomean speedup over ours_fp16"),
        "f16_m4": at(f"{f16}4 geomean speedup over torch_fp16"),
        "f16_m8": over_torch(8),
        "f16_m16": at(f"{f16}16 geomean speedup over torch_fp16"),
        "f16_m32": over_torch(32),
        "f16_m64": at(f"{f16}64 geomean speedup over torch_fp16"),
        "bf16_torch": at(f"{bf16}torch_fp16"),
        # The peers' speed as a ratio ("0.79x"), or "n/a" where the report has no run of them.
        "bf16_tinygemm": ratio if (ratio := at(f"{bf16}tinygemm", invert=True)) == "n/a" else f"{ratio}x",
        "bf16_gemlite": ratio if (ratio := at(f"{bf16}gemlite", invert=True)) == "n/a" else f"{ratio}x",
    }


def _lowbit_rows(case: str, m: int) -> dict[tuple[int, int], dict[str, Any]]:
    """The H200's int4 rows of one kind ("g128 float16") at M = m, by (N, K)."""
    return {(r["n"], r["k"]): r for r in _load(LOWBIT_H200)["rows"] if case_label(r) == case and r["m"] == m}


def _over_torch(case: str, m: int) -> str:
    """One kind's goal figure at M = m: its geomean over torch's float16 (bench_lowbit.goal_figures)."""
    value = {f.name: f.value for f in goal_figures(_load(LOWBIT_H200))}[f"{case} M={m} geomean speedup over torch_fp16"]
    return "n/a" if value is None else f"{value:.2f}"


BIG_PAIRS = ((28672, 4096), (37888, 3584))  # the two widest (N, K) pairs of the int4 benchmark


def lowbit_wgmma() -> dict[str, str]:
    """The int4 wgmma kernel's figures at M = 64: ours (and torch's float16) on 28672x4096 and 37888x3584
    in each tuned kind, each kind's geomean over torch's float16, and the error range at M = 32 and 64."""
    kinds = {"f16": "g128 float16", "f16a": "g128a float16", "bf16": "g128 bfloat16"}
    found: dict[str, str] = {}
    errors = []
    for key, case in kinds.items():
        rows = _lowbit_rows(case, 64)
        found[f"{key}_28672"], found[f"{key}_37888"] = (f"{rows[nk]['ours_us']:.1f}" for nk in BIG_PAIRS)
        found[f"{key}_m64"] = _over_torch(case, 64)
        for m in (32, 64):
            errors += [r["max_rel_err"] / r["peer_max_rel_err"] for r in _lowbit_rows(case, m).values()]
    rows = _lowbit_rows(kinds["f16"], 64)
    found["torch_28672"], found["torch_37888"] = (f"{rows[nk]['torch_fp16_us']:.1f}" for nk in BIG_PAIRS)
    found["errors"] = f"{min(errors):.2f}-{max(errors):.2f}"
    return found


def lowbit_m16() -> dict[str, str]:
    """M = 16 in each tuned kind over torch's float16, float16 g128's times on 37888x3584 and 4608x3584,
    its time over M = 8's (geometric mean over the pairs) and what M = 16 would reach at M = 8's times."""
    kinds = {"f16": "g128 float16", "f16a": "g128a float16", "bf16": "g128 bfloat16"}
    found = {key: _over_torch(case, 16) for key, case in kinds.items()}
    m16, m8 = _lowbit_rows(kinds["f16"], 16), _lowbit_rows(kinds["f16"], 8)
    found["t37888"], found["t4608"] = (f"{m16[nk]['ours_us']:.1f}" for nk in ((37888, 3584), (4608, 3584)))
    found["over_m8"] = f"{_geomean([m16[nk]['ours_us'] / m8[nk]['ours_us'] for nk in m8]):.2f}"
    found["at_m8"] = f"{_geomean([m16[nk]['torch_fp16_us'] / m8[nk]['ours_us'] for nk in m8]):.2f}"
    return found


GEMM_WS = ROOT / "experiments" / "gemm_ws_nvidia-h200.jsonl"  # experiments/gemm_ws.cu (EPILOGUES=1)


def gemm_ws() -> dict[str, str]:
    """The persistent warp-specialized GEMM's epilogue variants beside cuBLAS (findings.md, GEMM)."""
    rows = [json.loads(line) for line in GEMM_WS.read_text().splitlines()]

    def row(dtype: str, mnk: tuple[int, int, int], call: int = 1, **kind: int) -> dict[str, Any]:
        """The one row of this shape and variant in device call `call` (2: the threads' store beside the TMA's)."""
        found = [
            r
            for r in rows
            if r["dtype"] == dtype
            and (r["m"], r["n"], r["k"]) == mnk
            and r["call"] == call
            and all(r[k] == v for k, v in kind.items())
        ]
        assert len(found) == 1, (dtype, mnk, kind, len(found))
        return found[0]

    cube, big, wide, whole = (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4224, 4096, 4096)
    registers = row("float16", cube, pingpong=0, store=1, tma_store=0)
    bare = row("float16", cube, store=0)
    plain = row("float16", cube, pingpong=0, store=1, tma_store=1)
    swizzled = row("float16", cube, store=1, tma_store=2)
    big_row = row("float16", big, store=1, tma_store=2)
    cublas_big = [
        r["cublas_us"] for r in rows if (r["m"], r["n"], r["k"]) == big and r["dtype"] == "float16" and r["call"] == 1
    ]
    threads, beside = row("float16", cube, 2, tma_store=3), row("float16", cube, 2, tma_store=2)
    return {
        "registers": f"{registers['ours_us']:.1f}",
        "bare": f"{bare['ours_us']:.1f}",
        "reg_ratio": f"{registers['vs_cublas']:.2f}",
        "cublas": f"{registers['cublas_us']:.1f}",
        "share": f"{round(100 * (1 - bare['ours_us'] / registers['ours_us']))}",
        "plain": f"{plain['ours_us']:.1f}",
        "plain_ratio": f"{plain['vs_cublas']:.2f}",
        "swizzled": f"{swizzled['ours_us']:.1f}",
        "tflops": f"{swizzled['ours_tflops']:.0f}",
        "ratio": f"{swizzled['vs_cublas']:.2f}",
        "bf16": f"{row('bfloat16', cube, tma_store=2)['vs_cublas']:.2f}",
        # "in both dtypes": one figure where both round alike, else both (and the doc no longer matches)
        "wide": "/".join(sorted({f"{row(d, wide, tma_store=2)['vs_cublas']:.2f}" for d in ("float16", "bfloat16")})),
        "big": f"{big_row['ours_us']:.0f}",
        "big_cublas": f"{big_row['cublas_us']:.0f}",
        "big_spread": _span(cublas_big, 0).replace("-", "\u2013"),  # an en dash, as findings.md writes spans
        "pingpong": f"{row('float16', cube, pingpong=1)['vs_cublas']:.2f}",
        "whole": f"{row('float16', whole, store=1, tma_store=2)['vs_cublas']:.2f}",
        "threads": f"{threads['ours_us']:.1f}",
        "threads_ratio": f"{threads['vs_cublas']:.2f}",
        "beside": f"{beside['ours_us']:.1f}",
    }


WS_ORDER = ROOT / "experiments" / "ws_tile_order_nvidia-h200.jsonl"  # experiments/ws_tile_order.py


def ws_tile_order() -> dict[str, str]:
    """The ws family's tile orders beside torch.mm (findings.md, GEMM): the call with groups of 1-16, the
    prefill set's with groups of 8-32 and 8192^3's with 16-64, each row told apart by a config of its call."""
    rows = [json.loads(line) for line in WS_ORDER.read_text().splitlines()]

    def ratio(problem: str, config: str, call: str) -> float:
        """`problem` is a row's whole name, or its name before " (B stored N x K)"."""
        named = [r for r in rows if call in r["vs_torch"] and problem in (r["problem"], r["problem"].split(" (")[0])]
        found = [r["vs_torch"][config] for r in named if r["problem"] == problem or len(named) == 1]
        assert len(found) == 1, (problem, config, call, len(found))
        return float(found[0])

    def span(problems: list[str], config: str, call: str) -> str:
        values = [ratio(p, config, call) for p in problems]
        return f"{min(values):.3f}\u2013{max(values):.3f}"

    first, prefill, squares = "128x256_s3_g1_c1", "128x128_s6_g16_c1", "128x256_s3_g64_c1"
    wide, widest = "hgemm 4096x28672x4096", "hgemm 4096x37888x3584"
    float16_set = [f"hgemm 4096x{n}x{k}" for n, k in llm_nk_pairs()]
    cubes = [
        r["problem"] for r in rows if r["problem"].split(" (")[0] in ("hgemm 8192x8192x8192", "bgemm 8192x8192x8192")
    ]
    figures = {
        f"{name}_g{g}": f"{ratio(problem, f'128x256_s3_g{g}_c1', first):.2f}"
        for name, problem in (("wide", wide), ("widest", widest))
        for g in (1, 4, 8, 16)
    }
    named = (
        ("f6144", "hgemm 4096x6144x4096"),
        ("f28672", wide),
        ("f37888", widest),
        ("f18944", "hgemm 4096x3584x18944"),
        ("b28672", "bgemm 4096x28672x4096"),
        ("b37888", "bgemm 4096x37888x3584"),
    )
    figures |= {
        f"{name}_{g}": f"{ratio(problem, f'128x256_s3_g{g}_c1', prefill):.3f}"
        for name, problem in named
        for g in (32, 8)
    }
    figures |= {f"all_{g}": span(float16_set, f"128x256_s3_g{g}_c1", prefill) for g in (32, 8)}
    figures |= {f"cube_{g}": span(cubes, f"128x256_s3_g{g}_c1", squares) for g in (16, 32, 64)}
    return figures


INT4_AB = ROOT / "experiments" / "int4_ab_nvidia-h200.jsonl"  # experiments/int4_ab.py's A/B rounds


def _ab_ratios(round_: str, tree: str, keep: Callable[[dict[str, int]], bool], base: str = "old") -> list[float]:
    """Each config's fastest time under `base` over its fastest under `tree`, in one A/B round."""
    times: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for line in INT4_AB.read_text().splitlines():
        row = json.loads(line)
        if row["round"] == round_:
            times.setdefault((row["key"], row["config"], row["what"]), {}).setdefault(row["tree"], []).append(row["us"])
    ratios = []
    for (_, config, _), by_tree in times.items():
        if keep({name: int(value) for name, value in (part.split("=") for part in config.split())}):
            ratios.append(min(by_tree[base]) / min(by_tree[tree]))
    return ratios


def lowbit_ab() -> dict[str, str]:
    """The wgmma kernel's A/B figures (experiments/int4_ab_nvidia-h200.jsonl): geomeans, spans and counts
    of each change's configs against the kernels before it."""

    def wgmma(c: dict[str, int]) -> bool:
        return c.get("wgmma", 0) == 1

    def mma(c: dict[str, int]) -> bool:
        return not c.get("wgmma", 0) and not c.get("rpw", 0)

    def every(c: dict[str, int]) -> bool:
        return True

    found: dict[str, str] = {}
    # Each change: its round, its tree, which configs, and what the prose states (geomean, count, span).
    for key, ratios, stated in (
        ("scales", _ab_ratios("scales-at-use", "new", wgmma), "gns"),
        ("moved", _ab_ratios("scales-at-use", "new2", wgmma), "gs"),
        ("mma", _ab_ratios("scales-at-use", "new", mma), "gns"),
        ("stage16", _ab_ratios("x-staging", "new2", every), "g"),
        ("stage32", _ab_ratios("x-staging", "new", every), "gn"),
        ("offset", _ab_ratios("step-instructions-split", "va", every), "g"),
        ("mx32", _ab_ratios("step-instructions", "new", lambda c: c["mt"] == 4), "gns"),
    ):
        figures = {"g": f"{_geomean(ratios):.2f}", "n": str(len(ratios)), "s": _span(ratios, 2)}
        found.update({key + {"g": "", "n": "_n", "s": "_span"}[part]: figures[part] for part in stated})
    kept = _ab_ratios("step-instructions-split", "vb", lambda c: c["mt"] == 8, base="va")
    found["kept_cost"], found["kept_n"] = f"{100 * (1 - _geomean(kept)):.0f}", str(len(kept))
    return found


def lowbit_fewer_instructions() -> dict[str, str]:
    """float16 g128's times after the wgmma kernel's step lost instructions: 28672x4096 at M = 64, and
    28672x4096 and 37888x3584 at M = 32."""
    m64, m32 = _lowbit_rows("g128 float16", 64), _lowbit_rows("g128 float16", 32)
    return {
        "m64": f"{m64[(28672, 4096)]['ours_us']:.1f}",
        "m32_28672": f"{m32[(28672, 4096)]['ours_us']:.1f}",
        "m32_37888": f"{m32[(37888, 3584)]['ours_us']:.1f}",
    }


INT4_NCU = ROOT / "experiments" / "int4_ncu_m64{}_nvidia-h200.txt"  # the M = 64 wgmma pick, Nsight Compute


def _ncu_profile(suffix: str) -> tuple[dict[str, float], dict[str, float]]:
    """A profile's counters (Nsight's details page) and the warp-state sample shares (%) of its listed
    instructions summed by what they wait in: the partial sums' adds, the barrier's release, the scale
    pairs."""
    text = INT4_NCU.with_name(INT4_NCU.name.format(suffix)).read_text()
    counters = {}
    for name in ("Executed Instructions", "Elapsed Cycles", "Duration", "Issue Slots Busy"):
        match = re.search(rf"^\s+{name}\s+\S+\s+([\d,.]+)$", text, flags=re.M)
        assert match is not None, name
        counters[name] = float(match.group(1).replace(",", ""))
    listed = [(float(m[1]), m[2]) for m in re.finditer(r"^\s*([\d.]+)%\s+(?:0x[0-9a-f]+\s+)?(\S.*)$", text, re.M)]
    shares = {
        "adds": sum(p for p, sass in listed if sass.startswith("FADD")),
        "release": sum(p for p, sass in listed if sass.startswith("ERRBAR")),
        "scales": sum(p for p, sass in listed if sass.startswith("PRMT") and "0x5410" in sass),
    }
    return counters, shares


def lowbit_ncu() -> dict[str, str]:
    """The wgmma pick's Nsight figures before and after its step lost instructions
    (experiments/int4_ncu_m64*_nvidia-h200.txt)."""
    before, waits = _ncu_profile("")
    after, waits_after = _ncu_profile("_fewer_instructions")
    return {
        "adds": f"{waits['adds']:.0f}",
        "release": f"{waits['release']:.0f}",
        "scales": f"{waits['scales']:.0f}",
        "instructions": f"{after['Executed Instructions'] / 1e6:.1f}",
        "instructions_before": f"{before['Executed Instructions'] / 1e6:.1f}",
        "cycles": f"{after['Elapsed Cycles'] / 1e3:.0f}",
        "cycles_before": f"{before['Elapsed Cycles'] / 1e3:.0f}",
        "us": f"{after['Duration']:.1f}",
        "us_before": f"{before['Duration']:.1f}",
        "issue": f"{after['Issue Slots Busy']:.0f}",
        "release_after": f"{waits_after['release']:.0f}",
        "adds_after": f"{waits_after['adds']:.0f}",
    }


def lowbit_decode() -> dict[str, str]:
    """The int4 decode step (results/decode_nvidia-h200.json): its CUDA graph's speedup over torch.mv's
    float16 graph, and host µs per call, int4's and the float16 GEMV's."""
    rows = {r["model"]: r for r in _load("decode_nvidia-h200")["rows"]}
    int4, fp16 = rows["llama-like-int4"], rows["llama-like"]
    return {
        "graph": f"{int4['torch_graph_us'] / int4['ours_graph_us']:.2f}",
        "host": f"{int4['ours_host_us_per_call']:.0f}",
        "fp16_host": f"{fp16['ours_host_us_per_call']:.0f}",
    }


def lowbit_large_m() -> dict[str, str]:
    """The M >= 1024 goal figure of each tuned kind (the worst geomean over torch's F.linear), three
    digits as lowbit.md writes them (0.798 rounds onto the goal of 0.8 it misses)."""
    value = {f.name: f.value for f in goal_figures(_load(LOWBIT_H200))}
    cases = {"f16": "g128 float16", "f16a": "g128a float16", "bf16": "g128 bfloat16"}
    found = {key: value[f"{case} M>=1024 worst geomean speedup over torch_fp16"] for key, case in cases.items()}
    return {key: "n/a" if figure is None else f"{figure:.3f}" for key, figure in found.items()}


def lowbit_large_m_headline() -> dict[str, str]:
    """The README's M >= 1024 figure: g128 float16's, two digits."""
    figure = lowbit_large_m()["f16"]
    return {"f16": figure if figure == "n/a" else f"{float(figure):.2f}"}


def lowbit_headline() -> dict[str, str]:
    """The README's int4 line: g128 float16 at M = 1, 16 and 64 over torch's float16, and the pairs it is
    taken over."""
    figures = lowbit_prose()
    return {key: figures[key] for key in ("f16_torch", "f16_m16", "f16_m64", "pairs")}


LOWBIT8_H200 = "lowbit8_nvidia-h200"


def _lowbit8_ratios(kind: str, m: int, peer: str = "torch_fp16") -> list[float]:
    """Our 8-bit product's speedup over `peer` on each shape of one kind at M = m, float16 activations
    (results/lowbit8_nvidia-h200.json)."""
    rows = _load(LOWBIT8_H200)["rows"]
    return [r[f"{peer}_us"] / r["ours_us"] for r in rows if (r["format"], r["dtype"], r["m"]) == (kind, "float16", m)]


def lowbit8_prose() -> dict[str, str]:
    """docs/lowbit.md's M = 1 figures: each kind's geomean over torch's float16, int8's over our float16,
    the span over torch's on each shape (both kinds), and the fastest int8 row's bandwidth and share of
    copy."""
    report = _load(LOWBIT8_H200)
    ones = [r for r in report["rows"] if (r["format"], r["dtype"], r["m"]) == ("int8", "float16", 1)]
    gbs = max(r["bytes"] / (r["ours_us"] * 1e3) for r in ones)
    return {
        "int8": f"{_geomean(_lowbit8_ratios('int8', 1)):.2f}",
        "fp8": f"{_geomean(_lowbit8_ratios('fp8', 1)):.2f}",
        "ours": f"{_geomean(_lowbit8_ratios('int8', 1, 'ours_fp16')):.2f}",
        "span": _span(_lowbit8_ratios("int8", 1) + _lowbit8_ratios("fp8", 1), 2),
        "tbs": f"{gbs / 1e3:.2f}",
        "copy": f"{100 * gbs / report['copy_gbs']:.0f}",
    }


def lowbit8_headline() -> dict[str, str]:
    """The README's 8-bit line: both kinds' M = 1 geomeans over torch's float16, int8's span at M = 4."""
    figures = lowbit8_prose()
    return {"int8": figures["int8"], "fp8": figures["fp8"], "m4": _span(_lowbit8_ratios("int8", 4), 2)}


def model_figures(weights: str = "float16") -> dict[str, str]:
    """A decode step's GPU-time ratios of scripts/bench_model.py's 32-layer rows of `weights`, by fused
    and mode, and the linears' (torch's linear kernels' time over ours') in the fused compiled step."""
    found = [r for r in _load("model_nvidia-h200")["rows"] if r["layers"] == 32 and r["weights"] == weights]
    rows = {(r["fused"], r["mode"]): r for r in found}
    fused = rows[True, "compiled"]
    return {
        "eager": f"{rows[False, 'eager']['gpu_ratio']:.3f}",
        "compiled": f"{rows[False, 'compiled']['gpu_ratio']:.3f}",
        "fused_eager": f"{rows[True, 'eager']['gpu_ratio']:.3f}",
        "fused_compiled": f"{fused['gpu_ratio']:.3f}",
        "linears": f"{fused['torch_linear_us'] / fused['ours_linear_us']:.2f}",
        "headline": f"{fused['gpu_ratio']:.2f}",
    }


def model_host_figures() -> dict[str, str]:
    """The 32-layer float16 eager row's host µs per linear (ours' range, torch's) and generate's wall µs."""
    (row,) = [r for r in _load("model_nvidia-h200")["rows"] if r["layers"] == 32 and r.get("host")]
    ours = [h["ours_host_us"] for h in row["host"]]
    theirs = [h["torch_host_us"] for h in row["host"]]
    return {
        "ours": f"{min(ours):.1f}-{max(ours):.1f}",
        "torch": f"{min(theirs):.1f}-{max(theirs):.1f}",
        "ours_wall": f"{row['ours_wall_us'] / 1e3:.1f}",
        "torch_wall": f"{row['torch_wall_us'] / 1e3:.1f}",
    }


def tune_model_figures() -> dict[str, str]:
    """scripts/bench_tune_model.py's stages: torch's time over ours, the problems and seconds swept."""
    rows = {r["stage"]: r for r in _load("tune_model_nvidia-h200")["rows"]}
    ratio = {stage: r["torch_gpu_us"] / r["ours_gpu_us"] for stage, r in rows.items()}
    tuned, full = rows["tune_model"], rows["64 trials"]
    return {
        "untuned": f"{ratio['untuned']:.3f}",
        "problems": str(tuned["problems"]),
        "seconds": f"{tuned['sweep_s']:.0f}",
        "tuned": f"{ratio['tune_model']:.3f}",
        "within": f"{abs(tuned['ours_gpu_us'] / full['ours_gpu_us'] - 1) * 100:.1f}",
        "full": f"{ratio['64 trials']:.3f}",
    }


def linear_grad_figures() -> dict[str, str]:
    """scripts/bench_linear_grad.py's ratios (torch's time over ours): queued, and one step at a time at
    the 4096 x 4096 weights (M = 512 and 2048) and at the larger shapes."""
    rows = _load("linear_grad_nvidia-h200")["rows"]
    small = [r["ratio"] for r in rows if (r["n"], r["k"]) == (4096, 4096) and r["m"] <= 2048]
    large = [r["ratio"] for r in rows if not ((r["n"], r["k"]) == (4096, 4096) and r["m"] <= 2048)]

    def span(values: list[float]) -> str:
        return f"{min(values):.2f}-{max(values):.2f}"

    return {"queued": span([r["gpu_ratio"] for r in rows]), "small": span(small), "large": span(large)}


FIGURES = [
    Figure(
        DOCS / "findings.md",
        r"C cost (?P<share>\d+)% of the call: (?P<registers>[\d.]+) µs against (?P<bare>[\d.]+) with one sum a thread"
        r"\s+written\s+instead \((?P<reg_ratio>[\d.]+)\u00d7 cuBLAS's (?P<cublas>[\d.]+)\).*?go on:"
        r" (?P<plain>[\d.]+) µs"
        r"\s+\((?P<plain_ratio>[\d.]+)\u00d7\).*?\*\*(?P<swizzled>[\d.]+) µs,\s+(?P<tflops>\d+) TFLOP/s,"
        r" (?P<ratio>[\d.]+)\u00d7\*\* \(bfloat16 (?P<bf16>[\d.]+)\u00d7; 4096\u00d714336\u00d74096"
        r" (?P<wide>[\d.]+)\u00d7 in both dtypes;"
        r"\s+8192³ (?P<big>\d+) µs against\s+cuBLAS's (?P<big_cublas>\d+), whose own times over that run's rows"
        r" spread\s+(?P<big_spread>[\d\u2013]+) µs\).*?ran\s+(?P<pingpong>[\d.]+)\u00d7: the.*?has 3\.88\) ran"
        r" (?P<whole>[\d.]+)\u00d7.*?16-byte stores instead \(no tensor map for C, so beta can be read\):"
        r"\s+(?P<threads>[\d.]+) µs, (?P<threads_ratio>[\d.]+)\u00d7, in a call where the TMA store took"
        r"\s+(?P<beside>\d+\.\d)",
        gemm_ws,
        "experiments/gemm_ws_nvidia-h200.jsonl",
    ),
    Figure(
        README,
        r"cost (?P<ours>[\d.]+-[\d.]+) µs of host time with `out=`\s+against\s+torch\.mv's\s+"
        r"(?P<torch>[\d.]+-[\d.]+) µs",
        host_cost,
        "results/decode_*.json",
    ),
    Figure(
        README,
        r"decode step of 32 float16 GEMVs in a CUDA graph runs (?P<h200>[\d.]+)x faster than torch\.mv's\s+"
        r"graph on the H200 \((?P<h100>[\d.]+)x on the H100\)",
        decode_graph_headline,
        "results/decode_*.json",
    ),
    Figure(
        DOCS / "launch.md",
        r"the Llama-like step runs (?P<graph>[\d.]+)x faster than torch\.mv's graph \((?P<ours_graph>\d+) against "
        r"(?P<torch_graph>\d+) µs\),\s+(?P<above_floor>[\d.]+)% above the summed read floors of its matrices "
        r"\((?P<floor>\d+) µs\); the narrow step (?P<narrow_graph>[\d.]+)x \((?P<narrow_ours_graph>\d+) against "
        r"(?P<narrow_torch_graph>\d+)\)\..*?Eager, the Llama-like step takes (?P<ours_eager>\d+) µs against "
        r"torch\.mv's (?P<torch_eager>\d+), and the narrow one, host-bound,\s+(?P<narrow_ours_eager>\d+) against "
        r"(?P<narrow_torch_eager>\d+)\.\s+- Host cost of a call with `out=`: (?P<host>[\d.]+) µs \(Llama-like row\) "
        r"and (?P<narrow_host>[\d.]+) µs \(narrow row\), (?P<above_bare>[\d.]+) and (?P<narrow_above_bare>[\d.]+) µs"
        r"\s+above the bare ctypes `cuLaunchKernel` beside them \((?P<bare>[\d.]+) and (?P<narrow_bare>[\d.]+) µs\), "
        r"and (?P<vs_torch>[\d.]+-[\d.]+)x torch\.mv's \((?P<torch_host>[\d.]+)\s+and "
        r"(?P<narrow_torch_host>[\d.]+) µs\)",
        decode_h200,
        "results/decode_nvidia-h200.json",
    ),
    Figure(
        README,
        r"int4 weights \(g128, float16\) at\s+M = 1 run (?P<f16_torch>[\d.]+)x\s+torch's float16 GEMV,\s+"
        r"(?P<f16_m16>[\d.]+)x at M = 16\s+and (?P<f16_m64>[\d.]+)x at M = 64,\s+geometric mean over\s+(?P<pairs>\d+)",
        lowbit_headline,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        README,
        r"int8 and fp8\s+weights: (?P<int8>[\d.]+)x and (?P<fp8>[\d.]+)x at M = 1, "
        r"int8 (?P<m4>[\d.]+-[\d.]+)x at M = 4",
        lowbit8_headline,
        f"results/{LOWBIT8_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"At M = 1 the 8-bit GEMV runs (?P<int8>[\d.]+)x \(int8\) and (?P<fp8>[\d.]+)x \(fp8\) torch's float16, and "
        r"(?P<ours>[\d.]+)x our own\s+float16 GEMV\*\* \(geometric means over the 8 shapes; goals 1.9x and 1.6x\): "
        r"(?P<span>[\d.]+-[\d.]+)x torch's on each\s+shape, (?P<tbs>[\d.]+) TB/s \((?P<copy>\d+)% of copy\)",
        lowbit8_prose,
        f"results/{LOWBIT8_H200}.json",
    ),
    Figure(
        README,
        r"float16 weights are faster\), (?P<f16>[\d.]+)x at 1024 rows",
        lowbit_large_m_headline,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"the worst geomean over the eight pairs \(at M = 1024\) is (?P<f16>[\d.]+)x in\s+float16 g128 and "
        r"(?P<f16a>[\d.]+)x in g128a, met, and (?P<bf16>[\d.]+)x in bfloat16, missed",
        lowbit_large_m,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"M = 1 geometric mean (?P<f16_torch>[\d.]+)x torch's float16 and\s+(?P<f16_ours>[\d.]+)x our float16 "
        r"GEMV over the\s+(?P<pairs>\d+) \(N, K\) pairs.*?M = 4 (?P<f16_m4>[\d.]+)x, M = 8\s+(?P<f16_m8>[\d.]+)x, "
        r"M = 16\s+(?P<f16_m16>[\d.]+)x, M = 32\s+(?P<f16_m32>[\d.]+)x and M = 64\s+(?P<f16_m64>[\d.]+)x"
        r".*?(?P<bf16_torch>[\d.]+)x torch's\s+bfloat16; tinygemm\s+"
        r"(?P<bf16_tinygemm>[\d.]+x|n/a) and gemlite[^\d]*?(?P<bf16_gemlite>[\d.]+x|n/a)\s+as fast as ours",
        lowbit_prose,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"M = 64: 28672\u00d74096 [\d.]+ → (?P<f16_28672>[\d.]+) µs \(torch's float16 (?P<torch_28672>[\d.]+)\), "
        r"37888\u00d73584 [\d.]+ → (?P<f16_37888>[\d.]+) \((?P<torch_37888>[\d.]+)\); g128a\s+[\d.]+ → "
        r"(?P<f16a_28672>[\d.]+) and [\d.]+ → (?P<f16a_37888>[\d.]+); bfloat16 [\d.]+ → (?P<bf16_28672>[\d.]+) "
        r"and [\d.]+ → (?P<bf16_37888>[\d.]+)\. Geometric means at M = 64 over\s+the eight pairs: float16 g128 "
        r"[\d.]+x → (?P<f16_m64>[\d.]+)x torch's float16, g128a [\d.]+x → (?P<f16a_m64>[\d.]+)x, bfloat16 "
        r"[\d.]+x →\s+(?P<bf16_m64>[\d.]+)x; errors at M = 32 and 64 (?P<errors>[\d.]+-[\d.]+)x",
        lowbit_wgmma,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"float16 g128 [\d.]+x →\s+(?P<f16>[\d.]+)x \(37888\u00d73584 [\d.]+ → (?P<t37888>[\d.]+) µs, 4608\u00d73584 "
        r"[\d.]+ → (?P<t4608>[\d.]+)\), g128a [\d.]+x → (?P<f16a>[\d.]+)x, bfloat16 [\d.]+x → (?P<bf16>[\d.]+)x\."
        r"\s+M = 16 still runs (?P<over_m8>[\d.]+)x the time of M = 8.*?it would be (?P<at_m8>[\d.]+)x",
        lowbit_m16,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"multiplied ran\s+(?P<scales>[\d.]+)x over the (?P<scales_n>\d+) wgmma\s+picks \((?P<scales_span>[\d.-]+)x\);"
        r".*?next tile's loads,\s+(?P<moved>[\d.]+)x \((?P<moved_span>[\d.-]+)x\)\..*?ran\s+(?P<mma>[\d.]+)x over its"
        r"\s+(?P<mma_n>\d+) picks at M = 1-64\s+\((?P<mma_span>[\d.-]+)x\).*?\(16: (?P<stage16>[\d.]+)x,\s+32:"
        r"\s+(?P<stage32>[\d.]+)x over (?P<stage32_n>\d+) configs\).*?\(alone\s+(?P<offset>[\d.]+)x\).*?and"
        r"\s+(?P<mx32_n>\d+) configs ran\s+(?P<mx32>[\d.]+)x faster\s+\((?P<mx32_span>[\d.-]+)x\); at MX = 64 kept"
        r"\s+pointers cost\s+(?P<kept_cost>\d+)% over (?P<kept_n>\d+) configs",
        lowbit_ab,
        "experiments/int4_ab_nvidia-h200.jsonl",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"cluster's\s+shared\s+memory\s+\((?P<adds>\d+)%\s+of\s+samples\),\s+the\s+cluster\s+barrier's\s+release"
        r"\s+\((?P<release>\d+)%\)\s+and\s+the\s+scale\s+pairs\s+built\s+as\s+soon\s+as\s+their\s+loads\s+were"
        r"\s+issued\s+\((?P<scales>\d+)%\).*?new\s+M\s+=\s+64\s+pick:\s+(?P<instructions>[\d.]+)\s+million"
        r"\s+instructions\s+executed\s+instead\s+of\s+(?P<instructions_before>[\d.]+),\s+(?P<cycles>\d+)\s+thousand"
        r"\s+cycles\s+instead\s+of\s+(?P<cycles_before>\d+)\s+\((?P<us>[\d.]+)\s+µs\s+under\s+the\s+profiler"
        r"\s+against\s+(?P<us_before>[\d.]+)\),\s+issue\s+slots\s+still\s+(?P<issue>\d+)%\s+busy,.*?release"
        r"\s+(?P<release_after>\d+)%\s+of\s+samples,\s+the\s+partial\s+sums'\s+adds\s+(?P<adds_after>\d+)%\)",
        lowbit_ncu,
        "experiments/int4_ncu_m64*_nvidia-h200.txt",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"28672\u00d74096\s+at\s+M\s+=\s+64\s+[\d.]+\s+→\s+(?P<m64>[\d.]+)\s+µs,\s+and\s+at\s+M\s+=\s+32\s+the\s+wgmma"
        r"\s+kernel\s+now\s+also\s+serves\s+28672\u00d74096\s+in\s+every\s+kind\s+\(float16\s+g128\s+[\d.]+\s+→"
        r"\s+(?P<m32_28672>[\d.]+)\s+µs;\s+37888\u00d73584\s+[\d.]+\s+→\s+(?P<m32_37888>[\d.]+)\)",
        lowbit_fewer_instructions,
        f"results/{LOWBIT_H200}.json",
    ),
    Figure(
        DOCS / "lowbit.md",
        r"int4 weights in a CUDA graph runs (?P<graph>[\d.]+)x torch\.mv's float16\s+graph \(goal 3\.3x\)\. Eager, "
        r"a call cost (?P<host>\d+) µs of host time\s+against (?P<fp16_host>\d+) µs",
        lowbit_decode,
        "results/decode_nvidia-h200.json",
    ),
    Figure(
        README,
        r"under `autotune\.patch\(model, fuse=True\)`:\s+decode steps (?P<headline>[\d.]+)x faster than torch's"
        r" in GPU time, (?P<int4>[\d.]+)x with `\"int4\"` weights, (?P<int8>[\d.]+)x with `\"int8\"`",
        lambda: {
            "headline": model_figures()["headline"],
            "int4": model_figures("int4")["headline"],
            "int8": model_figures("int8")["headline"],
        },
        "results/model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "models.md",
        r"torch's time over ours:\s+(?P<eager>[\d.]+)x eager and (?P<compiled>[\d.]+)x compiled\s+patched alone, "
        r"(?P<fused_eager>[\d.]+)x and (?P<fused_compiled>[\d.]+)x with `fuse=True`; the linears' kernels\s+"
        r"of the fused compiled step (?P<linears>[\d.]+)x",
        lambda: {k: v for k, v in model_figures().items() if k != "headline"},
        "results/model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "models.md",
        r"\(1, 1, K\) x costs (?P<ours>[\d.]+-[\d.]+) µs of host time against `nn\.Linear`'s "
        r"(?P<torch>[\d.]+-[\d.]+) µs.*?eager `generate` runs a token in (?P<ours_wall>[\d.]+) ms against "
        r"torch's (?P<torch_wall>[\d.]+) ms",
        model_host_figures,
        "results/model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "models.md",
        r"run the decode step (?P<untuned>[\d.]+)x faster than torch; .*?swept the (?P<problems>\d+) problems it "
        r"met in (?P<seconds>\d+) s, and the step then ran (?P<tuned>[\d.]+)x, within (?P<within>[\d.]+)% of "
        r"a\s+64-trial sweep of the same problems \((?P<full>[\d.]+)x\)",
        tune_model_figures,
        "results/tune_model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "models.md",
        r"against torch's float16 model:\s+(?P<eager>[\d.]+)x eager and (?P<compiled>[\d.]+)x compiled\s+"
        r"patched alone, (?P<fused_eager>[\d.]+)x and (?P<fused_compiled>[\d.]+)x with `fuse=True`; the "
        r"linears (?P<linears>[\d.]+)x",
        lambda: {k: v for k, v in model_figures("int4").items() if k != "headline"},
        "results/model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "models.md",
        r"With int8 weights \(a scale a row\), against the same float16 model:\s+(?P<eager>[\d.]+)x\s+eager and "
        r"(?P<compiled>[\d.]+)x compiled\s+patched alone, "
        r"(?P<fused_eager>[\d.]+)x and (?P<fused_compiled>[\d.]+)x with `fuse=True`; the linears (?P<linears>[\d.]+)x",
        lambda: {k: v for k, v in model_figures("int8").items() if k != "headline"},
        "results/model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "models.md",
        r"With fp8 \(e4m3\) weights:\s+(?P<eager>[\d.]+)x\s+eager and (?P<compiled>[\d.]+)x compiled\s+"
        r"patched alone, "
        r"(?P<fused_eager>[\d.]+)x and (?P<fused_compiled>[\d.]+)x with `fuse=True`; the linears (?P<linears>[\d.]+)x",
        lambda: {k: v for k, v in model_figures("fp8").items() if k != "headline"},
        "results/model_nvidia-h200.json",
    ),
    Figure(
        DOCS / "launch.md",
        r"ours\s+takes (?P<queued>[\d.]+-[\d.]+)x `F\.linear`'s time.*?host's time shows: (?P<small>[\d.]+-[\d.]+)x at "
        r"512x4096x4096 and 2048x4096x4096, (?P<large>[\d.]+-[\d.]+)x at the larger shapes",
        linear_grad_figures,
        "results/linear_grad_nvidia-h200.json",
    ),
    Figure(
        README,
        r"first call in a fresh process takes (?P<medians>[\d.]+-[\d.]+) ms on an H200 host",
        lambda: {"medians": first_call()["medians"]},
        "results/first_call_nvidia-h200.json",
    ),
    Figure(
        DOCS / "deploy.md",
        r"The file's run: medians of (?P<medians>[\d.]+-[\d.]+) ms\*\*.*?the first process of each problem, which "
        r"unpacks its kernel from\s+xz, took (?P<first>[\d.]+-[\d.]+) ms",
        first_call,
        "results/first_call_nvidia-h200.json",
    ),
    Figure(
        DOCS / "findings.md",
        r"groups of 1, 4, 8 and 16: (?P<wide_g1>[\d.]+)\u00d7, (?P<wide_g4>[\d.]+)\u00d7, (?P<wide_g8>[\d.]+)\u00d7,"
        r" (?P<wide_g16>[\d.]+)\u00d7 `torch\.mm` at 4096\u00d728672\u00d74096\s+and (?P<widest_g1>[\d.]+)\u00d7,"
        r" (?P<widest_g4>[\d.]+)\u00d7, (?P<widest_g8>[\d.]+)\u00d7, (?P<widest_g16>[\d.]+)\u00d7"
        r" at 4096\u00d737888\u00d73584.*?groups of 32 ran (?P<all_32>[\d.\u2013]+)\u00d7 `torch\.mm`"
        r"\s+against (?P<all_8>[\d.\u2013]+)\u00d7 in groups of 8 \(float16: 6144 columns (?P<f6144_32>[\d.]+)"
        r" against (?P<f6144_8>[\d.]+), 28672 (?P<f28672_32>[\d.]+)"
        r" against\s+(?P<f28672_8>[\d.]+), 37888 (?P<f37888_32>[\d.]+) against (?P<f37888_8>[\d.]+),"
        r" 4096\u00d73584\u00d718944 (?P<f18944_32>[\d.]+) against (?P<f18944_8>[\d.]+);\s+bfloat16 28672"
        r" (?P<b28672_32>[\d.]+) against\s+(?P<b28672_8>[\d.]+), 37888 (?P<b37888_32>[\d.]+) against"
        r" (?P<b37888_8>[\d.]+)\).*?groups of 32 ran (?P<cube_32>[\d.\u2013]+)\u00d7 `torch\.mm`, groups of 16"
        r"\s+(?P<cube_16>[\d.\u2013]+)\u00d7 and whole columns \(64\) (?P<cube_64>[\d.\u2013]+)\u00d7",
        ws_tile_order,
        "experiments/ws_tile_order_nvidia-h200.jsonl",
    ),
    Figure(
        DOCS / "design.md",
        r"both workers in one call;\s+`results/retime_nvidia-h200\.json`\) ran at (?P<median>[\d.]+)x the old\s+"
        r"worker's median, (?P<within>\d+) of (?P<problems>\d+) within 2%, the\s+rest spread both ways "
        r"\((?P<range>[\d.]+-[\d.]+)\)",
        worker_retime,
        "results/retime_nvidia-h200.json",
    ),
    Figure(
        ROOT / "README.md",
        r"transposed GEMV: (?P<geomean>[\d.]+)x cuBLAS on the H200",
        transposed_gemv_headline,
        "results/gemv_trans_nvidia-h200.json",
    ),
    Figure(
        ROOT / "README.md",
        r"(?P<shapes>\d+) open-model decode GEMVs: (?P<plain>[\d.]+)x, transposed (?P<trans>[\d.]+)x",
        llm_gemv_headline,
        "results/gemv_llm_nvidia-h200.json, results/gemv_llm_trans_nvidia-h200.json",
    ),
    Figure(
        DOCS / "findings.md",
        r"On the H200, geometric mean (?P<geomean>[\d.]+) over cuBLAS, (?P<range>[\d.]+\u2013[\d.]+); "
        r"(?P<within>\d+) of (?P<rows>\d+) shapes\s+within 2%",
        transposed_gemv,
        "results/gemv_trans_nvidia-h200.json",
    ),
    Figure(
        DOCS / "findings.md",
        r"convolution (?P<conv4>[\d.]+) / (?P<conv8>[\d.]+) / (?P<conv16>[\d.]+) evaluations to 2% "
        r"\((?P<conv4_vs_ga>[\d.]+)x / (?P<conv8_vs_ga>[\d.]+)x / (?P<conv16_vs_ga>[\d.]+)x the genetic "
        r"algorithm's\s+(?P<conv_ga>[\d.]+)\), 2% under 128/64 in (?P<conv4_reach>\d+)% / (?P<conv8_reach>\d+)% "
        r"/ (?P<conv16_reach>\d+)% of runs, but (?P<conv4_s>[\d.]+) / (?P<conv8_s>[\d.]+) / (?P<conv16_s>[\d.]+) "
        r"s to 2% \(the genetic\s+algorithm (?P<conv4_ga_s>[\d.]+) / (?P<conv8_ga_s>[\d.]+) / "
        r"(?P<conv16_ga_s>[\d.]+) s\); GEMM, where a measurement outlasts a compile, (?P<gemm4>[\d.]+) / "
        r"(?P<gemm8>[\d.]+) / (?P<gemm16>[\d.]+)\s+evaluations, (?P<gemm4_reach>\d+)% / (?P<gemm8_reach>\d+)% / "
        r"(?P<gemm16_reach>\d+)%, (?P<gemm4_s>[\d.]+) / (?P<gemm8_s>[\d.]+) / (?P<gemm16_s>[\d.]+) s \(the "
        r"genetic algorithm (?P<gemm_ga>[\d.]+) evaluations, (?P<gemm16_ga_s>[\d.]+) s\).*?"
        r"\(`tpe-ranked`, 16 slots\): (?P<conv_ranked>[\d.]+) and (?P<gemm_ranked>[\d.]+) evaluations to 2% on "
        r"the convolution and GEMM, (?P<conv_ranked_s>[\d.]+) and\s+(?P<gemm_ranked_s>[\d.]+) s",
        compile_slot_replays,
        "results/search_replay.json",
    ),
    Figure(DOCS / "development.md", r"`--rebuild` compiles all (?P<count>\d+)", shipped_kernels, KERNELS_SOURCE),
    Figure(DOCS / "deploy.md", r"shipped kernels \((?P<count>\d+) instances", shipped_kernels, KERNELS_SOURCE),
    Figure(
        DOCS / "findings.md",
        r"\((?P<shapes>\d+) shapes in (?P<groups>\d+) groups of GPU.*?on (?P<model_hits>\d+)\s+shapes against the "
        r"nearest rule's (?P<nearest_hits>\d+), lower-bound regret geometric mean (?P<model_regret>[\d.]+)% "
        r"against\s+(?P<nearest_regret>[\d.]+)%",
        cost_model_over_records,
        "results/cost_model_loso.json",
    ),
]


def with_figures(path: Path, text: str, differences: list[str], missing: list[str]) -> str:
    """`text` (the file `path`) with each of its FIGURES as the source gives it; a figure that differs is
    described in `differences`, a sentence no longer found in `missing`."""
    for figure in (f for f in FIGURES if f.path == path):
        match = re.search(figure.pattern, text, flags=re.S)
        name = path.relative_to(ROOT)
        if match is None:
            missing.append(f"{name}: no sentence matches {figure.pattern!r} (reworded? update FIGURES)")
            continue
        wanted = figure.compute()
        for group in sorted(wanted, key=match.start, reverse=True):  # from the end: earlier spans stay valid
            if match.group(group) != wanted[group]:
                differences.append(f"{name}: {group} is {match.group(group)}, {figure.source} gives {wanted[group]}")
                text = text[: match.start(group)] + wanted[group] + text[match.end(group) :]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that every generated text is up to date")
    args = parser.parse_args()
    differences: list[str] = []
    missing: list[str] = []
    wanted = {DOC: results_doc(), README: readme_with_headlines(README.read_text())}
    wanted[README] = with_figures(README, wanted[README], differences, missing)
    for path in sorted({f.path for f in FIGURES} - {README}):
        wanted[path] = with_figures(path, path.read_text(), differences, missing)
    stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text() != text]
    for line in differences + missing:
        print(line)
    if missing:  # a figure whose sentence was reworded is neither checked nor rewritten: say so and fail
        return 1
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run python scripts/docs_results.py")
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
