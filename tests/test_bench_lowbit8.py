"""scripts/bench_lowbit8.py on the CPU: its plan, arguments, byte count and goal figures, and a row's fields
from fakes of torch, the clock and gemlite (the real runs need the GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_lowbit8  # noqa: E402
import lowbit_runs  # noqa: E402


def _row(
    kind: str, n: int, k: int, ours: float, ours_fp16: float, torch_fp16: float, gemlite: float | None = None
) -> dict[str, Any]:
    return {
        "format": kind,
        "dtype": "float16",
        "m": 1,
        "n": n,
        "k": k,
        "ours_us": ours,
        "ours_fp16_us": ours_fp16,
        "torch_fp16_us": torch_fp16,
        "gemlite_us": gemlite,
        "bytes": bench_lowbit8.unique_bytes(1, n, k),
    }


def test_the_plan_is_the_ops_eight_pairs_and_the_bytes_are_a_byte_a_weight() -> None:
    assert bench_lowbit8.pairs()[:2] == [(6144, 4096), (4096, 4096)] and len(bench_lowbit8.pairs()) == 8
    assert bench_lowbit8.unique_bytes(1, 4096, 4096) == 4096 * 4096 + 4096 * 2 + (4096 + 4096) * 2


def test_the_summary_states_each_goal_and_whether_it_is_met(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Over torch: 2.2x and 2x (geometric mean 2.098); over ours: 2x and 1.333x (1.633). 28672 x 4096 is
    # 112 MiB: 117.6 MB in 30 us is 3.92 TB/s, 98.0% of a 4 TB/s copy; 4096 x 4096 is under 32 MiB.
    rows = [_row("int8", 28672, 4096, 30.0, 60.0, 66.0), _row("int8", 4096, 4096, 6.0, 8.0, 12.0)]
    path = tmp_path / "lowbit8.json"
    path.write_text(json.dumps({"gpu": "GPU", "copy_gbs": 4000.0, "rows": rows}))
    assert bench_lowbit8.main(["--summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "int8 float16 M=1 geomean speedup over torch_fp16   2.098 (goal >= 1.9)  ok" in out
    assert "over ours_fp16    1.633 (goal >= 1.6)  ok" in out
    assert "worst % of copy, >= 32 MiB                   98.0 (goal >= 90.0)  ok" in out
    assert "int8 float16 M=1 worst speedup over gemlite          n/a (goal >= 1.0)\n" in out  # no gemlite times


def test_the_gemlite_goal_is_its_worst_pair_at_m1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # gemlite / ours: 36 / 30 = 1.2 and 5.7 / 6 = 0.95 (the worst); a null time (gemlite off) and M = 4 don't count.
    rows = [
        _row("fp8", 28672, 4096, 30.0, 60.0, 66.0, gemlite=36.0),
        _row("fp8", 4096, 4096, 6.0, 8.0, 12.0, gemlite=5.7),
        _row("fp8", 6144, 4096, 8.0, 14.0, 17.0) | {"notes": ["gemlite: off (--gemlite off)"]},
        _row("fp8", 4096, 4096, 6.0, 8.0, 12.0, gemlite=1.0) | {"m": 4},
    ]
    path = tmp_path / "lowbit8.json"
    path.write_text(json.dumps({"gpu": "GPU", "copy_gbs": 4000.0, "rows": rows}))
    assert bench_lowbit8.main(["--summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "fp8 float16 M=1 worst speedup over gemlite        0.950 (goal >= 1.0)  MISSED" in out
    assert "note: gemlite: off (--gemlite off)" in out
    rows[1]["gemlite_us"] = 6.6
    path.write_text(json.dumps({"gpu": "GPU", "copy_gbs": 4000.0, "rows": rows}))
    assert bench_lowbit8.main(["--summary", str(path)]) == 0
    assert "fp8 float16 M=1 worst speedup over gemlite        1.100 (goal >= 1.0)  ok" in capsys.readouterr().out


def test_arguments_take_every_m_and_gemlite_modes_as_bench_lowbit_does(capsys: pytest.CaptureFixture[str]) -> None:
    args = bench_lowbit8.parse_args(["--m", "1", "4", "8", "16", "32", "64"])
    assert args.m == [1, 4, 8, 16, 32, 64] and args.gemlite == "max" and args.gemlite_configs is None
    assert bench_lowbit8.parse_args(["--gemlite", "off"]).gemlite == "off"
    configs = bench_lowbit8.parse_args(["--gemlite-configs", "results/g8.json"]).gemlite_configs
    assert bench_lowbit8.kind_configs(configs, "fp8") == Path("results/g8.fp8.json")
    assert bench_lowbit8.kind_configs(None, "int8") is None
    for bad in (["--m", "0"], ["--gemlite", "fast", "--gemlite-configs", "g.json"], ["--gemlite", "slow"]):
        with pytest.raises(SystemExit):
            bench_lowbit8.parse_args(bad)
    capsys.readouterr()


def test_merge_keeps_the_rows_this_run_does_not_measure() -> None:
    args = bench_lowbit8.parse_args(["--kinds", "fp8", "--m", "4", "16"])
    row = {"format": "fp8", "dtype": "float16", "m": 4, "n": 4096, "k": 4096}
    assert bench_lowbit8.measured(args, row)
    assert not bench_lowbit8.measured(args, {**row, "m": 1})
    assert not bench_lowbit8.measured(args, {**row, "format": "int8"})
    assert not bench_lowbit8.measured(args, {**row, "dtype": "bfloat16"})
    one_pair = bench_lowbit8.parse_args(["--kinds", "fp8", "--m", "4", "--pairs", "4096x4096"])
    assert one_pair.pairs == [(4096, 4096)] and bench_lowbit8.measured(one_pair, row)
    assert not bench_lowbit8.measured(one_pair, {**row, "n": 6144})


def test_a_row_measured_without_gemlite_keeps_the_files_gemlite_times_only_when_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = bench_lowbit8.parse_args(["--m", "1", "--gemlite", "off", "--merge", "--keep-gemlite"])
    assert args.keep_gemlite
    with pytest.raises(SystemExit):  # nothing to carry from, or gemlite measured anyway
        bench_lowbit8.parse_args(["--gemlite", "off", "--keep-gemlite"])
    with pytest.raises(SystemExit):
        bench_lowbit8.parse_args(["--merge", "--keep-gemlite"])
    capsys.readouterr()
    key = {"format": "fp8", "dtype": "float16", "m": 1, "n": 4096, "k": 14336}
    earlier = [
        {**key, "m": 4, "gemlite_us": 30.0},
        {**key, "gemlite_us": 21.59, "gemlite_b2b_us": 21.0, "gemlite_mode": "fast", "gemlite_config": "autotuned"},
    ]
    row = {**key, "ours_us": 15.64, "gemlite_us": None, "notes": [bench_lowbit8.GEMLITE_OFF]}
    lowbit_runs.keep_gemlite(row, earlier)
    assert (row["gemlite_us"], row["gemlite_b2b_us"], row["gemlite_mode"]) == (21.59, 21.0, "fast")
    assert row["notes"] == [lowbit_runs.GEMLITE_KEPT]
    alone = {**key, "n": 6144, "gemlite_us": None, "notes": [bench_lowbit8.GEMLITE_OFF]}
    lowbit_runs.keep_gemlite(alone, earlier)  # no earlier row of its pair: as it was
    assert alone["gemlite_us"] is None and alone["notes"] == [bench_lowbit8.GEMLITE_OFF]


def test_pairs_outside_the_op_shapes_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("4096", "4096x4097", "axb"):
        with pytest.raises(SystemExit):
            bench_lowbit8.parse_args(["--pairs", bad])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--pairs" in error and "Traceback" not in error


def test_gemlite_that_cannot_be_imported_is_off_with_a_one_line_note(monkeypatch: pytest.MonkeyPatch) -> None:
    import lowbit_runs

    monkeypatch.setitem(sys.modules, "gemlite", None)  # `import gemlite` raises ImportError
    gemlite, info = lowbit_runs.setup_gemlite("max", None)
    assert gemlite is None and info["mode"] == "off"
    note = info["note"]
    assert note.startswith("gemlite off: cannot import it (ModuleNotFoundError: ") and "\n" not in note


# -- a row from fakes: numpy for torch, a clock that calls each variant, gemlite layers as callables -----


class _Array(np.ndarray):
    """What measure_row asks of a torch tensor, on numpy."""

    def double(self) -> Any:
        return np.asarray(self, dtype=np.float64).view(_Array)

    def abs(self) -> Any:
        return np.abs(np.asarray(self)).view(_Array)


def _fake_torch() -> Any:
    rng = np.random.default_rng(0)
    return SimpleNamespace(
        float16=np.float16,
        randn=lambda m, k, device, dtype: rng.standard_normal((m, k)).astype(dtype).view(_Array),
        empty=lambda n, device, dtype: np.empty(n, dtype).view(_Array),
        mv=lambda w, v, out: np.matmul(w, v, out=out),
        isfinite=np.isfinite,
        nn=SimpleNamespace(functional=SimpleNamespace(linear=lambda x, w: x @ w.T)),
        cuda=SimpleNamespace(synchronize=lambda: None),
    )


class _Clock:
    """Calls each variant once and gives it a time: 10 us, less 1 us a variant in the order of `runs`."""

    def time(self, runs: dict[str, Any]) -> dict[str, float]:
        times = {"separator_us": 1.0}
        for j, (name, run) in enumerate(runs.items()):
            run(1)
            times |= {f"{name}_us": 10.0 - j, f"{name}_b2b_us": 11.0 - j}
        return times


def _weights(n: int, k: int, copies: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    made = []
    for _ in range(copies):
        codes = rng.integers(-127, 128, size=(n, k)).astype(np.int8).view(np.uint8)
        scales = (rng.random(n) / 127).astype(np.float16)
        exact = (codes.view(np.int8).astype(np.float64) * scales.astype(np.float64)[:, None]).view(_Array)
        made.append({"codes": codes, "scales": scales, "exact": exact, "rounded": exact.astype(np.float16)})
    return made


@pytest.mark.parametrize("m", [1, 4])
def test_a_row_holds_gemlites_time_error_and_autotune_or_nulls_and_a_note(
    monkeypatch: pytest.MonkeyPatch, m: int
) -> None:
    import autotune

    weights = _weights(64, 32, 2)
    seen: list[tuple[int, ...]] = []

    def product(x: Any, w: Any) -> Any:
        return x.astype(np.float64) @ w.astype(np.float64).T

    def layer(w: dict[str, Any]) -> Any:
        def call(x: Any) -> Any:
            seen.append(x.shape)
            return product(x, w["exact"]).astype(np.float16)

        return call

    monkeypatch.setattr(autotune, "call", lambda op, x, codes, scales, options: product(x, weights[0]["exact"]))
    monkeypatch.setattr(autotune, "linear", lambda x, w: product(x, w))
    fake = _fake_torch()
    layers = [layer(w) for w in weights]
    row = bench_lowbit8.measure_row(fake, _Clock(), weights, "int8", "float16", m, layers, ["earlier note"])
    assert (row["m"], row["n"], row["k"]) == (m, 64, 32) and set(seen) == {(m, 32)}  # batched x, as gemlite takes it
    assert row["gemlite_us"] == 10.0 - (4 if m == 1 else 3) and row["gemlite_b2b_us"] == row["gemlite_us"] + 1
    assert 0 < row["gemlite_max_rel_err"] < 1e-3 and row["gemlite_autotune_s"] >= 0
    assert row["notes"] == ["earlier note"]

    def broken(x: Any) -> Any:
        raise RuntimeError("unsupported shape\nmore")

    row = bench_lowbit8.measure_row(fake, _Clock(), weights, "int8", "float16", m, [broken, broken])
    gemlite_fields = ("gemlite_us", "gemlite_b2b_us", "gemlite_max_rel_err", "gemlite_autotune_s")
    assert all(row[f] is None for f in gemlite_fields) and row["notes"] == ["gemlite: RuntimeError: unsupported shape"]
    row = bench_lowbit8.measure_row(fake, _Clock(), weights, "int8", "float16", m, (), ["gemlite: off (--gemlite off)"])
    assert all(row[f] is None for f in gemlite_fields) and row["notes"] == ["gemlite: off (--gemlite off)"]
    assert row["ours_us"] == 10.0 and row["max_rel_err"] == 0.0


def test_gemlite_gets_our_codes_and_scales_as_its_a16w8_helpers_take_them() -> None:
    """gemlite/helper.py: A16W8_INT8 / A16W8_FP8(device=, dtype=).from_weights(weight, bias, scales), where
    a weight of one byte a value with scales is taken as quantized (an int8 or float8_e4m3fn tensor)."""
    made: list[tuple[str, dict[str, Any], tuple[Any, ...], dict[str, Any]]] = []

    def helper(name: str) -> Any:
        def make(**options: Any) -> Any:
            def from_weights(*args: Any, **kwargs: Any) -> str:
                made.append((name, options, args, kwargs))
                return name

            return SimpleNamespace(from_weights=from_weights)

        return make

    gemlite = SimpleNamespace(helper=SimpleNamespace(A16W8_INT8=helper("int8"), A16W8_FP8=helper("fp8")))
    fake = SimpleNamespace(int8="torch.int8", float8_e4m3fn="torch.float8_e4m3fn", float16="torch.float16")
    codes = SimpleNamespace(device="cuda:0", view=lambda dtype: f"codes as {dtype}")
    for kind in ("int8", "fp8"):
        assert bench_lowbit8.gemlite_layer(gemlite, fake, kind, "float16", codes, "scales") == kind
    assert made == [
        (
            "int8",
            {"device": "cuda:0", "dtype": "torch.float16"},
            ("codes as torch.int8",),
            {"bias": None, "scales": "scales"},
        ),
        (
            "fp8",
            {"device": "cuda:0", "dtype": "torch.float16"},
            ("codes as torch.float8_e4m3fn",),
            {"bias": None, "scales": "scales"},
        ),
    ]


def test_a_file_that_is_no_report_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.json"
    path.write_text("[1, 2]")
    assert bench_lowbit8.main(["--summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_lowbit8: ") and "not a bench_lowbit8 report" in err and err.count("\n") == 1
