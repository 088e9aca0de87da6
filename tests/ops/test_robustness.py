"""Operator mistakes stop the process with one line (issue 19 #9): a taken port, and the
split processes on the embedded broker (each would hold a private queue: nothing delivers)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops.support import child_env, free_port

KEY = "ops-robustness-admin-key-0123456789abcdef"


def _tepat(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"TEPAT_DATABASE_URL": f"sqlite:///{cwd}/t.db", "TEPAT_ADMIN_API_KEY": KEY}
    return subprocess.run(
        [sys.executable, "-m", "tepat.cli", *args],
        env=child_env({**base, "TEPAT_METRICS_PORT": "0", **env}),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["serve", "api"])
def test_a_taken_port_stops_the_process_with_one_line(command: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {} if command == "serve" else {"TEPAT_BROKER_URL": "stomp://127.0.0.1:9"}
        done = _tepat([command, "--port", str(port)], tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"tepat: bad configuration: --port: cannot listen on 127.0.0.1:{port}"
        " (Address already in use); choose another port\n"
    )


@pytest.mark.parametrize("command", ["api", "scheduler", "consumers"])
def test_a_split_process_on_the_embedded_broker_is_refused_with_one_line(
    command: str, tmp_path: Path
) -> None:
    done = _tepat([command, *(["--port", str(free_port())] if command == "api" else [])], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tepat: bad configuration: TEPAT_BROKER_URL: ")
    assert f"`tepat {command}` alone needs a shared broker" in lines[0]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER: 'zipkin'"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc'",
        ),
    ],
)
def test_a_bad_tracing_variable_stops_the_process_with_one_line(
    env: dict[str, str], named: str, tmp_path: Path
) -> None:
    done = _tepat(["serve", "--port", str(free_port())], tmp_path, **env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"tepat: bad configuration: {named}: "), lines[0]
