"""`tepat plan`: the DST acceptance cases through the real command, and two planners at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from datetime import UTC, date, datetime, time
from pathlib import Path

import pytest

from tepat.adapters.sqlite import SqliteStore
from tepat.domain.models import Reminder, User

TIMES = (time(0, 30), time(1, 30), time(2, 30), time(9, 0))

# (zone, local date, local time) -> the UTC instant the rules define, and why.
# Derived by hand from the zones' 2027 rules (tzdata 2026f):
EXPECTED: dict[tuple[str, date, time], datetime] = {
    # New York springs forward 2027-03-14 02:00 EST -> 03:00 EDT.
    ("America/New_York", date(2027, 3, 14), time(0, 30)): datetime(2027, 3, 14, 5, 30, tzinfo=UTC),
    ("America/New_York", date(2027, 3, 14), time(1, 30)): datetime(2027, 3, 14, 6, 30, tzinfo=UTC),
    # 02:30 does not exist: read with the offset before the gap (-05:00).
    ("America/New_York", date(2027, 3, 14), time(2, 30)): datetime(2027, 3, 14, 7, 30, tzinfo=UTC),
    ("America/New_York", date(2027, 3, 14), time(9, 0)): datetime(2027, 3, 14, 13, 0, tzinfo=UTC),
    # New York falls back 2027-11-07 02:00 EDT -> 01:00 EST: 01:30 happens twice, first is EDT.
    ("America/New_York", date(2027, 11, 7), time(0, 30)): datetime(2027, 11, 7, 4, 30, tzinfo=UTC),
    ("America/New_York", date(2027, 11, 7), time(1, 30)): datetime(2027, 11, 7, 5, 30, tzinfo=UTC),
    ("America/New_York", date(2027, 11, 7), time(2, 30)): datetime(2027, 11, 7, 7, 30, tzinfo=UTC),
    ("America/New_York", date(2027, 11, 7), time(9, 0)): datetime(2027, 11, 7, 14, 0, tzinfo=UTC),
    # London springs forward 2027-03-28 01:00 GMT -> 02:00 BST: 01:30 does not exist (+00:00).
    ("Europe/London", date(2027, 3, 28), time(0, 30)): datetime(2027, 3, 28, 0, 30, tzinfo=UTC),
    ("Europe/London", date(2027, 3, 28), time(1, 30)): datetime(2027, 3, 28, 1, 30, tzinfo=UTC),
    ("Europe/London", date(2027, 3, 28), time(2, 30)): datetime(2027, 3, 28, 1, 30, tzinfo=UTC),
    ("Europe/London", date(2027, 3, 28), time(9, 0)): datetime(2027, 3, 28, 8, 0, tzinfo=UTC),
    # London falls back 2027-10-31 02:00 BST -> 01:00 GMT: 01:30 twice, first is BST.
    ("Europe/London", date(2027, 10, 31), time(1, 30)): datetime(2027, 10, 31, 0, 30, tzinfo=UTC),
    ("Europe/London", date(2027, 10, 31), time(2, 30)): datetime(2027, 10, 31, 2, 30, tzinfo=UTC),
    # Lord Howe (+10:30 standard, +11 DST, a 30-minute shift). 2027-04-04 02:00 -> 01:30:
    # 01:30 happens twice, first is +11.
    ("Australia/Lord_Howe", date(2027, 4, 4), time(1, 30)): datetime(
        2027, 4, 3, 14, 30, tzinfo=UTC
    ),
    ("Australia/Lord_Howe", date(2027, 4, 4), time(2, 30)): datetime(2027, 4, 3, 16, 0, tzinfo=UTC),
    # 2027-10-03 02:00 -> 02:30: none of 00:30/01:30/02:30 falls in the gap.
    ("Australia/Lord_Howe", date(2027, 10, 3), time(1, 30)): datetime(
        2027, 10, 2, 15, 0, tzinfo=UTC
    ),
    ("Australia/Lord_Howe", date(2027, 10, 3), time(2, 30)): datetime(
        2027, 10, 2, 15, 30, tzinfo=UTC
    ),
    ("Australia/Lord_Howe", date(2027, 10, 3), time(9, 0)): datetime(
        2027, 10, 2, 22, 0, tzinfo=UTC
    ),
    # Chatham (+12:45 standard, +13:45 DST). 2027-04-04 03:45 -> 02:45; 09:00 is +12:45 already.
    ("Pacific/Chatham", date(2027, 4, 4), time(2, 30)): datetime(2027, 4, 3, 12, 45, tzinfo=UTC),
    ("Pacific/Chatham", date(2027, 4, 4), time(9, 0)): datetime(2027, 4, 3, 20, 15, tzinfo=UTC),
    # 2027-09-26 02:45 -> 03:45: 02:30 still exists at +12:45; 09:00 is +13:45.
    ("Pacific/Chatham", date(2027, 9, 26), time(2, 30)): datetime(2027, 9, 25, 13, 45, tzinfo=UTC),
    ("Pacific/Chatham", date(2027, 9, 26), time(9, 0)): datetime(2027, 9, 25, 19, 15, tzinfo=UTC),
}

ZONES = sorted({z for z, _, _ in EXPECTED})


def _tepat(db: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TEPAT_DATABASE_URL": f"sqlite:///{db}", "TEPAT_LOG_LEVEL": "WARNING"}
    return subprocess.Popen(
        [sys.executable, "-m", "tepat.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _seed(db: Path, users_per_zone: int = 1) -> None:
    store = SqliteStore(str(db))
    await store.open()
    try:
        for zone in ZONES:
            for n in range(users_per_zone):
                user_id = f"{zone.replace('/', '_')}-{n}"
                await store.upsert_user(User(user_id, zone))
                for t in TIMES:
                    await store.upsert_reminder(
                        Reminder(user_id, f"at{t:%H%M}", "meal", t, title="t", body="b")
                    )
    finally:
        await store.close()


def _planned(db: Path) -> list[tuple[str, str, date, time, datetime]]:
    """Every pending reminder message, read straight from the file."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT user_id, reminder_id, local_date, local_time, scheduled_at FROM messages "
            "WHERE status = 'pending' ORDER BY scheduled_at, id"
        ).fetchall()
    return [
        (user, reminder, date.fromisoformat(d), time.fromisoformat(t), datetime.fromisoformat(at))
        for user, reminder, d, t, at in rows
    ]


