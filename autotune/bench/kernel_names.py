"""Which profiled kernels are a linear's product, by name, and how much of a step each kernel's time is:
the decode-step benchmarks (decode_graph.py) split a step's kernel time into the linears' and the rest
with these. No torch here, so that the rules are tested on any machine."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Kernel names of products: ours (autotune's families), cuBLAS's and cuBLASLt's; not attention's, and
# not the pointwise, reduction, persistent-reduction and foreach kernels torch.compile's Inductor writes:
# it names them after the ops they fuse, so the norm that adds a low-bit linear's output to the residual
# is "triton_red_fused_..._qgemm_rsqrt_..." (counted as a linear, it put 6 us a layer of norms and
# activations into an int4 step's linears).
LINEAR_KERNELS = re.compile(r"gemv|gemm|qgemm|nvjet|cublas|cutlass|xmma|sm90_", re.IGNORECASE)
NOT_LINEAR = re.compile(r"flash|fmha|attention|softmax|elementwise|reduce|^triton_(?:poi|red|per|for)_", re.IGNORECASE)


def is_linear_kernel(name: str) -> bool:
    """Whether a profiled kernel is a product's (a linear's GEMV or GEMM), by its name."""
    return bool(LINEAR_KERNELS.search(name)) and not NOT_LINEAR.search(name)


def exclusive_split(kernels: Iterable[tuple[str, float, float]]) -> tuple[float, float]:
    """(all kernels, the linears' kernels): the time of the step each kernel takes alone, summed, from
    (name, start, end) on the GPU's clock. A kernel is given the time from the later of its start and the
    end of every kernel before it, to its end; so the two sums count each instant once.

    Why not the kernels' durations: a kernel launched with programmatic dependent launch (ours) starts
    while the kernel before it runs and waits for it, and its duration counts that wait. Unfused and
    compiled, an int4 decode step's gate projection ran 12.9 us and the up projection right behind it
    23.3 us: summed, the profiled kernels came to 3.04 ms of a 2.76 ms step."""
    times = exclusive_times(kernels)
    return sum(alone for _, alone in times), sum(alone for name, alone in times if is_linear_kernel(name))


def exclusive_times(kernels: Iterable[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """(name, the time it runs alone) of each kernel, in the order they start: from the later of its
    start and the end of every kernel before it, to its end (exclusive_split's terms)."""
    times = []
    busy_until = -float("inf")
    for name, start, end in sorted(kernels, key=lambda kernel: kernel[1]):
        times.append((name, max(0.0, end - max(start, busy_until))))
        busy_until = max(busy_until, end)
    return times
