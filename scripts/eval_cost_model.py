"""Judge the cost model (autotune/select/cost.py) against the nearest-shape selector, on the CPU, from
stored data only.

1. Leave one shape out: for every tuned shape of every GPU, op, dtype, layout and kernel family in the
   shipped records (db/records/), hide it, then let each selector pick a config from the rest. The
   records keep each shape's 3 fastest trials, so a pick's time on the hidden shape is known only
   where it is one of those 3; otherwise the pick was slower than the third, and its regret is
   reported as at least the third's (a lower bound, "misses").
2. Shapes no tuned config fits (results/untuned_<gpu>.json, scripts/bench_untuned.py): several
   candidates were timed there on the GPU; the model predicts each from the full records.
3. cuBLASLt's own pick, leave one shape out: on every tuned shape that holds a cuBLASLt time, its time
   predicted from its times on the other tuned shapes of the GPU, op, dtype and layout, as the
   selector predicts it before it takes the library over our kernels (median |log(predicted/measured)|).

Writes results/cost_model_loso.json and prints a summary.

    python scripts/eval_cost_model.py [--out results] [--sigma 1.0] [--margin 0.02] [--neighbours 4]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune import ops
from autotune.bench.harness import out_folder, write_json
from autotune.core.problem import Problem, split_inputs
from autotune.core.space import config_key
from autotune.core.target import targeting
from autotune.select.choose import choose, vendor_config
from autotune.select.cost import ABSENT_MARGIN, NEIGHBOURS, SIGMA, CostModel
from autotune.store import open_store

ROOT = Path(__file__).resolve().parent.parent
TOP = 3  # trials per shape the shipped records keep


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def median_abs_log(pairs: Sequence[tuple[float, float]]) -> float | None:
    return statistics.median(abs(math.log(a / b)) for a, b in pairs) if pairs else None


class Pool:
    """The stored trials of one GPU, op, dtype and layout, per tuned problem (current kernel sources)."""

    def __init__(
        self,
        store: Any,
        gpu: str,
        sm_count: int | None,
        op: str,
        dtype: str,
        trans: bool,
        inputs: tuple[str, ...] = (),
        variant: str = "",
    ) -> None:
        self.gpu, self.sm_count = gpu, sm_count
        self.trials: dict[Problem, list[Any]] = {}
        self.best: dict[Problem, Any] = {}
        self.vendor: dict[Problem, float] = {}  # cuBLASLt's best time, where timed
        for row in store.tuned(gpu, op, dtype, None, trans=trans, inputs=inputs, variant=variant):
            vendor = store.vendor_best(gpu, row.problem)
            if vendor is not None:
                self.vendor[row.problem] = vendor.time_us
            if ops.library_of_source(row.source_hash) is not None:  # cuBLASLt led: our kernels' best instead
                row = store.best(gpu, row.problem, ops.source_hash(row.problem))
            if row is None or row.source_hash != ops.source_hash(row.problem):
                continue
            pid = store.problem_id(row.problem, gpu, create=False)
            self.trials[row.problem] = store.leaders(pid, row.source_hash, TOP)
            self.best[row.problem] = row

    def family(self, problem: Problem) -> list[Problem]:
        """The tuned problems whose configs are of this problem's space (its kernel source)."""
        return [p for p in self.trials if ops.source_hash(p) == ops.source_hash(problem)]

    def model(self, hide: Problem | None, within: Sequence[Problem], **knobs: Any) -> CostModel:
        stored = {p: self.trials[p] for p in within if p != hide}
        others = [(p, r.time_us) for p, r in self.best.items() if p != hide and p not in stored]
        return CostModel(stored, self.sm_count, roofline_from=others, **knobs)


