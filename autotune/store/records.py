"""Records files: the best trials of one GPU as reviewable JSON lines, exported, shipped and imported."""

from __future__ import annotations

import hashlib
import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from autotune import fingerprint, paths
from autotune.errors import AutotuneError
from autotune.fingerprint import GpuInfo, slugify
from autotune.outcome import Status
from autotune.problem import Problem, check_dim
from autotune.space import config_key
from autotune.store import models as orm
from autotune.store.database import Database
from autotune.store.queries import find_trial, get_or_create_problem, new_gpu, problem_filters, ranked_ok
from autotune.store.rows import as_utc

# Field -> JSON type; float fields take JSON integers too. Nullable fields may also be null.
_GPU_TYPES: dict[str, type] = {
    "name": str,
    "compute_capability": str,
    "sm_count": int,
    "l2_bytes": int,
    "memory_bytes": int,
    "driver": str,
    "cuda": str,
}
_TRIAL_TYPES: dict[str, type] = {
    "op": str,
    "dtype": str,
    "m": int,
    "n": int,
    "config": dict,
    "time_us": float,
    "times_us": list,
    "gbs": float,
    "rel_error": float,
    "source_hash": str,
    "nvcc": str,
    "pycuda": str,
    "driver": str,
    "cuda": str,
    "created_at": str,
}
_NULLABLE = frozenset({"gbs", "rel_error"})


class _BadLine(Exception):
    """What is wrong with one line; turned into an AutotuneError naming the file and line."""


# --- export --------------------------------------------------------------------------------------


def _gpu_line(gpu: orm.Gpu) -> dict[str, Any]:
    return {"kind": "gpu", **{name: getattr(gpu, name) for name in orm.GPU_FIELDS}}


def _trial_line(problem: orm.Problem, trial: orm.Trial) -> dict[str, Any]:
    return {
        "kind": "trial",
        "op": problem.op,
        "dtype": problem.dtype,
        "m": problem.m,
        "n": problem.n,
        "k": problem.k,
        "trans": problem.trans,
        "config": trial.config,
        "time_us": trial.time_us,
        "times_us": [t for t in trial.times_us if math.isfinite(t)],
        "rounds": trial.rounds,
        "gbs": orm.finite(trial.gbs),
        "rel_error": orm.finite(trial.rel_error),
        "source_hash": trial.source_hash,
        "nvcc": trial.nvcc,
        "pycuda": trial.pycuda,
        "driver": trial.driver,
        "cuda": trial.cuda,
        "created_at": as_utc(trial.created_at).isoformat(),
    }


def _write_atomically(path: Path, text: str) -> None:
    # A reader (or a crash) never sees half a records file.
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise AutotuneError(f"cannot write records file {path}: {exc.strerror or exc}") from None


_EVERY = 2**31 - 1  # a rank limit that keeps every trial


def _problem_of(row: orm.Problem) -> Problem:
    return Problem(row.op, row.dtype, row.m, row.n, row.k, row.trans)


def export_records(
    db: Database,
    gpu_name: str,
    path: Path,
    *,
    top: int = 3,
    source_hash: str | None = None,
    current_only: bool = False,
) -> int:
    """Write the GPU line, then the `top` fastest OK trials of each problem (with `current_only`,
    among those measured with the problem's kernel source as it is now: what a shipped records file
    must hold, since older ones never answer); returns the trial count."""
    if top < 1:
        raise AutotuneError(f"--top must be at least 1, got {top}")
    with db.session_scope() as session:
        newest = select(orm.Gpu).where(orm.Gpu.name == gpu_name)
        newest = newest.order_by(orm.Gpu.created_at.desc(), orm.Gpu.id.desc()).limit(1)
        gpu = session.scalars(newest).one_or_none()
        if gpu is None:
            raise AutotuneError(f"no GPU named {gpu_name!r} in {db.url}")
        lines = [_gpu_line(gpu)]
        filters = problem_filters(gpu_name=gpu_name)
        if current_only:
            current: dict[int, str] = {}  # problem id -> its kernel source hash today
            kept: dict[int, int] = {}
            for problem, trial in ranked_ok(session, filters, source_hash, top=_EVERY):
                if problem.id not in current:
                    current[problem.id] = fingerprint.source_hash(_problem_of(problem))
                if trial.source_hash == current[problem.id] and kept.get(problem.id, 0) < top:
                    kept[problem.id] = kept.get(problem.id, 0) + 1
                    lines.append(_trial_line(problem, trial))
        else:
            ranked = ranked_ok(session, filters, source_hash, top=top)
            lines += [_trial_line(problem, trial) for problem, trial in ranked]
    write_lines(path, lines)
    return len(lines) - 1


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """A records file as export_records writes it: one JSON object a line, keys sorted, written
    atomically (scripts/rehash_records.py rewrites shipped files through it too)."""
    _write_atomically(path, "".join(json.dumps(line, sort_keys=True, allow_nan=False) + "\n" for line in lines))


