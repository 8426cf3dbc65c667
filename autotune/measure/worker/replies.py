"""Worker replies checked before use: the envelope (id, then result or error) and a measurement's fields."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status

# A measurement reply is a few kilobytes (every repetition's time); a line longer than this is not one.
MAX_REPLY_CHARS = 1 << 20
# What a worker may report for a config it measured; a hang, a death or a quarantine is the
# orchestrator's verdict, never the worker's.
WORKER_STATUSES = frozenset({Status.OK, Status.LAUNCH_ERROR, Status.WRONG_RESULT})
_OUTCOME_KEYS = frozenset(
    {"status", "message", "time_us", "times_us", "gbs", "rel_error", "sm_mhz", "mem_mhz", "power_w"}
)


class BadReply(ValueError):
    """A reply that breaks the protocol: the worker that sent it is not to be trusted any further."""


def _show(text: str) -> str:
    return repr(text[:80]) + ("..." if len(text) > 80 else "")


def parse_envelope(line: str, request_id: int) -> dict[str, Any] | None:
    """The reply to request `request_id` as {"id", "result"} or {"id", "error"}; None for a reply to
    an earlier request (a duplicate or a late one: ignored, so it can never be taken for this one's).
    Raises BadReply for anything else."""
    try:
        reply = json.loads(line)
    except ValueError:
        raise BadReply(f"not JSON: {_show(line.strip())}") from None
    if not isinstance(reply, dict):
        raise BadReply(f"not a JSON object: {_show(line.strip())}")
    reply_id = reply.get("id")
    if type(reply_id) is not int:
        raise BadReply(f"no request id in {_show(line.strip())}")
    if reply_id < request_id:
        return None
    if reply_id > request_id:
        raise BadReply(f"an answer to request {reply_id} while request {request_id} was waiting")
    keys = set(reply) - {"id"}
    if keys == {"result"} and isinstance(reply["result"], dict):
        return reply
    if keys == {"error"} and isinstance(reply["error"], str):
        return reply
    raise BadReply(f"a reply needs a result object or an error text, got keys {sorted(keys)}")


def _number(value: Any, name: str, *, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if type(value) not in (int, float):  # bool is an int subclass, and no number here
        raise BadReply(f"{name} is not a number: {_show(repr(value))}")
    return float(value)


def outcome_from_reply(result: Mapping[str, Any]) -> Outcome:
    """A measurement reply as an Outcome; raises BadReply where a key or a type is wrong. An OK
    whose time is not a finite positive number is a wrong result, as a NaN output would be."""
    unknown = set(result) - _OUTCOME_KEYS
    if unknown or "status" not in result:
        raise BadReply(f"a measurement needs a status and only {sorted(_OUTCOME_KEYS)}, got {sorted(result)}")
    try:
        status = Status(result["status"])
    except ValueError:
        raise BadReply(f"unknown status {_show(repr(result['status']))}") from None
    if status not in WORKER_STATUSES:
        raise BadReply(f"a worker cannot report {status.value!r}")
    message = result.get("message", "")
    times = result.get("times_us", [])
    if not isinstance(message, str):
        raise BadReply(f"message is not text: {_show(repr(message))}")
    if not isinstance(times, list):
        raise BadReply(f"times_us is not a list: {_show(repr(times))}")
    outcome = Outcome(
        status=status,
        message=message,
        time_us=_number(result.get("time_us"), "time_us"),
        times_us=[float(_number(t, "times_us[]", optional=False) or 0.0) for t in times],
        gbs=_number(result.get("gbs"), "gbs"),
        rel_error=_number(result.get("rel_error"), "rel_error"),
        sm_mhz=_number(result.get("sm_mhz"), "sm_mhz"),
        mem_mhz=_number(result.get("mem_mhz"), "mem_mhz"),
        power_w=_number(result.get("power_w"), "power_w"),
    )
    if outcome.ok and (outcome.time_us is None or not math.isfinite(outcome.time_us) or outcome.time_us <= 0):
        return Outcome(Status.WRONG_RESULT, f"the worker reported a time of {outcome.time_us}")
    return outcome


def gpu_from_reply(result: Mapping[str, Any]) -> GpuInfo:
    """The hello reply as a GpuInfo: exactly its fields, text and whole numbers as declared."""
    expected = {f.name: f.type for f in fields(GpuInfo)}
    if set(result) != set(expected):
        raise BadReply(f"hello needs the keys {sorted(expected)}, got {sorted(result)}")
    for name, kind in expected.items():
        wanted = int if kind in (int, "int") else str
        if type(result[name]) is not wanted:
            raise BadReply(f"hello's {name} is not {wanted.__name__}: {_show(repr(result[name]))}")
    return GpuInfo(**result)
