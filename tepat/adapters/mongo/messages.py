"""Messages: insertion, claim and status transitions, and the queries over them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError

from tepat.adapters.message_cursor import decode_cursor, message_page
from tepat.adapters.message_transition import TransitionOne, transition_fields
from tepat.adapters.mongo.base import DUPLICATE_KEY, MongoBase, keyset_after
from tepat.adapters.mongo.codecs import bson_dt, message_doc, message_from_doc
from tepat.adapters.mongo.webhooks import add_journal_push, journal_on_insert, webhooks_active
from tepat.adapters.store_results import in_asked_order
from tepat.domain.errors import DomainError
from tepat.domain.models import CLAIMABLE, Message, MessageStatus, allowed_sources
from tepat.ports.repositories.messages import (
    Counts,
    InsertResult,
    MessagePage,
    MessageQuery,
    StatusChange,
)


class MessagesMixin(TransitionOne, MongoBase):
    async def insert_messages(self, messages: Sequence[Message]) -> InsertResult:
        if not messages:
            return InsertResult(created=[], existing=0)
        now = self._clock.now()
        docs = [message_doc(m, now) for m in messages]
        if await webhooks_active(self):  # status webhooks: the journal rides the insert
            for doc in docs:
                journal_on_insert(doc)
        rejected = await self._insert_new("messages", docs)
        created = [message_from_doc(d) for i, d in enumerate(docs) if i not in rejected]
        return InsertResult(created=created, existing=len(rejected))

    async def get_message(self, message_id: str) -> Message | None:
        return await self._fetch_one(message_from_doc, "messages", {"_id": message_id})

    async def get_messages(self, message_ids: Sequence[str]) -> list[Message]:
        found = await self._fetch_in(message_from_doc, "messages", "_id", message_ids)
        return in_asked_order(message_ids, found, attrgetter("id"))

    async def find_by_live_key(self, live_key: str) -> Message | None:
        return await self._fetch_one(message_from_doc, "messages", {"live_key": live_key})

    async def claim(
        self, message_ids: Sequence[str], now: datetime, due_before: datetime | None = None
    ) -> list[Message]:
        # One find_one_and_update per id rather than update_many + a claim token:
        # a single-document findAndModify is atomic and a *retryable write*, so a
        # network blip is retried by the driver exactly once and still tells us
        # whether *we* moved the message; a multi-document update is neither
        # retryable nor able to say which documents it changed.
        messages = self._db["messages"]
        claimed_at = bson_dt(now)

        flt: dict[str, Any] = {"status": {"$in": [s.value for s in CLAIMABLE]}}
        if due_before is not None:
            flt["due_at"] = {"$lt": bson_dt(due_before)}

        async def one(mid: str) -> Message | None:
            doc = await messages.find_one_and_update(
                {"_id": mid, **flt},
                {
                    "$set": {
                        "status": MessageStatus.SENDING.value,
                        "claimed_at": claimed_at,
                        "updated_at": claimed_at,
                        "publish_pending": False,
                    },
                    "$inc": {"attempts": 1},
                },
                return_document=ReturnDocument.AFTER,
            )
            return None if doc is None else message_from_doc(doc)

        # Issued together (the driver's pool carries them at once): a batch's claim
        # costs about one round trip, not one per message.
        claimed = await asyncio.gather(*(one(mid) for mid in dict.fromkeys(message_ids)))
        return [m for m in claimed if m is not None]

    async def renew_claims(self, message_ids: Sequence[str], now: datetime) -> int:
        claimed_at = {"claimed_at": bson_dt(now)}
        return await self._set_where_status(message_ids, MessageStatus.SENDING, claimed_at)

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        journal = await webhooks_active(self)  # status webhooks: the journal rides each update
        ops = [op for ch in changes if (op := _transition_update(ch, now, expect, journal))]
        if not ops:
            return 0
        try:
            result = await self._db["messages"].bulk_write(ops, ordered=False)
        except BulkWriteError as e:
            # Unordered: every other update still ran. A duplicate-key one did not
            # happen: back to pending onto a slot another pending message holds (slots
            # name the intent and its nominal instant, so only a duplicate intent can);
            # the caller closes the message honestly. Anything else is a real failure.
            if any(err.get("code") != DUPLICATE_KEY for err in e.details.get("writeErrors", [])):
                raise
            return int(e.details.get("nModified", 0))
        return int(result.modified_count)

    async def list_messages(self, query: MessageQuery) -> MessagePage:
        if query.limit < 1:
            raise DomainError("limit", "must be at least 1")
        flt: dict[str, Any] = {"user_id": query.user_id}
        if query.statuses:
            flt["status"] = {"$in": sorted(s.value for s in query.statuses)}
        window: dict[str, Any] = {}
        if query.scheduled_from is not None:
            window["$gte"] = bson_dt(query.scheduled_from)
        if query.scheduled_to is not None:
            window["$lt"] = bson_dt(query.scheduled_to)
        if window:
            flt["scheduled_at"] = window
        order = ["-scheduled_at", "-_id"]
        if query.cursor is not None:
            flt.update(keyset_after(order, decode_cursor(query.cursor)))
        # One extra tells whether another page exists.
        limit = query.limit + 1
        found = await self._fetch(message_from_doc, "messages", flt, sort=order, limit=limit)
        return message_page(found, query.limit)

    async def due_pending(self, before: datetime, limit: int) -> list[Message]:
        return await self._fetch(
            message_from_doc,
            "messages",
            {
                "status": MessageStatus.PENDING.value,
                # Still marked: the outbox has not published it yet, so it is
                # not lost in transit.
                "publish_pending": False,
                "due_at": {"$lt": bson_dt(before)},
            },
            sort=["due_at", "_id"],
            limit=limit,
        )

    async def pending_for_user(self, user_id: str) -> list[Message]:
        pending = {"user_id": user_id, "status": MessageStatus.PENDING.value}
        return await self._fetch(message_from_doc, "messages", pending, sort=["nominal_at", "_id"])

    async def stuck_sending(self, claimed_before: datetime, limit: int) -> list[Message]:
        stuck = {
            "status": MessageStatus.SENDING.value,
            "claimed_at": {"$lt": bson_dt(claimed_before)},
        }
        return await self._fetch(
            message_from_doc, "messages", stuck, sort=["claimed_at", "_id"], limit=limit
        )

    async def count_messages(self) -> Counts:
        # A message written before channels existed is a push (codecs.py).
        channel = {"$ifNull": ["$channel", "push"]}
        groups = await self._count("messages", {}, s="$status", c="$category", ch=channel)
        return Counts(by_status_category_channel={(g["s"], g["c"], g["ch"]): n for g, n in groups})

    async def dead_letters(self, limit: int) -> list[Message]:
        failed = {"status": MessageStatus.FAILED.value}
        order = ["-updated_at", "-_id"]
        return await self._fetch(message_from_doc, "messages", failed, sort=order, limit=limit)


def _transition_update(
    change: StatusChange, now: datetime, expect: Sequence[MessageStatus], journal: bool
) -> UpdateOne | None:
    """The conditional update of one status change (``journal``: with its journal entry),
    or None when the transition table allows it from none of ``expect`` (refused)."""
    sources = allowed_sources(change.to, expect)
    if not sources:
        return None
    fields = {
        name: bson_dt(value) if isinstance(value, datetime) else value
        for name, value in transition_fields(change, now).items()
    }
    update: dict[str, Any] = {"$set": fields}
    if change.release_live_key:
        update["$unset"] = {"live_key": ""}
    if journal:
        add_journal_push(update, change.to.value, change.reason, now)
    return UpdateOne(
        {"_id": change.message_id, "status": {"$in": [s.value for s in sources]}}, update
    )
