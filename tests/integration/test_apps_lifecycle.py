"""Apps come, change and go while the process runs (issue 23): no restart.

An app another process registered is served within TEPAT_APPS_REFRESH_SECONDS; its new
Expo access token is used for the next send; disabled, its key is refused, and enabled
again its data is back. An app whose settings cannot open (a credentials file missing)
stops neither the process nor the other apps, and is tried again each refresh. On both
brokers, real time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tepat.clock import SystemClock
from tepat.domain.models import MessageStatus
from tepat.runtime import make_store
from tepat.sandbox.fcm import FcmSandbox
from tepat.services.apps import AppService
from tepat.tenancy import settings_check
from tepat.wiring import app_repository
from tests.support.app_deployment import (
    Deployment,
    add_user_with_device,
    app_id_for,
    deployment,
    send_one_off,
)
from tests.support.provider_sandboxes import BROKERS
from tests.support.waiting import eventually

pytestmark = pytest.mark.parametrize("broker", BROKERS)
DONE = {MessageStatus.SENT, MessageStatus.DELIVERED}


@asynccontextmanager
async def another_process(d: Deployment) -> AsyncIterator[AppService]:
    """The apps service of another process on the same store (another API process): what
    it changes, this one learns only from its refresh."""
    clock = SystemClock()
    store = make_store(d.settings, clock)
    await store.open()
    try:
        yield AppService(app_repository(d.settings, store), clock, settings_check(d.settings))
    finally:
        await store.close()


async def _status(client: httpx.AsyncClient, path: str) -> int:
    return (await client.get(path)).status_code


async def _sent_with(d: Deployment, client: httpx.AsyncClient, key: str, token: str) -> None:
    """A one-off to ana, sent with the Expo access token ``token``."""
    message_id = await send_one_off(client, "ana", key, key)

    def arrived() -> list[dict[str, Any]]:
        return [r for r in d.received("ExponentPushToken[shop-ana]") if r["body"] == key]

    await eventually(lambda: bool(arrived()), timeout=30, what=f"{key} sent")
    assert [r["access_token"] for r in arrived()] == [token]
    assert message_id


async def test_an_app_is_served_changed_and_disabled_without_a_restart(
    tmp_path: Path, broker: str
) -> None:
    async with deployment(tmp_path, broker) as d:
        shop = app_id_for(broker, "shop")
        settings: dict[str, Any] = {"expo_access_token": "shop-token-1", "expo_url": d.expo_url}
        async with another_process(d) as elsewhere:
            _, _, key = await elsewhere.create(shop, "Shop", settings)
        async with d.client(key) as api:
            # Served within the refresh interval. (Asked of the operator: an address that
            # tries an unknown key again and again is locked out, 429.)
            async def served() -> bool:
                r = await d.operator.get(f"/v1/admin/apps/{shop}")
                return bool(r.json()["served"])

            await eventually(served, timeout=10, what="the new app served")
            assert await _status(api, "/v1/users/ana") == 404  # its key works
            await add_user_with_device(api, "ana", "ExponentPushToken[shop-ana]")
            await _sent_with(d, api, "first", "shop-token-1")

            # New credentials (PATCH replaces the settings whole): the next send uses them.
            await d.patch_app(shop, settings={**settings, "expo_access_token": "shop-token-2"})
            await _sent_with(d, api, "second", "shop-token-2")

            # ... and when another process made the change, within the refresh interval.
            async with another_process(d) as elsewhere:
                await elsewhere.update(
                    shop, settings={**settings, "expo_access_token": "shop-token-3"}
                )

            async def reopened() -> bool:
                rt = d.apps.runtime(shop)
                token = rt.settings.expo_access_token if rt else None
                return token is not None and token.get_secret_value() == "shop-token-3"

            await eventually(reopened, timeout=10, what="the app reopened with the new token")
            await _sent_with(d, api, "third", "shop-token-3")

            # Disabled: its key is refused, by this process and, after a refresh, by all.
            out = await d.patch_app(shop, disabled=True)
            assert out["served"] is False
            assert await _status(api, "/v1/users/ana") == 401
            assert d.apps.runtime(shop) is None
            # Enabled again: its data is there, and it sends.
            out = await d.patch_app(shop, disabled=False)
            assert out["served"] is True
            assert await _status(api, "/v1/users/ana") == 200
            await _sent_with(d, api, "fourth", "shop-token-3")


async def test_an_app_that_cannot_open_stops_neither_the_process_nor_the_others(
    tmp_path: Path, broker: str
) -> None:
    """Its service account, there when it was registered, is gone at the next start."""
    account = tmp_path / "service-account.json"
    account.write_text(json.dumps(FcmSandbox().service_account("http://127.0.0.1:9")))
    good, bad = app_id_for(broker, "good"), app_id_for(broker, "bad")
    async with deployment(tmp_path, broker) as d:
        good_key = await d.create_app(good, expo_access_token="good-token")
        bad_key = await d.create_app(bad, fcm_credentials_file=str(account))
    saved = account.read_text()
    account.unlink()

    with capture_logs() as logs:
        async with deployment(tmp_path, broker) as d:

            def not_opened() -> int:
                return sum(1 for e in logs if e["event"] == "app not opened" and e["app"] == bad)

            # Tried again at each refresh, the process and the other apps going on.
            await eventually(lambda: not_opened() >= 3, timeout=10, what="retried")
            assert d.apps.runtime(bad) is None
            async with d.client(bad_key) as api:
                assert await _status(api, "/v1/users/ana") == 401
            async with d.client(good_key) as api:
                await add_user_with_device(api, "ana", "ExponentPushToken[good-ana]")
                message_id = await send_one_off(api, "ana", "k", "still served")

                async def sent() -> bool:
                    m = await d.runtime(good).store.get_message(message_id)
                    return m is not None and m.status in DONE

                await eventually(sent, timeout=30, what="the good app's message sent")
            [arrived] = d.received("ExponentPushToken[good-ana]")
            assert arrived["access_token"] == "good-token"

            # The file back: served at the next refresh, no restart.
            account.write_text(saved)

            async def served() -> bool:
                r = await d.operator.get(f"/v1/admin/apps/{bad}")
                return bool(r.json()["served"])

            await eventually(served, timeout=10, what="the mended app served")
            async with d.client(bad_key) as api:
                assert await _status(api, "/v1/users/ana") == 404
