"""The 8-bit weight-only op (autotune/ops/q8gemm): problems, space, geometry and the checks of a call,
and its kernel and reference compiling for sm_90 (GPU correctness: tests/test_gpu_q8gemm.py)."""

from __future__ import annotations

import shutil

import pytest

from autotune import ops
from autotune.build.compiler import CompileJob
from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.target import targeting
from autotune.ops import q8gemm, source_hash
from tests.nvcc import compile_all

OP = q8gemm.OP


def _jobs() -> list[CompileJob]:
    """The default, a K-split and a ring config of each kernel (seeds where there are) for an int8 GEMV in
    float16 and of skinny problems (fp8 in bfloat16, int8 in float16), and the reference (every seed
    compiles for sm_80 to sm_100 under `-m arch`: tests/test_architectures.py)."""
    jobs: dict[str, CompileJob] = {}
    for dtype, m, kind in (("float16", 1, "int8"), ("bfloat16", 16, "fp8"), ("float16", 40, "int8")):
        problem = ops.make_problem("q8gemm", dtype, m, 4096, 4096, variant=kind)
        configs = [*OP.seed_configs(problem), *OP.space(problem)]  # the seeds first
        split = [next(c for c in configs if c["ksplit"] > 1 and c["mma"] == mma and c["ring"] == 1) for mma in (0, 1)]
        rings = [next(c for c in configs if c["ring"] > 1 and c["ksplit"] > 1 and c["mma"] == mma) for mma in (0, 1)]
        for config in [OP.default_config(problem), *split, *rings]:
            name = OP.kernel_name(problem, config)
            jobs[name] = CompileJob(name, OP.kernel_source(problem, config), "sm_90", source_hash(problem))
    reference = kernels_dir() / q8gemm.REFERENCE_FILE
    jobs["reference"] = CompileJob("reference", reference.read_text(), "sm_90", "q8gemm-reference")
    return list(jobs.values())


@pytest.mark.nvcc(jobs=_jobs)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_defaults_seeds_and_reference_compile_for_sm_90() -> None:
    results = compile_all(_jobs())
    assert all(r.cubin is not None and r.cubin.read_bytes()[:4] == b"\x7fELF" for r in results)
    assert b"at_q8gemm_reference_bfloat16_fp8" in results[-1].cubin.read_bytes()
    names = [job.name for job in _jobs()]
    # a ring of each kernel a problem (the CUDA-core one of M = 40 is the instance of M = 1)
    assert sum("_g" in name for name in names) == 5
    # the tensor cores: a split and a ring a problem (past M = 1 the default is the split seed)
    assert sum(name.startswith("q8gemm_mma_") for name in names) == 6
    assert all(name.encode() in r.cubin.read_bytes() for name, r in zip(names[:-1], results, strict=False))


def test_a_plain_problem_names_int8_codes_and_fp8_is_a_variant() -> None:
    plain = ops.make_problem("q8gemm", "float16", 1, 4096, 4096)
    assert plain.variant == "int8" and plain.inputs == ("float16", "int8", "float16")
    assert str(plain) == "hq8gemm 1x4096x4096 [float16,int8,float16] int8"
    fp8 = ops.make_problem("q8gemm", "bfloat16", 4, 4096, 4096, variant="fp8")
    assert fp8.inputs == ("bfloat16", "fp8e4m3", "bfloat16")
    assert ops.resolve_op("bq8gemm") == ("q8gemm", "bfloat16")


@pytest.mark.parametrize(
    ("dtype", "m", "k", "variant", "said"),
    [
        ("float32", 1, 4096, "", "float16 or bfloat16 activations"),
        ("float16", 1, 4008, "int8", "K = 4008 is not a multiple of 16"),
        ("float16", 65, 4096, "int8", "M <= 64"),
        ("float16", 1, 4096, "int4", "unknown variant"),
    ],
)
def test_problems_the_kernels_cannot_run_are_refused_in_one_line(
    dtype: str, m: int, k: int, variant: str, said: str
) -> None:
    with pytest.raises(AutotuneError, match=said) as caught:
        ops.make_problem("q8gemm", dtype, m, 4096, k, variant=variant)
    assert "\n" not in str(caught.value)