def leave_one_out(pool: Pool, family: list[Problem], knobs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for hidden in family:
        times = {config_key(t.config): t.time_us for t in pool.trials[hidden]}
        best, third = min(times.values()), max(times.values())
        old = choose(hidden, pool.gpu, None, [pool.best[p] for p in family if p != hidden])
        model = pool.model(hidden, family, **knobs)
        ranked = model.rank(hidden)
        new = ranked[0]
        # The model's prediction of each stored trial of the hidden shape, for its error.
        stored_predictions = []
        for trial in pool.trials[hidden]:
            predicted = model.predict(hidden, dict(trial.config))
            if predicted is not None:
                stored_predictions.append((predicted.time_us, trial.time_us))
        rows.append(
            {
                "shape": list(hidden.shape),
                "best_us": best,
                "third_us": third,
                "old": _pick(old.config, old.source, old.time_us, times, best, third),
                "new": {
                    **_pick(new.config, new.candidate.origin, new.time_us, times, best, third),
                    "rank_of_stored_best": _rank_of(ranked, pool.trials[hidden][0].config),
                },
                "stored_predicted_vs_measured": stored_predictions,
            }
        )
    return rows


def vendor_leave_one_out(pool: Pool, family: list[Problem], knobs: dict[str, Any]) -> list[tuple[float, float]]:
    """(predicted, measured) time of cuBLASLt's own pick on each of the family's shapes that holds one,
    predicted from its times on every other tuned shape of the pool (Selector._vendor_if_faster)."""
    pairs = []
    for hidden in family:
        if hidden not in pool.vendor:
            continue
        others = {p: t for p, t in pool.vendor.items() if p != hidden}
        model = pool.model(hidden, family, **knobs)
        predicted = model.predict_config_free(hidden, others, vendor_config(0), "cuBLASLt's own pick", "cuBLASLt")
        if predicted is not None:
            pairs.append((predicted.time_us, pool.vendor[hidden]))
    return pairs


def _rank_of(ranked: Sequence[Any], config: dict[str, int]) -> int | None:
    """Where the hidden shape's own best config sits in the model's ranking (1 = picked); None if
    it is not among the candidates."""
    keys = [config_key(p.config) for p in ranked]
    return keys.index(config_key(config)) + 1 if config_key(config) in keys else None


def _pick(
    config: dict[str, int], origin: str, shown_us: float | None, times: dict[str, float], best: float, third: float
) -> dict[str, Any]:
    measured = times.get(config_key(config))
    return {
        "config": config,
        "origin": origin,
        "shown_us": shown_us,  # old: the neighbour's measured time (or none); new: the predicted time
        "measured_us": measured,  # this config's stored time on the hidden shape, where stored
        "regret": measured / best if measured else None,
        "regret_at_least": None if measured else third / best,
    }


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"shapes": len(rows)}
    for who in ("old", "new"):
        picks = [r[who] for r in rows]
        known = [p["regret"] for p in picks if p["regret"]]
        bounded = [p["regret"] or p["regret_at_least"] for p in picks]
        shown = [(p["shown_us"], r["best_us"]) for p, r in zip(picks, rows, strict=True) if p["shown_us"]]
        out[who] = {
            "in_stored_top3": len(known),
            "regret_geomean_of_known": geomean(known),
            "regret_worst_of_known": max(known, default=None),
            "regret_geomean_at_least": geomean(bounded),
            "shown_time_median_abs_log_vs_best": median_abs_log(shown),
            "shown_time_count": len(shown),
        }
    pairs = [pair for r in rows for pair in r["stored_predicted_vs_measured"]]
    out["new"]["stored_trials_median_abs_log"] = median_abs_log(pairs)
    ranks = [r["new"]["rank_of_stored_best"] for r in rows]
    out["new"]["stored_best_ranked_first"] = sum(1 for x in ranks if x == 1)
    return out


