"""Read-only figures for the operator dashboard (see ``OpsViewRepository`` in the port).

Each query runs on an index (:mod:`.indexes`: ``tickets.sent``,
``messages.failed_updated``, ``devices.deactivated``), so a dashboard refresh
costs the recent documents, not the collection; the oldest due message reads the head
of ``messages.pending_due`` and the (few) messages in ``sending`` (``status_scheduled``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tepat.adapters.mongo.base import MongoBase
from tepat.adapters.mongo.codecs import bson_dt, read_dt_required
from tepat.ports.repositories.ops_views import SendSample

_DUE_ONLY = {"due_at": True}  # a projection


class OpsViewsMixin(MongoBase):
    async def recent_sends(self, since: datetime, limit: int) -> list[SendSample]:
        tickets = await self._fetch(
            dict,
            "tickets",
            {"sent_at": {"$gte": bson_dt(since)}},
            projection={"message_id": True, "sent_at": True},
            # sent_at alone: the index then yields the order and the limit stops the scan
            sort=["-sent_at"],
            limit=limit,
        )
        ids = [t["message_id"] for t in tickets]
        projection = {"category": True, "scheduled_at": True}
        found = await self._fetch_in(dict, "messages", "_id", ids, projection=projection)
        messages = {m["_id"]: m for m in found}
        return [
            SendSample(
                m["category"], read_dt_required(m["scheduled_at"]), read_dt_required(t["sent_at"])
            )
            for t in tickets
            if (m := messages.get(t["message_id"])) is not None
        ]

    async def failures_since(self, since: datetime) -> dict[str, int]:
        match = {"status": "failed", "updated_at": {"$gte": bson_dt(since)}}
        return await self._count_by("messages", match, "$status_reason")

    async def devices_deactivated_since(self, since: datetime) -> dict[str, int]:
        match = {"active": False, "updated_at": {"$gte": bson_dt(since)}}
        return await self._count_by("devices", match, "$deactivated_reason")

    async def oldest_due_unsent(self, now: datetime) -> datetime | None:
        due = {"$lte": bson_dt(now)}
        # Naming both values of the index's leading mark lets pending_due serve the range.
        pending = {"publish_pending": {"$in": [False, True]}, "status": "pending", "due_at": due}
        heads = [
            await self._fetch(
                dict, "messages", match, projection=_DUE_ONLY, sort=["due_at"], limit=1
            )
            for match in (pending, {"status": "sending", "due_at": due})
        ]
        return min((read_dt_required(h[0]["due_at"]) for h in heads if h), default=None)

    async def live_members(self, since: datetime) -> dict[str, int]:
        match = {"beat_at": {"$gte": bson_dt(since)}}
        return await self._count_by("presence", match, "$group")

    async def _count_by(self, collection: str, match: dict[str, Any], key: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for group, n in await self._count(collection, match, key=key):
            name = "" if group.get("key") is None else str(group["key"])
            counts[name] = counts.get(name, 0) + n
        return counts
