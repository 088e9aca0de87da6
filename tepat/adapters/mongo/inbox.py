"""The in-app inbox on MongoDB: one document per item, ``_id`` the item id.

``seq`` comes from one counter document (``counters``, ``_id: "inbox_seq"``) incremented
with a single ``findAndModify``, atomic like a re-plan's version: no two items ever
get the same seq. The unique index on (user_id, message_id) (``indexes.py``) decides
which of several concurrent deliveries of one message is stored; a loser's seq is
simply never used.

Unlike SQLite's single writer, two writers may commit out of seq order (A takes 5, B
takes 6, B's insert lands first). The live stream covers that window by re-reading
recent items (``tepat/services/inbox.py``), not this adapter.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from tepat.adapters.mongo.base import MongoBase
from tepat.adapters.mongo.codecs import (
    as_dict,
    bson_dt,
    decoder,
    encoder,
    read_dt,
    read_dt_required,
)
from tepat.adapters.mongo.webhooks import read_update, webhooks_active
from tepat.domain.inbox import InboxItem

SEQ_COUNTER = "inbox_seq"


_item_doc = encoder(InboxItem, "item_id", data=dict, created_at=bson_dt)
_item = decoder(
    InboxItem, "item_id", seq=int, data=as_dict, created_at=read_dt_required, read_at=read_dt
)


class InboxMixin(MongoBase):
    async def put_inbox_item(self, item: InboxItem) -> tuple[InboxItem, bool]:
        inbox = self._db["inbox"]
        key = {"user_id": item.user_id, "message_id": item.message_id}
        # A repeat (the common retry) takes no seq; the unique index still decides races.
        existing = await inbox.find_one(key)
        if existing is not None:
            return _item(existing), False
        seq = await self._db["counters"].find_one_and_update(
            {"_id": SEQ_COUNTER},
            {"$inc": {"value": 1}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        doc = {**_item_doc(item), "seq": int(seq["value"]), "read_at": None}
        try:
            await inbox.insert_one(doc)
        except DuplicateKeyError:
            winner = await inbox.find_one(key)
            if winner is None:  # same item_id under another key: not a repeat, a collision
                raise
            return _item(winner), False
        return _item(doc), True

    async def list_inbox(
        self, user_id: str, limit: int, before_seq: int | None = None, unread_only: bool = False
    ) -> list[InboxItem]:
        query: dict[str, Any] = {"user_id": user_id}
        if before_seq is not None:
            query["seq"] = {"$lt": before_seq}
        if unread_only:
            query["read_at"] = None
        return await self._fetch(_item, "inbox", query, sort=["-seq"], limit=limit)

    async def inbox_after(self, user_id: str, after_seq: int, limit: int) -> list[InboxItem]:
        query = {"user_id": user_id, "seq": {"$gt": after_seq}}
        return await self._fetch(_item, "inbox", query, sort=["seq"], limit=limit)

    async def mark_inbox_read(self, user_id: str, item_id: str, now: datetime) -> InboxItem | None:
        inbox = self._db["inbox"]
        # Forward-only: the filter on read_at keeps the first read.
        await inbox.update_one(
            {"_id": item_id, "user_id": user_id, "read_at": None},
            read_update(now, await webhooks_active(self)),
        )
        return await self._fetch_one(_item, "inbox", {"_id": item_id, "user_id": user_id})

    async def mark_inbox_read_all(
        self, user_id: str, now: datetime, up_to_seq: int | None = None
    ) -> int:
        query: dict[str, Any] = {"user_id": user_id, "read_at": None}
        if up_to_seq is not None:
            query["seq"] = {"$lte": up_to_seq}
        update = read_update(now, await webhooks_active(self))
        return await self._update("inbox", query, update, many=True)

    async def inbox_unread_count(self, user_id: str) -> int:
        count = await self._db["inbox"].count_documents({"user_id": user_id, "read_at": None})
        return int(count)
