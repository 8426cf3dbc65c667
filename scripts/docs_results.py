"""Write docs/results.md and the README's headline tables from results/*.json, so no figure is typed by hand.

python scripts/docs_results.py            # rewrites docs/results.md and the marked blocks of README.md
python scripts/docs_results.py --check    # exits 1 if either file differs from what the JSON files give

The README's headline tables sit between `<!-- results:NAME -->` and `<!-- /results:NAME -->` lines, where
NAME is a results file's stem (gemv_nvidia-h200, gemm_nvidia-h200, ...); everything else in the README is
left as it is.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts below are not a package

from plot_decode import table as decode_table
from results_table import _FAMILY_BY_PARAM, gemm_table
from results_table import table as gemv_table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DOC = ROOT / "docs" / "results.md"
README = ROOT / "README.md"

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DASH, TIMES = "\u2013", "\u00d7"  # en dash and multiplication sign, as the docs write ranges and shapes
LARGE = 64 * 2**20  # matrices of 64 MB or more are expected near the copy bandwidth


def _load(stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / f"{stem}.json").read_text())
    return data


def _stems(prefix: str) -> list[str]:
    """Stems of results/<prefix>_<gpu>.json, one per GPU (gemv_ does not take gemv_trans_)."""
    pattern = re.compile(rf"^{prefix}_(?!trans_)[a-z0-9-]+$")
    return sorted(p.stem for p in RESULTS.glob(f"{prefix}_*.json") if pattern.match(p.stem))


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _image(stem: str, prefix: str) -> str:
    return f"![{stem}]({prefix}{stem}.png)\n\n" if (RESULTS / f"{stem}.png").is_file() else ""


# --- headline tables (README) ----------------------------------------------------------------------


def gemv_headline(report: dict[str, Any]) -> str:
    """One line per dtype: speedup over cuBLAS, and how close the large matrices come to the copy bandwidth."""
    lines = [
        f"GEMV on one {report['gpu']}, every standard shape against cuBLAS (best of `torch.mv` and `F.linear`):",
        "",
        "| dtype | shapes | geometric-mean speedup | slowest, fastest | matrices ≥ 64 MB: % of copy bandwidth |",
        "|---|---:|---:|---:|---:|",
    ]
    rows = report["rows"]
    for dtype in [d for d in BYTES if any(r["dtype"] == d for r in rows)] + ["all"]:
        mine = [r for r in rows if dtype in ("all", r["dtype"])]
        speedups = [r["speedup"] for r in mine]
        large = [r["pct_copy"] for r in mine if r["m"] * r["n"] * BYTES[r["dtype"]] >= LARGE]
        copy = f"{min(large):.1f}{DASH}{max(large):.1f}% ({len(large)} shapes)" if large else DASH
        name = "**all**" if dtype == "all" else dtype
        lines.append(
            f"| {name} | {len(mine)} | {_geomean(speedups):.3f} | "
            f"{min(speedups):.2f}{DASH}{max(speedups):.2f} | {copy} |"
        )
    return "\n".join(lines)


def _family(config: dict[str, Any]) -> str:
    return next((f for key, f in _FAMILY_BY_PARAM.items() if key in config), "?")


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
        f"{report['rows_found']} rows found of {report['rows_expected']} expected, {report['duplicates']} duplicates; "
        f"rows finished before the kill kept as they were: {report['completed_rows_kept']}.",
    ]
    return "\n".join(lines)


SECTIONS: list[tuple[str, str, Any]] = [
    ("gemv", "GEMV `y = alpha·A x + beta·y`", gemv_table),
    ("gemv_trans", "Transposed GEMV `y = alpha·Aᵀx + beta·y` (`--trans`)", gemv_table),
    ("gemm", "GEMM `C = alpha·A B + beta·C`", gemm_table),
    ("gemm_nt", "GEMM with B stored N x K `C = alpha·A Wᵀ + beta·C` (`--trans`, nn.Linear's layout)", gemm_table),
    ("decode", "Decode steps (a model's GEMVs in sequence, eager and in a CUDA graph)", decode_table),
    ("linear", "A decoder stack: its linears as `F.linear` against `autotune.linear`", linear_table),
    ("untuned", "Shapes no tuned config fits", untuned_table),
    ("tuning", "Tuning speed: seconds until the best config found is within 2% of the optimum", tuning_table),
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
            parts.append(_image(stem, "../results/") + render(report) + "\n")
    return "\n".join(parts)


HEADLINES = {"gemv": gemv_headline, "gemm": gemm_headline}


def readme_with_headlines(text: str) -> str:
    """The README with every marked block replaced by the headline table of its results file."""

    def block(match: re.Match[str]) -> str:
        stem = match.group(1)
        render = HEADLINES[stem.split("_", 1)[0]]
        return f"<!-- results:{stem} -->\n{render(_load(stem))}\n<!-- /results:{stem} -->"

    return re.sub(r"<!-- results:([\w.-]+) -->\n.*?<!-- /results:\1 -->", block, text, flags=re.S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that both files are up to date")
    args = parser.parse_args()
    wanted = {DOC: results_doc(), README: readme_with_headlines(README.read_text())}
    stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text() != text]
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