def test_inputs_that_contradict_the_variant_are_refused() -> None:
    with pytest.raises(
        AutotuneError, match=r"q8gemm fp8 reads inputs float16,fp8e4m3,float16, not float16,int8,float16"
    ):
        ops.make_problem("q8gemm", "float16", 1, 4096, 4096, inputs=("float16", "int8", "float16"), variant="fp8")


@pytest.mark.parametrize(("capability", "runs"), [("8.0", False), ("8.6", False), ("8.9", True), ("9.0", True)])
def test_fp8_codes_need_ada_or_newer_and_int8_runs_everywhere(capability: str, runs: bool) -> None:
    with targeting(capability):
        ops.make_problem("q8gemm", "float16", 1, 4096, 4096, variant="int8")
        if runs:
            ops.make_problem("q8gemm", "float16", 1, 4096, 4096, variant="fp8")
        else:
            with pytest.raises(
                AutotuneError, match=rf"^fp8 weights need compute capability 8.9 or newer .*not {capability}$"
            ):
                ops.make_problem("q8gemm", "float16", 1, 4096, 4096, variant="fp8")


def test_every_standard_shape_has_a_valid_default_and_seeds() -> None:
    for shape in ops.standard_shapes("q8gemm"):
        for kind in q8gemm.call.KINDS:
            problem = ops.make_problem("q8gemm", "float16", *shape, variant=kind)
            space = OP.space(problem)
            configs = [OP.default_config(problem), *OP.seed_configs(problem)]
            assert len(configs) >= 5
            assert all(space.check(c) is None for c in configs)


def test_the_space_bounds_registers_and_rows_of_x() -> None:
    one = ops.make_problem("q8gemm", "float16", 1, 4096, 4096)
    assert OP.space(one).choices()["mt"] == (1, 8)  # 8: the tensor cores' tile of x
    simt_one = {**OP.default_config(one), "mt": 8}
    assert "one row of x" in (OP.space(one).check(simt_one) or "")
    three = ops.make_problem("q8gemm", "float16", 3, 4096, 4096)
    assert OP.space(three).choices()["mt"] == (1, 2, 4, 8)
    space = OP.space(ops.make_problem("q8gemm", "float16", 64, 4096, 4096))
    base = {"mt": 8, "block": 256, "rpw": 2, "unroll": 8, "policy": 1, "ksplit": 1, "mma": 0, "stage": 0, "ring": 1}
    base["stream"] = 0
    assert space.check(base) is None
    assert "in flight" in (space.check({**base, "rpw": 4}) or "")  # 4 x 8 pieces
    assert "sums" in (space.check({**base, "rpw": 4, "unroll": 2, "mt": 8}) or "")  # 4 x 8 sums > 16
    assert space.check({**base, "ksplit": 8}) is None
    assert "do not divide" in (space.check({**base, "block": 64, "ksplit": 4}) or "")  # 2 warps


