"""``tepat api --workers N``: several API processes on one port (issue 10, bench register).

With the embedded broker it is refused with one line (the queue lives inside one
process). On ActiveMQ (``TEPAT_TEST_STOMP_URL``) every worker opens its own runtime,
they serve one port together, and SIGTERM stops them all cleanly.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.ops.support import ROOT, child_env, free_port, tepat, wait_http
from tests.support.waiting import eventually

KEY = "ops-workers-admin-key-0123456789abcdef"


def test_workers_on_the_embedded_broker_are_refused_with_one_line(tmp_path: Path) -> None:
    env = child_env(
        {"TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/t.db", "TEPAT_ADMIN_API_KEY": KEY}
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tepat.cli", "api", "--workers", "2", "--port", str(free_port())],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    # the rule and the line of a single `tepat api` (tests/ops/test_robustness.py)
    assert lines[0].startswith("tepat: bad configuration: TEPAT_BROKER_URL: ")
    assert "`tepat api` alone needs a shared broker" in lines[0]


@pytest.mark.activemq
async def test_workers_share_one_port_and_stop_cleanly(tmp_path: Path) -> None:
    broker = os.environ.get("TEPAT_TEST_STOMP_URL", "")
    if not broker:
        pytest.skip("TEPAT_TEST_STOMP_URL is not set (scripts/test.sh starts ActiveMQ)")
    port = free_port()
    env = child_env(
        {
            "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/t.db",
            "TEPAT_BROKER_URL": broker,
            "TEPAT_ADMIN_API_KEY": KEY,
            "TEPAT_LOG_JSON": "true",
            "TEPAT_METRICS_PORT": "0",
            "TEPAT_HTTP_HEADER_TIMEOUT_SECONDS": "1",
        }
    )
    base = f"http://127.0.0.1:{port}"
    args = ["api", "--workers", "2", "--port", str(port)]
    with tepat("api", args, env, tmp_path) as api:
        await wait_http(api, f"{base}/readyz")

        def ready_pids() -> set[int]:
            lines = [json.loads(line) for line in api.stderr().splitlines() if line.strip()]
            return {e["pid"] for e in lines if e.get("event") == "api worker ready"}

        async def both_ready() -> bool:
            return len(ready_pids()) == 2

        await eventually(both_ready, timeout=60, what="two api workers ready")
        items = [
            {
                "user_id": f"w{n}",
                "timezone": "Asia/Jakarta",
                "devices": [{"device_id": "p", "push_token": f"ExponentPushToken[w{n}]"}],
            }
            for n in range(20)
        ]
        headers = {"X-API-Key": KEY}
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            r = await client.post("/v1/bulk/users", json=items, headers=headers)
            assert r.status_code == 200, r.text
            assert {i["status"] for i in r.json()["items"]} == {"created"}
            for n in range(20):
                got = await client.get(f"/v1/users/w{n}/devices", headers=headers)
                assert got.status_code == 200, got.text
        # A client that never finishes its headers is closed by whichever worker took it
        # (the guard of tepat/http_server.py, here in uvicorn's spawned workers too).
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: tepat\r\n")  # no blank line: unfinished
        await writer.drain()
        closed = await asyncio.wait_for(reader.read(), timeout=30)
        assert closed == b"", closed  # closed unanswered, well before the 30 s
        writer.close()
        assert api.stop() == 0, api.stderr()
    for line in api.stderr().splitlines():
        json.loads(line)  # every worker logs JSON lines only
