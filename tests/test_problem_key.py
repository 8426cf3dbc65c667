"""A problem key that can grow: each input array's dtype and an op-defined variant name a problem of
its own in the store, the records files, the selection table and the CLI, and a problem that names
neither is the problem it always was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune import api, ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import INPUT_BITS, ITEMSIZE, Problem, parse_input_dtypes
from autotune.ops import make_problem, source_hash
from autotune.select.choose import ESTIMATE, MEASURED
from autotune.store import Store, open_store
from autotune.store import selection_table as table
from tests.fakes import ok, record, run_cli
from tests.op_rowsum import RowSum

GPU = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")


class GroupedRowSum(RowSum):
    """Row sums in two group sizes, reading A in the output's dtype or in int8: an op with variants
    and an input whose dtype may differ from the output's."""

    name = "growsum"
    variants = ("g64", "g128")

    def input_fault(self, problem: Problem) -> str | None:
        return None if problem.inputs in ((), ("int8",)) else f"growsum reads A in int8 or {problem.dtype}"


OP = GroupedRowSum()
PLAIN = Problem("growsum", "float16", 64, 128)
G64 = Problem("growsum", "float16", 64, 128, variant="g64")
G128 = Problem("growsum", "float16", 64, 128, variant="g128")
INT8 = Problem("growsum", "float16", 64, 128, inputs=("int8",), variant="g128")
# The fastest config of each problem: the same shape, four answers.
CONFIGS = {
    PLAIN: {"threads": 32, "unroll": 1},
    G64: {"threads": 64, "unroll": 2},
    G128: {"threads": 128, "unroll": 4},
    INT8: {"threads": 256, "unroll": 1},
}


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    ops.register(OP, module=__name__)
    yield
    ops.unregister(OP.name)


def _fill(store: Store) -> None:
    for problem, config in CONFIGS.items():
        record(store, problem, config, ok(5.0), GPU)
        record(store, problem, {"threads": 32, "unroll": 2}, ok(9.0), GPU)


@pytest.fixture
def filled(db_path: Path) -> Iterator[Store]:
    with open_store(str(db_path), import_shipped=False) as store:
        _fill(store)
        yield store


# --- the key -----------------------------------------------------------------------------------------


def test_a_problem_that_names_neither_is_the_problem_it_was() -> None:
    plain = Problem("gemv", "float16", 4096, 4096)
    assert plain == Problem("gemv", "float16", 4096, 4096, 0, False, (), "")
    assert str(plain) == "hgemv 4096x4096" and plain.input_dtypes(2) == ("float16", "float16")
    assert str(INT8) == "hgrowsum 64x128 [int8] g128" and INT8.input_dtypes(1) == ("int8",)
    assert len({PLAIN, G64, G128, INT8}) == 4 and sorted([INT8, G64, PLAIN])[0] == PLAIN
    assert ITEMSIZE == {"float32": 4, "float16": 2, "bfloat16": 2} and INPUT_BITS["int4"] == 4
    assert parse_input_dtypes("int4, fp16") == ("int4", "float16")


@pytest.mark.parametrize(
    ("op", "key", "error"),
    [
        ("gemv", {"variant": "g128"}, "gemv has no variants (got 'g128')"),
        ("gemv", {"inputs": ("int4", "float16")}, "gemv reads every input in its dtype (float16), not int4,float16"),
        ("growsum", {"variant": "g32"}, "unknown variant 'g32' of growsum: choose one of g64, g128"),
        ("growsum", {"inputs": ("int8", "int8")}, "growsum reads 1 input arrays, not 2 (int8,int8)"),
        ("growsum", {"inputs": ("int3",)}, "unknown input dtype 'int3': choose from float32, "),
        ("growsum", {"inputs": ("int4",)}, "growsum reads A in int8 or float16"),
    ],
)
def test_make_problem_refuses_what_the_op_does_not_define(op: str, key: dict[str, Any], error: str) -> None:
    with pytest.raises(AutotuneError) as refused:
        make_problem(op, "float16", 64, 128, **key)
    assert str(refused.value).startswith(error)


