"""`tepat doctor` as a real process: against the Expo sandbox, ActiveMQ, and what it says when
something is wrong; its checks in-process where a real fault cannot be staged here."""

from __future__ import annotations

import asyncio
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tepat.adapters.embedded_broker import EmbeddedBroker
from tepat.adapters.sqlite import SqliteStore
from tepat.clock import SystemClock
from tepat.doctor import Status, scheduler_check, tzdata_check
from tepat.domain.zones import TZDATA_RELEASE
from tests.ops_cli.support import env, free_port, sandbox, tepat

CHECKS = ("config", "store", "broker", "scheduler", "expo", "tzdata")
LINE = re.compile(r"^(ok|warn|FAIL|skip) +(\w+) +(.*)$")


def verdicts(stdout: str) -> dict[str, tuple[str, str]]:
    """check name -> (status, rest of the line); exactly one line per check, in order."""
    lines = stdout.strip().splitlines()
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), stdout
    names = [m.group(2) for m in parsed if m]
    assert names == list(CHECKS), stdout
    return {m.group(2): (m.group(1), m.group(3)) for m in parsed if m}


async def _make_store(db: Path, tz_release: str | None) -> None:
    store = SqliteStore(str(db))
    await store.open()
    try:
        if tz_release is not None:
            await store.set_meta("tzdata_release", tz_release)
    finally:
        await store.close()


