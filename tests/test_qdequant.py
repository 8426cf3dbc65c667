"""The int4 dequantization op (autotune/ops/qdequant, kernels/qdequant/dequant.cu) on the CPU: the
problem a call binds, its one-line refusals, launch geometry over every word of 8 codes, bytes, and
its configs and reference compiling for sm_90."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace

import pytest

from autotune import ops
from autotune.build.compiler import CompileJob
from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.gpu import driver
from autotune.ops import qdequant, source_hash
from autotune.ops.qgemm import VARIANTS
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice
from tests.nvcc import compile_all
from tests.test_launch import CudaArray
from tests.test_runtime import H200, FakeCuda, cuda  # noqa: F401


def _problem(dtype: str = "float16", m: int = 4096, n: int = 4096, variant: str = "g128") -> ops.Problem:
    return ops.make_problem("qdequant", dtype, m, n, variant=variant)


def _jobs(whole: bool = False) -> list[CompileJob]:
    """The default config in float16 g128 and in bfloat16 with zero points, and the reference; `whole`
    (under `-m arch`, about 2 s of nvcc an instance): every words-a-thread and load path in float16
    g128 (threads change only the launch bounds), each block size at the default, and each dtype and
    variant at the default."""
    default = qdequant.OP.default_config(_problem())
    problems = [(_problem(), default), (_problem("bfloat16", variant="g64a"), default)]
    if whole:
        configs = [c for c in qdequant.OP.space(_problem()) if c["threads"] == 256]
        configs += [dict(default, threads=t) for t in (128, 512)]
        problems += [(_problem(), dict(c)) for c in configs]
        problems += [(_problem(d, variant=v), default) for d in ("float16", "bfloat16") for v in VARIANTS]
    jobs = {}
    for problem, config in problems:
        job = CompileJob(
            qdequant.OP.kernel_name(problem, config),
            qdequant.OP.kernel_source(problem, config),
            "sm_90",
            source_hash(problem),
        )
        jobs[job.name] = job
    reference = kernels_dir() / qdequant.REFERENCE_FILE
    return [*jobs.values(), CompileJob("reference", reference.read_text(), "sm_90", "qdequant-reference")]


@pytest.mark.nvcc(jobs=_jobs)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_defaults_and_the_reference_compile_for_sm_90() -> None:
    results = compile_all(_jobs())
    assert all(r.cubin is not None and r.cubin.read_bytes()[:4] == b"\x7fELF" for r in results)
    reference = results[-1].cubin.read_bytes()
    for dtype in ("float16", "bfloat16"):
        for variant in VARIANTS:
            assert qdequant.OP.device_reference(_problem(dtype, variant=variant)).kernel.encode() in reference


def _whole_jobs() -> list[CompileJob]:
    return _jobs(whole=True)


@pytest.mark.arch  # every config of one shape: with the other architecture compiles, in .ci/run
@pytest.mark.nvcc(jobs=_whole_jobs)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_every_config_compiles_for_sm_90() -> None:
    compile_all(_whole_jobs())  # each a cubin holding its kernel, or the test fails with nvcc's message


def test_a_plain_problem_names_the_int4_format_and_its_inputs() -> None:
    problem = _problem()
    assert (problem.variant, problem.inputs) == ("g128", ("int4", "float16", "uint8"))
    assert qdequant.OP.input_fault(problem) is None


@pytest.mark.parametrize(
    ("problem", "said"),
    [
        (replace(_problem(), dtype="float32", inputs=("int4", "float32", "uint8")), "float16 or bfloat16"),
        (replace(_problem(), inputs=("int4", "bfloat16", "uint8")), "reads inputs int4,float16,uint8"),
        (replace(_problem(), variant="g16"), "needs a variant"),
        (replace(_problem(), n=4096 + 64), "not a multiple of the group size 128"),
    ],
)
def test_problems_the_kernel_cannot_run_are_refused_in_one_line(problem: ops.Problem, said: str) -> None:
    fault = qdequant.OP.input_fault(problem)
    assert fault is not None and said in fault and "\n" not in fault


@pytest.mark.parametrize("shape", [(1, 32), (7, 96), (28672, 4096), (3584, 18944)])
def test_the_grid_covers_every_word_of_8_codes_once(shape: tuple[int, int]) -> None:
    m, n = shape
    problem = _problem(m=m, n=n, variant="g32")
    words = m * n // qdequant.WORD
    configs = list(qdequant.OP.space(problem))
    assert len(configs) == 27
    for config in configs:
        launch = qdequant.OP.launch(problem, config, 132)
        per_block = config["threads"] * config["chunks"]
        assert launch.block == (config["threads"], 1, 1) and launch.shared_bytes == 0
        assert launch.grid[0] == math.ceil(words / per_block) and launch.grid[1:] == (1, 1)


def test_operands_and_bytes() -> None:
    problem = _problem(m=6, n=256, variant="g64a")
    operands = qdequant.OP.operands(problem)
    assert operands.inputs == (6 * 256, 6 * 4, 6 * 4) and operands.output == 6 * 256 and operands.sizes == (6, 256)
    # codes 768 bytes, 24 scales of 2 bytes, 24 zero points, the weight written in float16
    assert qdequant.OP.bytes_moved(problem) == 768 + 48 + 24 + 6 * 256 * 2
    assert qdequant.OP.bytes_moved(replace(problem, variant="g64")) == 768 + 48 + 6 * 256 * 2


def _array(shape: tuple[int, ...], dtype: str, pointer: int = 4096) -> DeviceArray:
    return DeviceArray(None, pointer, shape, None, dtype, "cai", 0)


def test_bind_makes_the_problem_from_the_arrays() -> None:
    qw, scales, zeros = _array((7, 128), "uint8"), _array((7, 8), "bfloat16"), _array((7, 8), "uint8")
    bound = qdequant.OP.bind([qw, scales, zeros], None, ())
    assert bound.problem == _problem("bfloat16", 7, 256, "g32a") and bound.out_shape == (7, 256)
    assert qdequant.OP.bind([qw, _array((7, 2), "float16"), None], None, ()).problem == _problem(m=7, n=256)


@pytest.mark.parametrize(
    ("arrays", "out", "said"),
    [
        ((("7,128", "int8"), ("7,8", "float16"), None), None, "qweight must be a contiguous uint8"),
        ((("7,128", "uint8"), ("7,8", "float32"), None), None, "scales must be float16 or bfloat16"),
        ((("7,128", "uint8"), ("6,8", "float16"), None), None, "scales must be"),
        ((("7,128", "uint8"), ("7,3", "float16"), None), None, "scales has 3 columns"),
        ((("7,128", "uint8"), ("7,8", "float16"), ("7,8", "float16")), None, "zeros must be"),
        ((("7,128", "uint8"), ("7,8", "float16"), None), ("7,256", "bfloat16"), "out must be a contiguous float16"),
    ],
)
def test_bind_refuses_arrays_not_in_the_format(
    arrays: tuple[tuple[str, str] | None, ...], out: tuple[str, str] | None, said: str
) -> None:
    def made(a: tuple[str, str] | None) -> DeviceArray | None:
        return None if a is None else _array(tuple(int(s) for s in a[0].split(",")), a[1])

    with pytest.raises(AutotuneError, match=said):
        qdequant.OP.bind([made(a) for a in arrays], made(out), ())


@pytest.mark.parametrize("zeros", [True, False])
def test_a_call_launches_the_arrays_in_the_kernels_order(
    cuda: FakeCuda,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    zeros: bool,
) -> None:
    """Runtime.call of the op against a double of the driver: qweight, scales, zeros (a null pointer
    when symmetric), out, then M, N, alpha and beta, as kernel_source declares them, on the op's grid."""
    monkeypatch.setattr(driver, "pointer_device", lambda pointer: 0)
    cuda.arg_types = qdequant.OP.arg_types
    rows, codes = 96, 256
    config = {"threads": 128, "chunks": 2, "policy": 1}
    runtime = Runtime(lambda problem, device, db: Choice(problem, H200.name, config, "measured"))
    qweight = CudaArray((rows, codes // 2), "|u1", pointer=1 << 24)
    scales = CudaArray((rows, codes // 64), pointer=2 << 24)
    zero_points = CudaArray((rows, codes // 64), "|u1", pointer=3 << 24) if zeros else None
    out = CudaArray((rows, codes), pointer=4 << 24)
    assert runtime.call(qdequant.OP, qweight, scales, zero_points, out=out, alpha=0.5, beta=2.0) is out
    (launch,) = cuda.launches
    assert launch.args[:8] == [1 << 24, 2 << 24, (3 << 24) if zeros else 0, 4 << 24, rows, codes, 0.5, 2.0]
    problem = _problem(m=rows, n=codes, variant="g64" if not zeros else "g64a")
    geometry = qdequant.OP.launch(problem, config, H200.sm_count)
    assert launch.grid == geometry.grid == (rows * codes // 8 // 256, 1, 1) and launch.block == (128, 1, 1)
    name = qdequant.OP.kernel_name(problem, config)
    declared = qdequant.OP.kernel_source(problem, config).split(f"{name}(", 1)[1].split(")", 1)[0]
    assert [p.split()[-1].lstrip("*") for p in declared.split(",")][:8] == [
        "qweight",
        "scales",
        "zeros",
        "out",
        "M",
        "N",
        "alpha",
        "beta",
    ]
