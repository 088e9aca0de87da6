"""Issue 23 end to end: one deployment serves the default app and an app "shop" created
through ``/v1/admin/apps``, each with its own Expo account. Each app's one-off goes out
once, with its own access token, and is recorded in its own store only. On both brokers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tepat.adapters.mongo.base import database_name
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.models import MessageStatus
from tests.support.app_deployment import (
    DEFAULT_TOKEN,
    Deployment,
    add_user_with_device,
    app_id_for,
    deployment,
    send_one_off,
)
from tests.support.mongo_factory import drop_database, server_database
from tests.support.provider_sandboxes import BROKERS
from tests.support.waiting import eventually, stays_false

SHOP_TOKEN = "shop-expo-token"


async def _status(d: Deployment, app_id: str, message_id: str) -> MessageStatus | None:
    message = await d.runtime(app_id).store.get_message(message_id)
    return message.status if message else None


@pytest.mark.parametrize("broker", BROKERS)
async def test_each_app_sends_with_its_own_account_into_its_own_store(
    tmp_path: Path, broker: str
) -> None:
    async with deployment(tmp_path, broker) as d:
        shop = app_id_for(broker, "shop")
        shop_key = await d.create_app(shop, expo_access_token=SHOP_TOKEN, expo_url=d.expo_url)
        # The same user id and device in both apps: two people, one in each.
        default_phone, shop_phone = "ExponentPushToken[default-ana]", "ExponentPushToken[shop-ana]"
        async with d.client(shop_key) as shop_api:
            await add_user_with_device(d.operator, "ana", default_phone)
            await add_user_with_device(shop_api, "ana", shop_phone)
            default_id = await send_one_off(d.operator, "ana", "k-default", "from default")
            shop_id = await send_one_off(shop_api, "ana", "k-shop", "from shop")

        async def both_done() -> bool:
            return (
                # its receipt polled by its own app
                await _status(d, DEFAULT_APP, default_id) is MessageStatus.DELIVERED
                and await _status(d, shop, shop_id) is MessageStatus.DELIVERED
            )

        await eventually(both_done, timeout=30, what="both messages delivered")
        await eventually(lambda: bool(d.received(shop_phone) and d.received(default_phone)))
        assert await stays_false(
            lambda: len(d.received(shop_phone)) > 1 or len(d.received(default_phone)) > 1
        )
        [default_sent] = d.received(default_phone)
        [shop_sent] = d.received(shop_phone)
        assert (default_sent["body"], default_sent["access_token"]) == (
            "from default",
            DEFAULT_TOKEN,
        )
        assert (shop_sent["body"], shop_sent["access_token"]) == ("from shop", SHOP_TOKEN)

        default_store, shop_store = d.runtime(DEFAULT_APP).store, d.runtime(shop).store
        assert await default_store.get_message(shop_id) is None
        assert await shop_store.get_message(default_id) is None
        assert [m.id for m in await d.messages(DEFAULT_APP, "ana")] == [default_id]
        assert [m.id for m in await d.messages(shop, "ana")] == [shop_id]
        # ... in files of their own
        assert d.runtime(shop).settings.database_url.endswith(f"tepat.app-{shop}.db")
        assert (tmp_path / f"tepat.app-{shop}.db").exists()


async def test_on_mongodb_each_app_has_a_database_of_its_own(tmp_path: Path) -> None:
    """The default app's store on the MongoDB-wire server, shop's in the database beside
    it (``<db>-app-shop``): each app's message in its own database only."""
    async with server_database() as url:
        shop_db = f"{database_name(url)}-app-shop"
        try:
            async with deployment(tmp_path, "embedded", database_url=url) as d:
                shop_key = await d.create_app("shop", expo_access_token=SHOP_TOKEN)
                assert database_name(d.runtime("shop").settings.database_url) == shop_db
                async with d.client(shop_key) as shop_api:
                    await add_user_with_device(shop_api, "ana", "ExponentPushToken[shop-ana]")
                    shop_id = await send_one_off(shop_api, "ana", "k-shop", "from shop")
                await add_user_with_device(d.operator, "ben", "ExponentPushToken[default-ben]")
                default_id = await send_one_off(d.operator, "ben", "k-default", "from default")

                async def both_delivered() -> bool:
                    return (
                        await _status(d, DEFAULT_APP, default_id) is MessageStatus.DELIVERED
                        and await _status(d, "shop", shop_id) is MessageStatus.DELIVERED
                    )

                await eventually(both_delivered, timeout=30, what="both messages delivered")
                [shop_sent] = d.received("ExponentPushToken[shop-ana]")
                assert shop_sent["access_token"] == SHOP_TOKEN
                assert await d.runtime(DEFAULT_APP).store.get_message(shop_id) is None
                assert await d.runtime("shop").store.get_message(default_id) is None
                assert await d.runtime(DEFAULT_APP).store.get_user("ana") is None
        finally:
            await drop_database(url, shop_db)
