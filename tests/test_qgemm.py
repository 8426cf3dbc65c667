"""The int4 weight-only op on the CPU: its problem key (defaults, variants, one-line refusals), its space,
launch geometry and bytes, the Python call's checks through a fake device array, and a sample of its
instances (the wgmma kernel's for sm_90a) and its float64 reference compiled for sm_90."""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping

import pytest

from autotune import ops
from autotune.build.compiler import CompileJob
from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.target import targeting
from autotune.ops import qgemm, source_hash
from tests.nvcc import compile_all

# Configs spread over M tiles, lane groups, rows, pieces in flight, K split in clusters, load paths,
# occupancy hints, scales applied after the MMAs (group 128) and to each weight (groups 32 and 64).
SAMPLE: list[tuple[str, int, str, dict[str, int]]] = [
    (
        "float16",
        1,
        "g128",
        dict(mt=1, block=256, tiles=1, unroll=4, cluster=1, policy=1, min_blocks=1, persist=2, rpw=0, ring=2),
    ),
    (
        "bfloat16",
        16,
        "g32a",
        dict(mt=2, block=128, tiles=2, unroll=2, cluster=2, policy=2, min_blocks=2, persist=0, ring=2),
    ),
    (
        "float16",
        64,
        "g64a",
        dict(mt=8, block=64, tiles=1, unroll=1, cluster=8, policy=0, min_blocks=8, persist=0, ring=2),
    ),
    (
        "bfloat16",
        1,
        "g128",
        dict(mt=1, block=512, tiles=2, unroll=1, cluster=4, policy=1, min_blocks=1, persist=1, ring=2),
    ),
    (
        "float16",
        1,
        "g128a",
        dict(mt=1, block=256, tiles=1, unroll=1, cluster=1, policy=2, min_blocks=4, persist=0, rpw=0, ring=2),
    ),
    # rings of 3 and 4 register stages (one tile, persistent; two tiles, K split, zero points, bfloat16)
    (
        "float16",
        1,
        "g128",
        dict(mt=1, block=128, tiles=1, unroll=2, cluster=1, policy=2, min_blocks=1, persist=8, rpw=0, ring=3),
    ),
    (
        "bfloat16",
        16,
        "g64a",
        dict(mt=2, block=64, tiles=2, unroll=1, cluster=8, policy=1, min_blocks=2, persist=0, ring=4),
    ),
    # the CUDA-core GEMV (M = 1, float16): rows a warp, pieces in flight, each group size and zero points
    (
        "float16",
        1,
        "g128",
        dict(mt=1, block=256, tiles=1, unroll=2, cluster=1, policy=0, min_blocks=1, persist=0, rpw=4, ring=2),
    ),
    (
        "float16",
        1,
        "g32a",
        dict(mt=1, block=128, tiles=1, unroll=4, cluster=1, policy=0, min_blocks=2, persist=0, rpw=2, ring=2, chain=4),
    ),
    (
        "float16",
        1,
        "g64",
        dict(mt=1, block=512, tiles=1, unroll=1, cluster=1, policy=0, min_blocks=1, persist=0, rpw=8, ring=2),
    ),
    # the wgmma kernel (M > 16): n64 in clusters of 4, n32 in clusters of 2, n16 alone; every group size
    (
        "float16",
        64,
        "g128",
        dict(mt=8, block=256, tiles=1, unroll=1, cluster=4, policy=0, min_blocks=1, persist=1, ring=4, wgmma=1),
    ),
    (
        "bfloat16",
        33,
        "g32a",
        dict(mt=4, block=128, tiles=1, unroll=1, cluster=2, policy=0, min_blocks=1, persist=0, ring=2, wgmma=1),
    ),
    (
        "float16",
        24,
        "g64a",
        dict(mt=2, block=256, tiles=1, unroll=1, cluster=1, policy=0, min_blocks=1, persist=2, ring=3, wgmma=1),
    ),
]


# The default run compiles one instance of each kernel: the MMA one, the CUDA-core GEMV (two and four
# products a half), the wgmma one (the whole sample compiles under `-m arch`, in .ci/run: about 2 s of
# nvcc an instance).
DEFAULT_RUN = [SAMPLE[1], SAMPLE[7], SAMPLE[8], SAMPLE[12]]


