"""Benchmark: a transformers Llama decode, torch against autotune.patch(model), on this GPU; writes
results/model_<gpu>.json (plot it with scripts/plot_model.py).

Run on the GPU machine:  python scripts/bench_model.py --out results [--layers 8 32] [--weights float16 int4 int8 fp8]
                                                        [--modes eager compiled compiled-pdl] [--merge]
The model is LlamaForCausalLM at Llama-3-8B's widths (hidden 4096, MLP 14336, 32 query and 8 key/value
heads, vocabulary 128256), built from its config with random float16 weights (no download), batch 1, a
16-token prompt. Two copies of it: torch's, and one patched by autotune.patch (unfused, then fused); `--weights
int4` patches int4 g128 weights instead, `int8` and `fp8` 8-bit weights with a scale per row (`--weights
float16 int4`: both), timed against torch's float16 and checked against their own values dequantized.
`--merge` keeps the rows of an earlier run's file that this run does not measure again.
For each mode (`--modes`: eager modules; `torch.compile`d forward; `compiled-pdl`, the same with
Inductor's Triton kernels launched with programmatic dependent launch, both copies alike) and copy:

- GPU time per decode step: one decode step (a token, transformers' StaticCache, whose token counters the
  step first sets back with one small kernel) captured by hand into a CUDA graph and replayed, timed by
  CUDA events over REPLAYS replays; torch and ours take turns for ROUNDS rounds, the ratio's 95%
  interval bootstrapped from the rounds' ratios.
- The linears' share of it: torch.profiler's kernels of a few replays, each counted for the time it runs
  alone (a PDL launch starts under the kernel before it), the GEMV/GEMM kernels (ours, cuBLAS, cuBLASLt's
  nvjet) summed apart from the rest (attention, norms, rotary, sampling).
- Wall time per token: eager `generate` of NEW_TOKENS greedy tokens, less a one-token `generate` (the
  prefill), over the decode steps, torch's and ours in turns for WALL_ROUNDS rounds (eager mode only:
  what a user's plain loop pays, host included).
- Host time per patched linear (float16 unfused, eager): each distinct linear of the first layer and
  the lm_head called with a decode step's (1, 1, K) x, HELD_CALLS at a time queued behind a sleeping
  kernel (autotune/bench/harness.py's host_us_per_call), the torch copy's module beside ours', all
  sixteen in turns for HOST_ROUNDS rounds; the rows' `host` list.
- Correctness by teacher forcing: the same tokens (the prompt and torch's greedy continuation) fed one
  at a time to a float32 copy, torch's and ours; `logit_dev` is ours' max |logit - float32's|,
  `torch_logit_dev` torch's, `tokens_agree` the share of positions where ours and torch's argmax agree.
"""

from __future__ import annotations

import argparse
import copy
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import torch
except ImportError:  # a GPU machine's benchmark: one line where torch is missing, not a traceback
    sys.exit("bench_model: needs torch with CUDA (pip install torch), and a GPU to run on")

import autotune
from autotune.bench.decode_graph import NEW_TOKENS, PROMPT, REPLAYS, ROUNDS, DecodeGraph, built_on_gpu, static_cache
from autotune.bench.harness import (
    host_us_per_call,
    read_json,
    report_path,
    require_cuda_torch,
    run_script,
    write_progress,
    write_report,
)

WEIGHTS = ["float16", "int4", "int8", "fp8"]  # what --weights patches, in the order of the rows
# How a step runs: eager modules; under torch.compile; the same with Inductor's Triton kernels launched
# with programmatic dependent launch (opt-in: decode_graph.inductor_pdl), in the order of the rows.
MODES = ["eager", "compiled", "compiled-pdl"]
WALL_ROUNDS = 12  # rounds of eager generate's wall time per token, torch's and ours in turns
HOST_ROUNDS = 40  # rounds of host time per linear, every linear of both models in turns in each


def llama(layers: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        num_hidden_layers=layers,
        vocab_size=128256,
        max_position_embeddings=PROMPT + NEW_TOKENS + 8,
        rope_theta=500000.0,
    )
    return built_on_gpu(LlamaForCausalLM, config)


