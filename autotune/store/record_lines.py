"""Records-file lines checked strictly: exact fields and types, known ops, sane sizes, configs in the space."""

# Every config must be a point of its op's space, so nothing from a file can reach nvcc but
# integers the space offers.

from __future__ import annotations

import json
import math
from typing import Any

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, slugify
from autotune.core.limits import MAX_SM_COUNT
from autotune.core.problem import MAX_DIM, Problem
from autotune.core.target import check_capability
from autotune.core.timing_bounds import MAX_TIME_US, MIN_TIME_US, impossible_speed, is_plausible_time_us
from autotune.store.rows import parse_utc, problem_or_fault

_GPU_TYPES: dict[str, type] = {
    "name": str,
    "compute_capability": str,
    "sm_count": int,
    "l2_bytes": int,
    "memory_bytes": int,
    "driver": str,
    "cuda": str,
}
_GPU_OPTIONAL = frozenset({"kind", "uuid"})
# Field -> JSON type; float fields take JSON integers too. Nullable fields may also be null.
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
# Written by later versions; records of earlier ones lack them and get their defaults.
# What the GPU ran at while timed: optional, positive numbers (or null) below these bounds.
CLOCK_FIELDS = {"sm_mhz": 1e5, "mem_mhz": 1e5, "power_w": 1e5}
# A problem's input dtypes and variant: written only where it names them (records.key_fields).
_TRIAL_OPTIONAL = frozenset({"kind", "k", "trans", "inputs", "variant", "rounds", *CLOCK_FIELDS})
_MAX_INPUTS = 16  # input arrays a kernel reads: a handful
_NULLABLE = frozenset({"gbs", "rel_error"})
_MAX_TEXT = 200  # any text field: names, versions, hashes, dates
_MAX_SAMPLES = 10_000
# Each integer field's bounds, inclusive: what a GPU can have or a measurement can take, and always
# within its column (INTEGER for sm_count and rounds, BIGINT for bytes), so that SQLite and
# PostgreSQL give a file the same verdict. confirm.py measures a handful of rounds.
_COUNTS = {"sm_count": MAX_SM_COUNT, "l2_bytes": 2**48, "memory_bytes": 2**48}
_MAX_ROUNDS = 10**6
# A trial is stored only once its output passed the float64 check (every element within the op's
# tolerance, about 2^-12 of the terms' magnitudes); an output off by its own size never passes.
_MAX_REL_ERROR = 1.0
_MAX_GBS = 1e7  # GB/s: a thousand times any memory's bandwidth, so no time that passes gives more


class BadLine(Exception):
    """What is wrong with one line; turned into an AutotuneError naming the file and line."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(name: str, value: str) -> str:
    if len(value) > _MAX_TEXT:
        raise BadLine(f"field {name!r} is longer than {_MAX_TEXT} characters")
    # Text is printed by `list`, `gpus` and `best`: no terminal control codes.
    if not value.isprintable():
        raise BadLine(f"field {name!r} holds control characters: {_show(value)}")
    return value


def _typed(line: dict[str, Any], name: str, kind: type, nullable: bool = False) -> Any:
    if name not in line:
        raise BadLine(f"missing field {name!r}")
    value: Any = line[name]
    if value is None and nullable:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadLine(f"field {name!r} must be a {kind.__name__}, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadLine(f"field {name!r} must be a finite number, got {_show(value)}")
    if kind is str:
        return _text(name, str(value))
    return value


def _no_unknown(line: dict[str, Any], known: set[str] | frozenset[str]) -> None:
    unknown = sorted(set(line) - set(known))
    if unknown:
        raise BadLine(f"unknown field {_show(unknown[0])}")


def parse_gpu(line: dict[str, Any]) -> GpuInfo:
    _no_unknown(line, set(_GPU_TYPES) | _GPU_OPTIONAL)
    values = {name: _typed(line, name, kind) for name, kind in _GPU_TYPES.items()}
    for name, most in _COUNTS.items():
        if not 0 < values[name] <= most:
            raise BadLine(f"field {name!r} must be a count from 1 to {most}, got {values[name]}")
    try:
        check_capability(values["compute_capability"])
    except AutotuneError as exc:
        raise BadLine(f"field 'compute_capability': {exc}") from None
    if not values["name"].strip():
        raise BadLine("field 'name' is empty")
    # Records without a real uuid share one stand-in row per GPU model.
    uuid = line.get("uuid") or f"shipped:{slugify(values['name'])}"
    if not isinstance(uuid, str):
        raise BadLine(f"field 'uuid' must be a str, got {_show(uuid)}")
    return GpuInfo(uuid=_text("uuid", uuid), **values)


def _optional_int(line: dict[str, Any], name: str, default: int, least: int, most: int) -> int:
    value = line.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise BadLine(f"field {name!r} must be an integer from {least} to {most}, got {_show(value)}")
    return value


def _optional_positive(line: dict[str, Any], name: str, bound: float) -> float | None:
    value = line.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < bound:
        raise BadLine(f"field {name!r} must be a positive number below {bound:g} or null, got {_show(value)}")
    return float(value)


def _problem(values: dict[str, Any], line: dict[str, Any]) -> Problem:
    k = _optional_int(line, "k", 0, 0, MAX_DIM)
    trans = line.get("trans", False)
    if not isinstance(trans, bool):
        raise BadLine(f"field 'trans' must be true or false, got {_show(trans)}")
    inputs, variant = _inputs_and_variant(line)
    found = problem_or_fault(values["op"], values["dtype"], values["m"], values["n"], k, trans, inputs, variant)
    if isinstance(found, str):
        raise BadLine(found)
    return found


def _inputs_and_variant(line: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    """The problem's input dtypes and variant. A line names them or leaves them out: an empty list or
    string would be a second spelling of the plain problem."""
    inputs: Any = line.get("inputs", [])
    listed = isinstance(inputs, list) and 0 < len(inputs) <= _MAX_INPUTS and all(isinstance(d, str) for d in inputs)
    if "inputs" in line and not listed:
        raise BadLine(f"field 'inputs' must be a list of 1 to {_MAX_INPUTS} dtype names, got {_show(inputs)}")
    variant: Any = line.get("variant", "")
    if "variant" in line and (not isinstance(variant, str) or not variant):
        raise BadLine(f"field 'variant' must be a non-empty string, got {_show(variant)}")
    return tuple(_text("inputs", name) for name in inputs), _text("variant", variant)


def _config(problem: Problem, config: dict[str, Any], source_hash: str) -> dict[str, int]:
    """A config of the problem's space, or (a trial of a library family, `cublas`: its source hash
    names the library) the rank of a library's candidate; nothing else, so no file reaches nvcc."""
    library = ops.library_of_source(source_hash) or ops.library_for(config)
    if library is not None:
        if not library.owns_source(source_hash) or set(config) != {library.config_key}:
            key, prefix = library.config_key, library.source_prefix
            raise BadLine(f"a {library.label} trial has config {{{key!r}: rank}} and source {prefix}*")
        if not library.serves(problem):
            raise BadLine(f"{library.label} does not serve {problem.op}")
        try:
            library.rank_of(config)
        except AutotuneError as exc:
            raise BadLine(str(exc)) from None
        return config
    op = ops.for_problem(problem)
    config = op.stored_config(problem, config)
    why = op.space(problem).check(config)
    if why is not None:
        raise BadLine(f"config is not valid for {problem}: {why}")
    return config


