"""Benchmark: decode steps (a chain of GEMVs per layer) through autotune.gemv beside torch.mv, eager and
replayed from a CUDA graph, and the host cost of one call, on this GPU; writes results/decode_<gpu>.json.

Run on the GPU machine:  python scripts/bench_decode.py --out results
Each model is a chain: every GEMV reads the head of the vector the one before wrote (the projections
of a transformer layer, without the elementwise work between them). Step times are CUDA-event
times per step, median of many, the weights (hundreds of MB) cold in L2 by their size alone.
Host time per call is taken with the stream held by a long kernel, so calls only queue: it is what
a Python caller pays, apart from the GPU. `launch_floor_us` is the same for a bare cuLaunchKernel of
an empty kernel through ctypes, with torch's current stream and three data_ptr()s read per call.

An int4 row (`llama-like-int4`) runs the same step with its weights quantized (autotune.quantize, int4,
symmetric, a float16 scale per group of 128 along K) through autotune.linear(x, weight), beside torch.mv's
float16 step on the values those int4 weights hold. Its `bytes` are the packed codes and the scales, and
`torch_bytes` the float16 weights torch.mv reads; its host call is autotune.linear's, which takes no out=.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import autotune
from autotune.bench.compare import Bench
from autotune.bench.harness import host_us_per_call, median_event_ms, report_path, run_script, write_json
from autotune.gpu import driver

# (layers, [(rows, cols) of each GEMV of a layer]): Llama-3-8B's projections, and a model 1024 wide.
MODELS: dict[str, tuple[int, list[tuple[int, int]]]] = {
    "llama-like": (8, [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]),
    "narrow": (24, [(3072, 1024), (1024, 1024), (8192, 1024), (1024, 4096)]),
}
# Int4 rows: (the model above whose step they run, the group size): the same GEMVs with int4 weights.
INT4_MODELS: dict[str, tuple[str, int]] = {"llama-like-int4": ("llama-like", 128)}
ROWS = [*MODELS, *INT4_MODELS]  # what a run measures unless --models says otherwise
EMPTY_KERNEL = 'extern "C" __global__ void empty_kernel(const void*, const void*, void*, int, int) {}\n'


def empty_function(arch: str) -> int:
    """An empty kernel with a GEMV's pointer arguments, compiled with nvcc and loaded by the driver."""
    with tempfile.TemporaryDirectory() as folder:
        source, cubin = Path(folder) / "empty.cu", Path(folder) / "empty.cubin"
        source.write_text(EMPTY_KERNEL)
        subprocess.run(["nvcc", "--cubin", f"-arch={arch}", "-o", str(cubin), str(source)], check=True)
        return driver.load_function(cubin.read_bytes(), "empty_kernel")


def bare_launches(torch: Any, function: int, A: Any, x: Any, y: Any) -> dict[str, Callable[[], None]]:
    """The floor: a bare cuLaunchKernel per call through ctypes (and through cuda-bindings, where it is
    installed), reading torch's current stream and three data_ptr()s each time."""
    raw_stream = torch._C._cuda_getCurrentRawStream
    index = A.get_device()
    args = (ctypes.c_uint64 * 3)()
    sizes = (ctypes.c_int * 2)(A.shape[0], A.shape[1])
    params = (ctypes.c_void_p * 5)(
        *(ctypes.addressof(args) + 8 * i for i in range(3)), ctypes.addressof(sizes), ctypes.addressof(sizes) + 4
    )
    launch = driver.lib()["cuLaunchKernel"]  # no argtypes: every argument below is a ctypes object or small int
    handle = ctypes.c_void_p(function)

    def ctypes_call() -> None:
        stream = raw_stream(index)
        args[0], args[1], args[2] = A.data_ptr(), x.data_ptr(), y.data_ptr()
        launch(handle, 1, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(stream), params, None)

    attribute = driver.programmatic_attribute()
    config = driver.LaunchConfig(1, 1, 1, 32, 1, 1, 0, None, ctypes.pointer(attribute), 1)
    config_ref = ctypes.byref(config)
    launch_ex = driver.lib()["cuLaunchKernelEx"]

    def ctypes_ex_call() -> None:  # what our plans call: cuLaunchKernelEx with the PDL attribute
        config.stream = raw_stream(index)
        args[0], args[1], args[2] = A.data_ptr(), x.data_ptr(), y.data_ptr()
        launch_ex(config_ref, handle, params, None)

    calls = {"ctypes": ctypes_call, "ctypes, cuLaunchKernelEx with PDL": ctypes_ex_call}
    try:
        from cuda.bindings import driver as bindings

        function_handle = bindings.CUfunction(function)
        params_address = ctypes.addressof(params)

        def bindings_call() -> None:
            stream = raw_stream(index)
            args[0], args[1], args[2] = A.data_ptr(), x.data_ptr(), y.data_ptr()
            bindings.cuLaunchKernel(function_handle, 1, 1, 1, 32, 1, 1, 0, stream, params_address, 0)

        bindings_call()
        torch.cuda.synchronize()
        calls["cuda-bindings"] = bindings_call
    except Exception as error:  # not installed, or another API generation: reported, not fatal
        print(f"cuda-bindings not measured: {type(error).__name__}: {error}", flush=True)
    return calls


