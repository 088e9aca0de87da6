"""`tepat doctor` reads the apps from the registry in the default app's store (issue 23)
and checks each enabled app's accounts with its own settings, as a process would open
it: a real process against the Expo sandbox (nothing sent)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from tepat.adapters.sqlite import SqliteStore
from tepat.config import Settings
from tepat.domain.apps import App
from tepat.domain.zones import TZDATA_RELEASE
from tepat.wiring import app_repository
from tests.ops_cli.support import env, sandbox, tepat

T0 = datetime(2027, 3, 1, tzinfo=UTC)


async def _registry(db: Path, missing_file: Path) -> None:
    store = SqliteStore(str(db))
    await store.open()
    try:
        await store.set_meta("tzdata_release", TZDATA_RELEASE)
        registry = app_repository(Settings(database_url=f"sqlite:///{db}"), store)
        for app_id, settings, disabled in (
            ("shop", {"expo_access_token": "s3cret"}, False),
            ("stale", {"expo_access_token": "revoked-token"}, False),
            ("off", {"expo_access_token": "revoked-token"}, True),
            ("broken", {"fcm_credentials_file": str(missing_file)}, False),
        ):
            app = App(app_id, app_id, T0, settings, disabled=disabled)
            assert await registry.create_app(app)
    finally:
        await store.close()


def _verdicts(stdout: str) -> dict[str, str]:
    """check name -> status ("app shop: expo" for an app's)."""
    verdicts = {}
    for line in stdout.strip().splitlines():
        status, _, rest = line.partition("  ")
        name = rest.strip().split(" ")[0]
        if name == "app":  # "app <id>: <check> <detail>"
            name = " ".join(rest.strip().split(" ")[:3])
        verdicts[name] = status.strip()
    return verdicts


def test_doctor_checks_each_enabled_app_of_the_registry(tmp_path: Path) -> None:
    db = tmp_path / "tepat.db"
    missing = tmp_path / "gone.json"
    asyncio.run(_registry(db, missing))
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
    assert done.returncode == 1, done.stdout + done.stderr  # stale and broken fail
    verdicts = _verdicts(done.stdout)
    assert verdicts == {
        "config": "ok",
        "store": "ok",
        "broker": "ok",
        "scheduler": "ok",
        "app broken: config": "FAIL",
        "expo": "warn",  # a sandbox, not Expo: accepted, nothing real sent
        "app shop: expo": "warn",
        "app stale: expo": "FAIL",
        "tzdata": "ok",
    }, done.stdout
    lines = done.stdout.splitlines()
    [broken] = [line for line in lines if "app broken: config" in line]
    assert "fcm_credentials_file" in broken and str(missing) in broken
    assert "PATCH /v1/admin/apps/broken" in broken
    assert not [line for line in lines if "app off" in line]  # disabled: not served, not checked