def untuned(pools: dict[tuple[str, str, bool], Pool], path: Path, knobs: dict[str, Any]) -> dict[str, Any]:
    """The candidates timed on shapes no tuned config fits: predicted against measured, and which of
    them each selector would take."""
    data = json.loads(path.read_text())
    by_problem: dict[tuple[str, int, int, bool], list[dict[str, Any]]] = defaultdict(list)
    for row in data["rows"]:
        by_problem[(row["dtype"], row["m"], row["n"], row["trans"])].append(row)
    results, unpredicted = [], []
    for (dtype, m, n, trans), measured in by_problem.items():
        problem = Problem("gemv", dtype, m, n, 0, trans)
        pool = pools[(data["gpu"], dtype, trans)]
        model = pool.model(None, pool.family(problem), **knobs)
        ranked = model.rank(problem)
        position = {config_key(p.config): i for i, p in enumerate(ranked)}
        candidates = []
        for row in measured:
            predicted = model.predict(problem, row["config"])
            candidates.append(
                {
                    "candidate": row["candidate"],
                    "measured_us": row["ours_us"],
                    "predicted_us": predicted.time_us if predicted else None,
                    "model_rank": position.get(config_key(row["config"])),
                }
            )
        # Of the timed candidates the selector could have answered with (not the sweep's own find):
        offered = [c for c in candidates if c["candidate"] != "tuned" and c["predicted_us"]]
        if not offered or not ranked:
            # No tuned shape of ours left in the group to predict from (the H100's transposed GEMVs,
            # whose records the narrow family replaced): nothing to judge the model by.
            unpredicted.append(str(problem))
            continue
        model_pick = min(offered, key=lambda c: c["predicted_us"])
        results.append(
            {
                "problem": str(problem),
                "candidates": candidates,
                "model_pick_among_timed": model_pick["candidate"],
                "model_first_choice_timed": ranked[0].config in [r["config"] for r in measured],
                "model_first_choice": {"config": ranked[0].config, "origin": ranked[0].candidate.origin},
            }
        )
    pairs = [(c["predicted_us"], c["measured_us"]) for r in results for c in r["candidates"] if c["predicted_us"]]
    return {
        "gpu": data["gpu"],
        "problems": results,
        "unpredicted": unpredicted,
        "median_abs_log": median_abs_log(pairs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--sigma", type=float, default=SIGMA)
    parser.add_argument("--margin", type=float, default=ABSENT_MARGIN)
    parser.add_argument("--neighbours", type=int, default=NEIGHBOURS)
    parser.add_argument("--no-write", action="store_true", help="print the summary only")
    args = parser.parse_args()
    out_folder(args.out)
    knobs = {"sigma": args.sigma, "absent_margin": args.margin, "neighbours": args.neighbours}
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "records.db"))
        report: dict[str, Any] = {"knobs": knobs, "groups": [], "untuned": []}
        pools: dict[tuple[str, str, bool], Pool] = {}
        for gpu in store.gpus():
            if any(key[0] == gpu.name for key in pools):
                continue  # one row per card of the same model
            with targeting(gpu.compute_capability):
                kinds = {(p.op, p.dtype, p.trans, p.inputs, p.variant) for p in stored_problems(store, gpu.name)}
                for op, dtype, trans, inputs, variant in sorted(kinds):
                    pool = Pool(store, gpu.name, gpu.sm_count, op, dtype, trans, inputs, variant)
                    if op == "gemv":
                        pools[(gpu.name, dtype, trans)] = pool
                    for family in source_families(pool):
                        rows = leave_one_out(pool, family, knobs)
                        group = {
                            "gpu": gpu.name,
                            "op": op,
                            "dtype": dtype,
                            "trans": trans,
                            "variant": variant,
                            "family": ops.for_problem(family[0]).family(family[0], pool.best[family[0]].config),
                        }
                        summary = summarise(rows)
                        vendor = vendor_leave_one_out(pool, family, knobs)
                        summary["vendor"] = {"shapes": len(vendor), "median_abs_log": median_abs_log(vendor)}
                        report["groups"].append({**group, "summary": summary, "shapes": rows, "vendor": vendor})
                for path in sorted((ROOT / "results").glob("untuned_*.json")):
                    if json.loads(path.read_text())["gpu"] == gpu.name:
                        report["untuned"].append(untuned(pools, path, knobs))
        store.close()
    _print(report)
    if not args.no_write:
        write_json(args.out / "cost_model_loso.json", report)
    return 0


