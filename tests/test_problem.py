"""Op names, dtypes, sizes and shapes files: every bad input is one AutotuneError naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.problem import MAX_DIM, check_dim, parse_shapes, read_shapes_file
from autotune.ops import make_problem, resolve_op, standard_shapes


@pytest.mark.parametrize(
    ("op", "dtype", "expected"),
    [
        (None, None, ("gemv", "float16")),
        ("hgemv", None, ("gemv", "float16")),
        ("sgemv", None, ("gemv", "float32")),
        ("BGEMV", None, ("gemv", "bfloat16")),
        ("gemv", "bf16", ("gemv", "bfloat16")),
        ("gemv", "float32", ("gemv", "float32")),
        ("sgemv", "fp32", ("gemv", "float32")),
    ],
)
def test_resolve_op(op: str | None, dtype: str | None, expected: tuple[str, str]) -> None:
    assert resolve_op(op, dtype) == expected


@pytest.mark.parametrize(
    ("op", "dtype", "fragment"),
    [("gemm3", None, "unknown op"), ("gemv", "int8", "unknown dtype"), ("sgemv", "float16", "means dtype")],
)
def test_resolve_op_errors(op: str, dtype: str | None, fragment: str) -> None:
    with pytest.raises(AutotuneError, match=fragment):
        resolve_op(op, dtype)


@pytest.mark.parametrize("value", [0, -3, 1.5, "12", True, MAX_DIM + 1])
def test_bad_dims(value: object) -> None:
    with pytest.raises(AutotuneError, match="M"):
        check_dim("M", value)


def test_absurd_matrix_is_refused() -> None:
    with pytest.raises(AutotuneError, match="GiB"):
        make_problem("gemv", "float32", 2**20, 2**20)


def test_shapes_parsing_with_comments() -> None:
    assert parse_shapes("# header\n4096 8192  # note\n\n7 7\n", "f") == [(4096, 8192), (7, 7)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("4096\n", "line 1"),
        ("1 2\n3 x\n", "line 2"),
        ("1 2 3\n", "line 1"),
        ("0 5\n", "M must"),
        ("# only\n", "no shapes"),
    ],
)
def test_bad_shapes_files(text: str, fragment: str) -> None:
    with pytest.raises(AutotuneError, match=fragment):
        parse_shapes(text, "shapes.txt")


def test_missing_shapes_file(tmp_path: Path) -> None:
    with pytest.raises(AutotuneError, match="cannot read shapes file"):
        read_shapes_file(tmp_path / "nope.txt")


def test_standard_shapes_ship_with_the_package() -> None:
    shapes = standard_shapes()
    assert (4096, 8192) in shapes and (256, 131072) in shapes and (4096, 11008) in shapes and len(shapes) == 20


def test_the_llm_gemm_set_is_every_projection_at_every_batch() -> None:
    """Issue 30's coverage set: M in {2, 8, 32, 128, 4096} x the qkv, o, gate_up and down projections of
    Llama-3-8B and Qwen2-7B (N, K), each once, all valid GEMMs."""
    path = Path(__file__).resolve().parents[1] / "autotune" / "ops" / "gemm" / "llm_shapes.txt"
    shapes = read_shapes_file(path, ("M", "N", "K"))
    projections = {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)}
    projections |= {(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)}
    assert sorted(shapes) == sorted((m, n, k) for m in (2, 8, 32, 128, 4096) for n, k in projections)
    for m, n, k in shapes:
        make_problem("gemm", "bfloat16", m, n, k, trans=True)
