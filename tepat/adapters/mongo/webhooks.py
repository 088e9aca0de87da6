"""Status webhook subscriptions and the status journal on MongoDB.

MongoDB has no triggers, and a multi-document transaction per status change would cost
the hot path dearly. So the journal lives *inside* the document that changes: a status
transition of a message (``messages.py``) or an inbox item's first read (``inbox.py``)
pushes ``{s: status, r: reason, at}`` onto the document's ``wh`` array in the same
single-document update, atomic with the change. The emitter finds documents that carry
``wh`` (a partial index, ``indexes.py``), turns the entries into deliveries, then pulls
them (and unsets an emptied array, so the document leaves the index).

A process pushes only while a subscription is enabled. Whether one is, it caches for a
few seconds (:func:`webhooks_active`): a subscription created in another process starts
receiving within that time; one created through this store, at once. Webhook delivery
messages journal their own transitions too (an update cannot look at the document's
user before writing it); :meth:`WebhooksMixin.webhook_journal` drops those unread.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tepat.adapters.mongo.base import MongoBase
from tepat.adapters.mongo.codecs import (
    bson_dt,
    decoder,
    encoder,
    opt_bson_dt,
    read_dt,
    read_dt_required,
)
from tepat.domain.webhooks import (
    STATUS_EVENT_TYPES,
    WEBHOOK_USER,
    StatusChangeEntry,
    WebhookSecret,
    WebhookSubscription,
)

SUBSCRIPTIONS = "webhook_subscriptions"
JOURNAL_FIELD = "wh"
# Seconds a process trusts its answer to "is any subscription enabled?".
ACTIVE_CACHE_SECONDS = 5.0
_MESSAGE_STATUSES = frozenset(STATUS_EVENT_TYPES) - {"read"}


async def webhooks_active(store: MongoBase) -> bool:
    """Whether status changes must be journaled now (cached per store object)."""
    cached = store._webhooks_active
    now = time.monotonic()
    if cached is not None and now < cached[1]:
        return cached[0]
    found = await store._db[SUBSCRIPTIONS].find_one({"enabled": True}, projection={"_id": 1})
    active = found is not None
    store._webhooks_active = (active, now + ACTIVE_CACHE_SECONDS)
    return active


def journal_entry(status: str, reason: str | None, at: datetime) -> dict[str, Any]:
    return {"s": status, "r": reason, "at": bson_dt(at)}


def add_journal_push(update: dict[str, Any], status: str, reason: str | None, at: datetime) -> None:
    """Add the journal push to ``update`` (a message transition's), for a journaled status."""
    if status in _MESSAGE_STATUSES:
        update["$push"] = {JOURNAL_FIELD: journal_entry(status, reason, at)}


def read_update(now: datetime, journal: bool) -> dict[str, Any]:
    """An inbox item's first read, journaled (status ``read``) in the same update."""
    update: dict[str, Any] = {"$set": {"read_at": bson_dt(now)}}
    if journal:
        update["$push"] = {JOURNAL_FIELD: journal_entry("read", None, now)}
    return update


def journal_on_insert(doc: dict[str, Any]) -> None:
    """A message inserted already final (a render error) carries its entry from the start."""
    if doc.get("status") in _MESSAGE_STATUSES:
        doc[JOURNAL_FIELD] = [
            journal_entry(doc["status"], doc.get("status_reason"), doc["updated_at"])
        ]


_sub_doc = encoder(
    WebhookSubscription,
    "id",
    event_types=list,
    categories=list,
    secrets=lambda secrets: [
        {
            "secret": s.secret,
            "created_at": bson_dt(s.created_at),
            "expires_at": opt_bson_dt(s.expires_at),
        }
        for s in secrets
    ],
    created_at=bson_dt,
    updated_at=bson_dt,
)
_subscription = decoder(
    WebhookSubscription,
    "id",
    event_types=tuple,
    categories=lambda categories: tuple(categories or ()),
    secrets=lambda secrets: tuple(
        WebhookSecret(s["secret"], read_dt_required(s["created_at"]), read_dt(s.get("expires_at")))
        for s in secrets
    ),
    enabled=bool,
    version=int,
    created_at=read_dt_required,
    updated_at=read_dt_required,
)


class WebhooksMixin(MongoBase):
    async def create_webhook_subscription(self, sub: WebhookSubscription) -> bool:
        if not await self._insert_if_new(SUBSCRIPTIONS, _sub_doc(sub)):
            return False
        self._webhooks_active = None
        return True

    async def get_webhook_subscription(self, subscription_id: str) -> WebhookSubscription | None:
        return await self._fetch_one(_subscription, SUBSCRIPTIONS, {"_id": subscription_id})

    async def list_webhook_subscriptions(self) -> list[WebhookSubscription]:
        return await self._fetch(_subscription, SUBSCRIPTIONS, {}, sort=["created_at", "_id"])

    async def update_webhook_subscription(
        self, sub: WebhookSubscription, expect_version: int
    ) -> bool:
        fields = _sub_doc(sub)
        del fields["_id"], fields["created_at"]
        changed = await self._update(
            SUBSCRIPTIONS, {"_id": sub.id, "version": expect_version}, {"$set": fields}
        )
        self._webhooks_active = None
        return bool(changed)

    async def delete_webhook_subscription(self, subscription_id: str) -> bool:
        result = await self._db[SUBSCRIPTIONS].delete_one({"_id": subscription_id})
        self._webhooks_active = None
        return bool(result.deleted_count)

    async def webhook_journal(self, limit: int) -> list[StatusChangeEntry]:
        has = {JOURNAL_FIELD: {"$exists": True}}
        messages = await self._fetch(
            dict,
            "messages",
            has,
            projection={"user_id": 1, "category": 1, "channel": 1, JOURNAL_FIELD: 1},
            limit=limit,
        )
        own = [d["_id"] for d in messages if d["user_id"] == WEBHOOK_USER]
        if own:  # a delivery's own transitions: nothing to report, dropped here
            await self._db["messages"].update_many(
                {"_id": {"$in": own}}, {"$unset": {JOURNAL_FIELD: ""}}
            )
        out = [
            entry
            for d in messages
            if d["user_id"] != WEBHOOK_USER
            for entry in _journaled("m", d, d["_id"], d.get("channel"))
        ]
        if len(messages) < limit:
            items = await self._fetch(
                dict,
                "inbox",
                has,
                projection={"user_id": 1, "category": 1, "message_id": 1, JOURNAL_FIELD: 1},
                limit=limit - len(messages),
            )
            for d in items:
                out += _journaled("i", d, d["message_id"], "inbox")
        out.sort(key=lambda e: e.at)
        return out

    async def drop_webhook_journal(self, entries: Sequence[StatusChangeEntry]) -> int:
        grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
        for e in entries:
            kind, doc_id, status = e.key.split("|", 2)
            grouped[("messages" if kind == "m" else "inbox", doc_id)].append(status)
        dropped = 0
        emptied: dict[str, list[str]] = defaultdict(list)
        for (collection, doc_id), statuses in grouped.items():
            pull = {"$pull": {JOURNAL_FIELD: {"s": {"$in": statuses}}}}
            dropped += len(statuses) if await self._update(collection, {"_id": doc_id}, pull) else 0
            emptied[collection].append(doc_id)
        # Out of the partial index; an entry pushed since keeps the array (and the
        # document) there, since the filter is on the emptied array only.
        for collection, ids in emptied.items():
            await self._db[collection].update_many(
                {"_id": {"$in": ids}, JOURNAL_FIELD: {"$size": 0}},
                {"$unset": {JOURNAL_FIELD: ""}},
            )
        return dropped


def _journaled(
    kind: str, d: Mapping[str, Any], message_id: str, channel: str | None
) -> list[StatusChangeEntry]:
    """The entries journaled on document ``d``: a message's (``kind`` "m") or an inbox
    item's ("i"); the key names the document for :meth:`drop_webhook_journal`."""
    return [
        StatusChangeEntry(
            key=f"{kind}|{d['_id']}|{e['s']}",
            message_id=message_id,
            status=e["s"],
            reason=e.get("r"),
            user_id=d["user_id"],
            category=d["category"],
            channel=channel,
            at=read_dt_required(e["at"]),
        )
        for e in d.get(JOURNAL_FIELD) or ()
    ]