def _jobs(sample: list[tuple[str, int, str, dict[str, int]]] = DEFAULT_RUN) -> list[CompileJob]:
    jobs = []
    for dtype, m, variant, config in sample:
        problem = ops.make_problem("qgemm", dtype, m, 4096, 4096, variant=variant)
        config = qgemm.OP.carried_over(problem, config)  # wgmma = 0 where the space has the switch
        assert qgemm.OP.space(problem).check(config) is None, config
        job = CompileJob(
            qgemm.OP.kernel_name(problem, config),
            qgemm.OP.kernel_source(problem, config),
            qgemm.OP.compile_arch(problem, "sm_90", config),
            source_hash(problem),
        )
        jobs.append(job)
    reference = kernels_dir() / qgemm.REFERENCE_FILE
    jobs.append(CompileJob("reference", reference.read_text(), "sm_90", "qgemm-reference"))
    return jobs


@pytest.mark.nvcc(jobs=_jobs)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_each_kernel_and_the_reference_compile_for_sm_90() -> None:
    results = compile_all(_jobs())
    assert all(r.cubin is not None and r.cubin.read_bytes()[:4] == b"\x7fELF" for r in results)
    assert b"at_qgemm_reference_bfloat16_g64a" in results[-1].cubin.read_bytes()


def _sample_jobs() -> list[CompileJob]:
    return _jobs(SAMPLE)


@pytest.mark.arch  # the whole sample: with the other architecture compiles, in .ci/run
@pytest.mark.nvcc(jobs=_sample_jobs)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_sample_of_instances_compiles_for_sm_90() -> None:
    compile_all(_sample_jobs())  # each a cubin holding its kernel, or the test fails with nvcc's message


def test_a_plain_problem_names_the_int4_format() -> None:
    problem = ops.make_problem("qgemm", "float16", 1, 4096, 4096)
    assert problem.variant == "g128" and problem.inputs == ("float16", "int4", "float16", "uint8")
    assert str(problem) == "hqgemm 1x4096x4096 [float16,int4,float16,uint8] g128"
    assert ops.resolve_op("bqgemm") == ("qgemm", "bfloat16")


@pytest.mark.parametrize(
    ("dtype", "m", "k", "variant", "said"),
    [
        ("float32", 1, 4096, "", "float16 or bfloat16 activations"),
        ("float16", 1, 4000, "g128", "not a multiple of the group size 128"),
        ("float16", 65, 4096, "g128", "M <= 64"),
        ("float16", 1, 4096, "g256", "unknown variant"),
    ],
)
def test_problems_the_kernels_cannot_run_are_refused_in_one_line(
    dtype: str, m: int, k: int, variant: str, said: str
) -> None:
    with pytest.raises(AutotuneError, match=said) as caught:
        ops.make_problem("qgemm", dtype, m, 4096, k, variant=variant)
    assert "\n" not in str(caught.value)


def test_every_standard_shape_has_a_valid_default_and_seeds() -> None:
    for m, n, k in ops.standard_shapes("qgemm"):
        for variant in qgemm.VARIANTS:
            for dtype in ("float16", "bfloat16"):
                problem = ops.make_problem("qgemm", dtype, m, n, k, variant=variant)
                space = qgemm.OP.space(problem)
                assert space.check(qgemm.OP.default_config(problem)) is None
                assert qgemm.OP.seed_configs(problem)
                assert all(space.check(seed) is None for seed in qgemm.OP.seed_configs(problem))


def test_the_cuda_core_gemv_is_in_the_space_of_one_float16_row_only() -> None:
    one = ops.make_problem("qgemm", "float16", 1, 4096, 14336)
    space = qgemm.OP.space(one)
    assert "rpw" in space.names and qgemm.OP.kernel_file(one) == qgemm.SIMT_FILE
    seeds = qgemm.OP.seed_configs(one)
    assert {s["rpw"] for s in seeds} >= {0, 2, 4, 8}  # both kernels measured first
    # the tensor-core kernel's parameters the GEMV does not read stay pinned: no config twice
    simt = {**qgemm.OP.default_config(one), "rpw": 4, "unroll": 2}
    assert space.check(simt) is None
    assert "cluster=2" in (space.check({**simt, "cluster": 2}) or "")
    assert "in flight" in (space.check({**simt, "rpw": 8, "unroll": 4}) or "")
    assert qgemm.OP.family(one, simt) == "qgemm_simt" and qgemm.OP.family(one, seeds[0]) == "qgemm"
    assert qgemm.OP.kernel_name(one, simt) != qgemm.OP.kernel_name(one, {**simt, "rpw": 2})
    for other in (
        ops.make_problem("qgemm", "float16", 4, 4096, 14336),
        ops.make_problem("qgemm", "bfloat16", 1, 4096, 14336),
    ):
        assert "rpw" not in qgemm.OP.space(other).names and qgemm.OP.kernel_file(other) == qgemm.KERNEL_FILE
        assert "chain" not in qgemm.OP.space(other).names
    # four products a half: the GEMV's alone, an instance of its own; a config stored before `chain` ran two
    assert {s["chain"] for s in seeds if s["rpw"]} == {2, 4} and {s["chain"] for s in seeds if not s["rpw"]} == {2}
    assert space.check({**simt, "chain": 4}) is None
    assert "CUDA-core" in (space.check({**qgemm.OP.default_config(one), "chain": 4}) or "")
    assert qgemm.OP.kernel_name(one, simt) != qgemm.OP.kernel_name(one, {**simt, "chain": 4})
    assert qgemm.OP.kernel_source(one, simt).count("gemv_body<128, 4, 2, 128, 1>") == 1
    assert qgemm.OP.kernel_source(one, {**simt, "chain": 4}).count("gemv_body<128, 4, 2, 128, 1, 4>") == 1
    before = {k: v for k, v in simt.items() if k != "chain"}
    assert qgemm.OP.stored_config(one, before) == simt and qgemm.OP.carried_over(one, before) == simt
    # a source edit of the GEMV stales the float16 M = 1 records only
    assert source_hash(one) != source_hash(ops.make_problem("qgemm", "float16", 4, 4096, 14336))


