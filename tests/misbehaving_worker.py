"""A stand-in worker that breaks the protocol one way (argv[1]) when asked to measure; run as a script."""

from __future__ import annotations

import json
import os
import sys
import time


def _reply(out: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def _reply_nested(request_id: int) -> None:
    # 0.8 MB of brackets, under the client's line limit: enough to exhaust a recursive parser.
    sys.stdout.write(f'{{"id": {request_id}, "result": ' + "[" * 400_000 + "]" * 400_000 + "}\n")
    sys.stdout.flush()


def _measure(mode: str, request_id: int, config: dict[str, int]) -> None:
    good = {"status": "ok", "time_us": float(config.get("x", 1)), "times_us": [1.0], "message": ""}
    if mode == "garbage":
        sys.stdout.write("\x1b[31m<<not json>>\n")
    elif mode == "binary":
        sys.stdout.buffer.write(b"\xff\xfe\x00garbage\n")
    elif mode == "half":
        sys.stdout.write(json.dumps({"id": request_id, "result": good})[:20])
        sys.stdout.flush()
        os._exit(0)
    elif mode == "long":
        sys.stdout.write("x" * (2 << 20) + "\n")
    elif mode == "no-id":
        _reply({"result": good})
    elif mode == "list":
        _reply([request_id, good])  # type: ignore[arg-type]
    elif mode == "missing-status":
        _reply({"id": request_id, "result": {"time_us": 1.0}})
    elif mode == "bad-status":
        _reply({"id": request_id, "result": {**good, "status": "splendid"}})
    elif mode == "worker-quarantine":
        _reply({"id": request_id, "result": {**good, "status": "quarantined"}})
    elif mode == "string-time":
        _reply({"id": request_id, "result": {**good, "time_us": "fast"}})
    elif mode == "bool-time":
        _reply({"id": request_id, "result": {**good, "time_us": True}})
    elif mode == "extra-key":
        _reply({"id": request_id, "result": {**good, "cubin": "/etc/passwd"}})
    elif mode == "result-and-error":
        _reply({"id": request_id, "result": good, "error": "both"})
    elif mode == "future-id":
        _reply({"id": request_id + 1, "result": good})
    elif mode == "deep":
        _reply_nested(request_id)
    elif mode == "close-stdout":  # alive, but no reply can ever come
        os.close(sys.stdout.fileno())
        time.sleep(60)
    elif mode == "bad-samples":
        _reply({"id": request_id, "result": {**good, "times_us": [float("nan"), float("inf"), -1.0]}})
    elif mode == "zero-samples":
        _reply({"id": request_id, "result": {**good, "times_us": [-5.0, 0.0]}})
    elif mode == "tiny-time":
        _reply({"id": request_id, "result": {**good, "time_us": 1e-200, "times_us": []}})
    elif mode == "extra":  # every answer sent twice: the second copy must not be taken for the next
        _reply({"id": request_id, "result": good})
        _reply({"id": request_id, "result": {**good, "time_us": 999.0}})
    else:
        _reply({"id": request_id, "result": good})


def main() -> None:
    mode = sys.argv[1]
    if mode == "deaf":  # never reads a request: a large one fills the pipe and blocks its writer
        time.sleep(60)
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "hello" and mode == "deep":
            _reply_nested(request["id"])
        elif request["cmd"] == "measure":
            _measure(mode, request["id"], request["config"])
        elif request["cmd"] == "setup" and mode == "setup-dies":
            os._exit(5)
        elif request["cmd"] == "setup" and mode.startswith("setup-dies-once:"):
            marker = mode.split(":", 1)[1]  # dies the first time only: the file tells later workers
            if not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(5)
            _reply({"id": request["id"], "result": {"pid": os.getpid()}})
        else:
            _reply({"id": request["id"], "result": {"pid": os.getpid()}})
        sys.stdout.flush()


if __name__ == "__main__":
    main()
