"""The lines about messages written together (``send recorded``) read exactly as lines
written one by one, without a record per line where logging is set up as a process does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import structlog
from structlog.testing import capture_logs

from tepat.services.sending.message_log import log_lines

# Each way of writing the same three lines, one JSON document per way on stdout; the lines
# themselves go to stderr, as a process's do.
SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    import structlog
    from tepat.logging import configure_logging
    from tepat.services.sending.message_log import log_lines

    configure_logging("INFO", json=True)
    structlog.contextvars.bind_contextvars(request_id="r-1")
    made = []
    factory = logging.getLogRecordFactory()
    logging.setLogRecordFactory(lambda *a, **k: made.append(1) or factory(*a, **k))
    log = structlog.get_logger("tepat.recording")
    lines = [
        {"message_id": "m1", "user_id": "ana", "channel": "push", "attempt": 1},
        {"message_id": "m2", "user_id": "bo", "channel": "push", "reason": "see /u/secret"},
        {"message_id": "m3", "user_id": "cy", "channel": "push", "applied": "1 of 3"},
    ]
    for way in ("one by one", "together"):
        made.clear()
        if way == "together":
            log_lines(log, "send recorded", lines)
        else:
            for line in lines:
                log.info("send recorded", **line)
        sys.stderr.flush()
        print(json.dumps({"way": way, "records": len(made)}), flush=True)
    """
)


def test_lines_written_together_read_as_lines_written_one_by_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    ways = [json.loads(line) for line in done.stdout.splitlines()]
    # Two records a line one by one (the formatter copies the logger's).
    assert ways == [{"way": "one by one", "records": 6}, {"way": "together", "records": 0}]
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert len(lines) == 6
    for line in lines:
        assert line.pop("timestamp")
    # The same fields in the same order, the context's and the redaction included.
    assert [list(line.items()) for line in lines[:3]] == [list(line.items()) for line in lines[3:]]
    assert lines[1]["reason"] == "see /u/REDACTED" and lines[0]["request_id"] == "r-1"


def test_lines_captured_by_a_test_are_each_their_own_event() -> None:
    with capture_logs() as logs:
        log_lines(structlog.get_logger("tepat.recording"), "send recorded", [{"a": 1}, {"a": 2}])
    assert logs == [
        {"event": "send recorded", "log_level": "info", "a": 1},
        {"event": "send recorded", "log_level": "info", "a": 2},
    ]