def test_the_tensor_core_kernel_serves_every_m_in_its_own_tiles() -> None:
    one = ops.make_problem("q8gemm", "float16", 1, 4096, 4096)
    assert OP.space(one).choices()["mma"] == (0, 1) and OP.default_config(one)["mma"] == 0
    assert OP.kernel_file(one) == q8gemm.STREAM_FILE  # it includes the tensor-core kernel's file
    assert all(c["mma"] == 0 and c["ring"] == 1 for c in OP.seed_configs(one))  # faster at M = 1 (H200)
    assert any(c["ring"] > 1 for c in OP.seed_configs(ops.make_problem("q8gemm", "float16", 16, 4096, 14336)))
    twenty = ops.make_problem("q8gemm", "float16", 20, 4096, 4096)
    assert OP.kernel_file(twenty) == q8gemm.MMA_FILE  # it includes the CUDA-core kernel's file
    space = OP.space(twenty)
    assert space.choices()["mt"] == (1, 2, 4, 8, 16, 32) and space.choices()["mma"] == space.choices()["stage"]
    default = OP.default_config(twenty)
    assert default["mma"] == 1 and default["mt"] == 32 and space.check(default) is None
    assert any(c["mma"] == 0 for c in OP.seed_configs(twenty)) and any(c["mma"] for c in OP.seed_configs(twenty))
    assert "tensor-core kernel takes" in (space.check({**default, "rpw": 2}) or "")
    assert "CUDA-core kernel takes" in (space.check({**default, "mma": 0}) or "")  # rpw 16
    assert "tiles of W" in (space.check({**default, "rpw": 32, "unroll": 8}) or "")
    sixty = ops.make_problem("q8gemm", "float16", 64, 4096, 4096)
    big = {**OP.default_config(sixty), "rpw": 32, "unroll": 2, "ksplit": 2}  # 256 threads x 64 sums
    assert "shared memory" in (OP.space(sixty).check(big) or "")
    assert OP.space(sixty).check({**big, "ksplit": 1}) is None
    staged = {**big, "ksplit": 1, "stage": 1}  # 64 rows of x, 2 steps of 64 values: 17 KB
    assert OP.space(sixty).check(staged) is None
    assert "stage=1 with ksplit=1" in (OP.space(sixty).check({**staged, "ksplit": 2}) or "")
    assert "shared memory" in (OP.space(sixty).check({**staged, "rpw": 16, "unroll": 8}) or "")  # 66 KB
    assert "through L1" in (space.check({**default, "mma": 0, "rpw": 1, "mt": 8, "stage": 1}) or "")