def test_input_dtypes_that_are_all_the_output_s_are_the_plain_problem() -> None:
    plain = Problem("gemv", "float16", 64, 128)
    assert make_problem("gemv", "float16", 64, 128, inputs=("float16", "float16")) == plain
    assert make_problem("growsum", "float16", 64, 128, inputs=["int8"], variant="g128") == INT8
    with pytest.raises(AutotuneError, match="unknown input dtype 'int3'"):
        parse_input_dtypes("int3,float16")


# --- the store, best, records ------------------------------------------------------------------------


def test_variants_of_one_shape_are_stored_and_selected_apart(filled: Store, db_path: Path) -> None:
    ids = {problem: filled.problem_id(problem, GPU.name, create=False) for problem in CONFIGS}
    assert None not in ids.values() and len(set(ids.values())) == 4
    for problem, config in CONFIGS.items():
        best = filled.best(GPU.name, problem, None)
        assert best is not None and (best.problem, best.config) == (problem, config)
        inputs = ",".join(problem.inputs)
        chosen = api.best("hgrowsum", 64, 128, gpu=GPU.name, db=str(db_path), inputs=inputs, variant=problem.variant)
        assert (chosen.problem, chosen.source, chosen.config) == (problem, MEASURED, config)
    # An untuned shape is estimated from its own variant's tuned shapes, never another's.
    nearby = api.best("hgrowsum", 64, 120, gpu=GPU.name, db=str(db_path), variant="g64")
    assert (nearby.source, nearby.config, nearby.from_shape) == (ESTIMATE, CONFIGS[G64], (64, 128))
    tuned = filled.tuned(GPU.name, "growsum", "float16", None, inputs=("int8",), variant="g128")
    assert [row.problem for row in tuned] == [INT8]


def test_records_carry_inputs_and_variant_only_where_named(filled: Store, tmp_path: Path) -> None:
    records = tmp_path / "grouped.jsonl"
    assert filled.export_records(GPU.name, records, top=2) == 8
    lines = [json.loads(line) for line in records.read_text().splitlines()[1:]]
    named = {(tuple(line.get("inputs", ())), line.get("variant")) for line in lines}
    assert named == {((), None), ((), "g64"), ((), "g128"), (("int8",), "g128")}
    assert all(line["variant"] for line in lines if "variant" in line)  # never an empty one
    with open_store(str(tmp_path / "other.db"), import_shipped=False) as other:
        assert other.import_records(records) == 8
        assert {row.problem for row in other.problems()} == set(CONFIGS)
        for problem, config in CONFIGS.items():
            best = other.best(GPU.name, problem, None)
            assert best is not None and best.config == config
        again = tmp_path / "again.jsonl"
        other.export_records(GPU.name, again, top=2)
    assert again.read_bytes() == records.read_bytes()


GPU_LINE = {"kind": "gpu", **{k: v for k, v in GPU.to_dict().items() if k != "uuid"}}


def _trial_line(**changed: Any) -> dict[str, Any]:
    line = {
        "kind": "trial",
        **{"op": "growsum", "dtype": "float16", "m": 64, "n": 128, "k": 0, "trans": False, "variant": "g64"},
        **{"config": CONFIGS[G64], "time_us": 5.0, "times_us": [5.0], "rounds": 1, "gbs": None, "rel_error": 0.0},
        **{"source_hash": source_hash(G64), "nvcc": "13.0", "pycuda": "2025.1", "driver": "13.0", "cuda": "13.0"},
        "created_at": "2026-01-01T00:00:00+00:00",
        **changed,
    }
    return {name: value for name, value in line.items() if value is not ...}


@pytest.mark.parametrize(
    ("changed", "error"),
    [
        ({"variant": ""}, "field 'variant' must be a non-empty string, got ''"),
        ({"variant": 128}, "field 'variant' must be a non-empty string, got 128"),
        ({"variant": "g32"}, "unknown variant 'g32' of growsum"),
        ({"variant": "g\x1b[2J"}, "field 'variant' holds control characters"),
        ({"inputs": []}, "field 'inputs' must be a list of 1 to 16 dtype names, got []"),
        ({"inputs": "int8"}, "field 'inputs' must be a list of 1 to 16 dtype names, got 'int8'"),
        ({"inputs": ["int8", 8]}, "field 'inputs' must be a list of 1 to 16 dtype names"),
        ({"inputs": ["int3"]}, "unknown input dtype 'int3'"),
        ({"inputs": ["float16"]}, "input dtypes that are all float16, the output's, are the plain problem's"),
        ({"op": "gemv", "variant": "g64"}, "gemv has no variants"),
    ],
)
def test_a_records_line_names_inputs_and_variant_strictly(
    store: Store, tmp_path: Path, changed: dict[str, Any], error: str
) -> None:
    records = tmp_path / "bad.jsonl"
    lines = [GPU_LINE, _trial_line(), _trial_line(**changed)]
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(AutotuneError) as refused:
        store.import_records(records)
    message = str(refused.value)
    assert "line 3" in message and error in message and "\n" not in message
    assert store.gpu_names() == []  # nothing of the file went in


