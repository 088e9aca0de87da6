"""The transactional outbox over ``messages``: the ``publish_pending`` mark, written with
the message (``codecs.message_doc``, ``messages._transition_update``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import UpdateOne

from tepat.adapters.mongo.base import MongoBase, keyset_after
from tepat.adapters.mongo.codecs import bson_dt, message_from_doc, read_dt_required
from tepat.domain.models import Message, MessageStatus


class OutboxMixin(MongoBase):
    async def unpublished(
        self,
        limit: int,
        due_before: datetime | None = None,
        after: tuple[datetime, str] | None = None,
    ) -> list[Message]:
        flt: dict[str, Any] = {"publish_pending": True, "status": MessageStatus.PENDING.value}
        if due_before is not None:
            flt["due_at"] = {"$lt": bson_dt(due_before)}
        order = ["due_at", "_id"]
        if after is not None:
            flt.update(keyset_after(order, (bson_dt(after[0]), after[1])))
        return await self._fetch(message_from_doc, "messages", flt, sort=order, limit=limit)

    async def unpublished_counts(
        self, due_from: datetime, due_before: datetime
    ) -> dict[tuple[datetime, str, str, str | None], int]:
        groups = await self._count(
            "messages",
            {
                "publish_pending": True,
                "status": MessageStatus.PENDING.value,
                "due_at": {"$gte": bson_dt(due_from), "$lt": bson_dt(due_before)},
            },
            due="$due_at",
            category="$category",
            channel="$channel",
            priority="$priority",
        )
        # Documents written before channels existed carry neither field: push, normal.
        return {
            (
                read_dt_required(g["due"]),
                g["category"],
                g.get("channel") or "push",
                g.get("priority"),
            ): n
            for g, n in groups
        }

    async def mark_published(self, published: Sequence[tuple[str, datetime]]) -> int:
        if not published:
            return 0
        # Guarded on due_at: a message put back to pending since it was read carries
        # a new due_at and keeps its mark for the next pass.
        ops = [
            UpdateOne(
                {"_id": mid, "due_at": bson_dt(due), "publish_pending": True},
                {"$set": {"publish_pending": False}},
            )
            for mid, due in published
        ]
        result = await self._db["messages"].bulk_write(ops, ordered=False)
        return int(result.modified_count)

    async def republish(self, message_ids: Sequence[str], due_at: datetime) -> int:
        marked = {"publish_pending": True, "due_at": bson_dt(due_at)}
        return await self._set_where_status(message_ids, MessageStatus.PENDING, marked)

    async def republish_all_pending(self) -> int:
        unmarked = {"status": MessageStatus.PENDING.value, "publish_pending": {"$ne": True}}
        return await self._update(
            "messages", unmarked, {"$set": {"publish_pending": True}}, many=True
        )
