"""Every kernel family compiles with nvcc for sm_90 (no GPU needed), and the cubin cache is sound."""

from __future__ import annotations

import hashlib
import shutil
import struct
import threading
from pathlib import Path

import pytest

from autotune.build import compiler
from autotune.build.compiler import CompileJob, CompilePool, cache_key, compile_fixed, compile_kernel, compile_support
from autotune.core.dtypes import CUDA_TYPE
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem
from autotune.measure.floor import VARIANTS
from autotune.ops import gemv, source_hash
from tests.nvcc import compile_all, wait_for_background

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

# One config per family, spread over dtypes, vector widths, load policies, x in shared memory, rows
# per group (more rows than lanes included), 256 bytes of A in flight per thread, split-K reduced in a
# cluster, L2 prefetches of all three kinds and loads issued before the FMAs (order=1).
SAMPLE = [
    ("float32", dict(block=128, lanes=1, vec=1, unroll=1, rows=1, x_smem=0, policy=0)),
    ("float16", dict(block=256, lanes=1, vec=8, unroll=2, rows=2, x_smem=1, policy=1, order=1)),
    ("bfloat16", dict(block=64, lanes=4, vec=4, unroll=4, rows=2, x_smem=0, policy=2)),
    ("float32", dict(block=128, lanes=8, vec=4, unroll=2, rows=4, x_smem=1, policy=1, order=1)),
    ("float16", dict(block=256, lanes=16, vec=2, unroll=4, rows=1, x_smem=0, policy=0)),
    ("float16", dict(block=256, lanes=32, vec=8, unroll=2, rows=2, x_smem=0, policy=2, order=1)),
    ("bfloat16", dict(block=512, lanes=32, vec=8, unroll=4, rows=1, x_smem=1, policy=0)),
    ("float32", dict(block=256, lanes=64, vec=2, unroll=4, rows=4, x_smem=0, policy=2)),
    ("float16", dict(block=128, lanes=64, vec=8, unroll=8, rows=2, x_smem=0, policy=1, order=1)),
    ("float16", dict(block=512, lanes=128, vec=8, unroll=1, rows=4, x_smem=1, policy=1, order=1)),
    ("bfloat16", dict(block=256, lanes=256, vec=8, unroll=2, rows=1, x_smem=0, policy=0)),
    ("float32", dict(block=512, lanes=512, vec=1, unroll=4, rows=2, x_smem=1, policy=2)),
    ("float16", dict(block=64, lanes=64, vec=1, unroll=1, rows=1, x_smem=0, policy=1)),
    ("float16", dict(block=256, lanes=8, vec=8, unroll=1, rows=8, x_smem=0, policy=2)),
    ("bfloat16", dict(block=128, lanes=64, vec=8, unroll=2, rows=2, x_smem=0, policy=1, cluster=8, split=8, order=1)),
    ("float32", dict(block=256, lanes=32, vec=4, unroll=1, rows=8, x_smem=1, policy=1, cluster=4, split=4)),
    ("float16", dict(block=512, lanes=4, vec=8, unroll=1, rows=8, x_smem=0, policy=0, cluster=2, split=2)),
    ("bfloat16", dict(block=128, lanes=128, vec=8, unroll=4, rows=2, x_smem=0, policy=1, prefetch=1, order=1)),
    ("float32", dict(block=64, lanes=4, vec=4, unroll=1, rows=8, x_smem=0, policy=2, prefetch=1, cluster=4, split=4)),
    # Per-thread L2 prefetches of each row's first 1 or 2 vectors, with narrow and wide loads.
    ("float16", dict(block=128, lanes=128, vec=8, unroll=4, rows=2, x_smem=0, policy=1, prefetch=2, order=1)),
    ("bfloat16", dict(block=256, lanes=32, vec=2, unroll=2, rows=4, x_smem=1, policy=0, prefetch=3)),
    ("float32", dict(block=64, lanes=1, vec=1, unroll=1, rows=1, x_smem=0, policy=2, prefetch=3)),
]


def _job(dtype: str, compiled: dict[str, int]) -> CompileJob:
    problem = Problem("gemv", dtype, 4096, 8192)
    config = {"cluster": 1, "split": 1, "persist": 0, "prefetch": 0, "order": 0, **compiled}
    assert gemv.OP.space(problem).check(config) is None, config
    return CompileJob(
        gemv.OP.kernel_name(problem, config), gemv.OP.kernel_source(problem, config), "sm_90", source_hash(problem)
    )


# The README's run compiles each family once, with split-K in a cluster, x in shared memory, loads
# before the FMAs and each kind of L2 prefetch among them; the whole sample compiles under `-m arch`
# (about 2 s of nvcc a kernel).
DEFAULT_RUN = [SAMPLE[i] for i in (0, 4, 5, 9, 10, 14, 17, 19, 20)]