def chain(torch: Any, shapes: list[tuple[int, int]], layers: int) -> tuple[list[Any], Any, list[Any]]:
    """Weights (variance-preserving random values), the first input, and one output per GEMV."""
    weights, outputs = [], []
    for _ in range(layers):
        for rows, cols in shapes:
            scale = (3.0 / cols) ** 0.5
            weights.append((torch.rand(rows, cols, device="cuda", dtype=torch.float16) * 2 - 1) * scale)
            outputs.append(torch.empty(rows, device="cuda", dtype=torch.float16))
    x = torch.rand(shapes[0][1], device="cuda", dtype=torch.float16) * 2 - 1
    return weights, x, outputs


def step_calls(
    gemv: Callable[..., Any], weights: list[Any], x: Any, outputs: list[Any]
) -> tuple[Callable[[], None], list[tuple[Any, Any, Any]]]:
    """One decode step (every GEMV in order) and its (weight, input view, output) triples."""
    plan = []
    source = x
    for weight, out in zip(weights, outputs, strict=True):
        plan.append((weight, source[: weight.shape[1]], out))
        source = out

    def step() -> None:
        for weight, inputs, out in plan:
            gemv(weight, inputs, out=out)

    return step, plan


def int4_step(weights: list[Any], x: Any) -> tuple[Callable[[], None], list[Any]]:
    """One decode step through autotune.linear with int4 weights, chained as step_calls chains the
    GEMVs (each new output is the next input's source), and a list that holds its last output."""
    last: list[Any] = [None]

    def step() -> None:
        source = x
        for weight in weights:
            source = autotune.linear(source[: weight.in_features], weight)
        last[0] = source

    return step, last


def int4_bytes(rows: int, cols: int, group: int) -> int:
    """Bytes of a symmetric int4 weight (rows, cols): codes packed two a byte, a float16 scale per group."""
    return rows * cols // 2 + rows * (cols // group) * 2


def int4_model_bytes(name: str) -> int:
    """Bytes of an int4 row's weights over its whole step: packed codes and scales."""
    model, group = INT4_MODELS[name]
    layers, shapes = MODELS[model]
    return layers * sum(int4_bytes(rows, cols, group) for rows, cols in shapes)


def check_agreement(name: str, ours: Any, theirs: Any) -> None:
    error = ((ours.double() - theirs.double()).norm() / theirs.double().norm()).item()
    if not error < 2e-2:
        raise SystemExit(f"{name}: ours and torch.mv disagree (relative difference {error:.3g})")


