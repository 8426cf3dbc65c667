"""A transformers model's decode step captured into a CUDA graph, timed by CUDA events and by the
profiler's kernels: how scripts/bench_model.py and bench_tune_model.py set a patched model beside
torch's. Needs torch and transformers (the GPU machine); nothing in the package imports this module.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from autotune.bench.kernel_names import exclusive_split

# The prompt a step follows, the tokens generated after it (the static cache holds both), rounds of
# torch's and ours' step times taken in turns, and the graph replays per time sample.
PROMPT, NEW_TOKENS, ROUNDS, REPLAYS = 16, 64, 12, 20


def built_on_gpu(model_class: Any, config: Any) -> Any:
    """`model_class(config)` made on the GPU with random float16 weights (seeded), in eval mode."""
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float16)
    try:
        with torch.device("cuda"):
            model = model_class(config)
    finally:
        torch.set_default_dtype(torch.float32)
    return model.eval()


def static_cache(model: Any) -> Any:
    from transformers import StaticCache

    length = PROMPT + NEW_TOKENS + 1
    try:
        return StaticCache(config=model.config, max_cache_len=length, device="cuda", dtype=model.dtype)
    except TypeError:  # older transformers name the batch size
        return StaticCache(
            config=model.config, max_batch_size=1, max_cache_len=length, device="cuda", dtype=model.dtype
        )


def inductor_pdl() -> Any:
    """A context in which torch.compile makes its Triton kernels launch with programmatic dependent
    launch (Inductor's `triton.enable_pdl`): each waits for the kernel before it in the kernel, not at
    its launch, and lets the next one start early. Ours do both already, but behind a kernel that never
    lets its dependents start they begin only when it ends (docs/models.md)."""
    import torch._inductor.config as config

    if not hasattr(config.triton, "enable_pdl"):
        raise RuntimeError(f"torch {torch.__version__}'s Inductor has no triton.enable_pdl option")
    return config.patch({"triton.enable_pdl": True})


class DecodeGraph:
    """One decode step of `model` at position PROMPT, captured into a CUDA graph; `compiled` under
    torch.compile, with `pdl` its Triton kernels launched with programmatic dependent launch."""

    def __init__(self, model: Any, prompt: Any, compiled: bool, pdl: bool = False) -> None:
        self.cache = static_cache(model)
        with torch.no_grad():
            model(input_ids=prompt, past_key_values=self.cache, cache_position=torch.arange(PROMPT, device="cuda"))
        self.ids = prompt[:, -1:].clone()
        self.position = torch.tensor([PROMPT], device="cuda")
        # transformers 5's StaticCache counts the tokens it holds in a tensor per layer, which each step
        # advances: every replay starts by setting them back (one kernel, in both copies' graphs).
        counters = [
            value
            for layer in getattr(self.cache, "layers", [])
            for value in vars(layer).values()
            if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point()
        ]
        starts = [counter.clone() for counter in counters]
        self.kept = (counters, starts)  # the graph reads them: they must outlive this function

        def step() -> Any:
            if counters:
                torch._foreach_copy_(counters, starts)
            return model(input_ids=self.ids, past_key_values=self.cache, cache_position=self.position).logits

        run = torch.compile(step) if compiled else step
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        options = inductor_pdl if compiled and pdl else contextlib.nullcontext
        with options(), torch.no_grad(), torch.cuda.stream(stream):
            for _ in range(3):  # warm: selection, kernels, compilation, cuBLAS workspaces
                run()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with options(), torch.no_grad(), torch.cuda.graph(self.graph):
            self.logits = run()

    def time_us(self) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.graph.replay()
        start.record()
        for _ in range(REPLAYS):
            self.graph.replay()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e3 / REPLAYS

    def kernel_us(self) -> tuple[float | None, float | None]:
        """(all kernels, the products' kernels) in µs per replay, from torch.profiler's kernel events, each
        kernel counted for the time it runs alone (kernel_names.exclusive_split: our PDL launches start
        under the kernel before them); None where the profiler sees no kernel inside the graph."""
        from torch.profiler import ProfilerActivity, profile

        replays = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                self.graph.replay()
            torch.cuda.synchronize()
        total, linear = exclusive_split(kernel_spans(kernel_events(prof)))
        return (total / replays, linear / replays) if total else (None, None)


def kernel_events(prof: Any) -> list[Any]:
    """A torch.profiler run's kernels on the GPU, in the order it lists them (no copies, no sets)."""
    from torch.autograd import DeviceType

    return [
        event
        for event in prof.events()
        if event.device_type == DeviceType.CUDA and not event.name.startswith(("cudaGraph", "Memcpy", "Memset"))
    ]


def kernel_spans(events: list[Any]) -> list[tuple[str, float, float]]:
    """(name, start, end) on the GPU's clock of each kernel event (exclusive_split's input)."""
    return [(event.name, float(event.time_range.start), float(event.time_range.end)) for event in events]