def parse_trial(line: dict[str, Any]) -> dict[str, Any]:
    """The values of a trial line, with `problem` in place of its op, dtype and dims."""
    _no_unknown(line, set(_TRIAL_TYPES) | _TRIAL_OPTIONAL)
    values = {name: _typed(line, name, kind, name in _NULLABLE) for name, kind in _TRIAL_TYPES.items()}
    values["problem"] = _problem(values, line)
    values["rounds"] = _optional_int(line, "rounds", 1, 1, _MAX_ROUNDS)
    for name, bound in CLOCK_FIELDS.items():
        values[name] = _optional_positive(line, name, bound)
    values["config"] = _config(values["problem"], values["config"], values["source_hash"])
    _check_times(values)
    try:
        values["created_at"] = parse_utc(values["created_at"])
    except ValueError as exc:
        raise BadLine(f"field 'created_at': {exc}") from None
    return values


_TIME_RANGE = f"from {MIN_TIME_US:g} to {MAX_TIME_US:g} microseconds (no kernel call is faster than its launch)"


def _check_times(values: dict[str, Any]) -> None:
    """Every time a kernel call can take (core/timing_bounds.py), and a bandwidth and error that go with one."""
    if not is_plausible_time_us(values["time_us"]):
        raise BadLine(f"field 'time_us' must be a time {_TIME_RANGE}, got {values['time_us']!r}")
    samples = values["times_us"]
    if len(samples) > _MAX_SAMPLES:
        raise BadLine(f"field 'times_us' holds more than {_MAX_SAMPLES} samples")
    for sample in samples:
        if not is_plausible_time_us(sample):
            raise BadLine(f"field 'times_us' must hold times {_TIME_RANGE}, got {_show(sample)}")
    op, problem = ops.for_problem(values["problem"]), values["problem"]
    fastest = min([values["time_us"], *samples])
    why = impossible_speed(op.bytes_moved(problem), op.flops(problem), fastest)
    if why is not None:
        raise BadLine(f"a time of {fastest:g} us for {problem} would be {why}")
    if values["gbs"] is not None and not 0 <= values["gbs"] < _MAX_GBS:
        raise BadLine(f"field 'gbs' must be a bandwidth from 0 to {_MAX_GBS:g} GB/s or null, got {values['gbs']!r}")
    if values["rel_error"] is not None and not 0 <= values["rel_error"] <= _MAX_REL_ERROR:
        bounds = f"from 0 to {_MAX_REL_ERROR:g} (a timed trial passed the float64 check)"
        raise BadLine(f"field 'rel_error' must be a relative error {bounds} or null, got {values['rel_error']!r}")


def parse_line(raw: str, number: int) -> dict[str, Any]:
    try:
        line = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        reason = exc.args[0] if isinstance(exc, ValueError) and exc.args else type(exc).__name__
        raise BadLine(f"not JSON ({reason})") from None
    if not isinstance(line, dict):
        raise BadLine("expected a JSON object")
    expected = "gpu" if number == 1 else "trial"
    if line.get("kind") != expected:
        raise BadLine(f"expected kind {expected!r}, got {_show(line.get('kind'))}")
    return line


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")
