"""A device's fallback token (``Device.fallback_kind`` / ``fallback_token``, failover):
kept by every store, replaced or cleared by the next registration."""

from __future__ import annotations

import dataclasses

from tepat.ports.store import Store
from tests.contract.records import at, device


async def test_a_fallback_token_round_trips_and_a_new_registration_replaces_it(
    store: Store,
) -> None:
    d = device("u1", "d1", "ExponentPushToken[a]", fallback_kind="fcm", fallback_token="f:1")
    assert await store.register_device(d) == (d, True)
    assert (await store.active_devices(["u1"]))["u1"] == [d]
    without = device("u1", "d1", "ExponentPushToken[a]", updated_at=at(5))
    await store.register_device(without)
    [stored] = await store.list_devices("u1")
    assert (stored.fallback_kind, stored.fallback_token) == (None, None)
    assert stored == dataclasses.replace(without, created_at=d.created_at)
