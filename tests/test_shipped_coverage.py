"""What the shipped records cover (issue 30): the LLM GEMM set (autotune/ops/gemm/llm_shapes.txt, B
stored N x K) tuned on the H200 and the H100 in three dtypes, the edge shapes (autotune/ops/*/
edge_shapes.txt) on the H200 in three dtypes and both layouts, and cuBLASLt timed on every shipped
problem of both cards, so the selector can set it against our kernels everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.ops.cublas.mapping import OPS as VENDOR_OPS

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "db" / "records"
LLM_SHAPES = ROOT / "autotune" / "ops" / "gemm" / "llm_shapes.txt"
EDGE_SHAPES = {op: ROOT / "autotune" / "ops" / op / "edge_shapes.txt" for op in ("gemv", "gemm")}
DTYPES = ("float16", "bfloat16", "float32")
CARDS = {"nvidia-h200": DTYPES, "nvidia-h100-80gb-hbm3": DTYPES}

Key = tuple[str, str, int, int, int, bool]


def _trials(slug: str) -> tuple[dict[Key, int], set[Key]]:
    """(our trials per problem, the problems with a cuBLASLt trial) of one card's records files."""
    ours: dict[Key, int] = {}
    vendor: set[Key] = set()
    for path in sorted(RECORDS.glob(f"{slug}*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("kind") != "trial":
                continue
            key = (row["op"], row["dtype"], row["m"], row["n"], row["k"], bool(row["trans"]))
            if row["source_hash"].startswith("cublasLt-"):
                vendor.add(key)
            else:
                ours[key] = ours.get(key, 0) + 1
    return ours, vendor


def _shapes(path: Path) -> list[tuple[int, ...]]:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [tuple(int(size) for size in row) for row in rows]


def _llm_shapes() -> list[tuple[int, int, int]]:
    return [(m, n, k) for m, n, k in _shapes(LLM_SHAPES)]


def test_the_llm_set_lists_five_batch_sizes_of_eight_projections() -> None:
    shapes = _llm_shapes()
    assert len(shapes) == len(set(shapes)) == 40
    assert sorted({m for m, _, _ in shapes}) == [2, 8, 32, 128, 4096]


@pytest.mark.parametrize("slug", sorted(CARDS))
def test_the_llm_set_is_tuned_and_cublas_timed_on_each_card(slug: str) -> None:
    ours, vendor = _trials(slug)
    missing = [
        (dtype, shape)
        for dtype in CARDS[slug]
        for shape in _llm_shapes()
        if ours.get(("gemm", dtype, *shape, True), 0) < 3 or ("gemm", dtype, *shape, True) not in vendor
    ]
    assert not missing, f"{slug}: {len(missing)} LLM problems without 3 trials of ours and cuBLASLt's: {missing[:4]}"


@pytest.mark.parametrize("slug", sorted(CARDS))
def test_cublas_is_timed_on_every_shipped_problem(slug: str) -> None:
    """Every problem of an op cuBLASLt computes (GEMV and GEMM: not the int4 op, which it has no kernel for)."""
    ours, vendor = _trials(slug)
    assert ours, f"no records for {slug}"
    assert sorted(key for key in set(ours) - vendor if key[0] in VENDOR_OPS) == []


def test_the_edge_shapes_are_tuned_on_the_h200_both_ways_in_three_dtypes() -> None:
    ours, _ = _trials("nvidia-h200")
    wanted: list[Key] = [
        (op, dtype, shape[0], shape[1], shape[2] if op == "gemm" else 0, trans)
        for op, path in EDGE_SHAPES.items()
        for shape in _shapes(path)
        for dtype in DTYPES
        for trans in (False, True)
    ]
    assert len(wanted) == 6 * (22 + 12)
    missing = [key for key in wanted if ours.get(key, 0) < 1]
    assert not missing, f"{len(missing)} edge problems without a trial of ours: {missing[:4]}"