def test_the_wgmma_kernel_is_in_the_space_past_16_rows_on_hopper_only() -> None:
    problem = ops.make_problem("qgemm", "float16", 17, 4096, 14336)
    space = qgemm.OP.space(problem)
    assert "wgmma" in space.names and qgemm.OP.kernel_file(problem) == qgemm.WGMMA_FILE
    seeds = qgemm.OP.seed_configs(problem)
    assert {s["wgmma"] for s in seeds} == {0, 1}  # both kernels measured first
    assert qgemm.OP.default_config(problem)["wgmma"] == 0  # qgemm.cu: what every GPU runs
    wgmma = next(s for s in seeds if s["wgmma"])
    assert qgemm.OP.family(problem, wgmma) == "qgemm_wgmma" and qgemm.OP.family(problem, seeds[0]) == "qgemm"
    assert qgemm.OP.compile_arch(problem, "sm_90", wgmma) == "sm_90a"
    assert qgemm.OP.compile_arch(problem, "sm_90", seeds[0]) == "sm_90"
    # the mma kernel's parameters it does not read stay pinned, and its own choices are checked
    assert "tiles=2" in (space.check({**wgmma, "tiles": 2}) or "")
    assert "mt=1" in (space.check({**wgmma, "mt": 1}) or "")
    assert "block=512" in (space.check({**wgmma, "block": 512}) or "")
    assert "persist=4" in (space.check({**wgmma, "persist": 4}) or "")
    wide = ops.make_problem("qgemm", "float16", 64, 4096, 14336)
    refused = qgemm.OP.space(wide).check({**wgmma, "mt": 8, "cluster": 1})
    assert "shared memory" in (refused or "")  # x's 64 rows of 14336
    assert qgemm.OP.kernel_name(problem, wgmma) != qgemm.OP.kernel_name(problem, {**wgmma, "ring": 2})
    for other in (
        ops.make_problem("qgemm", "float16", 16, 4096, 14336),  # 16 rows: qgemm.cu was faster
        ops.make_problem("qgemm", "float16", 64, 4096, 4160, variant="g64"),  # K not in whole steps of 128
    ):
        assert "wgmma" not in qgemm.OP.space(other).names and qgemm.OP.kernel_file(other) == qgemm.KERNEL_FILE
    with targeting("8.0"):  # sm_90a cubins run on Hopper only
        assert "wgmma" not in qgemm.OP.space(problem).names and qgemm.OP.kernel_file(problem) == qgemm.KERNEL_FILE


