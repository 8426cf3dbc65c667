"""Which profiled kernels are a linear's product, by name: the decode-step benchmarks (decode_graph.py)
split a step's kernel time into the linears' and the rest with it. No torch here, so that the rule is
tested on any machine."""

from __future__ import annotations

import re

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