def stored_problems(store: Any, gpu: str) -> list[Problem]:
    """The GPU's stored problems, with their input dtypes and variant (an int4 weight's group size, an
    8-bit weight's codes): each of those is a selector's pool of its own."""
    return [
        Problem(p.op, p.dtype, p.m, p.n, p.k, p.trans, split_inputs(p.input_dtypes), p.variant)
        for p in store.problems(gpu)
    ]


def source_families(pool: Pool) -> list[list[Problem]]:
    """The tuned problems grouped by kernel source, groups of 3 or more (fewer leave nothing to learn)."""
    groups: dict[str, list[Problem]] = defaultdict(list)
    for problem in pool.trials:
        groups[ops.source_hash(problem)].append(problem)
    return [sorted(g, key=lambda p: p.shape) for g in groups.values() if len(g) >= 3]


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{(x - 1) * 100:5.1f}%" if pct else f"{x:.3f}"


def _print(report: dict[str, Any]) -> None:
    print(f"knobs {report['knobs']}")
    print(
        "gpu / op / family: shapes | top3 hits old new | regret geomean of hits old new | worst old new | "
        "geomean >= old new | |log| shown-vs-best old new | |log| stored new | |log| cuBLASLt (shapes)"
    )
    for g in report["groups"]:
        s = g["summary"]
        o, n = s["old"], s["new"]
        variant = f" {g['variant']}" if g.get("variant") else ""
        name = f"{g['gpu'][:12]} {g['dtype'][:4]}{' T' if g['trans'] else ''} {g['op']}{variant} {g['family']}"
        print(
            f"{name:42s} {s['shapes']:3d} | {o['in_stored_top3']:3d} {n['in_stored_top3']:3d} | "
            f"{_fmt(o['regret_geomean_of_known'])} {_fmt(n['regret_geomean_of_known'])} | "
            f"{_fmt(o['regret_worst_of_known'])} {_fmt(n['regret_worst_of_known'])} | "
            f"{_fmt(o['regret_geomean_at_least'])} {_fmt(n['regret_geomean_at_least'])} | "
            f"{_fmt(o['shown_time_median_abs_log_vs_best'], False)} ({o['shown_time_count']}) "
            f"{_fmt(n['shown_time_median_abs_log_vs_best'], False)} | {_fmt(n['stored_trials_median_abs_log'], False)}"
            f" | {_fmt(s['vendor']['median_abs_log'], False)} ({s['vendor']['shapes']})"
        )
    vendor = [pair for g in report["groups"] for pair in g["vendor"]]
    print(
        f"cuBLASLt's own pick, leave one shape out: median |log(predicted/measured)| "
        f"{_fmt(median_abs_log(vendor), False)} over {len(vendor)} shapes"
    )
    for u in report["untuned"]:
        print(f"untuned shapes on {u['gpu']}: median |log(predicted/measured)| {_fmt(u['median_abs_log'], False)}")
        if u["unpredicted"]:
            print(f"  nothing tuned to predict from: {', '.join(u['unpredicted'])}")
        for p in u["problems"]:
            timed = {c["candidate"]: c for c in p["candidates"]}
            text = "  ".join(
                f"{c['candidate']} {c['measured_us']:.2f}/{c['predicted_us'] or 0:.2f}" for c in timed.values()
            )
            print(
                f"  {p['problem']:30s} pick {p['model_pick_among_timed']:10s} first timed: "
                f"{p['model_first_choice_timed']!s:5s} {p['model_first_choice']['origin']:22s} {text}"
            )


if __name__ == "__main__":
    sys.exit(main())