def test_the_wgmma_kernel_geometry() -> None:
    problem = ops.make_problem("qgemm", "bfloat16", 40, 999, 1152, variant="g128a")
    config = {**qgemm.OP.default_config(problem), "wgmma": 1, "mt": 4, "block": 256, "cluster": 4, "ring": 3}
    assert qgemm.OP.space(problem).check({**config, "persist": 2}) is None
    # 8 tiles of 128 rows of W; 9 steps of K split 3, 3, 3, 0; x in slices of 32 rows
    assert qgemm.OP.launch(problem, config, 132).grid == (8, 4, 2)
    # one wave of clusters walking the tiles: 120 of 132 SMs (GPCs), or all of them
    assert qgemm.OP.launch(problem, {**config, "persist": 1}, 24).grid == (5, 4, 2)
    assert qgemm.OP.launch(problem, {**config, "persist": 2}, 24).grid == (6, 4, 2)
    assert qgemm.OP.launch(problem, {**config, "persist": 1}, 132).grid == (8, 4, 2)  # no more than tiles
    wide = ops.make_problem("qgemm", "float16", 64, 37888, 3584)
    assert qgemm.OP.launch(wide, {**config, "mt": 8, "persist": 1}, 132).grid == (30, 4, 1)
    launch = qgemm.OP.launch(problem, config, 132)
    assert launch.block == (256, 1, 1) and launch.workspace_floats == 0
    # x 32 x 384 halves, two buffers of 128 x 32 partial sums, three stages of 256 x 32 bytes, alignment
    assert launch.shared_bytes == 32 * 384 * 2 + 2 * 128 * 32 * 4 + 3 * 256 * 32 + 1024
    source = qgemm.OP.kernel_source(problem, config)
    assert "__cluster_dims__(1, 4, 1)" in source and "<__nv_bfloat16, 32, 2, 4, 3, 128, 0>(x," in source


def test_a_config_carried_over_gains_or_loses_the_wgmma_switch() -> None:
    wide = ops.make_problem("qgemm", "float16", 64, 4096, 4096)
    narrow = ops.make_problem("qgemm", "float16", 8, 4096, 4096)
    mma = {k: v for k, v in qgemm.OP.default_config(narrow).items()}
    assert qgemm.OP.carried_over(wide, mma) == {**mma, "wgmma": 0}
    assert qgemm.OP.carried_over(narrow, {**mma, "wgmma": 0}) == mma
    tensor = {**qgemm.OP.default_config(wide), "wgmma": 1, "mt": 8, "block": 256, "cluster": 4, "ring": 4}
    assert qgemm.OP.space(narrow).check(qgemm.OP.carried_over(narrow, tensor)) is not None  # refused, not run


def test_the_cuda_core_gemv_geometry() -> None:
    problem = ops.make_problem("qgemm", "float16", 1, 1001, 3584, variant="g32a")
    config = {**qgemm.OP.default_config(problem), "rpw": 2, "unroll": 4, "block": 256}
    launch = qgemm.OP.launch(problem, config, 132)
    assert launch.grid == (math.ceil(1001 / 16), 1, 1) and launch.block == (256, 1, 1)
    assert launch.shared_bytes == 2 * 3584 and launch.workspace_floats == 0


