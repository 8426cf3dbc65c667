"""The read floor's plan on the CPU: which kernels it times, how it covers a buffer, and the bound it
reports beside cuBLAS (the timing itself runs in tests/test_gpu_floor.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune.bench.compare import BenchRow, ReadFloor, as_json, rows_of_report
from autotune.bench.harness import read_json
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.measure.floor import VARIANTS, WORD_BYTES, ReadKernel, words_for


def test_every_variant_is_a_kernel_of_the_source() -> None:
    source = (kernels_dir() / "measure/read_floor.cu").read_text()
    pairs = re.findall(r"^AT_READ_FLOOR\((\d+), (\d)\)", source, re.M)
    defined = {f"at_read_l{loads}_p{prefetch}" for loads, prefetch in pairs}
    assert {v.name for v in VARIANTS} == defined
    assert len(set(VARIANTS)) == len(VARIANTS) == 48


@pytest.mark.parametrize("nbytes", [1, 16, 17, 2**21, 3 * 2**20 + 48, 2004 * 2**20])
def test_the_grid_covers_every_word(nbytes: int) -> None:
    words = words_for(nbytes)
    assert words * WORD_BYTES >= nbytes > (words - 1) * WORD_BYTES
    for variant in VARIANTS:
        per_block = variant.threads * variant.loads
        assert variant.blocks(words) * per_block >= words > (variant.blocks(words) - 1) * per_block


def test_a_size_that_is_no_size_is_refused() -> None:
    with pytest.raises(AutotuneError, match="positive size"):
        words_for(0)


def test_variants_describe_themselves() -> None:
    assert ReadKernel(4, 256, 1).describe() == "256 threads x 4 loads, L2 prefetch of the block's chunk"
    assert ReadKernel(2, 512, 3).describe() == "512 threads x 2 loads, L2 prefetch of each thread's first 2 words"
    assert ReadKernel(1, 128, 0).describe() == "128 threads x 1 loads"


def _row(ours_us: float, cublas_us: float) -> BenchRow:
    return BenchRow("float16", 64, 64, ours_us, cublas_us, cublas_us / ours_us, 1.0, 1.0, 0.0, 0.0, "measured", {})


def test_the_bound_is_cublas_over_the_lesser_of_floor_and_ours() -> None:
    above_floor, below_floor = _row(10.0, 15.0), _row(4.0, 6.0)
    above_floor.set_floor(ReadFloor(8.0, "k"))
    below_floor.set_floor(ReadFloor(5.0, "k"))  # ours beat the read kernels: ours is the floor
    assert above_floor.bound == pytest.approx(15.0 / 8.0)
    assert below_floor.bound == pytest.approx(6.0 / 4.0)
    report = as_json("gpu", 1000.0, 1.0, [above_floor, below_floor])
    assert report["geomean_speedup"] == pytest.approx((1.5 * 1.5) ** 0.5)
    assert report["geomean_bound"] == pytest.approx((15.0 / 8.0 * 1.5) ** 0.5)
    assert report["rows"][0]["floor_us"] == 8.0


def test_no_bound_mean_unless_every_row_has_a_floor() -> None:
    with_floor, without = _row(10.0, 15.0), _row(4.0, 6.0)
    with_floor.set_floor(ReadFloor(8.0, "k"))
    assert "geomean_bound" not in as_json("gpu", 1000.0, 1.0, [with_floor, without])


def test_a_report_written_as_json_gives_back_its_rows() -> None:
    first, second = _row(10.0, 15.0), _row(4.0, 6.0)
    first.set_floor(ReadFloor(8.0, "k"))
    report = json.loads(json.dumps(as_json("NVIDIA H200", 1000.0, 1.0, [first, second])))
    assert rows_of_report(report, "NVIDIA H200") == [first, second]


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({"gpu": "NVIDIA H100", "rows": []}, "measured on 'NVIDIA H100'"),
        ([], "not a GEMV benchmark report"),
        ({"gpu": "NVIDIA H200", "rows": [{"dtype": "float16"}]}, "row 1 of the report"),
        ({"gpu": "NVIDIA H200", "rows": ["x"]}, "row 1 of the report"),
    ],
)
def test_a_report_of_another_gpu_or_shape_is_not_resumed(report: object, message: str) -> None:
    with pytest.raises(AutotuneError, match=re.escape(message)):
        rows_of_report(report, "NVIDIA H200")


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), (b"{bad", "is not JSON: Expecting"), (b"\xff\xfe", "is not JSON: not UTF-8 text")],
)
def test_a_report_that_cannot_be_read_back_is_refused_in_one_line(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "gemv_llm_nvidia-h200.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(AutotuneError, match=re.escape(message)):
        read_json(path)
    path.write_text('{"rows": []}')
    assert read_json(path) == {"rows": []}