# --- parsing -------------------------------------------------------------------------------------


def _typed(line: dict[str, Any], name: str, kind: type, nullable: bool = False) -> Any:
    if name not in line:
        raise _BadLine(f"missing field {name!r}")
    value = line[name]
    if value is None and nullable:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _BadLine(f"field {name!r} must be a {kind.__name__}, got {value!r}")
    return value


def _parse_gpu(line: dict[str, Any]) -> GpuInfo:
    values = {name: _typed(line, name, kind) for name, kind in _GPU_TYPES.items()}
    # Records without a real uuid share one stand-in row per GPU model.
    uuid = line.get("uuid") or f"shipped:{slugify(values['name'])}"
    if not isinstance(uuid, str):
        raise _BadLine(f"field 'uuid' must be a str, got {uuid!r}")
    return GpuInfo(uuid=uuid, **values)


def _parse_trial(line: dict[str, Any]) -> dict[str, Any]:
    values = {name: _typed(line, name, kind, name in _NULLABLE) for name, kind in _TRIAL_TYPES.items()}
    # Records written before GEMM and the transposed GEMV carry neither field.
    values["k"] = line.get("k", 0)
    values["trans"] = line.get("trans", False)
    # Records written before confirmation rounds were measured once.
    values["rounds"] = line.get("rounds", 1)
    if not isinstance(values["rounds"], int) or isinstance(values["rounds"], bool) or values["rounds"] < 1:
        raise _BadLine(f"field 'rounds' must be a positive integer, got {values['rounds']!r}")
    if not isinstance(values["trans"], bool):
        raise _BadLine(f"field 'trans' must be true or false, got {values['trans']!r}")
    dims = ("m", "n", "k") if values["op"] == "gemm" else ("m", "n")
    for dim in dims:
        try:
            check_dim(dim.upper(), values[dim])
        except AutotuneError as exc:
            raise _BadLine(str(exc)) from None
    if values["op"] != "gemm" and values["k"] != 0:
        raise _BadLine(f"field 'k' must be 0 for {values['op']}, got {values['k']!r}")
    if not (math.isfinite(values["time_us"]) and values["time_us"] > 0):
        raise _BadLine(f"time_us must be a positive number, got {values['time_us']!r}")
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in values["times_us"]):
        raise _BadLine("times_us must be a list of numbers")
    try:
        values["created_at"] = as_utc(datetime.fromisoformat(values["created_at"]))
    except ValueError:
        raise _BadLine(f"created_at is not an ISO date and time: {values['created_at']!r}") from None
    return values


