"""Benchmark: what autotune.tune_model gives a model whose shapes were never tuned; writes
results/tune_model_<gpu>.json.

Run on the GPU machine:  python scripts/bench_tune_model.py --out results
transformers' Phi3ForCausalLM at Phi-3-mini's widths (hidden 3072, MLP 8192, 32 heads, vocabulary 32064;
8 layers, random float16 weights), patched, in a new database (the shipped records, none of them of
these shapes). GPU time per decode step (autotune/bench/decode_graph.py's captured decode step, torch's copy
timed in turns) at three points: with the untuned picks (the selector's estimates), after
`tune_model` (its default trials, five minutes at most, the seconds it took recorded), and after a
64-trial sweep of the same problems (`patience` off).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    import torch
except ImportError:  # a GPU machine's benchmark: one line where torch is missing, not a traceback
    sys.exit("bench_tune_model: needs torch with CUDA (pip install torch), and a GPU to run on")

import autotune
from autotune import api
from autotune.bench.decode_graph import PROMPT, ROUNDS, DecodeGraph, built_on_gpu
from autotune.bench.harness import report_path, require_cuda_torch, run_script, write_json


def phi3(layers: int) -> Any:
    from transformers import Phi3Config, Phi3ForCausalLM

    config = Phi3Config(
        hidden_size=3072,
        intermediate_size=8192,
        num_attention_heads=32,
        num_key_value_heads=32,
        num_hidden_layers=layers,
        vocab_size=32064,
        max_position_embeddings=4096,
        pad_token_id=0,
    )
    return built_on_gpu(Phi3ForCausalLM, config)


def step_us(ours: Any, theirs: Any, prompt: Any) -> tuple[float, float]:
    """Median GPU µs per decode step of ours and torch's, in turns."""
    graphs = [DecodeGraph(model, prompt, compiled=False) for model in (ours, theirs)]
    times: list[list[float]] = [[], []]
    for _ in range(ROUNDS):
        for index, graph in enumerate(graphs):
            times[index].append(graph.time_us())
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--layers", type=int, default=8)
    args = parser.parse_args()
    require_cuda_torch()
    gpu = torch.cuda.get_device_name(0)
    db = str(Path(tempfile.mkdtemp()) / "tune-model.db")
    theirs = phi3(args.layers)
    ours = autotune.patch(copy.deepcopy(theirs), db=db)
    prompt = torch.randint(0, 32064, (1, PROMPT), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    rows: list[dict[str, Any]] = []

    def point(stage: str, sweep_s: float | None, problems: int | None) -> None:
        ours_us, torch_us = step_us(ours, theirs, prompt)
        rows.append(
            {"stage": stage, "ours_gpu_us": ours_us, "torch_gpu_us": torch_us, "sweep_s": sweep_s, "problems": problems}
        )
        print(f"{stage:10} ours {ours_us:7.1f} us  torch {torch_us:7.1f} us  {torch_us / ours_us:.3f}x"
              f"  sweep {sweep_s or 0:.0f} s", flush=True)  # fmt: skip

    point("untuned", None, None)
    began = time.perf_counter()
    tuning = autotune.tune_model(ours, prompt, decode_steps=2, timeout=300, db=db)  # five minutes at most
    point("tune_model", time.perf_counter() - began, len(tuning.swept))
    began = time.perf_counter()
    decode = [choice.problem for choice in tuning.met]
    api.sweep_problems(decode, trials=64, patience=None, db=db)
    api.forget_choices()
    point("64 trials", time.perf_counter() - began, len(decode))
    report = {"gpu": gpu, "model": "phi-3-mini-widths", "layers": args.layers, "rows": rows,
              "met": [choice.to_dict() for choice in tuning.met]}  # fmt: skip
    path = write_json(report_path(args.out, "tune_model", gpu), report)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_tune_model")
