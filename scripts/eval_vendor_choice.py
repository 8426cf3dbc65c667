"""Judge the selector's choice between our kernels and cuBLASLt on shapes never tuned, on the CPU, from
the shipped records only (issue 30: "judge it by leave-one-shape-out on the stored data").

For every tuned shape that has both our kernels' best and cuBLASLt's best stored, hide the shape: the
cost model, fitted to the other shapes of that GPU, op, dtype, layout and kernel family, predicts our
pick's time and cuBLASLt's (its times on the other shapes, scaled by the roofline), and the selector
takes the faster prediction. The truth is the two stored bests of the hidden shape; the regret of a
decision is the chosen side's best over the faster side's, minus 1 (our pick is taken to reach our
best: leave-one-shape-out of our configs alone, results/cost_model_loso.json, puts it within 1-2%).
Always ours and always cuBLASLt are the baselines.

    python scripts/eval_vendor_choice.py [--out results]

Writes results/vendor_choice_loso.json and prints a table.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.bench.harness import out_folder, write_json
from autotune.core.problem import Problem
from autotune.core.target import targeting
from autotune.ops.cublas import FAMILY as CUBLAS
from autotune.select.choose import vendor_evidence
from autotune.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_cost_model import Pool, source_families, stored_problems  # a sibling script

ROOT = Path(__file__).resolve().parent.parent


def vendor_bests(store: Any, gpu: str, problems: Sequence[Problem]) -> dict[Problem, float]:
    """cuBLASLt's best stored time of each problem (of the newest library version stored)."""
    found = {}
    for problem in problems:
        row = store.vendor_best(gpu, problem)
        if row is not None and CUBLAS.owns_source(row.source_hash):
            found[problem] = float(row.time_us)
    return found


def leave_one_out(pool: Pool, family: list[Problem], vendor: dict[Problem, float]) -> list[dict[str, Any]]:
    rows = []
    for hidden in family:
        if hidden not in vendor:
            continue
        model = pool.model(hidden, family)
        ours = model.rank(hidden)[0]
        timed = vendor_evidence(model, {p: t for p, t in vendor.items() if p != hidden})
        theirs = model.predict_config_free(hidden, timed, CUBLAS.config(0), "cuBLASLt's own pick", "cuBLASLt")
        ours_us, vendor_us = float(pool.best[hidden].time_us), vendor[hidden]
        picks_vendor = theirs is not None and theirs.time_us < ours.time_us
        fastest = min(ours_us, vendor_us)
        rows.append(
            {
                "shape": list(hidden.shape),
                "ours_us": ours_us,
                "vendor_us": vendor_us,
                "ours_predicted_us": ours.time_us,
                "vendor_predicted_us": theirs.time_us if theirs else None,
                "picks": "cublas" if picks_vendor else "ours",
                "right": picks_vendor == (vendor_us < ours_us),
                "regret": (vendor_us if picks_vendor else ours_us) / fastest,
                "regret_always_ours": ours_us / fastest,
                "regret_always_cublas": vendor_us / fastest,
            }
        )
    return rows


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def geomean(values: Sequence[float]) -> float:
        return math.exp(statistics.fmean(math.log(v) for v in values))

    summary: dict[str, Any] = {
        "shapes": len(rows),
        "cublas_faster": sum(r["vendor_us"] < r["ours_us"] for r in rows),
        "picks_cublas": sum(r["picks"] == "cublas" for r in rows),
        "right": sum(r["right"] for r in rows),
    }
    for name, key in (
        ("selector", "regret"),
        ("always_ours", "regret_always_ours"),
        ("always_cublas", "regret_always_cublas"),
    ):
        values = [r[key] for r in rows]
        summary[name] = {"regret_geomean": geomean(values) - 1, "regret_worst": max(values) - 1}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    out_folder(args.out)
    groups: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "records.db"))
        seen = set()
        for gpu in store.gpus():
            if gpu.name in seen:
                continue  # one row per card of the same model
            seen.add(gpu.name)
            with targeting(gpu.compute_capability):
                for op, dtype, trans in sorted({(p.op, p.dtype, p.trans) for p in stored_problems(store, gpu.name)}):
                    pool = Pool(store, gpu.name, gpu.sm_count, op, dtype, trans)
                    vendor = vendor_bests(store, gpu.name, list(pool.best))
                    rows = [r for family in source_families(pool) for r in leave_one_out(pool, family, vendor)]
                    if rows:
                        group = {"gpu": gpu.name, "op": op, "dtype": dtype, "trans": trans}
                        groups.append({**group, "summary": summarise(rows), "shapes": rows})
        store.close()
    print(
        "gpu / op / dtype / layout: shapes | cuBLAS faster | picks cuBLAS | right | "
        "regret geomean (worst): selector, always ours, always cuBLAS"
    )
    for g in groups:
        s = g["summary"]
        ways = ("selector", "always_ours", "always_cublas")
        cells = "  ".join(f"{s[k]['regret_geomean']:6.1%} ({s[k]['regret_worst']:6.1%})" for k in ways)
        counts = f"{s['shapes']:3} | {s['cublas_faster']:3} | {s['picks_cublas']:3} | {s['right']:3}"
        layout = "T" if g["trans"] else " "
        print(f"{g['gpu'][:12]:12} {g['op']} {g['dtype']:8} {layout}: {counts} | {cells}")
    if not args.no_write:
        write_json(args.out / "vendor_choice_loso.json", {"groups": groups})
    return 0


if __name__ == "__main__":
    sys.exit(main())