def _parse_line(raw: str, number: int) -> dict[str, Any]:
    try:
        line = json.loads(raw)
    except ValueError as exc:
        raise _BadLine(f"not JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(line, dict):
        raise _BadLine("expected a JSON object")
    expected = "gpu" if number == 1 else "trial"
    if line.get("kind") != expected:
        raise _BadLine(f"expected kind {expected!r}, got {line.get('kind')!r}")
    return line


def parse_records(path: Path, text: str) -> tuple[GpuInfo, list[dict[str, Any]]]:
    """The GPU and the trials of a records file; a bad line is an AutotuneError naming it."""
    gpu: GpuInfo | None = None
    trials: list[dict[str, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            if number > 1 and not raw.strip():
                continue
            line = _parse_line(raw, number)
            if gpu is None:
                gpu = _parse_gpu(line)
            else:
                trials.append(_parse_trial(line))
        except _BadLine as exc:
            raise AutotuneError(f"{path} line {number}: {exc}") from None
    if gpu is None:
        raise AutotuneError(f"{path} is empty: expected a GPU line first")
    return gpu, trials


# --- import --------------------------------------------------------------------------------------


def _gpu_id(session: Session, info: GpuInfo) -> int:
    # An imported file never overwrites a GPU row this machine wrote: it only adds missing ones.
    gpu = session.scalars(select(orm.Gpu).where(orm.Gpu.uuid == info.uuid)).one_or_none()
    if gpu is None:
        gpu = new_gpu(info)
        session.add(gpu)
        session.flush()
    return gpu.id


def _new_trial(problem_id: int, gpu_id: int, values: dict[str, Any], origin: str) -> orm.Trial:
    return orm.Trial(
        problem_id=problem_id,
        gpu_id=gpu_id,
        config_key=config_key(values["config"]),
        config=values["config"],
        status=Status.OK,
        time_us=values["time_us"],
        times_us=[float(t) for t in values["times_us"]],
        rounds=values["rounds"],
        gbs=values["gbs"],
        rel_error=values["rel_error"],
        message="",
        source_hash=values["source_hash"],
        nvcc=values["nvcc"],
        pycuda=values["pycuda"],
        driver=values["driver"],
        cuda=values["cuda"],
        origin=origin,
        created_at=values["created_at"],
        finished_at=values["created_at"],
    )


def _import_into(session: Session, path: Path, text: str) -> int:
    """Add the trials of a records file whose key is not in the database yet; returns how many."""
    info, trials = parse_records(path, text)
    gpu_id = _gpu_id(session, info)
    origin = f"shipped:{path.name}"
    problem_ids: dict[Problem, int] = {}
    added = 0
    for values in trials:
        problem = Problem(values["op"], values["dtype"], values["m"], values["n"], values["k"], values["trans"])
        if problem not in problem_ids:
            problem_ids[problem] = get_or_create_problem(session, problem, info.name).id
        pid = problem_ids[problem]
        if find_trial(session, pid, config_key(values["config"]), values["source_hash"]) is None:
            session.add(_new_trial(pid, gpu_id, values, origin))
            added += 1
    session.flush()
    return added


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise AutotuneError(f"cannot read records file {path}: {exc.strerror or exc}") from None


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AutotuneError(f"records file {path} is not UTF-8 text") from None


def import_records(db: Database, path: Path) -> int:
    """Import a records file in one transaction (all or nothing); returns how many trials were new."""
    text = _decode(path, _read(path))
    with db.session_scope(write=True) as session:
        return _import_into(session, path, text)


def _shipped_dir() -> Path | None:
    try:
        return paths.db_dir() / "records"
    except FileNotFoundError:
        return None


def _import_shipped_file(db: Database, path: Path, data: bytes, digest: str) -> int:
    with db.session_scope(write=True) as session:
        done = session.get(orm.ShippedImport, path.name)
        if done is not None and done.sha256 == digest:
            return 0  # another process imported it since we looked
        if done is not None:
            # The file changed: its old records go, so that removed or re-measured entries do not linger.
            session.execute(delete(orm.Trial).where(orm.Trial.origin == f"shipped:{path.name}"))
        added = _import_into(session, path, _decode(path, data))
        session.merge(orm.ShippedImport(file_name=path.name, sha256=digest, imported_at=orm.utcnow()))
        return added


def import_shipped(db: Database, records_dir: Path | None = None) -> int:
    """Import every records file (default db/records/*.jsonl) new or changed since its last import."""
    folder = records_dir if records_dir is not None else _shipped_dir()
    if folder is None or not folder.is_dir():
        return 0
    files = {path: _read(path) for path in sorted(folder.glob("*.jsonl"))}
    if not files:
        return 0
    digests = {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    with db.session_scope() as session:
        stmt = select(orm.ShippedImport.file_name, orm.ShippedImport.sha256)
        done = {name: digest for name, digest in session.execute(stmt)}
    # Checked before taking the write lock: opening a store must not wait on a running sweep.
    return sum(
        _import_shipped_file(db, path, data, digests[path])
        for path, data in files.items()
        if done.get(path.name) != digests[path]
    )
