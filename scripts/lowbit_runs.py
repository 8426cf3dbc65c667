"""The GPU half of scripts/bench_lowbit.py: the weights in every form a variant reads, the variants, their
errors and their times. Needs torch, CUDA and PyCUDA (the benchmarks' timer); gemlite is optional.

Timing reuses autotune/measure: Bench's device-to-device copy and its spin-kernel timer, whose
measure_interleaved takes the samples of every variant in turns. A variant's call i reads copy i % copies of
its weight and x; the copies of one form together hold ROTATION_BYTES_PER_L2 times the L2
(autotune/bench/harness.py's rotation_copies), so the weight comes from DRAM on every call. The timer's
empty kernel (launched plainly, without programmatic dependent launch) is the separator of the isolated
times: it cannot start before the call ahead of it has finished, and it is timed alone in the same turns so
that its own time is taken off.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_lowbit import Case, unique_bytes

import autotune
from autotune.bench.compare import Bench
from autotune.bench.harness import IsolatedClock, Launcher, report_path, rotation_copies, write_json
from autotune.core.errors import AutotuneError
from autotune.ops.qgemm.format import Int4Weight, dequantize, int4_weight, unpack_int4

TINYGEMM_INNER_K_TILES = (2, 4, 8)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


@dataclass
class Weights:
    """One case's (N, K) weight as each variant reads it, every list one entry per rotating copy."""

    exact: Any  # float32 (N, K): copy 0's dequantized weight, exactly
    ours: list[Any] = field(default_factory=list)  # autotune.quantize's QuantizedWeight
    rounded: list[Any] = field(default_factory=list)  # the dequantized weight in the activations' dtype
    tinygemm: dict[int, list[Any]] = field(default_factory=dict)  # innerKTiles -> packed weights
    tinygemm_scales: list[Any] = field(default_factory=list)  # tinygemm's scales_and_zeros
    gemlite: list[Any] = field(default_factory=list)  # GemLiteLinear layers
    notes: list[str] = field(default_factory=list)


def tinygemm_scales_and_zeros(torch: Any, weight: Int4Weight) -> Any:
    """tinygemm dequantizes w = (q - 8) * s + zero (torchao's _dequantize_affine_tinygemm), with scales and
    zeros stacked as (K / g, N, 2) bfloat16 (torchao's pack_tinygemm_scales_and_zeros): our w = (q - z) * s
    is zero = (8 - z) * s, 0 when symmetric."""
    scales = weight.scales.float()
    zero = torch.zeros_like(scales) if weight.zeros is None else (8 - weight.zeros.float()) * scales
    return torch.stack([scales, zero], dim=-1).to(torch.bfloat16).transpose(0, 1).contiguous()


def tinygemm_packs(torch: Any, codes: Any, weights: Weights) -> None:
    """Our codes in tinygemm's tiles for each innerKTiles; its input is uint8 (N, K / 2) with even k in the
    high nibble (the reverse of ours). A tiling torch refuses is noted and left out."""
    packed = ((codes[:, 0::2] << 4) | codes[:, 1::2]).contiguous()
    first_copy = not weights.tinygemm_scales
    for inner in TINYGEMM_INNER_K_TILES if first_copy else list(weights.tinygemm):
        try:
            weights.tinygemm.setdefault(inner, []).append(torch.ops.aten._convert_weight_to_int4pack(packed, inner))
        except RuntimeError as exc:  # torch's own limits on N, K and the tiling: the file says which
            weights.tinygemm.pop(inner, None)
            weights.notes.append(f"tinygemm innerKTiles {inner}: {first_line(exc)}")


def gemlite_layer(gemlite: Any, torch: Any, weight: Int4Weight, codes: Any) -> Any:
    """gemlite's A16W4 layer on our codes: it takes HQQ's w = (q - zero) * s, so zero = 8 when symmetric."""
    kind = gemlite.DType.FP16 if weight.scale_dtype == "float16" else gemlite.DType.BF16
    layer = gemlite.GemLiteLinear(
        4, group_size=weight.group, in_features=weight.k, out_features=weight.n, input_dtype=kind, output_dtype=kind
    )
    zeros = 8 if weight.zeros is None else weight.zeros.to(weight.scales.dtype)
    layer.pack(codes, weight.scales, zeros, bias=None)
    return layer


