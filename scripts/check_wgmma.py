"""GPU check of the wgmma GEMM family (kernels/gemm/gemm_wgmma.cu) on a Hopper GPU (sm_90), in one run.

Run from the repository root on the GPU machine:
    PYTHONPATH=. python3 scripts/check_wgmma.py --out $OUT/wgmma.json

It answers three questions:
  1. Which LAYOUT (B's shared-memory layout and descriptor, see LayoutB in gemm_wgmma.cu) is right.
     Every layout runs "probes" (A or B an identity, the other holding its own row or column index),
     which say for the first wrong outputs which element of A or B the kernel actually read, and the
     correctness cases below.
  2. Whether the kernels are correct: shapes 128x128x64, 256x256x128, 1000x1008x1016 (tails) and
     4096^3 in float16 and bfloat16, once with C poisoned with NaN and beta = 0, once with alpha = 1.5,
     beta = 0.5 on a random C0. Inputs are small integers, so float32 accumulation is exact and the
     only admissible error is the rounding of the stored result (half an ulp of the output dtype);
     anything more is a bug, and the first wrong (row, col) is printed. A sentinel after C catches
     stores outside it. max|err| / max(sum |a||b|) is reported as well.
  3. How fast the correct configs are at 4096^3 and 8192^3 beside cuBLAS (torch.mm on the same
     tensors): CUDA events, warm-up, then the median of 5 repeats of 20 back-to-back launches.

Kernels are compiled first (nvcc, sm_90a, no GPU needed); each layout is then checked in a child
process of its own, because a wrong descriptor may read outside shared memory, and the illegal
address that follows ruins the CUDA context for everything after it. A JSON summary goes to --out.
Needs: pycuda, numpy, torch, nvcc; about a minute on an H200.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when PYTHONPATH lacks it

from autotune.bench.harness import out_file
from autotune.build.compiler import CompileJob, compile_kernel
from autotune.core.fingerprint import file_hash
from autotune.core.limits import DEFAULT_SHARED_BYTES
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.ops import gemm
from autotune.ops.gemm import wgmma as gemm_wgmma

DTYPES = ("float16", "bfloat16")
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
CHECK_SHAPES = ((128, 128, 64), (256, 256, 128), (1000, 1008, 1016), (4096, 4096, 4096))
TIME_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
# Probes: one tile of A (128 x 64: two m64 slices) and B (64 x 256: four 64-column atoms).
PROBE_SHAPE = (128, 256, 64)
SENTINEL = -1152.0  # written after C (exact in both dtypes); a store outside C changes it
CHILD_TIMEOUT_S = 120
REPEATS, LAUNCHES, WARMUP = 5, 20, 3


def _config(bm: int, bn: int, bk: int, wgs: int, stages: int, swizzle: int, layout: int) -> Config:
    return {"bm": bm, "bn": bn, "bk": bk, "wgs": wgs, "stages": stages, "swizzle": swizzle, "layout": layout, "tma": 0}


def configs_for(layout: int, full: bool) -> list[Config]:
    """The configs checked for a layout: the seeds and small tiles (all N of wgmma, both k-depths, one
    and two warpgroups, 3..9 stages) where `full`, else three that cover BN 128 and 256 and BK 32."""
    shapes = [(128, 256, 64, 2, 4, 8), (128, 128, 64, 1, 4, 1), (128, 256, 32, 2, 8, 8)]
    if full:
        shapes += [
            (256, 128, 64, 2, 4, 8),
            (256, 128, 32, 2, 8, 8),
            (128, 256, 64, 2, 3, 16),
            (128, 256, 32, 2, 9, 16),
            (128, 128, 64, 2, 6, 8),
            (128, 128, 64, 1, 7, 4),
            (64, 64, 64, 1, 3, 1),
            (64, 64, 32, 1, 5, 1),
            (256, 64, 64, 1, 5, 1),
            (64, 256, 64, 1, 4, 1),
        ]
    return [_config(*s, layout) for s in shapes]


def _kernel(dtype: str, config: Config) -> dict[str, Any]:
    """Name, source and launch facts of one instance (the launch geometry depends on the shape)."""
    problem = Problem("gemm", dtype, 4096, 4096, 4096)
    return {
        "dtype": dtype,
        "config": config,
        "name": gemm_wgmma.kernel_name(problem, config),
        "source": gemm_wgmma.kernel_source(problem, config),
        "threads": gemm_wgmma.threads(config),
        "shared_bytes": gemm_wgmma.shared_bytes(problem, config),
    }


def compile_all(layouts: list[int], full_layouts: list[int]) -> list[dict[str, Any]]:
    """Every kernel of the check, compiled in parallel; each entry gains `cubin` (or `error`)."""
    arch = gemm.family_compile_arch(gemm_wgmma, "sm_90")
    depends = file_hash(gemm_wgmma.KERNEL_FILE)
    kernels = [_kernel(d, c) for layout in layouts for c in configs_for(layout, layout in full_layouts) for d in DTYPES]

    def build(k: dict[str, Any]) -> dict[str, Any]:
        result = compile_kernel(CompileJob(k["name"], k["source"], arch, depends))
        k = {key: v for key, v in k.items() if key != "source"}
        if result.cubin is None:
            return {**k, "cubin": None, "error": result.message}
        return {**k, "cubin": str(result.cubin), "error": None}

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        return list(pool.map(build, kernels))


# ------------------------------------------------------------------------------------------------
# Child process: everything that touches the GPU.


class Gpu:
    """torch for tensors and references, PyCUDA (on torch's primary context) for our kernels."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
        self._functions: dict[str, Any] = {}
        # CHECK_WGMMA_EMULATE=1 runs this harness on the CPU with torch standing in for the kernels
        # (a test of the harness itself, on a machine without a GPU).
        self.emulate = os.environ.get("CHECK_WGMMA_EMULATE") == "1"
        self.device = "cpu" if self.emulate else "cuda"
        if self.emulate:
            return
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # creates the primary context PyCUDA then shares
        import pycuda.autoprimaryctx  # noqa: F401
        import pycuda.driver as cuda

        self.cuda = cuda

    def sync(self) -> None:
        if not self.emulate:
            self.torch.cuda.synchronize()

    def function(self, kernel: dict[str, Any]) -> Any:
        name = kernel["name"]
        if name not in self._functions:
            module = self.cuda.module_from_file(kernel["cubin"])
            function = module.get_function(name)
            function.prepare(gemm.OP.arg_types)
            if kernel["shared_bytes"] > DEFAULT_SHARED_BYTES:
                function.set_attribute(
                    self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel["shared_bytes"]
                )
            self._functions[name] = (module, function)
        return self._functions[name][1]

    def launch(
        self, kernel: dict[str, Any], a: Any, b: Any, c: Any, shape: tuple[int, int, int], alpha: float, beta: float
    ) -> None:
        m, n, k = shape
        problem = Problem("gemm", kernel["dtype"], m, n, k)
        geom = gemm_wgmma.launch(problem, kernel["config"], sm_count=132)
        assert geom.shared_bytes == kernel["shared_bytes"]
        if self.emulate:
            out = alpha * (a.float() @ b.float())
            c.copy_(out if beta == 0.0 else out + beta * c.float())
            return
        self.function(kernel).prepared_async_call(
            geom.grid,
            geom.block,
            None,
            a.data_ptr(),
            b.data_ptr(),
            c.data_ptr(),
            m,
            n,
            k,
            alpha,
            beta,
            0,
            0,
            shared_size=geom.shared_bytes,
        )


def _first_wrong(bad: Any, out: Any, want: Any, limit: int = 4) -> list[dict[str, Any]]:
    where = bad.nonzero()[:limit].tolist()
    return [{"row": r, "col": c, "got": float(out[r, c]), "want": float(want[r, c])} for r, c in where]


def _mod_pattern(bad: Any, config: Config) -> dict[str, Any]:
    """Which rows mod BM and columns mod BN hold wrong outputs (a descriptor bug shows a pattern)."""
    rows = bad.any(dim=1).nonzero().flatten()
    cols = bad.any(dim=0).nonzero().flatten()
    row_mod = sorted({int(r) % config["bm"] for r in rows[:4096].tolist()})
    col_mod = sorted({int(c) % config["bn"] for c in cols[:4096].tolist()})
    return {"rows_mod_bm": _ranges(row_mod), "cols_mod_bn": _ranges(col_mod)}


def _ranges(values: list[int]) -> str:
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ",".join(parts) or "-"


def _wrong(err: Any, want: Any, scale: Any, dtype: str) -> Any:
    """Outputs off by more than the rounding of the stored result (NaN counts as wrong)."""
    allowed = UNIT_ROUNDOFF[dtype] * want.abs() * 1.0001 + 1e-6 * scale
    return ~(err <= allowed)


def check_case(
    gpu: Gpu, kernel: dict[str, Any], shape: tuple[int, int, int], data: dict[str, Any], with_beta: bool
) -> dict[str, Any]:
    """One launch against the float64 reference; exact inputs, so only the output rounding is allowed."""
    torch = gpu.torch
    m, n, _ = shape
    a, b, c0, ref, mag = data["a"], data["b"], data["c0"], data["ref"], data["mag"]
    buffer = torch.full((m * n + 256,), float("nan"), dtype=a.dtype, device=gpu.device)
    buffer[m * n :] = SENTINEL
    c = buffer[: m * n].view(m, n)
    alpha, beta = (1.5, 0.5) if with_beta else (1.0, 0.0)
    if with_beta:
        c.copy_(c0)
    gpu.launch(kernel, a, b, c, shape, alpha, beta)
    gpu.sync()
    out = c.double()
    want = alpha * ref + (beta * c0.double() if with_beta else 0.0)
    scale = abs(alpha) * mag + (abs(beta) * c0.double().abs() if with_beta else 0.0)
    err = (out - want).abs()
    bad = _wrong(err, want, scale, kernel["dtype"])
    tail_ok = bool((buffer[m * n :] == SENTINEL).all())
    finite_err = torch.nan_to_num(err, nan=float("inf"))
    result: dict[str, Any] = {
        "shape": list(shape),
        "alpha": alpha,
        "beta": beta,
        "wrong": int(bad.sum()),
        "max_err": float(finite_err.max()),
        "rel_err": float(finite_err.max() / scale.max()),
        "stores_outside_c": not tail_ok,
    }
    result["ok"] = result["wrong"] == 0 and tail_ok
    if result["wrong"]:
        result["first_wrong"] = _first_wrong(bad, out, want)
        result["pattern"] = _mod_pattern(bad, kernel["config"])
    return result


def make_data(gpu: Gpu, dtype: str, shape: tuple[int, int, int], seed: int) -> dict[str, Any]:
    """Integers in [-2, 2] (exact in both dtypes; sums stay far below 2^24, exact in float32)."""
    torch = gpu.torch
    m, n, k = shape
    g = torch.Generator(device=gpu.device).manual_seed(seed)
    t = gpu.dtypes[dtype]

    def ints(rows: int, cols: int) -> Any:
        return torch.randint(-2, 3, (rows, cols), generator=g, device=gpu.device).to(t)

    a, b, c0 = ints(m, k), ints(k, n), ints(m, n)
    a64, b64 = a.double(), b.double()
    return {"a": a, "b": b, "c0": c0, "ref": a64 @ b64, "mag": a64.abs() @ b64.abs()}


def probe(gpu: Gpu, kernel: dict[str, Any]) -> dict[str, Any]:
    """Identity probes on one tile: with A = [I; I] (128 x 64), C[m, n] = B[m % 64, n]; with B[k, n] =
    (n % 64 == k), C[m, n] = A[m, n % 64]. Filling the other operand with its own row or column index
    tells which element each wrong output came from."""
    torch = gpu.torch
    m, n, k = PROBE_SHAPE
    t = gpu.dtypes[kernel["dtype"]]
    eye_a = torch.eye(k, device=gpu.device).repeat(m // k, 1).to(t)  # m x k
    eye_b = torch.eye(k, device=gpu.device).repeat(1, n // k).to(t)  # k x n
    rows_b = torch.arange(k, device=gpu.device).view(k, 1).expand(k, n).to(t).contiguous()
    cols_b = torch.arange(n, device=gpu.device).view(1, n).expand(k, n).to(t).contiguous()
    rows_a = torch.arange(m, device=gpu.device).view(m, 1).expand(m, k).to(t).contiguous()
    cols_a = torch.arange(k, device=gpu.device).view(1, k).expand(m, k).to(t).contiguous()

    def run(a: Any, b: Any) -> Any:
        c = torch.full((m, n), float("nan"), dtype=t, device=gpu.device)
        gpu.launch(kernel, a, b, c, PROBE_SHAPE, 1.0, 0.0)
        gpu.sync()
        return c.double()

    mm = torch.arange(m, device=gpu.device).view(m, 1).expand(m, n).double()
    nn = torch.arange(n, device=gpu.device).view(1, n).expand(m, n).double()
    report: dict[str, Any] = {}
    for operand, got_row, got_col, want_row, want_col in (
        ("B", run(eye_a, rows_b), run(eye_a, cols_b), mm % k, nn),
        ("A", run(rows_a, eye_b), run(cols_a, eye_b), mm, nn % k),
    ):
        bad = (got_row != want_row) | (got_col != want_col)
        where = bad.nonzero()[:6].tolist()
        report[operand] = {
            "wrong": int(bad.sum()),
            "examples": [
                f"C[{r},{c}] read {operand}[{_num(got_row[r, c])},{_num(got_col[r, c])}] "
                f"want {operand}[{int(want_row[r, c])},{int(want_col[r, c])}]"
                for r, c in where
            ],
        }
    report["ok"] = report["A"]["wrong"] == 0 and report["B"]["wrong"] == 0
    return report


def _num(value: Any) -> str:
    v = float(value)
    return str(int(v)) if v == v and v == int(v) else f"{v:g}"


def child_correctness(kernels: list[dict[str, Any]]) -> dict[str, Any]:
    gpu = Gpu()
    results: list[dict[str, Any]] = []
    for dtype in DTYPES:
        mine = [k for k in kernels if k["dtype"] == dtype and k["cubin"]]
        for kernel in mine:
            entry: dict[str, Any] = {"name": kernel["name"], "dtype": dtype, "config": kernel["config"]}
            try:
                entry["probe"] = probe(gpu, kernel)
            except Exception as exc:  # a CUDA error: the context is gone, stop here
                entry["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                results.append(entry)
                return {"results": results, "aborted": entry["error"]}
            entry["cases"] = []
            results.append(entry)
        for index, shape in enumerate(CHECK_SHAPES[:3] if gpu.emulate else CHECK_SHAPES):
            data = make_data(gpu, dtype, shape, seed=index + 1)
            for kernel, entry in zip(mine, [r for r in results if r["dtype"] == dtype], strict=True):
                for with_beta in (False, True):
                    try:
                        entry["cases"].append(check_case(gpu, kernel, shape, data, with_beta))
                    except Exception as exc:
                        entry["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                        return {"results": results, "aborted": entry["error"]}
            del data
            gpu.sync()
    for entry in results:
        entry["ok"] = bool(entry["probe"]["ok"] and entry["cases"] and all(c["ok"] for c in entry["cases"]))
    return {"results": results, "aborted": None}


def _median_us(gpu: Gpu, launch: Any) -> float:
    torch = gpu.torch
    for _ in range(WARMUP):
        launch()
    gpu.sync()
    times = []
    if gpu.emulate:
        start_s = time.perf_counter()
        launch()
        return (time.perf_counter() - start_s) * 1e6
    for _ in range(REPEATS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(LAUNCHES):
            launch()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0 / LAUNCHES)
    return float(statistics.median(times))


def child_timing(kernels: list[dict[str, Any]]) -> dict[str, Any]:
    gpu = Gpu()
    torch = gpu.torch
    rows: list[dict[str, Any]] = []
    for dtype in DTYPES:
        mine = [k for k in kernels if k["dtype"] == dtype]
        for shape in ((512, 512, 512),) if gpu.emulate else TIME_SHAPES:
            if not mine:
                continue
            m, n, k = shape
            data = make_data(gpu, dtype, shape, seed=99)
            a, b = data["a"], data["b"]
            c = torch.empty((m, n), dtype=a.dtype, device=gpu.device)
            flops = 2.0 * m * n * k
            cublas_us = _median_us(gpu, lambda a=a, b=b, c=c: torch.mm(a, b, out=c))
            for kernel in mine:
                try:
                    us = _median_us(
                        gpu,
                        lambda kernel=kernel, a=a, b=b, c=c, shape=shape: gpu.launch(kernel, a, b, c, shape, 1.0, 0.0),
                    )
                    # The timed launches also count as a check at this shape.
                    gpu.sync()
                    ref = data["ref"]
                    exact = not bool(_wrong((c.double() - ref).abs(), ref, data["mag"], dtype).any())
                except Exception as exc:
                    rows.append({"name": kernel["name"], "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
                    return {"rows": rows, "aborted": rows[-1]["error"]}
                rows.append(
                    {
                        "name": kernel["name"],
                        "dtype": dtype,
                        "config": kernel["config"],
                        "shape": list(shape),
                        "us": us,
                        "tflops": flops / us / 1e6,
                        "cublas_us": cublas_us,
                        "cublas_tflops": flops / cublas_us / 1e6,
                        "ratio": cublas_us / us,
                        "exact_at_shape": exact,
                    }
                )
            del data, a, b, c
            gpu.sync()
    return {"rows": rows, "aborted": None}


def child_main(mode: str, manifest: Path, result: Path) -> int:
    kernels = json.loads(manifest.read_text())
    output = child_correctness(kernels) if mode == "correct" else child_timing(kernels)
    result.write_text(json.dumps(output, indent=1))
    return 0


# ------------------------------------------------------------------------------------------------
# Parent: compile, run the children, print and write the summary.


def run_child(mode: str, kernels: list[dict[str, Any]], work: Path, tag: str) -> dict[str, Any]:
    manifest, result = work / f"{tag}.kernels.json", work / f"{tag}.result.json"
    manifest.write_text(json.dumps(kernels))
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", mode, "--manifest", str(manifest), "--result", str(result)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"aborted": f"timed out after {CHILD_TIMEOUT_S} s (a hang?)"}
    if not result.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-6:]
        return {"aborted": f"child exited {done.returncode} without a result: " + " | ".join(tail)}
    output: dict[str, Any] = json.loads(result.read_text())
    return output


def _config_text(config: Config) -> str:
    c = config
    return f"{c['bm']}x{c['bn']}x{c['bk']} g{c['wgs']} s{c['stages']} z{c['swizzle']}"


def print_correctness(layout: int, output: dict[str, Any]) -> None:
    for entry in output.get("results", []):
        head = f"L{layout} {entry['dtype']:8} {_config_text(entry['config']):22}"
        if "error" in entry:
            print(f"{head} ERROR {entry['error']}")
            continue
        probe_ = entry["probe"]
        cases = entry["cases"]
        verdict = "PASS" if entry.get("ok") else "FAIL"
        marks = " ".join(("ok" if c["ok"] else "XX") + ("b" if c["beta"] else "") for c in cases)
        worst = max((c["rel_err"] for c in cases), default=float("nan"))
        print(f"{head} {verdict} probe {'ok' if probe_['ok'] else 'XX'} | {marks} | max rel_err {worst:.2e}")
        for operand in ("B", "A"):
            if probe_[operand]["wrong"]:
                print(
                    f"    probe {operand}: {probe_[operand]['wrong']} wrong, e.g. "
                    + "; ".join(probe_[operand]["examples"][:3])
                )
        for c in cases:
            if not c["ok"]:
                first = c.get("first_wrong", [{}])[0]
                print(
                    f"    {'x'.join(map(str, c['shape']))} alpha={c['alpha']} beta={c['beta']}: {c['wrong']} wrong,"
                    f" max_err {c['max_err']:.3g}, rel_err {c['rel_err']:.2e}, first wrong (row {first.get('row')},"
                    f" col {first.get('col')}) got {first.get('got')} want {first.get('want')},"
                    f" pattern {c.get('pattern')}{', STORES OUTSIDE C' if c['stores_outside_c'] else ''}"
                )
                break  # the first failing case of a kernel is enough to read
    if output.get("aborted"):
        print(f"L{layout} ABORTED: {output['aborted']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON summary to write")
    parser.add_argument("--layouts", default=",".join(map(str, gemm_wgmma.LAYOUTS)), help="layouts to check")
    parser.add_argument(
        "--full-layouts",
        default=",".join(map(str, gemm_wgmma.TUNED_LAYOUTS)),
        help="layouts checked with every config (others with two); the first correct one is timed",
    )
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--child", choices=("correct", "time"), help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child, args.manifest, args.result)
    if args.out is None:
        parser.error("--out is required")
    out_file(args.out)

    started = time.monotonic()
    layouts = [int(x) for x in args.layouts.split(",") if x]
    full = [int(x) for x in args.full_layouts.split(",") if x]
    kernels = compile_all(layouts, full)
    failed = [k for k in kernels if k["cubin"] is None]
    print(f"compiled {len(kernels) - len(failed)}/{len(kernels)} kernels in {time.monotonic() - started:.1f} s")
    for k in failed:
        print(f"  COMPILE ERROR {k['name']}: {k['error'].splitlines()[-1]}")

    work = args.out.parent / (args.out.stem + "_work")
    work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"kernels": [{k: v for k, v in x.items() if k != "cubin"} for x in kernels]}
    summary["layouts"] = {}
    correct_layouts = []
    for layout in layouts:
        mine = [k for k in kernels if k["config"]["layout"] == layout and k["cubin"]]
        output = run_child("correct", mine, work, f"layout{layout}")
        summary["layouts"][str(layout)] = output
        print_correctness(layout, output)
        entries = output.get("results", [])
        if entries and not output.get("aborted") and all(e.get("ok") for e in entries) and len(entries) == len(mine):
            correct_layouts.append(layout)
    summary["correct_layouts"] = correct_layouts
    print(f"layouts correct in every case: {correct_layouts or 'none'}")

    summary["timing"] = []
    # Timed: the passing kernels of the first fully-checked layout with any, else of any layout (a
    # layout that fails only some configs is still worth timing; its failures are printed above).
    passed = [x for x in layouts if any(e.get("ok") for e in summary["layouts"][str(x)].get("results", []))]
    timed = next((x for x in full if x in passed), passed[0] if passed else None)
    summary["timed_layout"] = timed
    if timed is not None and not args.no_timing:
        passing = [
            k
            for k in kernels
            if k["config"]["layout"] == timed
            and any(e["name"] == k["name"] and e.get("ok") for e in summary["layouts"][str(timed)]["results"])
        ]
        output = run_child("time", passing, work, "timing")
        summary["timing"] = output.get("rows", [])
        summary["timing_aborted"] = output.get("aborted")
        for row in summary["timing"]:
            if "error" in row:
                print(f"TIME {row['name']}: ERROR {row['error']}")
                continue
            exact = "" if row["exact_at_shape"] else " (WRONG RESULT at this shape)"
            print(
                f"TIME L{timed} {row['dtype']:8} {_config_text(row['config']):22} {row['shape'][0]}^3:"
                f" {row['us']:9.1f} us {row['tflops']:6.1f} TFLOP/s | cuBLAS {row['cublas_us']:9.1f} us"
                f" {row['cublas_tflops']:6.1f} TFLOP/s | ratio {row['ratio']:.3f}{exact}"
            )
        if output.get("aborted"):
            print(f"TIMING ABORTED: {output['aborted']}")
        best: dict[str, Any] = {}
        for row in summary["timing"]:
            if "ratio" in row:
                key = f"{row['dtype']} {row['shape'][0]}"
                if key not in best or row["ratio"] > best[key]["ratio"]:
                    best[key] = row
        summary["best"] = best
        for key, row in sorted(best.items()):
            print(f"BEST {key}^3: {row['name']} {row['tflops']:.1f} TFLOP/s, {row['ratio']:.3f} of cuBLAS")
    summary["seconds"] = time.monotonic() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.out} ({summary['seconds']:.0f} s)")
    return 0 if correct_layouts else 1


if __name__ == "__main__":
    sys.exit(main())
