"""The LLM GEMV shape set (autotune/ops/gemv/llm_shapes.txt): open models' decode projections beyond the
standard set. That none is held out for scripts/bench_select.py's measurement of the selector, in any
dtype or layout, test_bench_select.py checks for every shapes file."""

from __future__ import annotations

import re

from autotune.core.problem import read_shapes_file
from autotune.ops import standard_shapes
from autotune.ops.gemv import LLM_SHAPES_FILE


def test_the_set_holds_eight_families_and_their_odd_widths_each_shape_once() -> None:
    shapes = read_shapes_file(LLM_SHAPES_FILE)
    assert len(shapes) == len(set(shapes)) >= 40
    families = set(re.findall(r"^\d+ \d+\s+# ([^:]+):", LLM_SHAPES_FILE.read_text(), re.M))
    assert len(families) >= 8, families
    widths = {n for _, n in shapes} | {m for m, _ in shapes}
    assert {13824, 27648, 10944, 29568, 18176} <= widths


def test_no_shape_is_in_the_standard_set() -> None:
    """The standard set keeps its own table and README headline."""
    assert not set(read_shapes_file(LLM_SHAPES_FILE)) & set(standard_shapes("gemv"))
