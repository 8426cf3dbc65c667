"""The decode-step benchmarks' split of a step's kernels into the linears' and the rest (by name)."""

from __future__ import annotations

import pytest

from autotune.bench.kernel_names import exclusive_split, exclusive_times, is_linear_kernel
from autotune.ops import for_problem, make_problem
from autotune.ops.q8gemm import call as q8_call
from autotune.ops.qgemm import call as q4_call

# Kernel names torch.profiler reported for a patched Llama's decode step on an H200, eager and compiled
# (C++ template arguments cut short).
PROFILED_LINEARS = [
    "qgemm_float16_g128_m1_b128_t1_u2_c1_p2_o1_r3",
    "qgemm_simt_float16_g128_b512_r1_u4_o1_h4",
    # the rotary embedding's float32 product (inverse frequencies by positions): a GEMM in both copies
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>"
    "(cutlass_80_simt_sgemm_128x32_8x5_tn_align1::Params)",
]
PROFILED_OTHERS = [
    # Inductor names its kernels after the ops they fuse, a low-bit linear's custom op among them.
    "triton_red_fused__to_copy_add_embedding_mean_mul_pow_qgemm_rsqrt_10",
    "triton_poi_fused_mul_qgemm_silu_slice_8",
    "triton_for_fused_0",
    "triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_arange_bmm_cat_clone",
    "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1_cga1x1x1_kernel0_0",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::Half>>",
]


def _our_kernel_names() -> list[str]:
    """Each family a patched model's linears run at M = 1, as its instances are named."""
    problems = [
        make_problem("gemv", "float16", 4096, 4096),
        make_problem("qgemm", "float16", 1, 4096, 4096, inputs=q4_call.input_dtypes("float16"), variant="g128"),
        make_problem(
            "q8gemm", "float16", 1, 4096, 4096, inputs=q8_call.input_dtypes("float16", "int8"), variant="int8"
        ),
    ]
    names = []
    for problem in problems:
        op = for_problem(problem)
        names += [op.kernel_name(problem, config) for config in op.seed_configs(problem)]
    return names


@pytest.mark.parametrize("name", PROFILED_LINEARS + _our_kernel_names())
def test_products_count_as_linears(name: str) -> None:
    assert is_linear_kernel(name)


@pytest.mark.parametrize("name", PROFILED_OTHERS)
def test_fused_norms_activations_and_attention_do_not(name: str) -> None:
    assert not is_linear_kernel(name)


def test_a_kernel_waiting_under_the_one_before_counts_from_its_end() -> None:
    # The int4 step's gate and up projections: the up kernel (PDL) starts 10 us into the gate's 12.9 us.
    qgemm, silu = "qgemm_float16_g128_m1_b128_t1_u2_c1_p2_o1_r3", "triton_poi_fused_mul_qgemm_silu_8"
    kernels = [(qgemm, 10.0, 33.3), (qgemm, 0.0, 12.9), (silu, 33.3, 34.4)]
    total, linear = exclusive_split(kernels)
    assert linear == pytest.approx(33.3)  # not 12.9 + 23.3
    assert total == pytest.approx(34.4)


def test_gaps_and_kernels_inside_another_add_nothing() -> None:
    kernels = [("gemv_a", 0.0, 5.0), ("elementwise_kernel", 1.0, 2.0), ("gemv_b", 8.0, 9.0)]
    total, linear = exclusive_split(kernels)
    assert (total, linear) == (pytest.approx(6.0), pytest.approx(6.0))
    assert exclusive_split([]) == (0.0, 0.0)
    # Each kernel's own share, in the order they start: the one inside gemv_a gets nothing.
    assert exclusive_times(kernels) == [("gemv_a", 5.0), ("elementwise_kernel", 0.0), ("gemv_b", 1.0)]
