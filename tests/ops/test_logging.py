"""One JSON renderer for every logger; access lines with their own level, probes at DEBUG;
bad metrics settings stop the start with one line."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tepat.logging import AccessLevelFilter, redact_secrets
from tests.ops.support import Proc, child_env, json_lines

# What a process does before it dies: structlog, the libraries' own loggers, a warning,
# a handled exception, then an exception nobody catches.
SCRIPT = textwrap.dedent(
    """
    import logging, warnings
    import structlog
    from tepat.logging import configure_logging

    configure_logging("INFO", json=True)
    structlog.get_logger("tepat.test").info("structured", answer=42)
    logging.getLogger("stomp.py").info("Established connection to host %s", "127.0.0.1")
    logging.getLogger("pymongo.serverSelection").warning("no server\\nsecond line")
    logging.getLogger("httpx").info("HTTP Request: POST http://expo/ 200")  # below its level
    logging.getLogger("httpx").warning("HTTP Request failed")
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    warnings.warn("something old", DeprecationWarning, stacklevel=1)
    try:
        1 / 0
    except ZeroDivisionError:
        structlog.get_logger("tepat.test").exception("handled")
    raise RuntimeError("nobody catches this")
    """
)


def test_every_logger_and_the_last_traceback_are_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "script.stderr"
    with path.open("wb") as err:
        popen = subprocess.Popen(
            [sys.executable, "-W", "always", "-c", SCRIPT],
            env=child_env({}),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        assert popen.wait(timeout=60) == 1
    events = json_lines(Proc("script", popen, path))
    by_event = {e["event"]: e for e in events}
    assert by_event["structured"]["answer"] == 42
    assert by_event["structured"]["logger"] == "tepat.test"
    assert by_event["Established connection to host 127.0.0.1"]["logger"] == "stomp.py"
    assert by_event["no server\nsecond line"]["level"] == "warning"
    assert "HTTP Request: POST http://expo/ 200" not in by_event
    assert by_event["HTTP Request failed"]["logger"] == "httpx"
    assert any(e["logger"] == "py.warnings" and "something old" in e["event"] for e in events)
    assert "ZeroDivisionError" in by_event["handled"]["exception"]
    last = events[-1]
    assert last["event"] == "uncaught exception" and last["level"] == "critical"
    assert "RuntimeError: nobody catches this" in last["exception"]


def _access(path: str) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("10.0.0.1:5555", "GET", path, "1.1", 200),
        None,
    )


@pytest.mark.parametrize(
    ("threshold", "path", "kept", "level"),
    [
        (logging.INFO, "/v1/users/ana", True, logging.INFO),
        (logging.INFO, "/healthz", False, logging.DEBUG),
        (logging.INFO, "/readyz", False, logging.DEBUG),
        (logging.INFO, "/metrics?x=1", False, logging.DEBUG),
        (logging.DEBUG, "/healthz", True, logging.DEBUG),
        (logging.WARNING, "/v1/users/ana", False, logging.INFO),
    ],
)
def test_probes_and_scrapes_are_debug_access_lines(
    threshold: int, path: str, kept: bool, level: int
) -> None:
    record = _access(path)
    assert AccessLevelFilter(threshold).filter(record) is kept
    assert record.levelno == level


def test_a_token_in_the_query_never_reaches_the_access_log() -> None:
    record = _access("/v1/users/ana/inbox/stream?last_event_id=4&access_token=eyJ.secret.sig")
    assert AccessLevelFilter(logging.INFO).filter(record)
    line = record.getMessage()
    assert "eyJ.secret.sig" not in line
    assert "/v1/users/ana/inbox/stream?last_event_id=4&access_token=REDACTED" in line


def _tepat(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tepat.cli", *args],
        env=child_env({"TEPAT_DATABASE_URL": f"sqlite:///{cwd}/t.db", **env}),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_metrics_port_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _tepat(["consumers"], {"TEPAT_METRICS_PORT": "70000"}, tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("tepat: bad configuration: TEPAT_METRICS_PORT: ")
    assert done.stderr.count("\n") == 1

    done = _tepat(["scheduler"], {"TEPAT_ACCESS_LOG_LEVEL": "LOUD"}, tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("tepat: bad configuration: TEPAT_ACCESS_LOG_LEVEL: ")


def test_a_taken_metrics_port_stops_the_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # A broker URL (never reached: the port is bound first), since `tepat consumers`
        # refuses the embedded broker (issue 19 #9).
        stomp = {"TEPAT_BROKER_URL": "stomp://127.0.0.1:9"}
        done = _tepat(["consumers", "--metrics-port", str(port)], stomp, tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"tepat: bad configuration: TEPAT_METRICS_PORT: cannot listen on 127.0.0.1:{port}"
        " (Address already in use); choose another port, or 0 for none\n"
    )


def test_every_line_has_url_credentials_redacted_not_only_access_lines() -> None:
    event = {
        "event": "calling https://tepat.example/u/tok-123?x=1 for ana",
        "url": "https://hooks.example/in?Access%5FToken=jwt-1&page=2",
        "args": ("/u/tok-456", 3),
        "count": 2,
    }
    out = redact_secrets(None, "info", dict(event))
    assert out["event"] == "calling https://tepat.example/u/REDACTED?x=1 for ana"
    assert out["url"] == "https://hooks.example/in?Access%5FToken=REDACTED&page=2"
    assert out["args"] == ["/u/REDACTED", 3] and out["count"] == 2
    # A user named "u" is not a token, and harmless parameters stay.
    assert redact_secrets(None, "info", {"event": "/v1/users/u/inbox?limit=5"}) == {
        "event": "/v1/users/u/inbox?limit=5"
    }
