"""scripts/rehash_records.py: a shipped int4 trial reads back as the problem it was measured on (its
inputs and variant too), so that its instance can be written and compiled against two kernel sources."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import rehash_records  # noqa: E402

from autotune import ops  # noqa: E402


def test_every_shipped_int4_trial_reads_back_as_a_problem_whose_space_holds_its_config() -> None:
    path = REPO / "db" / "records" / "nvidia-h200-qgemm.jsonl"
    for raw in path.read_text().splitlines()[1:]:
        line = json.loads(raw)
        problem = rehash_records.problem_of(line)
        op = ops.get(problem.op)
        assert op.input_fault(problem) is None, problem
        assert op.space(problem).check(line["config"]) is None, (problem, line["config"])
        assert op.kernel_name(problem, line["config"]) in op.kernel_source(problem, line["config"])


def test_an_int4_trial_keeps_its_inputs_and_variant() -> None:
    line = next(
        json.loads(raw)
        for raw in (REPO / "db" / "records" / "nvidia-h200-qgemm.jsonl").read_text().splitlines()[1:]
        if json.loads(raw)["variant"] == "g128a"
    )
    problem = rehash_records.problem_of(line)
    assert problem.variant == "g128a" and problem.inputs == ("float16", "int4", "float16", "uint8")
    assert problem.k == line["k"]