def _family_jobs(sample: list[tuple[str, dict[str, int]]] = DEFAULT_RUN) -> list[CompileJob]:
    return [_job(dtype, c) for dtype, c in sample]


def _sample_jobs() -> list[CompileJob]:
    return _family_jobs(SAMPLE)


def _fixed_job(file_name: str) -> CompileJob:
    """The job compile_fixed() builds for a kernels/ file of its own extern "C" kernels."""
    stem = Path(file_name).stem
    return CompileJob(stem, (kernels_dir() / file_name).read_text(), "sm_90", stem)


def _fixed_jobs() -> list[CompileJob]:
    return [_fixed_job("measure/support.cu"), _fixed_job("measure/read_floor.cu")]


# A kernel that compiles in well under a second, for the tests of the cache itself.
TINY = CompileJob("tiny", 'extern "C" __global__ void tiny(float* p) { p[threadIdx.x] = 1.0f; }\n', "sm_90", "t")


@pytest.mark.parametrize("sample", [SAMPLE, DEFAULT_RUN], ids=["sample", "default-run"])
def test_sample_covers_every_family(sample: list[tuple[str, dict[str, int]]]) -> None:
    families = {gemv.OP.family(Problem("gemv", d, 4096, 8192), c) for d, c in sample}
    assert families == {"thread_per_row", "subwarp_per_row", "warp_per_row", "multiwarp_per_row", "block_per_row"}
    assert {dtype for dtype, _ in sample} == {"float32", "float16", "bfloat16"}
    configs = [config for _, config in sample]
    assert any(c["x_smem"] for c in configs) and any(c.get("order") for c in configs)
    assert any(c.get("split", 1) > 1 for c in configs)
    assert {config.get("prefetch", 0) for _, config in sample} == {0, 1, 2, 3}


@pytest.mark.nvcc(jobs=_family_jobs)
def test_every_family_compiles_for_sm_90() -> None:
    for result in compile_all(_family_jobs()):
        assert result.cubin is not None and result.cubin.read_bytes()[:4] == b"\x7fELF"


@pytest.mark.arch  # the whole sample: with the other architecture compiles, in .ci/run
@pytest.mark.nvcc(jobs=_sample_jobs)
def test_the_whole_sample_compiles_for_sm_90() -> None:
    compile_all(_sample_jobs())  # each a cubin holding its kernel, or the test fails with nvcc's message


@pytest.mark.nvcc(jobs=_fixed_jobs)
def test_support_kernels_compile() -> None:
    wait_for_background()
    data = compile_support("sm_90").read_bytes()
    for name in ("at_spin", "at_fill_bfloat16", "at_reference_float16"):
        assert name.encode() in data


@pytest.mark.nvcc(jobs=_fixed_jobs)
def test_read_floor_kernels_compile() -> None:
    wait_for_background()
    data = compile_fixed("measure/read_floor.cu", "sm_90", "the read-floor kernels").read_bytes()
    for variant in VARIANTS:
        assert variant.name.encode() in data


def test_a_fixed_file_that_does_not_compile_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "broken.cu").write_text("this is not CUDA\n")
    monkeypatch.setattr(compiler, "kernels_dir", lambda: tmp_path)
    with pytest.raises(AutotuneError, match="cannot compile the broken kernels"):
        compile_fixed("broken.cu", "sm_90", "the broken kernels")


def test_cache_hit_and_key(tmp_path: Path) -> None:
    job = TINY
    first = compile_kernel(job, tmp_path)
    second = compile_kernel(job, tmp_path)
    assert first.ok and not first.cached and second.cached and second.cubin == first.cubin
    assert not list(tmp_path.rglob("*.tmp*"))  # atomic publish leaves no staging files
    other = CompileJob(job.name, job.source, "sm_80", job.depends_hash)
    assert cache_key(other) != cache_key(job)
    assert cache_key(CompileJob(job.name, job.source, job.arch, "changed")) != cache_key(job)
    assert cache_key(_job(*SAMPLE[5])) != cache_key(_job(*SAMPLE[6]))


