"""Preferences per (category, channel) through the API; the per-category shape keeps working."""

from __future__ import annotations

import httpx

from tests.api.conftest import ADMIN, error_fields
from tests.api.helpers import create_user, ok

URL = "/v1/users/alice/preferences"


async def put(client: httpx.AsyncClient, categories: dict[str, object]) -> httpx.Response:
    return await client.put(URL, json={"categories": categories}, headers=ADMIN)


async def test_channel_keys_are_merged_and_returned_beside_every_category(
    client: httpx.AsyncClient,
) -> None:
    await create_user(client, "alice")
    got = (await ok(await put(client, {"meal": False, "meal.inbox": True}))).json()["categories"]
    assert got["meal"] is False and got["meal.inbox"] is True and got["mood"] is True
    got = (await ok(await put(client, {"mood.email": False}))).json()["categories"]
    # Merged: what was set before stays.
    assert (got["meal"], got["meal.inbox"], got["mood"], got["mood.email"]) == (
        False,
        True,
        True,
        False,
    )
    got = (await ok(await client.get(URL, headers=ADMIN))).json()["categories"]
    assert got["mood.email"] is False
    # The per-category shape alone is what an old client sees and sends, unchanged.
    await ok(await put(client, {"sleep": False}))
    got = (await ok(await client.get(URL, headers=ADMIN))).json()["categories"]
    assert got["sleep"] is False and "sleep.push" not in got


async def test_a_bad_key_is_a_422_naming_it(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")
    assert error_fields(await put(client, {"meal.fax": False})) == {"categories.meal.fax"}
    assert error_fields(await put(client, {"gossip.email": False})) == {"categories.gossip.email"}
    assert error_fields(await put(client, {"meal.email": "maybe"})) == {"categories.meal.email"}
    got = (await ok(await client.get(URL, headers=ADMIN))).json()["categories"]
    assert not any("." in key for key in got)  # nothing was stored
