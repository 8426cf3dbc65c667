"""scripts/bench_lowbit.py on the CPU: its cases and arguments, the bytes a call must move, the (N, K) pairs,
and the goal figures of --summary on a hand-made report (no torch, no GPU)."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
if str(SCRIPTS) not in sys.path:  # the script imports the scripts beside it, as `python scripts/x.py` runs it
    sys.path.insert(0, str(SCRIPTS))
bench: Any = importlib.import_module("bench_lowbit")


def test_cases_parse_group_symmetry_and_dtype() -> None:
    assert bench.parse_case("g128:float16") == bench.Case(128, True, "float16")
    case = bench.parse_case("g32a:bfloat16")
    assert (case.group, case.sym, case.dtype, case.variant) == (32, False, "bfloat16", "g32a")


@pytest.mark.parametrize("text", ["g100:float16", "g128:float32", "128:float16", "g128", "ga:float16", "g128b:float16"])
def test_bad_cases_are_refused_with_the_accepted_form(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="g<group>"):
        bench.parse_case(text)


def test_bytes_count_packed_weight_scales_zeros_x_and_y() -> None:
    sym = bench.Case(128, True, "float16")
    # 4096 x 4096: 8 MiB of codes, 4096 * 32 scales of 2 bytes, x 2 * 4096, y 2 * 4096 (M = 1).
    assert bench.unique_bytes(1, 4096, 4096, sym) == 4096 * 2048 + 4096 * 32 * 2 + 2 * 4096 + 2 * 4096
    asym = bench.Case(32, False, "bfloat16")
    groups = 6144 * (4096 // 32)
    assert bench.unique_bytes(16, 6144, 4096, asym) == 6144 * 2048 + groups * 2 + groups + 16 * 4096 * 2 + 16 * 6144 * 2


def test_defaults_cover_the_records_cases_every_m_and_the_llm_pairs() -> None:
    args = bench.parse_args([])
    assert args.m == [1, 4, 8, 16, 32, 64]
    assert [c.variant + c.dtype for c in args.cases] == ["g128float16", "g128afloat16", "g128bfloat16"]
    pairs = bench.plan(args)
    assert len(pairs) == 8 and pairs[0] == (6144, 4096) and (3584, 18944) in pairs


def test_quick_cuts_shapes_and_m_and_options_override(tmp_path: Path) -> None:
    args = bench.parse_args(["--quick"])
    assert args.m == [1, 16] and len(bench.plan(args)) == 2
    assert {c.dtype for c in args.cases} == {"float16", "bfloat16"}
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("1 512 256\n4 512 256\n1 1024 256\n")
    args = bench.parse_args(["--shapes", str(shapes), "--m", "2", "--cases", "g64a:float16", "--gemlite", "off"])
    assert bench.plan(args) == [(512, 256), (1024, 256)]
    assert args.m == [2] and args.cases == [bench.Case(64, False, "float16")] and args.gemlite == "off"


def test_non_positive_m_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--m", "0"])
    assert exit_info.value.code == 2 and "--m" in capsys.readouterr().err


def row(m: int, n: int, k: int, ours: float, dtype: str = "float16", **peers: float | None) -> dict[str, Any]:
    """A report row of a g128 symmetric case with the times given (peer=us) and its true bytes."""
    bytes_moved = bench.unique_bytes(m, n, k, bench.Case(128, True, dtype))
    fields = {"group": 128, "sym": True, "dtype": dtype, "m": m, "n": n, "k": k, "ours_us": ours, "bytes": bytes_moved}
    return fields | {f"{peer}_us": us for peer, us in peers.items()}


def figures(report: dict[str, Any]) -> dict[str, float | None]:
    return {f.name: f.value for f in bench.goal_figures(report)}


def test_summary_takes_geometric_means_at_m1_and_the_worst_gemlite_shape() -> None:
    report = {
        "copy_gbs": 4000.0,
        "rows": [
            row(1, 4096, 4096, 10.0, torch_fp16=40.0, ours_fp16=30.0, gemlite=20.0),
            row(1, 28672, 4096, 40.0, torch_fp16=90.0, ours_fp16=120.0, gemlite=50.0),
            row(4, 4096, 4096, 10.0, torch_fp16=30.0),
            row(4, 28672, 4096, 40.0, torch_fp16=120.0),
            row(1, 4096, 4096, 10.0, dtype="bfloat16", tinygemm=25.0, torch_fp16=None),
        ],
    }
    got = figures(report)
    assert got["g128 float16 M=1 geomean speedup over torch_fp16"] == pytest.approx(math.sqrt(4.0 * 2.25))
    assert got["g128 float16 M=1 geomean speedup over ours_fp16"] == pytest.approx(3.0)
    assert got["g128 float16 M=1 geomean speedup over gemlite"] == pytest.approx(math.sqrt(2.0 * 1.25))
    assert got["g128 float16 M=1 worst speedup over gemlite"] == pytest.approx(1.25)
    assert got["g128 float16 M=4 geomean speedup over torch_fp16"] == pytest.approx(3.0)
    assert got["g128 float16 M=16 geomean speedup over torch_fp16"] is None  # no such rows
    assert got["g128 float16 M=1 geomean speedup over tinygemm"] is None  # float16 rows have none
    assert got["g128 bfloat16 M=1 geomean speedup over tinygemm"] == pytest.approx(2.5)
    assert got["g128 bfloat16 M=1 geomean speedup over torch_fp16"] is None  # a null time is left out


def test_the_large_batch_goal_is_the_worst_m_of_1024_rows_or_more() -> None:
    rows = [row(64, 4096, 4096, 10.0, torch_fp16=13.0)]  # below 1024 rows: not this goal's
    report = {"copy_gbs": 4000.0, "rows": rows}
    assert figures(report)["g128 float16 M>=1024 worst geomean speedup over torch_fp16"] is None
    rows += [row(1024, 4096, 4096, 100.0, torch_fp16=90.0), row(1024, 28672, 4096, 500.0, torch_fp16=360.0)]
    rows += [row(4096, 4096, 4096, 300.0, torch_fp16=285.0)]
    got = figures({"copy_gbs": 4000.0, "rows": rows})
    assert got["g128 float16 M>=1024 worst geomean speedup over torch_fp16"] == pytest.approx(math.sqrt(0.9 * 0.72))


def test_summary_holds_only_big_matrices_to_the_copy_bandwidth() -> None:
    big = row(1, 28672, 4096, 16.0)  # 56 MiB packed
    report = {"copy_gbs": 4000.0, "rows": [row(1, 4096, 4096, 100.0), big]}
    share = 100.0 * big["bytes"] / 16e3 / 4000.0
    got = figures(report)
    assert got["g128 float16 M=1 worst % of copy_gbs, >= 32 MiB packed"] == pytest.approx(share)
    assert 85 < share < 100  # the slow 4096 x 4096 row (32 MiB in float16, 8 MiB packed) does not count


def test_summary_lines_say_which_goals_are_met(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row(1, 4096, 4096, 10.0, torch_fp16=40.0) | {"notes": ["tinygemm: bfloat16 activations only"]}]
    report = {"gpu": "NVIDIA H200", "copy_gbs": 4000.0, "rows": rows}
    path = tmp_path / "lowbit_nvidia-h200.json"
    path.write_text(json.dumps(report))
    assert bench.main(["--summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "speedup over torch_fp16" in out and "4.000  (goal >= 3.2)  ok" in out
    assert "note: tinygemm: bfloat16 activations only" in out


@pytest.mark.parametrize("text", ["{", "[1, 2]", '{"rows": []}'])
def test_summary_of_a_damaged_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = tmp_path / "lowbit.json"
    path.write_text(text)
    assert bench.main(["--summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_lowbit: ") and err.count("\n") == 1


def test_a_run_without_torch_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    assert bench.main(["--quick", "--out", "/nonexistent"]) == 2
    assert capsys.readouterr().err == "bench_lowbit: needs torch with CUDA (the GPU machine)\n"


def test_merge_drops_the_rows_run_again_also_when_the_script_runs_as_main() -> None:
    """`python scripts/bench_lowbit.py --merge` parses its cases with __main__'s Case, while lowbit_runs
    imports bench_lowbit again, with a Case class of its own: the rows measured again must still go."""
    import runpy

    runs = importlib.import_module("lowbit_runs")
    main_case = runpy.run_path(str(SCRIPTS / "bench_lowbit.py"))["Case"]  # the class as __main__ defines it
    assert main_case is not bench.Case
    args = argparse.Namespace(cases=[main_case(128, True, "float16")], m=[64])
    row = {"group": 128, "sym": True, "dtype": "float16", "n": 4096, "k": 4096, "m": 64}
    assert runs.measured(args, [(4096, 4096)], row)
    assert not runs.measured(args, [(4096, 4096)], {**row, "m": 1})
    assert not runs.measured(args, [(4096, 4096)], {**row, "sym": False})


def test_gemlite_configs_are_loaded_and_each_shape_is_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gemlite config file from an earlier run is loaded, and a row says whether its shape's config came
    from it or from this run's autotune (gemlite keys a config by str((M, N, K, group, ...)))."""
    from types import SimpleNamespace

    runs = importlib.import_module("lowbit_runs")
    cache: dict[str, dict[str, Any]] = {}
    loaded: list[str] = []

    def load_config(path: str) -> bool:
        loaded.append(path)
        cache.update(json.loads(Path(path).read_text()))
        return True

    fake = SimpleNamespace(
        core=SimpleNamespace(GEMLITE_TRITON_CONFIG_CACHE=cache),
        reset_config=cache.clear,
        set_autotune_setting=lambda f: None,
        set_autotune=lambda mode, use_cuda_graph: None,
        load_config=load_config,
        __version__="0.6.0.post2",
    )
    configs = tmp_path / "gemlite.json"
    configs.write_text(json.dumps({"GEMV_REVSPLITK": {"(1, 6144, 4096, 128, 8, 0)": {"BLOCK_SIZE_N": 64}}}))
    monkeypatch.setitem(sys.modules, "gemlite", fake)
    gemlite, info = runs.setup_gemlite("max", configs)
    assert loaded == [str(configs)] and info["configs"] == "gemlite.json" and info["mode"] == "max"
    assert runs.gemlite_holds(gemlite, 1, 6144, 4096, 128)
    assert not runs.gemlite_holds(gemlite, 4, 6144, 4096, 128)
    assert not runs.gemlite_holds(gemlite, 1, 6144, 40960, 128)


def test_gemlite_configs_are_kept_for_its_most_thorough_mode_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    runs = importlib.import_module("lowbit_runs")
    fake = SimpleNamespace(
        reset_config=lambda: None,
        set_autotune_setting=lambda f: None,
        set_autotune=lambda mode, use_cuda_graph: None,
        __version__="0.6.0.post2",
    )
    monkeypatch.setitem(sys.modules, "gemlite", fake)
    with pytest.raises(runs.AutotuneError, match="max-mode configs only"):
        runs.setup_gemlite("fast", tmp_path / "gemlite.json")