def test_rings_rotate_stages_of_registers_in_both_kernels() -> None:
    problem = ops.make_problem("q8gemm", "float16", 1, 4096, 14336, variant="fp8")
    space = OP.space(problem)
    ring = {"mt": 8, "block": 256, "rpw": 16, "unroll": 2, "policy": 1, "ksplit": 2, "mma": 1, "stage": 0, "ring": 3}
    ring["stream"] = 0
    assert space.check(ring) is None
    assert OP.kernel_name(problem, ring) == "q8gemm_mma_float16_fp8_m8_b256_r16_u2_p1_k2_g3"
    assert "at_q8gemm::q8gemm_mma_ring<__half, 1, 1, 256, 1, 2, 1, 2, 3>" in OP.kernel_source(problem, ring)
    assert OP.launch(problem, ring, 132).grid == (4096 // 64, 1, 1)  # 4 row groups of 16 rows a block
    assert "tiles of W" in (space.check({**ring, "unroll": 4}) or "")  # 3 stages x 4 steps
    simt = {**ring, "mma": 0, "rpw": 2, "mt": 1, "unroll": 2, "ring": 4}
    assert space.check(simt) is None
    assert OP.kernel_name(problem, simt) == "q8gemm_float16_fp8_m1_b256_r2_u2_p1_k2_g4"
    assert "at_q8gemm::q8gemm_ring_body<__half, 1, 1, 256, 2, 2, 1, 2, 4>" in OP.kernel_source(problem, simt)
    assert "pieces (ring x rpw x unroll)" in (space.check({**simt, "unroll": 4}) or "")  # 4 x 2 x 4 > 16
    assert "ring=1" in (space.check({**ring, "stage": 1, "ksplit": 1}) or "")  # staged x: one stage
    one_stage = {**ring, "ring": 1}
    assert OP.kernel_name(problem, one_stage) == "q8gemm_mma_float16_fp8_m8_b256_r16_u2_p1_k2"  # as before rings
    assert "q8gemm_mma_body<__half, 1, 1, 256, 1, 2, 1, 2>" in OP.kernel_source(problem, one_stage)


def test_a_tensor_core_instance_names_its_tiles() -> None:
    problem = ops.make_problem("q8gemm", "float16", 20, 4096, 4096, variant="fp8")
    config = {"mt": 32, "block": 256, "rpw": 32, "unroll": 2, "policy": 1, "ksplit": 4, "mma": 1, "stage": 0, "ring": 1}
    source = OP.kernel_source(problem, config)
    assert OP.kernel_name(problem, config) == "q8gemm_mma_float16_fp8_m32_b256_r32_u2_p1_k4"
    assert "at_q8gemm::q8gemm_mma_body<__half, 1, 4, 256, 2, 2, 1, 4>" in source  # 4 tiles of x, 2 of W
    assert f'#include "{q8gemm.MMA_FILE}"' in source
    launch = OP.launch(problem, config, 132)
    assert launch.grid == (4096 // 64, 1, 1)  # 2 row groups of 32 rows a block; M in one pass
    assert OP.family(problem, config) == "q8gemm_mma" and OP.family(problem, {**config, "mma": 0}) == "q8gemm"
    staged = {**config, "ksplit": 1, "stage": 1}
    assert OP.kernel_name(problem, staged) == "q8gemm_mma_float16_fp8_m32_b256_r32_u2_p1_k1_s"
    assert "at_q8gemm::q8gemm_mma_staged<__half, 1, 4, 256, 2, 2, 1>" in OP.kernel_source(problem, staged)


def test_configs_stored_before_the_tensor_cores_joined_m_1_and_before_rings_keep_their_kernels() -> None:
    one = ops.make_problem("q8gemm", "float16", 1, 4096, 4096)
    eight = ops.make_problem("q8gemm", "float16", 8, 4096, 4096)
    simt = {"mt": 1, "block": 128, "rpw": 1, "unroll": 1, "policy": 1, "ksplit": 2}  # M = 1's keys before
    before = {"mma": 0, "stage": 0, "ring": 1, "stream": 0}
    assert OP.stored_config(one, simt) == {**simt, **before}
    assert OP.carried_over(eight, simt) == {**simt, **before}
    mma = {"mt": 8, "block": 256, "rpw": 16, "unroll": 4, "policy": 1, "ksplit": 4, "mma": 1, "stage": 0}
    assert OP.stored_config(eight, mma) == {**mma, "ring": 1, "stream": 0}
    assert OP.space(one).check(OP.carried_over(one, mma)) is None  # the tensor cores run M = 1 too
    mma = {**mma, "ring": 1, "stream": 0}
    sixty = ops.make_problem("q8gemm", "float16", 64, 4096, 4096)
    assert OP.tiling_for(eight, sixty, mma) == {**mma, "mt": 64}  # every row of x in one pass there too
    assert OP.tiling_for(sixty, eight, {**mma, "mt": 16}) == {**mma, "mt": 16}  # tuned in passes


def test_the_streaming_gemv_runs_m_1_on_the_cuda_core_tilings() -> None:
    one = ops.make_problem("q8gemm", "bfloat16", 1, 3584, 18944, variant="fp8")
    space = OP.space(one)
    seeds = OP.seed_configs(one)
    assert seeds[0]["stream"] == 1 and any(c["stream"] == 0 for c in seeds)  # the streaming GEMV first
    stream = {"mt": 1, "block": 128, "rpw": 2, "unroll": 4, "policy": 1, "ksplit": 4, "mma": 0, "stage": 0, "ring": 1}
    stream["stream"] = 1
    assert space.check(stream) is None
    assert OP.kernel_name(one, stream) == "q8gemv_bfloat16_fp8_m1_b128_r2_u4_p1_k4"
    assert OP.family(one, stream) == "q8gemv" and OP.family(one, {**stream, "stream": 0}) == "q8gemm"
    source = OP.kernel_source(one, stream)
    assert f'#include "{q8gemm.STREAM_FILE}"' in source
    assert "at_q8gemm::q8gemv_body<__nv_bfloat16, 1, 128, 2, 4, 1, 4>(x, qweight, scales, out, N, K," in source
    assert OP.launch(one, stream, 132).grid == (3584 // 2, 1, 1)  # a row group of 4 warps a block, 2 rows
    assert "16-byte vectors" in (space.check({**stream, "rpw": 4, "unroll": 4}) or "")  # (4 + 2) x 4 > 16
    assert "one row of x" in (space.check({**stream, "ring": 2}) or "")
    four = ops.make_problem("q8gemm", "bfloat16", 4, 3584, 18944, variant="fp8")
    assert "runs M = 1" in (OP.space(four).check({**stream, "mt": 4}) or "")
    assert OP.tiling_for(one, four, stream) == {**stream, "stream": 0, "mt": 4}  # the CUDA-core kernel there


def test_geometry_and_bytes() -> None:
    problem = ops.make_problem("q8gemm", "bfloat16", 5, 1000, 4096, variant="fp8")
    simt = {"mt": 2, "block": 128, "rpw": 2, "unroll": 4, "policy": 0, "ksplit": 1, "mma": 0, "stage": 0, "ring": 1}
    launch = OP.launch(problem, simt, 132)
    assert launch.grid == (125, 3, 1) and launch.block == (128, 1, 1)  # 8 rows a block; M in tiles of 2
    split = OP.launch(problem, {**simt, "ksplit": 2}, 132)
    assert split.grid == (250, 3, 1)  # two warps a row group: 4 rows a block
    assert launch.shared_bytes == 0
    assert OP.bytes_moved(problem) == 1000 * 4096 + 1000 * 2 + (5 * 4096 + 5 * 1000) * 2
    assert OP.operands(problem).inputs == (5 * 4096, 1000 * 4096, 1000)
    assert OP.flops(problem) == 2 * 5 * 1000 * 4096


def test_the_instance_calls_the_body_with_the_kind_and_tiling() -> None:
    problem = ops.make_problem("q8gemm", "bfloat16", 2, 4096, 4096, variant="fp8")
    config = {"mt": 2, "block": 64, "rpw": 4, "unroll": 2, "policy": 2, "ksplit": 2, "mma": 0, "stage": 0, "ring": 1}
    source = OP.kernel_source(problem, config)
    assert OP.kernel_name(problem, config) == "q8gemm_bfloat16_fp8_m2_b64_r4_u2_p2_k2"
    assert "at_q8gemm::q8gemm_body<__nv_bfloat16, 1, 2, 64, 4, 2, 2, 2>" in source
    assert "__launch_bounds__(64)" in source


def _array(shape: tuple[int, ...], dtype: str, pointer: int = 4096) -> DeviceArray:
    return DeviceArray(None, pointer, shape, None, dtype, "cai", 0)


def test_bind_makes_the_problem_from_the_arrays_and_the_kind() -> None:
    x, qw, scales = _array((3, 256), "bfloat16"), _array((7, 256), "uint8"), _array((7,), "bfloat16")
    bound = OP.bind([x, qw, scales], None, ())
    assert bound.problem == ops.make_problem("q8gemm", "bfloat16", 3, 7, 256, variant="int8")
    assert bound.out_shape == (3, 7)
    fp8 = OP.bind([_array((256,), "bfloat16"), qw, scales], None, ("fp8",))
    assert fp8.problem.variant == "fp8" and fp8.problem.inputs[1] == "fp8e4m3" and fp8.out_shape == (7,)
    steps = OP.bind([_array((2, 1, 256), "bfloat16"), qw, scales], None, ("int8",))
    assert (steps.problem.m, steps.out_shape) == (2, (2, 1, 7))


@pytest.mark.parametrize(
    ("arrays", "options", "said"),
    [
        ((("3,256", "float32"), ("7,256", "uint8"), ("7", "float32")), (), "float16 or bfloat16"),
        ((("", "float16"), ("7,256", "uint8"), ("7", "float16")), (), "x must be a contiguous array"),
        ((("3,256", "float16"), ("7,128", "uint8"), ("7", "float16")), (), "K = 256 but qweight holds 128"),
        ((("3,256", "float16"), ("7,256", "int8"), ("7", "float16")), (), "qweight must be a contiguous uint8"),
        ((("3,256", "float16"), ("7,256", "uint8"), ("7", "bfloat16")), (), "scales must be a contiguous float16"),
        ((("3,256", "float16"), ("7,256", "uint8"), ("7,1", "float16")), (), r"vector \(7,\)"),
        ((("3,256", "float16"), ("7,256", "uint8"), ("7", "float16")), ("int4",), "options are"),
    ],
)
def test_bind_refuses_arrays_not_in_the_format(
    arrays: tuple[tuple[str, str], ...], options: tuple[str, ...], said: str
) -> None:
    made = [_array(tuple(int(s) for s in a[0].split(",") if s), a[1]) for a in arrays]
    with pytest.raises(AutotuneError, match=said) as caught:
        OP.bind(made, None, options)
    assert "\n" not in str(caught.value)


def test_an_untuned_kind_borrows_the_other_codes_then_the_other_dtype() -> None:
    problem = ops.make_problem("q8gemm", "float16", 1, 4096, 4096, variant="fp8")
    found = [(p.dtype, p.variant) for p in OP.estimate_from(problem)]
    assert found == [("float16", "int8"), ("bfloat16", "fp8"), ("bfloat16", "int8")]


def test_a_config_tuned_at_one_row_carries_to_more_rows_in_one_pass_and_rereads_are_counted() -> None:
    one = ops.make_problem("q8gemm", "float16", 1, 4096, 4096)
    four = ops.make_problem("q8gemm", "float16", 4, 4096, 4096)
    tuned = {"mt": 1, "block": 128, "rpw": 1, "unroll": 1, "policy": 1, "ksplit": 2, "mma": 0, "stage": 0, "ring": 1}
    assert OP.tiling_for(one, four, tuned) == {**tuned, "mt": 4}
    sixteen = ops.make_problem("q8gemm", "float16", 16, 4096, 4096)
    assert OP.tiling_for(sixteen, four, {**tuned, "mt": 2}) == {**tuned, "mt": 2}  # tiled in passes there too
    assert OP.bytes_streamed(four, {**tuned, "mt": 4}) == OP.bytes_moved(four)
    assert OP.bytes_streamed(four, tuned) == OP.bytes_moved(four) + 3 * 4096 * 4096


def test_registers_estimate_ptxas_and_let_the_waves_rule_see_a_second_wave() -> None:
    """ptxas -v for sm_90 (the H200 records' instances): 144 registers for the M = 64 tensor-core tiling
    below, 48 for a 2-step one of 8 rows of x, 64 for a 2-row CUDA-core stream of 2 pieces, 79 for the
    CUDA-core kernel's 4 rows of 1 piece. At 144 one 256-thread block fits an SM, so 4608 rows (144
    blocks) take two waves where 4096 (128 blocks) take one."""
    from autotune.select import grid

    fp8 = ops.make_problem("q8gemm", "float16", 64, 4608, 3584, variant="fp8")
    base = {**q8gemm.OP.default_config(fp8), "stream": 0}
    wide = {**base, "mt": 64, "block": 256, "rpw": 16, "unroll": 4, "ring": 1, "ksplit": 4, "mma": 1, "stage": 0}
    narrow = {**wide, "mt": 8, "unroll": 2, "ksplit": 8}
    one_row = ops.make_problem("q8gemm", "float16", 1, 3584, 18944, variant="int8")
    stream = {**q8gemm.OP.default_config(one_row), "stream": 1, "block": 128, "rpw": 2, "unroll": 2, "ksplit": 1}
    simt = {**q8gemm.OP.default_config(one_row), "block": 256, "rpw": 4, "unroll": 1, "ksplit": 4}
    for problem, config, ptxas in ((fp8, wide, 144), (fp8, narrow, 48), (one_row, stream, 64), (one_row, simt, 79)):
        assert q8gemm.OP.space(problem).check(config) is None, config
        assert abs(q8gemm.OP.registers(problem, config) - ptxas) <= 28, (config, ptxas)
    assert grid.waves(fp8, wide, 132) == 2
    assert grid.waves(ops.make_problem("q8gemm", "float16", 64, 4096, 4096, variant="fp8"), wide, 132) == 1
