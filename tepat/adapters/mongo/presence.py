"""Live members of a group: consumer processes sharing one provider's rate ceiling."""

from __future__ import annotations

from datetime import datetime, timedelta

from tepat.adapters.mongo.base import MongoBase
from tepat.ports.repositories.presence import FORGET_AFTER_TTLS


class PresenceMixin(MongoBase):
    async def heartbeat(self, group: str, member: str, now: datetime, ttl: timedelta) -> int:
        presence = self._db["presence"]
        await presence.update_one(
            {"_id": f"{group}|{member}"},
            {"$set": {"group": group, "member": member, "beat_at": now}},
            upsert=True,
        )
        await presence.delete_many(
            {"group": group, "beat_at": {"$lt": now - ttl * FORGET_AFTER_TTLS}}
        )
        return int(await presence.count_documents({"group": group, "beat_at": {"$gte": now - ttl}}))

    async def leave(self, group: str, member: str) -> None:
        await self._db["presence"].delete_one({"_id": f"{group}|{member}"})
