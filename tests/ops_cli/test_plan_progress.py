"""`tepat plan`: a progress line on a terminal only, and a summary line at the end."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import re
import subprocess
import sys
from datetime import time
from pathlib import Path

from tepat.adapters.sqlite import SqliteStore
from tepat.cli_progress import PlanProgress
from tepat.domain.models import Reminder, User
from tepat.services.planning.creator import PlanResult
from tests.ops_cli.support import env, tepat

USERS = 30
WINDOW = ("--start", "2027-01-01T00:00:00Z", "--end", "2027-01-08T00:00:00Z")
SUMMARY = re.compile(
    rf"^created (\d+), existing 0 \({USERS} users in [\d.]+ s, [\d,]+ created/s\)$"
)


async def _seed(db: Path) -> None:
    store = SqliteStore(str(db))
    await store.open()
    try:
        for n in range(USERS):
            await store.upsert_user(User(f"u{n}", "Europe/London"))
            await store.upsert_reminder(
                Reminder(f"u{n}", "r", "meal", time(9), title="t", body="b")
            )
    finally:
        await store.close()


def test_plan_on_a_terminal_shows_progress_and_prints_a_summary(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    asyncio.run(_seed(db))
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tepat.cli", "plan", *WINDOW],
            env=env(TEPAT_DATABASE_URL=f"sqlite:///{db}", TEPAT_LOG_LEVEL="WARNING"),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
        )
        os.close(slave)
        out, _ = proc.communicate(timeout=120)
        terminal = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        os.close(master)
    assert proc.returncode == 0, terminal.decode(errors="replace")
    shown = terminal.decode(errors="replace")
    assert f"planning: {USERS} users done, {USERS * 7} messages created" in shown
    assert "created/s" in shown and shown.endswith("\r\x1b[K"), repr(shown)
    match = SUMMARY.match(out.strip())
    assert match, out
    assert int(match.group(1)) == USERS * 7


def test_plan_without_a_terminal_prints_only_the_summary(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    asyncio.run(_seed(db))
    done = tepat(
        "plan",
        *WINDOW,
        environ=env(TEPAT_DATABASE_URL=f"sqlite:///{db}", TEPAT_LOG_LEVEL="WARNING"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "planning:" not in done.stderr and "\r" not in done.stderr
    assert SUMMARY.match(done.stdout.strip()), done.stdout


def test_progress_redraws_at_most_once_per_interval() -> None:
    now = [100.0]
    stream = io.StringIO()
    progress = PlanProgress(stream, live=True, interval=0.2, monotonic=lambda: now[0])
    progress(1000, PlanResult(created=3000))
    now[0] += 0.1
    progress(1000, PlanResult(created=6000))  # too soon: counted, not drawn
    now[0] += 0.2
    progress(500, PlanResult(created=7500, existing=10))
    drawn = stream.getvalue().split("\r")[1:]
    assert drawn == [
        "planning: 1,000 users done, 3,000 messages created, 0 existing, 0 created/s\x1b[K",
        "planning: 2,500 users done, 7,500 messages created, 10 existing, 25,000 created/s\x1b[K",
    ]
    now[0] += 0.7
    assert progress.finish() == "created 7500, existing 10 (2500 users in 1.0 s, 7,500 created/s)"
    assert stream.getvalue().endswith("\r\x1b[K")


def test_progress_off_the_terminal_draws_nothing() -> None:
    stream = io.StringIO()
    progress = PlanProgress(stream, live=False)
    progress(10, PlanResult(created=5))
    assert progress.finish().startswith("created 5, existing 0 (10 users in ")
    assert stream.getvalue() == ""