def test_tepat_plan_yields_the_instants_the_rules_define(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    asyncio.run(_seed(db))
    # Whole year 2027: crosses every transition above.
    proc = _tepat(db, "plan", "--start", "2027-01-01T00:00:00Z", "--end", "2028-01-01T00:00:00Z")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    rows = _planned(db)
    assert out.startswith(f"created {len(rows)}, existing 0 (")
    instants = {(u.rsplit("-", 1)[0].replace("_", "/", 1), d, t): at for u, _, d, t, at in rows}
    for key, expected in EXPECTED.items():
        assert instants[key] == expected, key
    # One message per (user, reminder, local date): 365 dates x 4 reminders per zone.
    per_key = Counter((u, r, d) for u, r, d, _, _ in rows)
    assert max(per_key.values()) == 1
    assert len(rows) == len(ZONES) * len(TIMES) * 365


def test_two_planners_at_once_plan_each_local_date_once(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    asyncio.run(_seed(db, users_per_zone=25))
    args = ("plan", "--start", "2027-03-01T00:00:00Z", "--end", "2027-04-15T00:00:00Z")
    procs = [_tepat(db, *args), _tepat(db, *args)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    created = [int(out.split()[1].rstrip(",")) for out, _ in results]
    existing = [int(out.split()[3]) for out, _ in results]
    rows = _planned(db)
    per_key = Counter((u, r, d) for u, r, d, _, _ in rows)
    assert max(per_key.values()) == 1
    assert sum(created) == len(rows) == len(per_key)
    # Whatever the interleaving, each planner saw every message: created or existing.
    assert created[0] + existing[0] == created[1] + existing[1] == len(rows)


@pytest.mark.parametrize(
    "bad",
    [
        ["--start", "yesterday", "--end", "2027-01-02T00:00:00Z"],
        ["--start", "2027-01-02T00:00:00", "--end", "2027-01-03T00:00:00Z"],
        ["--start", "2027-01-02T00:00:00Z", "--end", "2027-01-01T00:00:00Z"],
    ],
)
def test_tepat_plan_refuses_bad_windows(tmp_path: Path, bad: list[str]) -> None:
    proc = _tepat(tmp_path / "tepat.db", "plan", *bad)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in err and ("--start" in err or "--end" in err)
