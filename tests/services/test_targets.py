"""Send-time target resolution for contact channels (tepat/services/targets.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tepat.domain.contacts import SuppressionReason
from tepat.ports.store import Store
from tepat.services.targets import SKIP_REASONS, resolve_targets
from tests.support.store_factories import STORE_FACTORIES

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with STORE_FACTORIES[request.param](tmp_path) as s:
        yield s


class CountingReads:
    """The two reads resolve_targets may make, counted, passed through to the store."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: list[str] = []

    async def contacts_for_users(self, user_ids: Sequence[str], channel: str) -> Any:
        self.calls.append("contacts")
        return await self._store.contacts_for_users(user_ids, channel)

    async def suppressions_for(self, channel: str, addresses: Sequence[str]) -> Any:
        self.calls.append("suppressions")
        return await self._store.suppressions_for(channel, addresses)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"resolve_targets should not call {name}")


async def setup(store: Store) -> None:
    await store.set_contact("verified", "email", "v@example.com", True, T0)
    await store.set_contact("unverified", "email", "u@example.com", False, T0)
    await store.set_contact("bounced", "email", "b@example.com", True, T0)
    await store.set_contact("sms-only", "sms", "+14155550100", True, T0)
    await store.add_suppression("email", "b@example.com", SuppressionReason.HARD_BOUNCE, T0)
    # Suppressed on SMS, not on e-mail: a suppression is per channel.
    await store.add_suppression("sms", "v@example.com", SuppressionReason.STOP, T0)


USERS = ["verified", "unverified", "bounced", "sms-only", "nobody"]


async def test_each_user_gets_an_address_or_why_not(store: Store) -> None:
    await setup(store)
    reads = CountingReads(store)
    got = await resolve_targets(reads, "email", USERS)
    assert got == {
        "verified": "v@example.com",
        "unverified": "u@example.com",  # verification not required by default
        "bounced": "suppressed",
        "sms-only": "no_contact",
        "nobody": "no_contact",
    }
    assert reads.calls == ["contacts", "suppressions"]
    assert set(got.values()) - {"v@example.com", "u@example.com"} <= SKIP_REASONS


async def test_unverified_contacts_are_no_contact_when_verification_is_required(
    store: Store,
) -> None:
    await setup(store)
    got = await resolve_targets(store, "email", USERS, require_verified=True)
    assert got["unverified"] == "no_contact"
    assert got["verified"] == "v@example.com"
    assert got["bounced"] == "suppressed"


async def test_sms_targets_and_a_lifted_suppression(store: Store) -> None:
    await setup(store)
    await store.add_suppression("sms", "+14155550100", SuppressionReason.STOP, T0)
    assert await resolve_targets(store, "sms", ["sms-only", "verified"]) == {
        "sms-only": "suppressed",
        "verified": "no_contact",
    }
    await store.lift_suppression("sms", "+14155550100", SuppressionReason.STOP)
    assert (await resolve_targets(store, "sms", ["sms-only"])) == {"sms-only": "+14155550100"}


async def test_no_contacts_at_all_skips_the_suppression_read(store: Store) -> None:
    reads = CountingReads(store)
    got = await resolve_targets(reads, "email", ["a", "b"])
    assert got == {"a": "no_contact", "b": "no_contact"}
    assert reads.calls == ["contacts"]
    assert await resolve_targets(store, "email", []) == {}