def build_weights(torch: Any, gemlite: Any, case: Case, n: int, k: int, copies: int) -> Weights:
    kind = getattr(torch, case.dtype)
    weights: Weights | None = None
    for _ in range(copies):
        w = torch.randn(n, k, device="cuda", dtype=kind) * k**-0.5
        qw = autotune.quantize(w, "int4", group=case.group, sym=case.sym)
        # Read before any call: a prepared layout may replace the canonical buffers in memory.
        zeros = None if qw.zeros is None else qw.zeros.clone()
        canonical = int4_weight(qw.qweight.clone(), qw.scales.clone(), zeros, case.group)
        exact = dequantize(canonical)
        weights = weights or Weights(exact)
        weights.ours.append(qw)
        weights.rounded.append(exact.to(kind))
        codes = unpack_int4(canonical.qweight)
        if case.dtype == "bfloat16":
            tinygemm_packs(torch, codes, weights)
            weights.tinygemm_scales.append(tinygemm_scales_and_zeros(torch, canonical))
        if gemlite is not None:
            weights.gemlite.append(gemlite_layer(gemlite, torch, canonical, codes))
    assert weights is not None
    if case.dtype != "bfloat16":
        weights.notes.append("tinygemm: bfloat16 activations only")
    return weights


def setup_gemlite(mode: str, configs: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """gemlite (None where off or missing) and what the report says of it. 'max' is its most thorough
    autotune (every config of its space), with CUDA graphs in the autotune and one tuning per exact M
    (set_autotune_setting must come first: set_autotune reloads the kernels, which read it then).
    `configs`: gemlite's own file of autotuned configs (gemlite.cache_config), loaded where it exists,
    so that a shape it holds runs the config an earlier run's autotune chose, without tuning again.
    Where gemlite cannot be imported (not installed, no triton, or its import-time GPU queries fail) the
    run goes on with gemlite off, and the report's note says why."""
    if mode == "off":
        return None, {"mode": "off"}
    try:
        import gemlite
    except Exception as exc:  # ImportError, or whatever its import-time setup raises: a peer, not fatal
        note = f"gemlite off: cannot import it ({first_line(exc)}); pip install .whl/gemlite-*.whl"
        return None, {"mode": "off", "note": note}
    gemlite.reset_config()  # no configs shipped for other GPUs: tuned here from scratch
    gemlite.set_autotune_setting(lambda m: m)
    gemlite.set_autotune(mode, use_cuda_graph=mode == "max")
    info = {"mode": mode, "version": gemlite.__version__, "cuda_graph_autotune": mode == "max", "per_m": True}
    if configs is not None:
        if mode != "max":  # the file says nothing of its mode: it holds the most thorough autotune's only
            raise AutotuneError(f"--gemlite-configs keeps gemlite's max-mode configs only, not {mode}'s")
        info["configs"] = configs.name
        if configs.exists() and not gemlite.load_config(str(configs)):
            raise AutotuneError(f"{configs}: not a gemlite config file")
    return gemlite, info


GEMLITE_FIELDS = (
    "gemlite_us",
    "gemlite_b2b_us",
    "gemlite_max_rel_err",
    "gemlite_autotune_s",
    "gemlite_mode",
    "gemlite_config",
)
GEMLITE_KEPT = "gemlite: timed in an earlier run of this benchmark (off in this one)"
# The fields that name a row's case (int4 rows have a group and sym, 8-bit ones a format only).
ROW_KEY = ("format", "group", "sym", "dtype", "m", "n", "k")


def keep_gemlite(row: dict[str, Any], earlier: Sequence[Mapping[str, Any]]) -> None:
    """`row` (measured with gemlite off) takes gemlite's fields from the earlier row of its case, M and
    (N, K) pair that has them, with that row's note on where they came from (else GEMLITE_KEPT); left as
    it is where none has. Both benchmarks' --keep-gemlite: gemlite's thorough autotune takes minutes a
    shape, so a re-run of our side alone keeps its times."""
    key = [k for k in ROW_KEY if k in row]
    found = [r for r in earlier if all(r.get(k) == row[k] for k in key) and r.get("gemlite_us") is not None]
    if not found:
        return
    row.update({name: found[0].get(name) for name in GEMLITE_FIELDS})
    kept = [n for n in found[0].get("notes", []) if n.startswith("gemlite: timed in an earlier run")] or [GEMLITE_KEPT]
    row["notes"] = [*kept, *(n for n in row["notes"] if not n.startswith("gemlite"))]


def gemlite_holds(gemlite: Any, m: int, n: int, k: int, group: int) -> bool:
    """Whether gemlite's config cache already answers this shape (its key: str((M, N, K, group, ...)))."""
    cache: dict[str, dict[str, Any]] = gemlite.core.GEMLITE_TRITON_CONFIG_CACHE
    return any(key.startswith(f"({m}, {n}, {k}, {group},") for kind in cache.values() for key in kind)


def rel_err(torch: Any, y: Any, want: Any) -> float:
    """max|y - want| / max|want|; NaN where y holds a NaN or an infinity."""
    got = y.double().reshape(want.shape)
    if not bool(torch.isfinite(got).all()):
        return math.nan
    return float((got - want).abs().max() / want.abs().max())


def variants(torch: Any, weights: Weights, xs: list[Any], case: Case) -> dict[str, Launcher]:
    """Every variant as a launcher of call i on copy i % copies."""
    c = len(xs)
    F = torch.nn.functional
    runs: dict[str, Launcher] = {
        "ours": lambda i: autotune.linear(xs[i % c], weights.ours[i % c]),
        "ours_fp16": lambda i: autotune.linear(xs[i % c], weights.rounded[i % c]),
        "torch_linear": lambda i: F.linear(xs[i % c], weights.rounded[i % c]),
    }
    if xs[0].shape[0] == 1:
        vectors = [x[0] for x in xs]
        y = torch.empty(weights.exact.shape[0], device="cuda", dtype=xs[0].dtype)
        runs["torch_mv"] = lambda i: torch.mv(weights.rounded[i % c], vectors[i % c], out=y)
    mm = torch.ops.aten._weight_int4pack_mm
    for inner, packs in weights.tinygemm.items():
        runs[f"tinygemm_{inner}"] = functools.partial(
            lambda packs, i: mm(xs[i % c], packs[i % c], case.group, weights.tinygemm_scales[i % c]), packs
        )
    if weights.gemlite:
        runs["gemlite"] = lambda i: weights.gemlite[i % c](xs[i % c])
    return runs


def check_and_warm(torch: Any, runs: dict[str, Launcher], weights: Weights, x: Any) -> dict[str, Any]:
    """Each variant's first call (gemlite autotunes in it, timed), its error, and runs that failed, dropped."""
    exact = x.double() @ weights.exact.double().T
    rounded = x.double() @ weights.rounded[0].double().T
    found: dict[str, Any] = {"notes": []}
    for name in list(runs):
        begin = time.perf_counter()
        try:
            y = runs[name](0)
            torch.cuda.synchronize()
        except Exception as exc:  # a peer that cannot run this shape: reported, not fatal
            if name.startswith(("ours", "torch")):
                raise
            found["notes"].append(f"{name}: {first_line(exc)}")
            del runs[name]
            continue
        if name == "gemlite":
            found["gemlite_autotune_s"] = time.perf_counter() - begin
        if name != "torch_mv":  # float16 variants read the rounded weight, int4 ones the exact one
            want = rounded if name in ("torch_linear", "ours_fp16") else exact
            found[f"{name}_max_rel_err"] = rel_err(torch, y, want)
    return found


def best_of(times: dict[str, float], names: list[str]) -> tuple[str | None, float | None, float | None]:
    present = [n for n in names if f"{n}_us" in times]
    if not present:
        return None, None, None
    best = min(present, key=lambda n: times[f"{n}_us"])
    return best, times[f"{best}_us"], min(times[f"{n}_b2b_us"] for n in present)


def measure_row(
    torch: Any, clock: IsolatedClock, weights: Weights, case: Case, m: int, copy_gbs: float
) -> dict[str, Any]:
    n, k = weights.exact.shape
    xs = [torch.randn(m, k, device="cuda", dtype=getattr(torch, case.dtype)) for _ in weights.ours]
    runs = variants(torch, weights, xs, case)
    found = check_and_warm(torch, runs, weights, xs[0])
    times = clock.time(runs)
    torch_name, torch_us, torch_b2b = best_of(times, ["torch_mv", "torch_linear"])
    tiny_name, tiny_us, tiny_b2b = best_of(times, [f"tinygemm_{inner}" for inner in weights.tinygemm])
    _, gemlite_us, gemlite_b2b = best_of(times, ["gemlite"])
    row = {
        **{"format": "int4", "group": case.group, "sym": case.sym, "dtype": case.dtype, "m": m, "n": n, "k": k},
        **{"ours_us": times["ours_us"], "ours_fp16_us": times["ours_fp16_us"], "torch_fp16_us": torch_us},
        **{"tinygemm_us": tiny_us, "gemlite_us": gemlite_us, "bytes": unique_bytes(m, n, k, case)},
        **{"copy_gbs": copy_gbs, "max_rel_err": found["ours_max_rel_err"]},
        "peer_max_rel_err": found["torch_linear_max_rel_err"],
        **{"ours_b2b_us": times["ours_b2b_us"], "ours_fp16_b2b_us": times["ours_fp16_b2b_us"]},
        **{"torch_fp16_b2b_us": torch_b2b, "tinygemm_b2b_us": tiny_b2b, "gemlite_b2b_us": gemlite_b2b},
        "torch_fp16_call": torch_name,
        "tinygemm_inner_k_tiles": int(tiny_name.rsplit("_", 1)[1]) if tiny_name else None,
        "tinygemm_max_rel_err": found.get(f"{tiny_name}_max_rel_err") if tiny_name else None,
        "gemlite_max_rel_err": found.get("gemlite_max_rel_err"),
        "gemlite_autotune_s": found.get("gemlite_autotune_s"),
        "separator_us": times["separator_us"],
        "copies": len(xs),
        "notes": weights.notes + found["notes"],
    }
    return row


def measured(args: argparse.Namespace, pairs: list[tuple[int, int]], row: dict[str, Any]) -> bool:
    """Whether this run measures `row`'s case, (N, K) and M again. The cases are compared by their
    fields: run as a script, bench_lowbit is `__main__`, and the Case this module imports from it is
    another class, whose instances never equal the ones args holds."""
    case = (row["group"], row["sym"], row["dtype"])
    cases = {(c.group, c.sym, c.dtype) for c in args.cases}
    return case in cases and (row["n"], row["k"]) in pairs and row["m"] in args.m


def run_benchmark(args: argparse.Namespace, pairs: list[tuple[int, int]]) -> Path:
    """Every case, (N, K) pair and M of `args`; returns the report's path, rewritten after each pair."""
    try:
        import torch
    except ImportError:
        raise AutotuneError("needs torch with CUDA (the GPU machine)") from None
    bench = Bench()  # a clear AutotuneError where torch sees no GPU
    gpu = bench.launcher.gpu
    gemlite, gemlite_info = setup_gemlite(args.gemlite, args.gemlite_configs)
    copy_gbs = bench.copy_gbs()
    report: dict[str, Any] = {"gpu": gpu.name, "copy_gbs": copy_gbs, "l2_bytes": gpu.l2_bytes}
    report.update({"gemlite": gemlite_info, "rows": []})
    args.out.mkdir(parents=True, exist_ok=True)
    path = report_path(args.out, "lowbit", gpu.name)
    before = json.loads(path.read_text()) if args.merge and path.exists() else {"rows": []}
    # gemlite's thorough autotune makes a full run longer than one sitting: --merge keeps the other rows.
    report["rows"] = [r for r in before["rows"] if not measured(args, pairs, r)]
    if args.keep_gemlite:  # the file's gemlite run (version, mode) stands for the times kept
        report["gemlite"] = dict(before.get("gemlite", {}))
    clock = IsolatedClock(bench, args.reps)
    print(f"{gpu.name}: device-to-device copy {copy_gbs:.0f} GB/s; gemlite: {gemlite_info}", flush=True)
    for case in args.cases:
        for n, k in pairs:
            copies = rotation_copies(unique_bytes(1, n, k, case), gpu.l2_bytes)
            weights = build_weights(torch, gemlite, case, n, k, copies)
            for m in args.m:
                held = gemlite is not None and gemlite_holds(gemlite, m, n, k, case.group)
                row = measure_row(torch, clock, weights, case, m, copy_gbs)
                # Per row: a merged file holds rows of several runs, not all in one gemlite mode.
                row["gemlite_mode"] = args.gemlite if row["gemlite_us"] is not None else None
                row["gemlite_config"] = None if row["gemlite_us"] is None else ("loaded" if held else "autotuned")
                if args.keep_gemlite:
                    keep_gemlite(row, before["rows"])
                report["rows"].append(row)
                print(json.dumps(row), flush=True)
            del weights
            torch.cuda.empty_cache()
            if gemlite is not None and args.gemlite_configs is not None:
                gemlite.cache_config(str(args.gemlite_configs))  # this pair's autotune kept for later runs
            report["gemlite"]["autotune_s"] = sum(r["gemlite_autotune_s"] or 0.0 for r in report["rows"])
            write_json(path, report)  # whole or not at all: a run cut short keeps the shapes it finished
    print(f"wrote {path}", flush=True)
    return path
