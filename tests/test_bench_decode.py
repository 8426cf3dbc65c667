"""scripts/bench_decode.py on the CPU: which rows a run measures, the int4 row's bytes, and an int4 row in
the decode table and in the README's host-cost figure (no torch, no GPU)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
if str(SCRIPTS) not in sys.path:  # the script imports the scripts beside it, as `python scripts/x.py` runs it
    sys.path.insert(0, str(SCRIPTS))
bench: Any = importlib.import_module("bench_decode")

# Llama-3-8B's projections at 8 layers, as the float16 llama-like row runs them.
LLAMA_SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]


def test_a_plain_run_measures_every_row_the_int4_one_last() -> None:
    assert bench.parse_args([]).models == ["llama-like", "narrow", "llama-like-int4"]
    assert bench.parse_args(["--models", "llama-like-int4"]).models == ["llama-like-int4"]


def test_an_unknown_row_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        bench.parse_args(["--models", "llama-like-int8"])
    assert refused.value.code == 2
    assert "llama-like-int4" in capsys.readouterr().err  # the choices are listed


def test_the_int4_row_runs_the_llama_like_step_in_groups_of_128() -> None:
    model, group = bench.INT4_MODELS["llama-like-int4"]
    assert (model, group) == ("llama-like", 128)
    assert bench.MODELS[model] == (8, LLAMA_SHAPES)


def test_int4_bytes_are_the_packed_codes_and_a_float16_scale_per_group() -> None:
    # 4096 x 4096: 8 MiB of codes (two a byte), 4096 rows of 32 groups of 2-byte scales.
    assert bench.int4_bytes(4096, 4096, 128) == 4096 * 2048 + 4096 * 32 * 2
    assert bench.int4_bytes(4096, 14336, 128) == 4096 * 7168 + 4096 * 112 * 2
    float16_bytes = 8 * sum(rows * cols * 2 for rows, cols in LLAMA_SHAPES)
    assert float16_bytes == 3489660928  # the float16 row's `bytes` in results/decode_nvidia-h200.json
    int4 = bench.int4_model_bytes("llama-like-int4")
    assert int4 == 8 * sum(rows * cols // 2 + rows * cols // 128 * 2 for rows, cols in LLAMA_SHAPES)
    assert int4 / float16_bytes == pytest.approx(0.25 * (1 + 4 / 128))  # a quarter, plus 1/32 for the scales


def _int4_row(**fields: Any) -> dict[str, Any]:
    times = {"floor_us": 200.0, "ours_eager_us": 400.0, "torch_eager_us": 1000.0}
    times |= {"ours_graph_us": 250.0, "torch_graph_us": 950.0}
    host = {"ours_host_us_per_call": 9.0, "torch_host_us_per_call": 15.0, "launch_floor_us": 4.8}
    calls = {"autotune.linear (int4)": 9.0, "torch": 15.0, "bare launch (ctypes)": 4.8}
    row = {"model": "llama-like-int4", "format": "int4", "group": 128, "sym": True, "calls": 32}
    return row | times | host | {"host_us_per_call": calls} | fields


def test_the_decode_table_shows_an_int4_row_and_its_graph_speedup() -> None:
    plot_decode = importlib.import_module("plot_decode")
    table = plot_decode.table({"gpu": "NVIDIA H200", "rows": [_int4_row()]})
    assert "| llama-like-int4 | 32 | 200 | 400 | 1000 | 250 | 950 | 3.80x |" in table


def test_the_readme_host_cost_counts_only_the_float16_rows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    docs_results = importlib.import_module("docs_results")
    float16_row = {"model": "llama-like", "host_us_per_call": {"ours": 6.5, "torch": 15.2}}
    report = {"gpu": "NVIDIA H200", "rows": [float16_row, _int4_row()]}
    (tmp_path / "decode_nvidia-h200.json").write_text(json.dumps(report))
    monkeypatch.setattr(docs_results, "RESULTS", tmp_path)
    # The int4 row's autotune.linear call (9.0 µs, no out=) would widen the span of calls with out=.
    assert docs_results.host_cost() == {"ours": "6.5-6.5", "torch": "15.2-15.2"}