def test_geometry_and_bytes() -> None:
    problem = ops.make_problem("qgemm", "float16", 5, 1001, 3584, variant="g128a")
    config: Mapping[str, int] = dict(mt=1, block=256, tiles=2, unroll=2, cluster=2, policy=1, persist=0, ring=2)
    launch = qgemm.OP.launch(problem, config, 132)
    assert launch.grid == (1001 // 256 + 1, 2, 1) and launch.block == (256, 1, 1)
    # 5 rows of x, 112 pieces split in 2 (56, whole quads), 80 bytes a piece, rows 64 bytes off 128
    assert launch.shared_bytes == 5 * (4480 + 64)
    assert qgemm.OP.launch(problem, {**config, "persist": 1}, 2).grid == (2, 2, 1)
    groups = 1001 * 28
    assert qgemm.OP.bytes_moved(problem) == 1001 * 3584 // 2 + groups * 2 + groups + (5 * 3584 + 5 * 1001) * 2
    operands = qgemm.OP.operands(problem)
    assert operands.inputs == (5 * 3584, 1001 * 3584, groups, groups) and operands.sizes == (5, 1001, 3584)


def test_two_stages_keep_the_instance_text_of_the_records_before_rings() -> None:
    """ring 2 is qgemm_body's default RING: its instance names none, so the shipped records' cubins stay
    as they were (scripts/rehash_records.py compared them); rings of 3 and 4 name theirs."""
    problem = ops.make_problem("qgemm", "float16", 1, 4096, 4096, variant="g128")
    two = {**qgemm.OP.default_config(problem), "ring": 2}
    three = {**two, "ring": 3}
    assert qgemm.OP.kernel_name(problem, two).endswith("_o1")
    assert qgemm.OP.kernel_name(problem, three).endswith("_o1_r3")
    assert "128, 1, 1, 0>(x," in qgemm.OP.kernel_source(problem, two)  # GROUP, SYM, CLUSTER, POLICY
    assert "128, 1, 1, 0, 3>(x," in qgemm.OP.kernel_source(problem, three)
    space = qgemm.OP.space(problem)
    assert space.check({**three, "tiles": 2, "unroll": 2}) is not None  # 3 x 2 x 2 stage-steps > 8
    assert space.check({**three, "tiles": 2, "unroll": 1}) is None
    assert space.check({**three, "rpw": 2}) is not None  # the CUDA-core GEMV has no ring


def _array(shape: tuple[int, ...], dtype: str, pointer: int = 4096) -> DeviceArray:
    return DeviceArray(None, pointer, shape, None, dtype, "cai", 0)


def test_bind_makes_the_problem_from_the_arrays() -> None:
    x, qw, scales = _array((3, 256), "bfloat16"), _array((7, 128), "uint8"), _array((7, 8), "bfloat16")
    bound = qgemm.OP.bind([x, qw, scales, _array((7, 8), "uint8")], None, ())
    assert bound.problem == ops.make_problem("qgemm", "bfloat16", 3, 7, 256, variant="g32a")
    assert bound.out_shape == (3, 7)
    vector = qgemm.OP.bind([_array((256,), "bfloat16"), qw, scales, None], None, ())
    assert vector.problem.variant == "g32" and vector.out_shape == (7,)
    steps = qgemm.OP.bind([_array((2, 1, 256), "bfloat16"), qw, scales, None], None, ())
    assert (steps.problem.m, steps.out_shape) == (2, (2, 1, 7))


@pytest.mark.parametrize(
    ("arrays", "said"),
    [
        ((("3,256", "float32"), ("7,128", "uint8"), ("7,8", "float32"), None), "float16 or bfloat16"),
        ((("", "float16"), ("7,128", "uint8"), ("7,8", "float16"), None), "x must be a contiguous array"),
        ((("3,256", "float16"), ("7,100", "uint8"), ("7,8", "float16"), None), "K = 256 but qweight holds 200"),
        ((("3,256", "float16"), ("7,128", "uint8"), ("7,8", "bfloat16"), None), "scales must be a contiguous float16"),
        ((("3,256", "float16"), ("7,128", "uint8"), ("7,3", "float16"), None), "scales has 3 columns"),
        ((("3,256", "float16"), ("7,128", "uint8"), ("7,8", "float16"), ("7,8", "float16")), "zeros must be"),
    ],
)
def test_bind_refuses_arrays_not_in_the_format(arrays: tuple[tuple[str, str] | None, ...], said: str) -> None:
    made = [None if a is None else _array(tuple(int(s) for s in a[0].split(",") if s), a[1]) for a in arrays]
    with pytest.raises(AutotuneError, match=said):
        qgemm.OP.bind(made, None, ())


def test_an_untuned_kind_borrows_the_same_shapes_config_from_g128_then_the_other_dtype() -> None:
    """Nothing tuned in bfloat16 or in group 64: the selector hands them float16 g128's measured config
    of the same shape (the same kernels on the same bytes), and stops once their own kind is tuned."""
    from autotune.core.fingerprint import GpuInfo
    from autotune.core.outcome import Outcome, Status
    from autotune.select.choose import ESTIMATE, MEASURED, Selector
    from autotune.store import open_store
    from tests.fakes import record

    gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    half = ops.make_problem("qgemm", "float16", 1, 4096, 4096)
    config = qgemm.OP.seed_configs(half)[2]
    with open_store("sqlite://", import_shipped=False) as store:
        record(store, half, config, Outcome(Status.OK, time_us=8.0, times_us=[8.0]), gpu)
        for dtype, variant in (("bfloat16", "g128"), ("float16", "g64"), ("bfloat16", "g32")):
            problem = ops.make_problem("qgemm", dtype, 1, 4096, 4096, variant=variant)
            choice = Selector(store).choose(problem, gpu.name, None, None)
            carried = {k: v for k, v in config.items() if k in qgemm.OP.space(problem).names}  # rpw: f16 M = 1 only
            assert (choice.source, choice.config, choice.time_us) == (ESTIMATE, carried, 8.0), problem
            assert "float16" in choice.notes[-1] and "g128" in choice.notes[-1]
        asym = ops.make_problem("qgemm", "bfloat16", 1, 4096, 4096, variant="g128a")  # another mapping: no
        assert Selector(store).choose(asym, gpu.name, None, None).source != ESTIMATE
        brain = ops.make_problem("qgemm", "bfloat16", 1, 4096, 4096)
        own = qgemm.OP.seed_configs(brain)[0]
        record(store, ops.make_problem("qgemm", "bfloat16", 1, 8192, 4096), own, Outcome(Status.OK, time_us=9.0), gpu)
        choice = Selector(store).choose(brain, gpu.name, None, None)
        assert choice.config == own and choice.source != MEASURED  # its own kind's nearest shape now
