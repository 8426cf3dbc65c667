"""Worker replies checked before use: the envelope (id, then result or error) and a measurement's fields."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.timing_bounds import MAX_TIME_US, MIN_TIME_US, is_plausible_time_us

# A measurement reply is a few kilobytes (every repetition's time); a line longer than this is not one.
MAX_REPLY_CHARS = 1 << 20
# The deepest reply the protocol has is a measurement: the envelope, its result, the times list; one
# level more is headroom. Deeper nesting is refused before it is parsed: a line of brackets well under
# MAX_REPLY_CHARS would otherwise take the parser into a RecursionError.
MAX_REPLY_DEPTH = 4
# What changes the nesting depth of JSON text: an escape (inside a string), a quote, a bracket.
_DEPTH_TOKENS = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
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


def _nested_deeper_than(text: str, limit: int) -> bool:
    """Whether JSON `text` opens more than `limit` arrays or objects inside one another; brackets
    inside strings do not count. Stops at the first level past `limit`, so a long run costs nothing."""
    depth = 0
    in_string = False
    for token in _DEPTH_TOKENS.finditer(text):
        char = token.group()
        if char == '"':
            in_string = not in_string
        elif in_string or len(char) > 1:
            continue  # a bracket inside a string, or an escape (valid JSON has them inside strings only)
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def parse_envelope(line: str, request_id: int) -> dict[str, Any] | None:
    """The reply to request `request_id` as {"id", "result"} or {"id", "error"}; None for a reply to
    an earlier request (a duplicate or a late one: ignored, so it can never be taken for this one's).
    Raises BadReply for anything else."""
    if _nested_deeper_than(line, MAX_REPLY_DEPTH):
        raise BadReply(f"nested deeper than {MAX_REPLY_DEPTH} levels: {_show(line.strip())}")
    try:
        reply = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: kept as a second guard on the depth check
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


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):  # bool is an int subclass, and no number here
        raise BadReply(f"{name} is not a number: {_show(repr(value))}")
    return float(value)


def _samples(times: list[Any]) -> list[float]:
    """Every repetition's time, each a plausible one: a timer cannot produce NaN, a negative or a
    zero time, so a worker that reports one is broken and none of its numbers is to be stored."""
    for index, sample in enumerate(times):
        if not is_plausible_time_us(sample):
            raise BadReply(
                f"times_us[{index}] is {_show(repr(sample))}, not a time of {MIN_TIME_US:g} to {MAX_TIME_US:g} us"
            )
    return [float(sample) for sample in times]


def outcome_from_reply(result: Mapping[str, Any]) -> Outcome:
    """A measurement reply as an Outcome; raises BadReply where a key or a type is wrong, or a
    sample is no plausible time. An OK whose time is not a plausible time (NaN, zero, below the
    floor) is a wrong result, as a NaN output would be."""
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
        times_us=_samples(times),
        gbs=_number(result.get("gbs"), "gbs"),
        rel_error=_number(result.get("rel_error"), "rel_error"),
        sm_mhz=_number(result.get("sm_mhz"), "sm_mhz"),
        mem_mhz=_number(result.get("mem_mhz"), "mem_mhz"),
        power_w=_number(result.get("power_w"), "power_w"),
    )
    if outcome.ok and not is_plausible_time_us(outcome.time_us):
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
