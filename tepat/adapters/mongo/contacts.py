"""Contact points, suppressions and provider-event dedup on MongoDB: each collection has
the port's unique key as a unique index (``indexes.py``), which decides whether a write
is the first (an insert's DuplicateKeyError), never a read before it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError

from tepat.adapters.mongo.base import MongoBase, keyset_after
from tepat.adapters.mongo.codecs import bson_dt, decoder, read_dt_required
from tepat.domain.contacts import Contact, Suppression, SuppressionReason, overrides

_ORDER = ["channel", "address"]


_contact = decoder(Contact, verified=bool, updated_at=read_dt_required)
_suppression = decoder(Suppression, reason=SuppressionReason, added_at=read_dt_required)


class ContactsMixin(MongoBase):
    async def set_contact(
        self, user_id: str, channel: str, address: str | None, verified: bool, now: datetime
    ) -> None:
        contacts = self._db["contacts"]
        key = {"user_id": user_id, "channel": channel}
        if address is None:
            await contacts.delete_one(key)
            return
        update = {"$set": {"address": address, "verified": verified, "updated_at": bson_dt(now)}}
        try:
            await contacts.update_one(key, update, upsert=True)
        except DuplicateKeyError:
            # Two first sets at once: the other upsert inserted; ours now matches it.
            await contacts.update_one(key, update)

    async def contacts_for_users(self, user_ids: Sequence[str], channel: str) -> dict[str, Contact]:
        on_channel = {"channel": channel}
        contacts = await self._fetch_in(_contact, "contacts", "user_id", user_ids, on_channel)
        return {c.user_id: c for c in contacts}

    async def list_contacts(self, user_id: str) -> list[Contact]:
        return await self._fetch(_contact, "contacts", {"user_id": user_id}, sort=["channel"])

    async def add_suppression(
        self,
        channel: str,
        address: str,
        reason: SuppressionReason,
        now: datetime,
        source: str | None = None,
    ) -> bool:
        reason = SuppressionReason(reason)
        doc = {
            "channel": channel,
            "address": address,
            "reason": reason.value,
            "added_at": bson_dt(now),
            "source": source,
        }
        if await self._insert_if_new("suppressions", doc):
            return True
        weaker = [r.value for r in SuppressionReason if overrides(reason, r)]
        if weaker:
            # Conditional on the stored reason being weaker: two upgrades at once
            # cannot turn a complaint back into a hard bounce.
            await self._db["suppressions"].update_one(
                {"channel": channel, "address": address, "reason": {"$in": weaker}},
                {"$set": {"reason": reason.value, "source": source}},
            )
        return False

    async def lift_suppression(
        self, channel: str, address: str, reason: SuppressionReason | None = None
    ) -> bool:
        query: dict[str, Any] = {"channel": channel, "address": address}
        if reason is not None:
            query["reason"] = SuppressionReason(reason).value
        result = await self._db["suppressions"].delete_one(query)
        return int(result.deleted_count) > 0

    async def suppressions_for(
        self, channel: str, addresses: Sequence[str]
    ) -> dict[str, Suppression]:
        on_channel = {"channel": channel}
        found = await self._fetch_in(_suppression, "suppressions", "address", addresses, on_channel)
        return {s.address: s for s in found}

    async def list_suppressions(
        self, channel: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[Suppression]:
        query: dict[str, Any] = {} if channel is None else {"channel": channel}
        if after is not None:
            query.update(keyset_after(_ORDER, after))
        return await self._fetch(_suppression, "suppressions", query, sort=_ORDER, limit=limit)

    async def record_provider_event(self, provider: str, event_id: str, now: datetime) -> bool:
        doc = {"provider": provider, "event_id": event_id, "recorded_at": bson_dt(now)}
        return await self._insert_if_new("provider_events", doc)

    async def provider_event_seen(self, provider: str, event_id: str) -> bool:
        event = {"provider": provider, "event_id": event_id}
        return await self._db["provider_events"].find_one(event) is not None
