"""`tepat plan --workers N`: user-id ranges planned by N processes, one combined summary;
a second run reads no user (their planning marks cover the window)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from tepat.config import load_settings
from tepat.plan_workers import plan_parallel, ranges
from tepat.runtime import open_runtime
from tests.ops_cli.support import env, tepat
from tests.ops_cli.test_plan_progress import USERS, WINDOW, _seed

SUMMARY = re.compile(r"^created (\d+), existing (\d+) \((\d+) users in ")


def _plan(db: Path, cwd: Path, *extra: str) -> tuple[int, int, int]:
    done = tepat(
        "plan",
        *WINDOW,
        *extra,
        environ=env(TEPAT_DATABASE_URL=f"sqlite:///{db}", TEPAT_LOG_LEVEL="WARNING"),
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    match = SUMMARY.match(done.stdout.strip())
    assert match, done.stdout
    created, existing, users = (int(g) for g in match.groups())
    return created, existing, users


def test_workers_plan_every_user_once_and_a_second_run_reads_none(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    asyncio.run(_seed(db))
    assert _plan(db, tmp_path, "--workers", "3") == (USERS * 7, 0, USERS)
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT count(*), count(DISTINCT live_key) FROM messages").fetchone()
    assert stored == (USERS * 7, USERS * 7)
    assert _plan(db, tmp_path, "--workers", "3") == (0, 0, 0)
    assert _plan(db, tmp_path) == (0, 0, 0)


async def test_worker_processes_plan_their_ranges_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parallel path itself (small runs stay in one process): three workers, and
    a second parallel run over the same window finds nothing to do."""
    db = tmp_path / "tepat.db"
    await _seed(db)
    url = f"sqlite:///{db}"
    monkeypatch.setenv("TEPAT_DATABASE_URL", url)  # the workers read their settings
    monkeypatch.setenv("TEPAT_LOG_LEVEL", "WARNING")
    start, end = (datetime.fromisoformat(w) for w in WINDOW[1::2])
    finished: list[int] = []
    async with open_runtime(load_settings()) as rt:
        done = await plan_parallel(
            rt, start, end, 3, lambda users, _: finished.append(users), parallel_from=1
        )
        again = await plan_parallel(rt, start, end, 3, parallel_from=1)
    assert (done.created, done.existing, done.users_planned) == (USERS * 7, 0, USERS)
    assert len(finished) == 3 and sum(finished) == USERS
    assert (again.created, again.users_planned) == (0, 0)


def test_ranges_cover_every_id_from_the_split_points() -> None:
    assert ranges([]) == [("", None)]
    assert ranges(["m", "t"]) == [("", "m"), ("m", "t"), ("t", None)]
