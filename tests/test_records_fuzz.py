"""Random mutations of a real shipped records file: each imports whole or is refused whole in one line."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.store import Store

SHIPPED = Path(__file__).resolve().parents[1] / "db" / "records" / "nvidia-h200.jsonl"
LINES = 12  # the GPU line and the first trials: a whole file's import takes a second, a few lines milliseconds
MUTATIONS = 250
ODD_VALUES: list[Any] = [True, False, None, 0, -1, 1.5, 128.0, 2**40, "0", "", "x\n#include <x>", [], {}, [1], 1e308]


def _byte_mutation(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text))
    choice = rng.randrange(4)
    if choice == 0:
        return text[:at] + text[at + 1 :]
    if choice == 1:
        return text[:at] + rng.choice('{}[]",:0123456789-.eEtrufalsn \n\x00\x1b') + text[at:]
    if choice == 2:
        return text[:at]
    return text[:at] + chr(rng.randrange(32, 0x3000)) + text[at + 1 :]


def _value_mutation(lines: list[str], rng: random.Random) -> list[str]:
    number = rng.randrange(len(lines))
    line = json.loads(lines[number])
    target = line["config"] if "config" in line and rng.random() < 0.5 else line
    key = rng.choice(sorted(target))
    choice = rng.randrange(3)
    if choice == 0:
        target[key] = rng.choice(ODD_VALUES)
    elif choice == 1:
        del target[key]
    else:
        target[rng.choice(["evil", key + "_", "block", "m"])] = rng.choice(ODD_VALUES)
    lines[number] = json.dumps(line)
    return lines


def _line_mutation(lines: list[str], rng: random.Random) -> list[str]:
    a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
    choice = rng.randrange(3)
    if choice == 0:
        lines[a], lines[b] = lines[b], lines[a]
    elif choice == 1:
        lines.insert(a, lines[b])
    else:
        del lines[a]
    return lines


def mutate(text: str, rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        return _byte_mutation(text, rng)
    lines = text.splitlines()
    lines = _value_mutation(lines, rng) if kind == 1 else _line_mutation(lines, rng)
    return "\n".join(lines) + "\n"


def _state(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT problem_id, config_key, source_hash, time_us FROM trials ORDER BY id")
        state = [*rows.fetchall(), *connection.execute("SELECT id, uuid FROM gpus ORDER BY id").fetchall()]
    connection.close()
    return state


def _trial_keys(db: Path) -> set[str]:
    with sqlite3.connect(db) as connection:
        keys = {key for (key,) in connection.execute("SELECT config_key FROM trials")}
    connection.close()
    return keys


def test_every_mutation_imports_whole_or_is_refused_whole(store: Store, db_path: Path, tmp_path: Path) -> None:
    original = "".join(SHIPPED.read_text().splitlines(keepends=True)[:LINES])
    rng = random.Random(27)
    path = tmp_path / "mutated.jsonl"
    refused = imported = 0
    for _ in range(MUTATIONS):
        text = mutate(original, rng)
        path.write_text(text, encoding="utf-8")
        before = _state(db_path)
        try:
            store.import_records(path)
        except AutotuneError as exc:
            message = str(exc)
            assert "\n" not in message and str(path) in message, message
            assert _state(db_path) == before, message  # nothing of a refused file stays
            refused += 1
            continue
        imported += 1
        # Imported whole: every trial of the file is in the database with its time.
        stored = _trial_keys(db_path)
        for raw in text.splitlines()[1:]:
            if raw.strip():
                line = json.loads(raw)
                assert json.dumps(line["config"], sort_keys=True, separators=(",", ":")) in stored
                # Only points of the op's space get in: exact ints the space offers.
                dims = (line["m"], line["n"], line.get("k", 0))
                problem = Problem(line["op"], line["dtype"], *dims, line.get("trans", False))
                assert ops.for_problem(problem).space(problem).check(line["config"]) is None
    assert refused > MUTATIONS // 3 and imported > 10  # both paths are exercised