def test_doctor_passes_against_the_sandbox_with_the_right_token(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    asyncio.run(_make_store(db, TZDATA_RELEASE))
    with sandbox(tmp_path, access_token="s3cret") as url:
        done = tepat(
            "doctor",
            environ=env(
                TEPAT_DATABASE_URL=f"sqlite:///{db}",
                TEPAT_EXPO_URL=url,
                TEPAT_EXPO_ACCESS_TOKEN="s3cret",
            ),
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    v = verdicts(done.stdout)
    assert {name: status for name, (status, _) in v.items()} == {
        "config": "ok",
        "store": "ok",
        "broker": "ok",
        "scheduler": "ok",
        # the sandbox is not Expo: a warning (no real pushes), not a failure
        "expo": "warn",
        "tzdata": "ok",
    }
    assert "accepts the access token" in v["expo"][1]
    assert "s3cret" not in done.stdout
    arrived = re.search(r"arrived after ([\d.]+) s", v["scheduler"][1])
    assert arrived and 0.8 <= float(arrived.group(1)) <= 5, v["scheduler"]
    assert TZDATA_RELEASE in v["tzdata"][1]


def test_doctor_fails_a_wrong_expo_token_with_the_fix(tmp_path: Path) -> None:
    with sandbox(tmp_path, access_token="s3cret") as url:
        done = tepat(
            "doctor",
            environ=env(
                TEPAT_DATABASE_URL=f"sqlite:///{tmp_path / 'tepat.db'}",
                TEPAT_EXPO_URL=url,
                TEPAT_EXPO_ACCESS_TOKEN="wrong",
            ),
            cwd=tmp_path,
        )
    assert done.returncode == 1
    status, text = verdicts(done.stdout)["expo"]
    assert status == "FAIL"
    assert "UNAUTHORIZED" in text and "fix: set TEPAT_EXPO_ACCESS_TOKEN" in text


@pytest.mark.activemq
def test_doctor_on_activemq_sees_the_scheduler_keep_the_delay(tmp_path: Path) -> None:
    url = os.environ.get("TEPAT_TEST_STOMP_URL", "").strip()
    if not url:
        pytest.skip("TEPAT_TEST_STOMP_URL is not set (scripts/test.sh sets it)")
    with sandbox(tmp_path) as expo:
        done = tepat(
            "doctor",
            environ=env(
                TEPAT_DATABASE_URL=f"sqlite:///{tmp_path / 'tepat.db'}",
                TEPAT_BROKER_URL=url,
                TEPAT_EXPO_URL=expo,
            ),
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    v = verdicts(done.stdout)
    assert v["broker"][0] == "ok" and v["scheduler"][0] == "ok", done.stdout
    arrived = re.search(r"arrived after ([\d.]+) s", v["scheduler"][1])
    # ActiveMQ fires on 500 ms steps, never before the delay.
    assert arrived and 0.95 <= float(arrived.group(1)) <= 5, v["scheduler"]


def test_doctor_unreachable_broker_fails_with_the_hint(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    done = tepat(
        "doctor",
        environ=env(
            TEPAT_DATABASE_URL=f"sqlite:///{tmp_path / 'tepat.db'}",
            TEPAT_BROKER_URL=f"stomp://tepat:pw@127.0.0.1:{port}",
            TEPAT_EXPO_URL="http://127.0.0.1:9",
        ),
        cwd=tmp_path,
    )
    assert done.returncode == 1
    v = verdicts(done.stdout)
    status, text = v["broker"]
    assert status == "FAIL"
    assert f"cannot reach stomp://tepat:***@127.0.0.1:{port}" in text
    assert "fix: start the broker" in text and "TEPAT_BROKER_URL" in text
    assert "pw@" not in done.stdout
    assert v["scheduler"][0] == "skip"
    assert v["expo"][0] == "FAIL" and "fix: correct TEPAT_EXPO_URL" in v["expo"][1]
    assert "Traceback" not in done.stdout + done.stderr


def test_doctor_bad_configuration_names_the_variable(tmp_path: Path) -> None:
    done = tepat("doctor", environ=env(TEPAT_DATABASE_URL="postgres://x/y"), cwd=tmp_path)
    assert done.returncode == 1
    v = verdicts(done.stdout)
    assert v["config"][0] == "FAIL" and "TEPAT_DATABASE_URL" in v["config"][1]
    assert all(v[name][0] == "skip" for name in CHECKS[1:])


class _IgnoresDelays(EmbeddedBroker):
    """A broker like ActiveMQ without schedulerSupport: the delay header is dropped."""

    async def publish(self, queue: str, body: bytes, delay_seconds: float = 0.0) -> None:
        await super().publish(queue, body, 0.0)


async def test_scheduler_check_catches_a_broker_that_ignores_delays() -> None:
    broker = _IgnoresDelays(SystemClock())
    await broker.connect()
    try:
        check = await scheduler_check(broker)
    finally:
        await broker.close()
    assert check.status is Status.FAIL
    assert "delays are ignored" in check.detail
    assert 'schedulerSupport="true"' in check.hint


async def test_tzdata_check_compares_the_release_with_the_store(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "tepat.db"))
    await store.open()
    now = datetime(int(TZDATA_RELEASE[:4]), 6, 1, tzinfo=UTC)
    try:
        fresh = await tzdata_check(store, now, 5)
        assert fresh.status is Status.OK and "first run" in fresh.detail
        await store.set_meta("tzdata_release", "2001a")
        behind = await tzdata_check(store, now, 5)
        assert behind.status is Status.WARN and "planned with 2001a" in behind.detail
        assert "tepat scheduler" in behind.hint
        await store.set_meta("tzdata_release", TZDATA_RELEASE)
        assert (await tzdata_check(store, now, 5)).status is Status.OK
        # Three years on, the same release is stale.
        later = now.replace(year=now.year + 3)
        stale = await tzdata_check(store, later, 5)
        assert stale.status is Status.WARN and "pip install -U tzdata" in stale.hint
    finally:
        await store.close()


def test_doctor_fails_a_store_directory_it_cannot_write(tmp_path: Path) -> None:
    """/proc refuses new files even to root, as a read-only mount would (issue 19 #9)."""
    done = tepat(
        "doctor",
        environ=env(
            TEPAT_DATABASE_URL="sqlite:////proc/tepat.db", TEPAT_EXPO_URL="http://127.0.0.1:9"
        ),
        cwd=tmp_path,
    )
    assert done.returncode == 1
    status, text = verdicts(done.stdout)["store"]
    assert status == "FAIL"
    assert "directory /proc is not writable" in text and "TEPAT_DATABASE_URL" in text
    assert "Traceback" not in done.stdout + done.stderr