def bootstrap(ratios: list[float], draws: int = 2000) -> list[float]:
    """A 95% interval of the median of `ratios`."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return [medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]]


def generate_seconds(model: Any, prompt: Any, tokens: int) -> float:
    torch.cuda.synchronize()
    begin = time.perf_counter()
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    torch.cuda.synchronize()
    return time.perf_counter() - begin


def wall_us_per_token(models: dict[str, Any], prompt: Any) -> tuple[dict[str, float], list[float]]:
    """Eager generate's time per decode step (host included), each model's in turns for WALL_ROUNDS
    rounds: NEW_TOKENS tokens less one token (the prefill), over the decode steps. Returns the medians
    and the 95% interval of the first model's time over the second's."""
    samples: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():
        generate_seconds(model, prompt, 2)  # warm
    for _ in range(WALL_ROUNDS):
        for name, model in models.items():
            decode = generate_seconds(model, prompt, NEW_TOKENS) - generate_seconds(model, prompt, 1)
            samples[name].append(decode * 1e6 / (NEW_TOKENS - 1))
    first, second = samples.values()
    return {name: statistics.median(values) for name, values in samples.items()}, bootstrap(
        [a / b for a, b in zip(first, second, strict=True)]
    )


def teacher_forced_logits(model: Any, tokens: Any) -> Any:
    """Logits at each position, the tokens fed one at a time after the prompt (decode's M = 1 path)."""
    cache = static_cache(model)
    outputs = []
    with torch.no_grad():
        logits = model(
            input_ids=tokens[:, :PROMPT], past_key_values=cache, cache_position=torch.arange(PROMPT, device="cuda")
        ).logits
        outputs.append(logits[:, -1].float())
        for position in range(PROMPT, tokens.shape[1] - 1):
            step = model(
                input_ids=tokens[:, position : position + 1],
                past_key_values=cache,
                cache_position=torch.tensor([position], device="cuda"),
            ).logits
            outputs.append(step[:, -1].float())
    return torch.cat(outputs)


def references(model: Any, tokens: Any) -> tuple[Any, Any]:
    """Teacher-forced logits of a float32 copy of `model` and of `model` itself (torch's own run)."""
    reference = copy.deepcopy(model).float()
    exact = teacher_forced_logits(reference, tokens)
    del reference
    gc.collect()
    torch.cuda.empty_cache()
    return exact, teacher_forced_logits(model, tokens)


def host_per_linear(theirs: Any, ours: Any) -> list[dict[str, Any]]:
    """Host µs per call of each distinct linear (the first decoder layer's and the lm_head), torch's
    module beside ours', under no_grad with a decode step's (1, 1, K) x. All sixteen calls take turns
    in every round: the host's speed drifts by a third within a run, so each linear measured in its own
    window of time compared one window with another."""
    names = [name for name, module in theirs.named_modules() if isinstance(module, torch.nn.Linear)]
    names = [name for name in names if name.startswith("model.layers.0.") or "layers." not in name]
    modules = dict(ours.named_modules())
    calls: dict[str, Callable[[], None]] = {}
    for name in names:
        mine, torch_module = modules[name], theirs.get_submodule(name)
        x = torch.randn(1, 1, torch_module.in_features, device="cuda", dtype=torch.float16)
        calls[f"torch {name}"] = lambda m=torch_module, x=x: m(x)
        calls[f"ours {name}"] = lambda m=mine, x=x: m(x)
    with torch.no_grad():
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        got = host_us_per_call(torch, calls, rounds=HOST_ROUNDS)
    rows = []
    for name in names:
        module = theirs.get_submodule(name)
        rows.append({"name": name.rsplit(".", 1)[-1], "n": module.out_features, "k": module.in_features,
                     "torch_host_us": got[f"torch {name}"], "ours_host_us": got[f"ours {name}"]})  # fmt: skip
        print(f"host per call {rows[-1]['name']:10} torch {got[f'torch {name}']:5.1f} us"
              f"  ours {got[f'ours {name}']:5.1f} us", flush=True)  # fmt: skip
    return rows


def decode_graph(model: Any, prompt: Any, mode: str) -> DecodeGraph:
    """The model's decode step captured as `mode` (one of MODES) runs it."""
    return DecodeGraph(model, prompt, compiled=mode != "eager", pdl=mode == "compiled-pdl")


def measure(
    layers: int,
    modes: list[str],
    variants: list[tuple[str, bool]],
    rows: list[dict[str, Any]],
    save: Callable[[], None],
) -> None:
    """Rows for each (weights, fused) variant and mode, appended to `rows`, save() called after each.
    A low-bit copy (int4, int8, fp8) is timed against torch's float16 model (what it replaces) and
    checked against its own weights dequantized (float32 and torch's float16)."""
    torch_model = llama(layers)
    prompt = torch.randint(
        0, torch_model.config.vocab_size, (1, PROMPT), device="cuda", generator=torch.Generator("cuda").manual_seed(1)
    )
    with torch.no_grad():
        tokens = torch_model.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    float_checks = references(torch_model, tokens)
    torch_graphs = {mode: decode_graph(torch_model, prompt, mode) for mode in modes}
    for weights, fused in variants:
        low_bit = weights != "float16"
        ours_model = autotune.patch(copy.deepcopy(torch_model), weights if low_bit else None, fuse=fused)
        if low_bit:  # the same weights as ours, dequantized, run by torch
            dequantized = autotune.unpatch(copy.deepcopy(ours_model))
            exact, theirs = references(dequantized, tokens)
            del dequantized
        else:
            exact, theirs = float_checks
        torch_dev = float((theirs - exact).abs().max())
        mine = teacher_forced_logits(ours_model, tokens)
        checks = {
            "logit_dev": float((mine - exact).abs().max()),
            "torch_logit_dev": torch_dev,
            "tokens_agree": float((mine.argmax(-1) == theirs.argmax(-1)).float().mean()),
        }
        host = host_per_linear(torch_model, ours_model) if (weights, fused) == ("float16", False) else None
        walls, wall_ci = wall_us_per_token({"torch": torch_model, "ours": ours_model}, prompt)
        torch_wall, ours_wall = walls["torch"], walls["ours"]
        for mode in modes:
            graphs = {"torch": torch_graphs[mode], "ours": decode_graph(ours_model, prompt, mode)}
            times: dict[str, list[float]] = {"torch": [], "ours": []}
            for _ in range(ROUNDS):
                for name, graph in graphs.items():
                    times[name].append(graph.time_us())
            ratios = [t / o for t, o in zip(times["torch"], times["ours"], strict=True)]
            kernels = {name: graph.kernel_us() for name, graph in graphs.items()}
            row = {
                "model": "llama-3-8b-widths",
                "layers": layers,
                "weights": weights,
                "fused": fused,
                "mode": mode,
                "torch_gpu_us": statistics.median(times["torch"]),
                "ours_gpu_us": statistics.median(times["ours"]),
                "gpu_ratio": statistics.median(ratios),
                "gpu_ratio_ci95": bootstrap(ratios),
                "torch_kernel_us": kernels["torch"][0],
                "ours_kernel_us": kernels["ours"][0],
                "torch_linear_us": kernels["torch"][1],
                "ours_linear_us": kernels["ours"][1],
                "kernel_split": "exclusive",  # each kernel's time alone (older rows: durations summed)
                "torch_wall_us": torch_wall if mode == "eager" else None,
                "ours_wall_us": ours_wall if mode == "eager" else None,
                "wall_ratio_ci95": wall_ci if mode == "eager" else None,  # torch's over ours'
                "host": host if mode == "eager" else None,
                **checks,
            }
            rows.append(row)
            save()
            linear = ""
            if row["torch_linear_us"] and row["ours_linear_us"]:
                linear = f"  linears {row['torch_linear_us']:.0f} / {row['ours_linear_us']:.0f} us"
            print(
                f"{layers:2} layers {weights:7} {'fused' if fused else 'unfused':7} {mode:8}"
                f"  GPU/step torch {row['torch_gpu_us']:7.0f}"
                f" ours {row['ours_gpu_us']:7.0f} us  {row['gpu_ratio']:.3f}x [{row['gpu_ratio_ci95'][0]:.3f}, "
                f"{row['gpu_ratio_ci95'][1]:.3f}]{linear}  wall {torch_wall:.0f} / {ours_wall:.0f} us"
                f"  |dlogit| {checks['logit_dev']:.3f} (torch {torch_dev:.3f}) agree {checks['tokens_agree']:.3f}",
                flush=True,
            )
            del graphs["ours"]
        autotune.unpatch(ours_model)
        del ours_model
        gc.collect()
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=MODES)
    parser.add_argument("--fused", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    parser.add_argument("--weights", nargs="+", default=["float16"], choices=WEIGHTS)
    parser.add_argument("--merge", action="store_true", help="keep the earlier file's rows not measured again")
    args = parser.parse_args()
    require_cuda_torch()
    gpu = torch.cuda.get_device_name(0)
    import transformers

    torch._dynamo.config.cache_size_limit = 64  # one compiled step per model copy, all in one process

    path = report_path(args.out, "model", gpu)
    rows: list[dict[str, Any]] = []
    if args.merge and path.exists():
        measured = {(layers, weights, fused == "yes", mode) for layers in args.layers for weights in args.weights
                    for fused in args.fused for mode in args.modes}  # fmt: skip
        earlier = read_json(path)["rows"]
        rows = [r for r in earlier if (r["layers"], r["weights"], r["fused"], r["mode"]) not in measured]

    def report() -> dict[str, Any]:
        rows.sort(key=lambda r: (r["layers"], WEIGHTS.index(r["weights"]), r["fused"], MODES.index(r["mode"])))
        return {"gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
                "prompt": PROMPT, "new_tokens": NEW_TOKENS, "rounds": ROUNDS, "replays": REPLAYS,
                "rows": rows}  # fmt: skip

    def save() -> None:  # after every row, beside the report: a run cut short keeps what it measured
        write_progress(path, report())

    for layers in args.layers:
        variants = [(weights, fused == "yes") for weights in args.weights for fused in args.fused]
        measure(layers, args.modes, variants, rows, save)
    write_report(path, report())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_model")
