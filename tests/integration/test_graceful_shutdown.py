"""`tepat serve` under load, then SIGTERM: no accepted request lost, nothing left `sending`."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.waiting import eventually

KEY = "shutdown-test-admin-key-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_sigterm_under_load_drains_cleanly(tmp_path: Path) -> None:
    port, sandbox_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "TEPAT_DATABASE_URL": f"sqlite:///{tmp_path}/tepat.db",
        "TEPAT_ADMIN_API_KEY": KEY,
        "TEPAT_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before any awaiting
        [
            sys.executable,
            "-m",
            "tepat.cli",
            "serve",
            "--sandbox",
            "--port",
            str(port),
            "--sandbox-port",
            str(sandbox_port),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"X-API-Key": KEY}
    accepted: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:

            async def up() -> bool:
                try:
                    return (await client.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(up, timeout=30, what="the API to start")
            for i in range(20):
                r = await client.put(f"/v1/users/u{i}", json={"timezone": "UTC"})
                assert r.status_code in (200, 201), r.text
                r = await client.put(
                    f"/v1/users/u{i}/devices/d{i}",
                    json={"push_token": f"ExponentPushToken[sd-{i}]"},
                )
                assert r.status_code in (200, 201), r.text

            async def post(n: int) -> None:
                try:
                    r = await client.post(
                        f"/v1/users/u{n % 20}/notifications",
                        json={
                            "idempotency_key": f"k{n}",
                            "category": "custom",
                            "title": "t",
                            "body": f"b{n}",
                        },
                    )
                except httpx.TransportError:
                    return  # refused or cut: never accepted
                if r.status_code in (200, 201):
                    accepted.append(r.json()["id"])

            load = [asyncio.create_task(post(n)) for n in range(300)]
            await eventually(lambda: len(accepted) >= 50, timeout=60, what="load accepted")
            proc.send_signal(signal.SIGTERM)
            await asyncio.gather(*load)
        _, err = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert b"Traceback" not in err, err.decode()[-3000:]
    db = sqlite3.connect(tmp_path / "tepat.db")
    stored = {row[0]: row[1] for row in db.execute("SELECT id, status FROM messages")}
    assert accepted and set(accepted) <= set(stored)
    assert "sending" not in stored.values()
