"""The selection table: what the selector reads of a database (GPUs, and each problem's fastest OK
trials per kernel source that the store admits), kept in a JSON file, so that the launch path picks a config without
SQLAlchemy and without opening the store. `Table` serves those rows to `choose.Selector`, whose rules
are the same whichever it reads from.

Two tables serve the default database (no `db=`, no $AUTOTUNE_DB):

- the shipped table, db/selection.json, made from the shipped records alone
  (scripts/build_selection_table.py; tests/test_selection_table.py fails where it is stale). It is
  what a new database holds once the store has imported the shipped records, so it answers while the
  default database does not exist yet: a deployed machine never creates one.
- the database's own, beside it (autotune.db-selection.json), written by a process that opened the
  store to select (`refresh`). It answers while the database's version (its identity and change
  count) still equals the one it was made at: SQLite triggers (migration 0008) count every insert,
  update and delete of the gpus, problems, trials and shipped_imports rows, by autotune or any other
  program. The count is a row like any other, and a copy of the data carries it: `sqlite3 .dump`
  writes it out and the reload puts it back, creating the triggers after the inserts, so the count
  of a database edited through a dump (or rescued with `.recover`, or overwritten with another
  database's file) may equal the old one. The identity tells those apart: a random id that `refresh`
  writes into the database's header (PRAGMA user_version, which a dump does not write) whenever it
  writes a table, the header's schema cookie (moved by every CREATE and DROP, as a reload in place
  does) and the file's device and inode (a rebuilt file moved into place is another inode).

Either answers only while opening the store would import no shipped records file (each file's
SHA-256 is in the table's stamp). Anything else (a stale, missing or damaged table, an older schema,
a database that cannot be read without writing) gives None, and the caller opens the store.

A first call must be cheap (docs/deploy.md, "A first call"): each group of the table comes with its
exact-hit line, every problem's best trial per kernel source, so a tuned problem's answer is read
without parsing the group's trials; and what an earlier process has checked (the records files'
SHA-256, the table's, the database's change count) is trusted while the files are unchanged
(stamps.py), so a fresh process neither hashes them again nor imports sqlite3, and reads such a
table's header alone, then each line it needs, at the offsets the header's line lengths give.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import secrets
import stat as stat_module
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol, overload
from urllib.parse import quote

from autotune import ops
from autotune.core import paths
from autotune.core.errors import AutotuneError
from autotune.core.problem import DTYPES, Problem, split_inputs
from autotune.store import stamps as stamping
from autotune.store.selection_rows import RankedTrial, SelectedTrial, SelectionGpu, SelectionRows
from autotune.store.stamps import Stamps

log = logging.getLogger(__name__)

FORMAT = 3  # 2: each group's exact-hit line follows the groups; 3: the header gives each line's length
SHIPPED_TABLE = "selection.json"  # under db/
BESIDE_DATABASE = "-selection.json"  # appended to the database file's name, as SQLite's -wal and -shm
DATABASE_NAME = "autotune.db"  # the default database's file in the data folder (store/database.py)
DATABASE_VAR = "AUTOTUNE_DB"  # names another database: the table never answers for it
# Admitted trials kept per problem and kernel source: the store first looks at the 8 fastest for a
# problem's best (store/queries.py) and the cost model at the 3 fastest (choose.EVIDENCE_TOP).
PER_SOURCE = 8
# The count and the triggers that keep it (db/migrations/versions/0008_change_counter.py): a table of
# a database that lacks one of them is never taken as current.
COUNTER_TABLE = "change_counter"
WATCHED = ("gpus", "problems", "trials", "shipped_imports")
TRIGGERS = tuple(f"change_counter_{table}_{event}" for table in WATCHED for event in ("insert", "update", "delete"))
# How long reading the count waits for a writer's lock (a rollback-journal database): past it, the store.
LOCK_WAIT_S = 1.0
# The header field that holds the id `refresh` writes (0, SQLite's default, is no id).
ID_PRAGMA = "user_version"
LARGEST_ID = 2**31 - 1  # the field is a signed 32-bit integer


class Version(NamedTuple):
    """What a database's table is current for: the database's identity (its header id and schema
    cookie, the file's device and inode) and its change count."""

    identity: str
    changes: int


class SnapshotSource(Protocol):
    """A store that can read a snapshot (autotune.store.Store; not imported: it brings SQLAlchemy)."""

    def selection_rows(self, per_source: int) -> SelectionRows: ...


def _usable_config(config: Any) -> bool:
    # As the store's rows.usable: a config of integers only reaches the selector.
    return isinstance(config, dict) and all(isinstance(k, str) and type(v) is int for k, v in config.items())


# (GPU name, op, dtype, trans, input dtypes joined by commas, variant): every question is about one.
# The file names a group of a problem without input dtypes and variant by its first four alone, as
# tables written before problems had them do.
GroupKey = tuple[str, str, str, bool, str, str]


def group_key(gpu: str, problem: Problem) -> GroupKey:
    return (gpu, problem.op, problem.dtype, problem.trans, ",".join(problem.inputs), problem.variant)


def _key_json(key: GroupKey) -> list[Any]:
    return list(key if key[4] or key[5] else key[:4])


def _key_of(values: list[Any]) -> GroupKey:
    gpu, op, dtype, trans, *named = values
    inputs, variant = named if named else ("", "")
    if len(named) not in (0, 2) or (named and not (inputs or variant)):
        raise ValueError(f"a bad group {values!r}")
    return (_text(gpu), _text(op), _text(dtype), _flag(trans), _text(inputs), _text(variant))


class Table:
    """A table's rows, answering the selector's questions as the store does (autotune/store/store.py:
    gpus, best, tuned, problem_id, leaders), from memory. Each (GPU, op, dtype, layout, input dtypes,
    variant) group is kept as its JSON text until a question needs it, and so is its exact-hit line:
    a first call of a tuned problem parses only that line, one of another problem only its own group."""

    def __init__(
        self,
        gpus: list[SelectionGpu],
        groups: list[GroupKey],
        texts: Sequence[bytes],
        exact: Sequence[bytes] | None = None,
    ) -> None:
        self._gpus = gpus
        self._keys = {key: index for index, key in enumerate(groups)}
        self._texts = texts
        self._exact_texts = exact
        self._parsed: dict[int, list[tuple[Problem, list[SelectedTrial]]]] = {}
        self._exact: dict[int, dict[str, list[Any]]] = {}

    def gpus(self) -> list[SelectionGpu]:
        return list(self._gpus)

    def problems(self) -> list[tuple[str, Problem]]:
        """Every (GPU name, problem) the table holds, in the store's order."""
        return [(key[0], problem) for key, index in self._keys.items() for problem, _ in self._group(index)]

    def problem_id(self, problem: Problem, gpu_name: str, *, create: bool = False) -> int | None:
        if create:
            raise ValueError("a selection table is read-only")
        found = self._find(gpu_name, problem)
        return None if found is None else found[0] << 20 | found[1]

    def best(self, gpu_name: str, problem: Problem, source_hash: str | None) -> SelectedTrial | None:
        """The fastest usable OK trial of exactly this problem (of that kernel source when given):
        with a kernel source, from the group's exact-hit line, without parsing the group."""
        if source_hash is not None and self._exact_texts is not None:
            index = self._keys.get(group_key(gpu_name, problem))
            if index is None or not _known(problem):
                return None
            for values in self._exact_line(index).get(_shape_key(problem.m, problem.n, problem.k), ()):
                if isinstance(values, list) and len(values) == 6 and values[3] == source_hash:
                    return self._checked(gpu_name, problem, values)
            return None
        found = self._find(gpu_name, problem)
        return None if found is None else _first_usable(*self._group(found[0])[found[1]], source_hash)

    def vendor_best(self, gpu_name: str, problem: Problem) -> SelectedTrial | None:
        """The fastest usable trial of a library family (cuBLASLt's) of exactly this problem, of any
        library version."""
        if self._exact_texts is not None:
            index = self._keys.get(group_key(gpu_name, problem))
            if index is None or not _known(problem):
                return None
            entries = self._exact_line(index).get(_shape_key(problem.m, problem.n, problem.k), ())
            rows = [
                self._checked(gpu_name, problem, values)
                for values in entries
                if isinstance(values, list) and len(values) == 6 and ops.library_of_source(str(values[3])) is not None
            ]
        else:
            found = self._find(gpu_name, problem)
            if found is None:
                return None
            problem, trials = self._group(found[0])[found[1]]
            vendor = {t.source_hash for t in trials if ops.library_of_source(t.source_hash) is not None}
            rows = [_first_usable(problem, trials, source) for source in vendor]
        usable = [row for row in rows if row is not None]
        return min(usable, key=lambda row: row.time_us) if usable else None

    def tuned(
        self,
        gpu_name: str,
        op: str,
        dtype: str,
        source_hash: str | None,
        *,
        trans: bool = False,
        inputs: tuple[str, ...] = (),
        variant: str = "",
    ) -> list[SelectedTrial]:
        """One best row per problem of this GPU, op, dtype, layout, input dtypes and variant."""
        index = self._keys.get((gpu_name, op, dtype, trans, ",".join(inputs), variant))
        if index is None:
            return []
        rows = (_first_usable(problem, trials, source_hash) for problem, trials in self._group(index))
        return [row for row in rows if row is not None]

    def leaders(self, problem_id: int, source_hash: str, top: int) -> list[SelectedTrial]:
        """The `top` fastest OK trials with that kernel source, fastest first: the table holds the
        trials the store admits (store/queries.py's Admission), ranked as the store ranks them."""
        if top > PER_SOURCE:
            raise ValueError(f"a selection table keeps {PER_SOURCE} trials per kernel source, not {top}")
        problem, trials = self._group(problem_id >> 20)[problem_id & 0xFFFFF]
        ranked = [t for t in trials if t.source_hash == source_hash][:top]
        return [t for t in ranked if _usable_config(t.config)] if _known(problem) else []

    def _find(self, gpu_name: str, problem: Problem) -> tuple[int, int] | None:
        index = self._keys.get(group_key(gpu_name, problem))
        if index is None:
            return None
        position = next((i for i, (p, _) in enumerate(self._group(index)) if p == problem), None)
        return None if position is None else (index, position)

    def _exact_line(self, index: int) -> dict[str, list[Any]]:
        found = self._exact.get(index)
        if found is None:
            assert self._exact_texts is not None
            try:
                found = json.loads(self._exact_texts[index])
                if not isinstance(found, dict):
                    raise TypeError("not an object")
            except (ValueError, TypeError) as exc:
                raise Damaged(
                    f"a selection table holds a bad exact-hit line {self._name(index)} ({type(exc).__name__}: {exc})"
                ) from None
            self._exact[index] = found
        return found

    def _checked(self, gpu: str, problem: Problem, values: list[Any]) -> SelectedTrial | None:
        try:
            row = _trial(gpu, problem, values)
        except (ValueError, TypeError) as exc:
            raise Damaged(f"a selection table holds a bad trial of {problem} ({type(exc).__name__}: {exc})") from None
        return row if _usable_config(row.config) else None

    def _name(self, index: int) -> str:
        gpu, op, dtype, trans, inputs, variant = next(key for key, i in self._keys.items() if i == index)
        named = "".join(f"/{part}" for part in (inputs, variant) if part)
        return f"{gpu}/{op}/{dtype}" + ("/trans" if trans else "") + named

    def _group(self, index: int) -> list[tuple[Problem, list[SelectedTrial]]]:
        found = self._parsed.get(index)
        if found is None:
            gpu, op, dtype, trans, inputs, variant = next(key for key, i in self._keys.items() if i == index)
            named = split_inputs(inputs)
            try:
                found = [
                    (
                        problem := Problem(op, dtype, _count(m), _count(n), _count(k), trans, named, variant),
                        [_trial(gpu, problem, v) for v in trials],
                    )
                    for m, n, k, trials in json.loads(self._texts[index])
                ]
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                raise Damaged(
                    f"a selection table holds a bad group {self._name(index)} ({type(exc).__name__}: {exc})"
                ) from None
            self._parsed[index] = found
        return found


def _first_usable(problem: Problem, trials: list[SelectedTrial], source_hash: str | None) -> SelectedTrial | None:
    if not _known(problem):
        return None
    ranked = [t for t in trials if source_hash is None or t.source_hash == source_hash][:PER_SOURCE]
    return next((t for t in ranked if _usable_config(t.config)), None)


def _known(problem: Problem) -> bool:
    # Registered when asked, as the store checks it: a plug-in op may be registered later.
    if problem.op not in ops.names() or problem.dtype not in DTYPES:
        return False
    return not (problem.inputs or problem.variant) or ops.key_fault(problem) is None


def _shape_key(m: int, n: int, k: int) -> str:
    return f"{m},{n},{k}"


def _exact_trials(trials: list[list[Any]]) -> list[list[Any]]:
    """A problem's exact-hit entry: for each kernel source, the trial `_first_usable` picks for it
    (the first usable one of its PER_SOURCE fastest), in the order the sources first appear."""
    seen: dict[Any, int] = {}
    chosen: dict[Any, list[Any]] = {}
    for values in trials:
        source = values[3]
        seen[source] = seen.get(source, 0) + 1
        if source not in chosen and seen[source] <= PER_SOURCE and _usable_config(values[0]):
            chosen[source] = values
    return list(chosen.values())


# --- the file -------------------------------------------------------------------------------------
# A header line (format, stamp, GPUs, the groups in order, each later line's length in bytes, the
# SHA-256 of the rest), then one line of JSON per group:
# [[m, n, k, [[config, time_us, gbs, source_hash, driver, cuda], ...]], ...], then each group's
# exact-hit line, in the same order: {"m,n,k": [the trial picked per kernel source]}.


def to_lines(snapshot: SelectionRows, database: Path | None, identity: str | None = None) -> list[str]:
    """The table file's lines for a snapshot of `database` (None: the shipped records alone), whose
    identity (Version.identity) was `identity` while the snapshot was read."""
    groups: dict[GroupKey, list[Any]] = {}
    exact: dict[GroupKey, dict[str, list[Any]]] = {}
    for gpu, p, trials in snapshot.problems:  # the store's order: each group's problems together
        values = [_trial_json(t) for t in trials]
        key = group_key(gpu, p)
        groups.setdefault(key, []).append([p.m, p.n, p.k, values])
        # The first of a problem held twice answers, as Table._find takes it.
        exact.setdefault(key, {}).setdefault(_shape_key(p.m, p.n, p.k), _exact_trials(values))
    body = [json.dumps(problems, separators=(",", ":")) for problems in groups.values()]
    body += [json.dumps(exact[key], separators=(",", ":")) for key in groups]
    header = {
        "format": FORMAT,
        "made_from": {
            "database": None if database is None else str(database),
            "changes": None if database is None else snapshot.changes,
            **({"identity": identity} if database is not None and identity is not None else {}),
            "shipped": dict(sorted(snapshot.shipped.items())),
        },
        "gpus": [[gpu.name, gpu.compute_capability, gpu.sm_count] for gpu in snapshot.gpus],
        "groups": [_key_json(key) for key in groups],
        "lines": [len(line.encode()) for line in body],
        "body": hashlib.sha256(_joined(body)).hexdigest(),
    }
    return [json.dumps(header, separators=(",", ":")), *body]


def in_memory(snapshot: SelectionRows) -> Table:
    """A table of `snapshot` that is never written: the selector's rows for every problem from one
    read (`autotune list` asks it what `autotune best` answers, without two queries a problem)."""
    header, *body = to_lines(snapshot, None)
    texts = [line.encode() for line in body]
    half = len(texts) // 2  # the groups, then their exact-hit lines, as read() splits a file
    return _parse(json.loads(header), texts[:half], texts[half:]).table


def _joined(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def _trial_json(trial: RankedTrial) -> list[Any]:
    return [trial.config, trial.time_us, trial.gbs, trial.source_hash, trial.driver, trial.cuda]


def write(path: Path, lines: list[str]) -> None:
    """Write a table file atomically: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as staged:
            staged.write(_joined(lines))
        os.replace(name, path)
    except OSError:
        Path(name).unlink(missing_ok=True)
        raise


class Damaged(AutotuneError):
    """A table file that is not what `write` wrote (one line, naming the file)."""


class Outdated(Damaged):
    """A table file of an older format (written by an earlier autotune): not current, not damaged."""


@dataclass(frozen=True)
class Loaded:
    """A table file read back: what it was made from, and its rows."""

    database: str | None
    changes: int | None
    identity: str | None  # None: a shipped table, or one written before identities were kept
    shipped: dict[str, str]
    table: Table


class _Lines(Sequence[bytes]):
    """Lines of a table file's body, each read (`read(start, end)`) only when asked for."""

    def __init__(self, read: Callable[[int, int], bytes], spans: list[tuple[int, int]]) -> None:
        self._read = read
        self._spans = spans

    def __len__(self) -> int:
        return len(self._spans)

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self._read(a, b) for a, b in self._spans[index]]
        return self._read(*self._spans[index])


class _OpenFile:
    """A table file held open while lines of it are in use (closed with the last of them), so a table
    replaced meanwhile (write() renames a new file into place) still answers from the file that was
    checked. Read with os.pread: any thread."""

    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor
        weakref.finalize(self, os.close, descriptor)

    def read(self, start: int, end: int) -> bytes:
        # A file cut short since its check reads short: the caller's JSON parse calls it damaged.
        return os.pread(self._descriptor, end - start, start)


def _slice_of(data: bytes, start: int, end: int) -> bytes:
    return data[start:end]


def _spans_of(lengths: Any, start: int) -> list[tuple[int, int]]:
    """Where each body line lies in the file, from the header's lengths (each line is followed by a
    newline) and where the body starts."""
    if not isinstance(lengths, list) or not all(type(n) is int and n >= 0 for n in lengths):
        raise ValueError("a bad list of line lengths")
    spans = []
    for length in lengths:
        spans.append((start, start + length))
        start += length + 1
    return spans


_HEADER_CHUNK = 16384  # the header is ~3 KB: one read, where a fresh process's read of the whole
# 0.7 MB shipped table cost 0.5 ms (the pages of a new buffer), the most of a first call's selection


def _header(descriptor: int, size: int) -> bytes:
    """The file's first line, without its newline (all of it where it has none)."""
    head = b""
    while len(head) < size:
        chunk = os.pread(descriptor, _HEADER_CHUNK, len(head))
        if not chunk:
            break
        end = chunk.find(b"\n")
        if end >= 0:
            return head + chunk[:end]
        head += chunk
    return head


def read(path: Path, stamps: Stamps | None = None) -> Loaded:
    """Read a table file: its header in full, the groups once a question needs them. Damaged where
    it is not one (its groups are checked against the header's SHA-256, which `stamps` may hold for
    the file as it is: then only the header is read now, each line when asked for), Outdated where
    an earlier autotune wrote it, OSError where unreadable."""
    descriptor, opened = stamping.open_regular(path)
    keep_open = False
    try:
        stat = stamping.stat_of(opened)
        taken = stamping.now_ns()
        head = _header(descriptor, opened.st_size)
        try:
            header = json.loads(head)
            if type(header["format"]) is int and header["format"] < FORMAT:
                raise Outdated(f"{path} was written by an earlier autotune (format {header['format']}, not {FORMAT})")
            if header["format"] != FORMAT:
                raise ValueError(f"format {header['format']!r}, not {FORMAT}")
            spans = _spans_of(header["lines"], len(head) + 1)
            if (spans[-1][1] + 1 if spans else len(head) + 1) != opened.st_size:
                raise ValueError("its lines do not add up to its size")
            half = len(spans) // 2  # the groups, then their exact-hit lines
            digest = stamps.digest(str(path), stat) if stamps is not None else None
            if digest == header["body"]:  # checked by an earlier process, unchanged since
                keep_open = True
                read_line = _OpenFile(descriptor).read
                return _parse(header, _Lines(read_line, spans[:half]), _Lines(read_line, spans[half:]))
            data = stamping.read_all(descriptor)
            digest = hashlib.sha256(memoryview(data)[len(head) + 1 :]).hexdigest()
            if digest != header["body"]:
                raise ValueError("its groups do not match its header's SHA-256")
            if stamps is not None:
                stamps.record_digest(str(path), stat, digest, taken)
            read_line = functools.partial(_slice_of, data)
            return _parse(header, _Lines(read_line, spans[:half]), _Lines(read_line, spans[half:]))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise Damaged(f"{path} is not a selection table ({type(exc).__name__}: {exc})") from None
    finally:
        if not keep_open:
            os.close(descriptor)


def _parse(header: dict[str, Any], texts: Sequence[bytes], exact: Sequence[bytes]) -> Loaded:
    if header["format"] != FORMAT:
        raise ValueError(f"format {header['format']!r}, not {FORMAT}")
    made = header["made_from"]
    database, changes, shipped = made["database"], made["changes"], made["shipped"]
    identity = made.get("identity")
    if not (database is None or isinstance(database, str)) or not (changes is None or type(changes) is int):
        raise ValueError("a bad stamp")
    if not (identity is None or isinstance(identity, str)):
        raise ValueError("a bad identity")
    if not isinstance(shipped, dict) or not all(isinstance(v, str) for v in shipped.values()):
        raise ValueError("a bad list of shipped records files")
    gpus = [SelectionGpu(_text(name), _text(capability), _count(sm)) for name, capability, sm in header["gpus"]]
    groups = [_key_of(values) for values in header["groups"]]
    if not len(groups) == len(texts) == len(exact):
        held = len(texts) + len(exact)
        raise ValueError(f"{len(groups)} groups named, {held} lines held (a group and its exact hits each)")
    return Loaded(database, changes, identity, dict(shipped), Table(gpus, groups, texts, exact))


def _trial(gpu: str, problem: Problem, values: list[Any]) -> SelectedTrial:
    config, time_us, gbs, source, driver, cuda = values
    if (
        not isinstance(config, dict)
        or type(time_us) not in (int, float)
        or (gbs is not None and type(gbs) not in (int, float))
    ):
        raise ValueError(f"a bad trial of {problem}")
    return SelectedTrial(
        config, float(time_us), gbs, _text(source), _text(driver), _text(cuda), gpu_name=gpu, problem=problem
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value


def _count(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def _flag(value: Any) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{value!r} is not true or false")
    return value


# --- which table answers, and keeping the database's current -----------------------------------------


def default_database() -> Path | None:
    """The default database's file, as the store resolves it with no `db` (None where $AUTOTUNE_DB
    names another: the table never answers for it)."""
    if os.environ.get(DATABASE_VAR):
        return None
    return (paths.data_home() / DATABASE_NAME).absolute()


def beside(database: Path) -> Path:
    """The table file of a database."""
    return database.with_name(database.name + BESIDE_DATABASE)


def _db_dir() -> Path | None:
    try:
        return paths.db_dir()
    except FileNotFoundError:
        return None


def shipped_path(db: Path | None = None) -> Path | None:
    """db/selection.json (`db`: db/ where already found)."""
    db = db or _db_dir()
    return None if db is None else db / SHIPPED_TABLE


def shipped_digests(stamps: Stamps | None = None, db: Path | None = None) -> dict[str, str]:
    """SHA-256 of each shipped records file (db/records/*.jsonl), by name, as the store's import
    compares them; {} where none ship. `stamps` holds those of files unchanged since an earlier
    process hashed them; `db`: db/ where already found."""
    db = db or _db_dir()
    if db is None:
        return {}
    try:
        # os.scandir, not glob: a fresh process's first glob compiles its pattern (up to 4 ms of a first call).
        listed = os.scandir(db / "records")
        entries = sorted((entry.name, entry.path) for entry in listed if entry.name.endswith(".jsonl"))
    except (FileNotFoundError, NotADirectoryError):
        return {}
    found: dict[str, str] = {}
    for name, path in entries:
        # Stat first, then read: a file changed in between is recorded with its earlier stat, so the
        # next process hashes it again.
        stat = stamping.stat_of(os.stat(path)) if stamps is not None else None
        taken = stamping.now_ns()
        digest = stamps.digest(path, stat) if stamps is not None and stat is not None else None
        if digest is None:
            digest = hashlib.sha256(stamping.read_regular(path)[0]).hexdigest()
            if stamps is not None and stat is not None:
                stamps.record_digest(path, stat, digest, taken)
        found[name] = digest
    return found


def default_table() -> Table | None:
    """The table that answers for the default database right now, or None (open the store)."""
    database = default_database()
    if database is None:
        return None
    stamps = Stamps()
    try:
        return _current(database, stamps)
    except Outdated as exc:
        log.debug("%s: the store answers", exc)
        return None
    except (OSError, Damaged) as exc:
        log.warning("the selection table is not used (%s): the store answers", " ".join(str(exc).split()))
        return None
    finally:
        stamps.save()


def _current(database: Path, stamps: Stamps | None = None) -> Table | None:
    db = _db_dir()
    digests = shipped_digests(stamps, db)
    if not database.exists():
        # The store would create the database and import the shipped records: the shipped table.
        path = shipped_path(db)
        if path is None or not path.is_file():
            return None
        loaded = read(path, stamps)
        if loaded.database is None and loaded.shipped == digests:
            return loaded.table
        log.debug("the shipped selection table %s was made from other records files: the store answers", path)
        return None
    path = beside(database)
    if not path.is_file():
        return None
    loaded = read(path, stamps)
    if loaded.database != str(database) or loaded.changes is None or loaded.identity is None:
        return None
    # Opening the store imports a shipped records file that is new or changed since the database
    # imported it (a file gone from the records stays in the database: it changes nothing).
    if any(loaded.shipped.get(name) != digest for name, digest in digests.items()):
        return None
    if current_version(database, stamps) != Version(loaded.identity, loaded.changes):
        return None
    return loaded.table


def _stat_or_none(path: Path, *, ctime: bool = True) -> stamping.Stat | None:
    try:
        return stamping.stat_of(path.stat(), ctime=ctime)
    except FileNotFoundError:
        return None


def current_version(database: Path, stamps: Stamps | None = None) -> Version | None:
    """The database's version (read_version), or where `stamps` recorded it while the database file
    and its write-ahead log were as they are now, that version: every commit writes to one of the
    two, so it cannot have moved (and sqlite3 is not imported)."""
    if stamps is None or not _writable(database.parent):
        return read_version(database)
    # Taken before the version is read: a commit after them changes one of them. (SQLite run as root
    # gives the log its database's owner again at every open, a read's too: its status-change time moves.)
    log_file = database.with_name(database.name + "-wal")
    stats = [_stat_or_none(database), _stat_or_none(log_file, ctime=False)]
    taken = stamping.now_ns()
    found = stamps.version(database, stats)
    if found is not None:
        return Version(*found)
    version = read_version(database)
    if version is not None:
        stamps.record_version(database, stats, version, taken)
    return version


def read_version(database: Path) -> Version | None:
    """The database's identity and change count, read with the standard library's sqlite3
    (read-only, no SQLAlchemy); None where they cannot be read, where `refresh` has written no id
    into the database (a new one, or one rebuilt from a dump), or where any trigger that keeps the
    count is missing."""
    import sqlite3  # only where a database exists: a deployed machine without one never loads it

    if not _writable(database.parent):
        # A read-only connection to a WAL database still needs its -shm file; without a writable
        # folder the store opens the file as immutable, which cannot see another process's writes.
        return None
    names = ", ".join(f"'{name}'" for name in TRIGGERS)
    query = (
        f"SELECT (SELECT changes FROM {COUNTER_TABLE} WHERE id = 1), "
        f"(SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN ({names})), "
        f"(SELECT {ID_PRAGMA} FROM pragma_{ID_PRAGMA}), (SELECT schema_version FROM pragma_schema_version)"
    )
    try:
        # The file as it is before and after the query: one that was replaced meanwhile has no version.
        before = _file_of(database)
        if before is None:
            return None
        connection = sqlite3.connect(f"file:{quote(str(database))}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        try:
            changes, triggers, header_id, schema = connection.execute(query).fetchone()
        finally:
            connection.close()
        if _file_of(database) != before:
            return None
    except (sqlite3.Error, OSError) as exc:
        log.debug("the change count of %s cannot be read (%s): the store answers", database, exc)
        return None
    if triggers != len(TRIGGERS) or type(changes) is not int or not header_id:
        return None
    return Version(f"{header_id}.{schema}@{before}", changes)


def _file_of(database: Path) -> str | None:
    """The device and inode of the database's file; None for anything but a regular file (SQLite
    would block opening a named pipe)."""
    found = database.stat()
    return f"{found.st_dev}:{found.st_ino}" if stat_module.S_ISREG(found.st_mode) else None


def new_identity(database: Path) -> bool:
    """Write a new random id into the database's header (ID_PRAGMA), which its change count does not
    see: a table stamped with it is current only for this file as it is now, or copies of it at
    this change count, never for a copy made earlier that went another way since. False where the
    database cannot be written."""
    import sqlite3

    try:
        connection = sqlite3.connect(
            f"file:{quote(str(database))}?mode=rw", uri=True, timeout=LOCK_WAIT_S, isolation_level=None
        )
        try:
            connection.execute(f"PRAGMA {ID_PRAGMA} = {secrets.randbelow(LARGEST_ID) + 1}")
        finally:
            connection.close()
    except sqlite3.Error as exc:
        log.debug("cannot write an id into %s (%s): no selection table", database, exc)
        return False
    return True


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK)


def refresh(store: SnapshotSource, database: Path) -> bool:
    """Write `database`'s table from `store` (that database, open) where the one beside it is not
    current, stamped with a new id written into the database first; True where the table is current
    afterwards. A database that cannot be written, or written beside (a read-only folder), keeps no
    table: the store answers there."""
    try:
        if _current(database) is not None:
            return True
    except (OSError, Damaged):
        pass  # rewritten below
    if not _writable(database.parent) or not new_identity(database):
        return False
    identity = read_version(database)
    snapshot = store.selection_rows(PER_SOURCE)
    if identity is None or snapshot.changes is None:
        return False
    if read_version(database) != Version(identity.identity, snapshot.changes):
        log.debug("%s changed while its selection table was read: the store answers", database)
        return False
    try:
        write(beside(database), to_lines(snapshot, database, identity.identity))
    except OSError as exc:
        log.debug("cannot write the selection table beside %s: %s", database, exc)
        return False
    return True