def test_one_kernel_compiled_by_two_threads_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs that differ only in launch parameters share a cubin, so a pool can compile one kernel
    twice at the same time: both must publish it (a shared staging name once lost one copy)."""
    both_staged = threading.Barrier(2, timeout=60)
    real_stage = compiler._stage

    def stage_then_wait(data: bytes, folder: Path, key: str) -> str:
        staged = real_stage(data, folder, key)
        both_staged.wait()  # neither thread publishes before both have staged
        return staged

    monkeypatch.setattr(compiler, "_stage", stage_then_wait)
    job = TINY
    with CompilePool(workers=2, cache_dir=tmp_path) as pool:
        results = [future.result() for future in [pool.submit(job), pool.submit(job)]]
    assert all(r.ok and not r.cached for r in results)
    assert results[0].cubin == results[1].cubin and results[0].cubin is not None and results[0].cubin.is_file()
    assert not list(tmp_path.rglob("*.tmp*"))


def _text_section(cubin: bytes) -> tuple[int, int]:
    """(offset, size) of the kernel's code: the first section named .text.*."""
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    (names,) = struct.unpack_from("<Q", cubin, shoff + shstrndx * shentsize + 0x18)
    for index in range(shnum):
        header = shoff + index * shentsize
        (name_at,) = struct.unpack_from("<I", cubin, header)
        offset, size = struct.unpack_from("<QQ", cubin, header + 0x18)
        if cubin[names + name_at :].split(b"\0")[0].startswith(b".text."):
            return offset, size
    raise AssertionError("no .text section")


def test_a_cubin_damaged_inside_its_code_is_rebuilt_not_served(tmp_path: Path) -> None:
    first = compile_kernel(TINY, tmp_path)
    assert first.cubin is not None, first.message
    data = bytearray(first.cubin.read_bytes())
    offset, size = _text_section(bytes(data))
    damage = slice(offset + size // 4, offset + size // 4 + min(64, size // 2))
    data[damage] = b"\xff" * (damage.stop - damage.start)
    first.cubin.write_bytes(bytes(data))
    assert compiler.cubin_is_sound(first.cubin)  # the ELF is whole: only the digest sees the damage
    again = compile_kernel(TINY, tmp_path)
    assert again.ok and not again.cached and again.cubin == first.cubin
    assert first.cubin.read_bytes()[damage] != bytes(data[damage])
    assert compile_kernel(TINY, tmp_path).cached


def test_a_cubin_without_its_digest_is_rebuilt_once(tmp_path: Path) -> None:
    first = compile_kernel(TINY, tmp_path)
    assert first.cubin is not None, first.message
    compiler.digest_path(first.cubin).unlink()  # as an older autotune left its cache
    assert not compile_kernel(TINY, tmp_path).cached
    assert compiler.digest_path(first.cubin).is_file() and compile_kernel(TINY, tmp_path).cached


def test_a_cached_cubin_is_hashed_once_per_process_while_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cubin = compile_kernel(TINY, tmp_path).cubin
    assert cubin is not None
    compiler._CHECKED.clear()
    hashes: list[int] = []
    real = hashlib.sha256

    def counted(data: bytes = b"") -> hashlib._Hash:
        hashes.append(len(data))
        return real(data)

    monkeypatch.setattr(compiler.hashlib, "sha256", counted)
    assert compiler.cached_cubin_is_whole(cubin) and compiler.cached_cubin_is_whole(cubin)
    assert len(hashes) == 1
    data = bytearray(cubin.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cubin.write_bytes(bytes(data))  # changed in place: checked again, and refused
    assert not compiler.cached_cubin_is_whole(cubin) and len(hashes) == 2


def test_compile_error_keeps_the_command_line(tmp_path: Path) -> None:
    broken = CompileJob("broken", '#include "gemv.cu"\nthis is not cuda;\n', "sm_90", "x")
    result = compile_kernel(broken, tmp_path)
    assert not result.ok and result.cubin is None
    assert "nvcc" in result.message and "--cubin" in result.message and "error" in result.message


def _drill_jobs() -> list[CompileJob]:
    from scripts import fault_drill as drill

    jobs = []
    for fault in drill.FAULTS:
        name, source = (
            gemv.OP.kernel_name(drill.PROBLEM, fault.config),
            gemv.OP.kernel_source(drill.PROBLEM, fault.config),
        )
        faulty = fault.rewrite(source, CUDA_TYPE[drill.PROBLEM.dtype])
        assert faulty != source, fault.kind
        jobs.append(CompileJob(name, faulty, "sm_90", f"{source_hash(drill.PROBLEM)}:{fault.kind}"))
    return jobs


@pytest.mark.arch  # a compile of the fault drill's kernels: in .ci/run, beside the other compiles (time)
@pytest.mark.nvcc(jobs=_drill_jobs)
def test_every_planted_fault_of_the_drill_compiles() -> None:
    """The fault drill (scripts/fault_drill.py, GPU only) rewrites kernel sources: each rewrite must
    still compile, or the drill would record a compile error instead of the fault it plants."""
    compile_all(_drill_jobs())
