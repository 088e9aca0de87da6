"""Run a benchmark as its user does (``python -m bench…`` in a child process) for a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench_result(*argv: str, timeout: float = 300) -> dict[str, Any]:
    """The JSON result a one-scenario run prints last; its exit status must be 0."""
    # The benchmark sets its own settings: none of the caller's TEPAT_* may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPAT_")}
    proc = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


STOMP_URL_ENV = "TEPAT_TEST_STOMP_URL"


def backends() -> list[Any]:
    """Embedded always; ActiveMQ where ``TEPAT_TEST_STOMP_URL`` names a broker."""
    amq = pytest.param(
        "activemq",
        marks=pytest.mark.skipif(
            not os.environ.get(STOMP_URL_ENV), reason=f"{STOMP_URL_ENV} is not set"
        ),
    )
    return ["embedded", amq]