def captured(torch: Any, step: Callable[[], None]) -> Any:
    """`step` in a CUDA graph, captured after a run on a side stream (as torch asks before a capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def step_times(torch: Any, ours: Callable[[], None], theirs: Callable[[], None]) -> dict[str, float]:
    """µs per step of both, eager and replayed from a CUDA graph."""
    graphs = {"ours": captured(torch, ours), "torch": captured(torch, theirs)}
    reps = 40
    times = {}
    for _ in range(2):  # the second pass is kept: clocks settled by the first
        times = {
            "ours_eager_us": 1e3 * median_event_ms(torch, ours, reps),
            "torch_eager_us": 1e3 * median_event_ms(torch, theirs, reps),
            "ours_graph_us": 1e3 * median_event_ms(torch, graphs["ours"].replay, reps),
            "torch_graph_us": 1e3 * median_event_ms(torch, graphs["torch"].replay, reps),
        }
    return times


def measure_model(torch: Any, bench: Bench, name: str, floor_fn: Callable[[], int]) -> dict[str, Any]:
    layers, shapes = MODELS[name]
    weights, x, ours_out = chain(torch, shapes, layers)
    torch_out = [torch.empty_like(o) for o in ours_out]
    ours, triples = step_calls(autotune.gemv, weights, x, ours_out)
    theirs, _ = step_calls(torch.mv, weights, x, torch_out)
    autotune.warmup(gemv=[(weight, inputs) for weight, inputs, _ in triples[: len(shapes)]])
    for _ in range(3):
        ours()
        theirs()
    torch.cuda.synchronize()
    check_agreement(name, ours_out[-1], torch_out[-1])
    times = step_times(torch, ours, theirs)
    floor_us = layers * sum(bench.read_floor(rows * cols * 2).us for rows, cols in shapes)
    weight, inputs, out = triples[1]
    function = floor_fn()
    calls: dict[str, Callable[[], None]] = {
        "ours": lambda: autotune.gemv(weight, inputs, out=out),
        "torch": lambda: torch.mv(weight, inputs, out=out),
        "torch.ops.autotune.gemv": lambda: torch.ops.autotune.gemv(weight, inputs),
        "ours without out=": lambda: autotune.gemv(weight, inputs),
    }
    calls.update({f"bare launch ({k})": v for k, v in bare_launches(torch, function, weight, inputs, out).items()})
    host = host_us_per_call(torch, calls)
    return {
        "model": name,
        "calls": layers * len(shapes),
        "bytes": sum(w.numel() * w.element_size() for w in weights),
        "floor_us": floor_us,
        **times,
        "ours_host_us_per_call": host["ours"],
        "torch_host_us_per_call": host["torch"],
        "launch_floor_us": host["bare launch (ctypes)"],
        "host_us_per_call": host,
        "host_shape": list(weight.shape),
    }


def measure_int4_model(torch: Any, bench: Bench, name: str, floor_fn: Callable[[], int]) -> dict[str, Any]:
    """An int4 row: its model's step through autotune.linear with int4 weights, beside torch.mv's float16
    step on the dequantized weights (the same bytes as any float16 weight, and a tight check of ours)."""
    model, group = INT4_MODELS[name]
    layers, shapes = MODELS[model]
    weights, x, torch_out = chain(torch, shapes, layers)
    quantized = []
    for i, weight in enumerate(weights):
        quantized.append(autotune.quantize(weight, "int4", group=group, sym=True))
        weights[i] = quantized[-1].dequantize(torch.float16)  # what torch.mv reads: the values ours holds
    ours, last = int4_step(quantized, x)
    theirs, triples = step_calls(torch.mv, weights, x, torch_out)
    for _ in range(3):
        ours()
        theirs()
    autotune.warmup()  # split-K scratch set aside for the capture, for every call seen above
    torch.cuda.synchronize()
    check_agreement(name, last[0], torch_out[-1])
    times = step_times(torch, ours, theirs)
    floor_us = layers * sum(bench.read_floor(int4_bytes(rows, cols, group)).us for rows, cols in shapes)
    weight, inputs, out = triples[1]
    quantized_weight = quantized[1]
    calls: dict[str, Callable[[], None]] = {
        "autotune.linear (int4)": lambda: autotune.linear(inputs, quantized_weight),
        "torch": lambda: torch.mv(weight, inputs, out=out),
    }
    calls.update({f"bare launch ({k})": v for k, v in bare_launches(torch, floor_fn(), weight, inputs, out).items()})
    host = host_us_per_call(torch, calls)
    return {
        "model": name,
        "format": "int4",
        "group": group,
        "sym": True,
        "calls": layers * len(shapes),
        "bytes": int4_model_bytes(name),
        "torch_bytes": sum(w.numel() * w.element_size() for w in weights),
        "floor_us": floor_us,
        **times,
        "ours_host_us_per_call": host["autotune.linear (int4)"],
        "torch_host_us_per_call": host["torch"],
        "launch_floor_us": host["bare launch (ctypes)"],
        "host_us_per_call": host,
        "host_shape": list(weight.shape),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for decode_<gpu>.json")
    parser.add_argument("--models", nargs="+", default=ROWS, choices=ROWS, help="rows to run (default: all)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    bench = Bench()
    torch = bench.torch
    import autotune.runtime.torch_ops  # noqa: F401  (torch.ops.autotune, whose host cost is reported)

    gpu = bench.device.gpu
    empty: list[int] = []

    def floor_fn() -> int:
        if not empty:
            empty.append(empty_function(gpu.arch))
        return empty[0]

    rows = []
    for name in args.models:
        measure = measure_int4_model if name in INT4_MODELS else measure_model
        row = measure(torch, bench, name, floor_fn)
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = {"gpu": gpu.name, "rows": rows}
    path = write_json(report_path(args.out, "decode", gpu.name), report)
    print(
        f"{'model':15} {'calls':>5} {'floor':>7} {'ours':>7} {'torch':>7} {'ours g':>7} {'torch g':>7} "
        f"{'host ours':>9} {'torch':>6} {'bare':>6}"
    )
    for r in rows:
        print(
            f"{r['model']:15} {r['calls']:5} {r['floor_us']:7.0f} {r['ours_eager_us']:7.0f} {r['torch_eager_us']:7.0f} "
            f"{r['ours_graph_us']:7.0f} {r['torch_graph_us']:7.0f} {r['ours_host_us_per_call']:9.2f} "
            f"{r['torch_host_us_per_call']:6.2f} {r['launch_floor_us']:6.2f}"
        )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_decode")