def test_a_line_of_the_plain_problem_reads_as_before(store: Store, tmp_path: Path) -> None:
    records = tmp_path / "plain.jsonl"
    lines = [GPU_LINE, _trial_line(variant=..., config=CONFIGS[PLAIN])]
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert store.import_records(records) == 1
    best = store.best(GPU.name, PLAIN, None)
    assert best is not None and best.config == CONFIGS[PLAIN]


# --- the selection table -----------------------------------------------------------------------------


def test_the_selection_table_keeps_variants_in_groups_of_their_own(filled: Store, tmp_path: Path) -> None:
    lines = table.to_lines(filled.selection_rows(table.PER_SOURCE), None)
    groups = json.loads(lines[0])["groups"]
    # A group of the plain problem is written as before any problem named inputs or a variant.
    assert groups == [
        [GPU.name, "growsum", "float16", False],
        [GPU.name, "growsum", "float16", False, "", "g128"],
        [GPU.name, "growsum", "float16", False, "", "g64"],
        [GPU.name, "growsum", "float16", False, "int8", "g128"],
    ]
    path = tmp_path / "selection.json"
    table.write(path, lines)
    loaded = table.read(path).table
    for problem, config in CONFIGS.items():
        for source in (None, source_hash(problem)):  # from the group, and from its exact-hit line
            best = loaded.best(GPU.name, problem, source)
            assert best is not None and (best.problem, best.config) == (problem, config)
    assert [row.problem for row in loaded.tuned(GPU.name, "growsum", "float16", None, variant="g64")] == [G64]
    assert loaded.tuned(GPU.name, "growsum", "float16", None, variant="g32") == []


def test_a_table_group_that_names_empty_inputs_and_variant_is_damaged(filled: Store, tmp_path: Path) -> None:
    header, *body = table.to_lines(filled.selection_rows(table.PER_SOURCE), None)
    parsed = json.loads(header)
    parsed["groups"][0] += ["", ""]  # the plain group's second spelling: never written
    path = tmp_path / "selection.json"
    table.write(path, [json.dumps(parsed, separators=(",", ":")), *body])
    with pytest.raises(table.Damaged, match="a bad group"):
        table.read(path)


# --- the CLI -----------------------------------------------------------------------------------------


def test_best_names_the_variant_and_refuses_an_unknown_one(
    filled: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = ["--m", "64", "--n", "128", "--gpu", GPU.name, "--db", str(db_path)]
    code, out, _ = run_cli(monkeypatch, capsys, "best", "--op", "hgrowsum", *shape, "--variant", "g64")
    assert code == 0 and out.startswith("hgrowsum 64x128 g64 on NVIDIA H200 [measured]")
    code, out, _ = run_cli(monkeypatch, capsys, "best", "--op", "hgrowsum", *shape, "--inputs", "int8", "--json")
    assert code == 0 and json.loads(out)["inputs"] == ["int8"] and "variant" not in json.loads(out)
    for flags, error in (
        (["--op", "hgemv", "--variant", "g128"], "gemv has no variants (got 'g128')"),
        (["--op", "hgrowsum", "--variant", "g32"], "unknown variant 'g32' of growsum: choose one of g64, g128"),
        (["--op", "hgrowsum", "--inputs", "int3"], "unknown input dtype 'int3'"),
    ):
        code, out, err = run_cli(monkeypatch, capsys, "best", *flags, *shape)
        assert code == 2 and out == "" and error in err and len(err.strip().splitlines()) == 1, err
