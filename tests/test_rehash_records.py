"""scripts/rehash_records.py: a shipped int4 trial reads back as the problem it was measured on (its
inputs and variant too), so that its instance can be written and compiled against two kernel sources."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import rehash_records  # noqa: E402

from autotune import ops  # noqa: E402
from autotune.core.fingerprint import file_hash  # noqa: E402
from autotune.core.paths import kernels_dir  # noqa: E402
from autotune.ops import qgemm  # noqa: E402


def test_every_shipped_int4_trial_reads_back_as_a_problem_whose_space_holds_its_config() -> None:
    path = REPO / "db" / "records" / "nvidia-h200-qgemm.jsonl"
    for raw in path.read_text().splitlines()[1:]:
        line = json.loads(raw)
        problem = rehash_records.problem_of(line)
        op = ops.get(problem.op)
        assert op.input_fault(problem) is None, problem
        config = op.stored_config(problem, line["config"])  # as an import reads it (chain 2 where absent)
        assert op.space(problem).check(config) is None, (problem, config)
        assert op.kernel_name(problem, config) in op.kernel_source(problem, config)
        assert op.kernel_source(problem, config) == op.kernel_source(problem, line["config"])


def test_an_int4_trial_keeps_its_inputs_and_variant() -> None:
    line = next(
        json.loads(raw)
        for raw in (REPO / "db" / "records" / "nvidia-h200-qgemm.jsonl").read_text().splitlines()[1:]
        if json.loads(raw)["variant"] == "g128a"
    )
    problem = rehash_records.problem_of(line)
    assert problem.variant == "g128a" and problem.inputs == ("float16", "int4", "float16", "uint8")
    assert problem.k == line["k"]


def test_a_trial_whose_problem_now_names_another_kernel_file_is_carried_with_the_new_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--file-was NEW=OLD: an M = 32 int4 trial measured with qgemm.cu (before the wgmma kernel joined
    its space) is compared and, its cubins the same, re-keyed to qgemm_wgmma.cu with wgmma = 0. The git
    checkout of the old kernels and the two builds are stood in for: today's kernels/, equal cubins."""
    shipped = (REPO / "db" / "records" / "nvidia-h200-qgemm.jsonl").read_text().splitlines()
    trial = next(json.loads(raw) for raw in shipped[1:] if json.loads(raw)["m"] == 32)
    trial["source_hash"] = file_hash(qgemm.KERNEL_FILE)
    trial["config"] = {k: v for k, v in trial["config"].items() if k != "wgmma"}
    records = tmp_path / "nvidia-h200-qgemm.jsonl"
    records.write_text(shipped[0] + "\n" + json.dumps(trial) + "\n")
    monkeypatch.setattr(rehash_records, "kernels_at", lambda revision, into: kernels_dir())
    monkeypatch.setattr(rehash_records, "cubin", lambda job, kernels, work: job.source.encode())
    was = f"{qgemm.WGMMA_FILE}={qgemm.KERNEL_FILE}"
    monkeypatch.setattr(sys, "argv", ["rehash", "--since", "HEAD", "--file-was", was, "--write", str(records)])
    assert rehash_records.main() == 0
    carried = json.loads(records.read_text().splitlines()[1])
    assert carried["source_hash"] == file_hash(qgemm.WGMMA_FILE) != trial["source_hash"]
    assert carried["config"] == {**trial["config"], "wgmma": 0}
    problem = rehash_records.problem_of(carried)
    assert ops.for_problem(problem).space(problem).check(carried["config"]) is None
