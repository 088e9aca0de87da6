"""Collections and their indexes.

Every guarantee the port promises comes from a unique index created here (on
:meth:`MongoStore.open`), never from check-then-insert:

- ``messages.dedup_key`` unique;
- ``messages.live_key`` unique where it is a string. A message without a live
  key (or whose key was released on cancel) has the *field absent*: we ``$unset``
  rather than set ``null`` so "no live key" has one representation, written the
  same way by insert and by cancel, and so queries and the partial filter
  (``{$type: "string"}``) never have to care about a stored ``null``;
- ``messages.slot_key`` unique among pending messages (partial on
  ``{status: "pending"}``): the slot is computed in the domain
  (``slot_key_for``), so every message carries it and a deferral or retry,
  which never changes it, can collide only with a duplicate intent;
- devices: one active document per (``user_id``, ``device_id``) and per
  ``push_token`` (partial on ``{active: true}``). A device id is scoped to its
  user; a token is global.

:func:`migrate` brings a database written by an earlier version to this shape
(idempotent, safe with several processes opening at once).
"""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from tepat.adapters.mongo.codecs import legacy_backfill

INDEX_NOT_FOUND = 27  # the server's code when dropping an index that is not there
BACKFILL_PAGE = 1000

# Indexes of earlier versions whose guarantee changed: the pending slot was
# (user, device, category, label, scheduled_at), and a device id was global.
_RETIRED_INDEXES = {
    "messages": ("uniq_pending_slot",),
    "devices": ("uniq_active_device_id",),
}
_LEGACY_MESSAGE = {
    "$or": [
        {field: {"$exists": False}}
        for field in ("nominal_at", "due_at", "slot_key", "publish_pending")
    ]
}


async def migrate(db: Any) -> None:
    """Retire the old indexes and backfill the message fields they lacked.

    Runs before :func:`create_indexes`: the unique slot index can only be built
    once every pending message has its ``slot_key``.
    """
    for collection, names in _RETIRED_INDEXES.items():
        present = await db[collection].index_information()
        for name in names:
            if name not in present:
                continue
            try:
                await db[collection].drop_index(name)
            except OperationFailure as e:
                if e.code != INDEX_NOT_FOUND:  # another process dropped it first
                    raise
    await _backfill_messages(db["messages"])


async def _backfill_messages(messages: Any) -> None:
    while True:
        docs = await messages.find(_LEGACY_MESSAGE).limit(BACKFILL_PAGE).to_list(None)
        if not docs:
            return
        # Guarded on the fields read: a document another writer changed meanwhile
        # is left for the next page, read again with its new values.
        ops = [
            UpdateOne(
                {"_id": d["_id"], "status": d["status"], "scheduled_at": d["scheduled_at"]},
                {"$set": legacy_backfill(d)},
            )
            for d in docs
        ]
        try:
            await messages.bulk_write(ops, ordered=False)
        except BulkWriteError as e:
            # Two legacy pending messages in one new slot: impossible while the old
            # index held them apart, so this is a real inconsistency to report.
            raise RuntimeError(f"message backfill failed: {e.details}") from e


async def create_indexes(db: Any) -> None:
    # create_index with an identical spec is a no-op on the server, so open()
    # is idempotent. Names are explicit so a later spec change fails loudly
    # (IndexOptionsConflict) instead of piling up near-duplicate indexes.
    messages = db["messages"]
    await messages.create_index("dedup_key", unique=True, name="uniq_dedup_key")
    await messages.create_index(
        "live_key",
        unique=True,
        name="uniq_live_key",
        partialFilterExpression={"live_key": {"$type": "string"}},
    )
    await messages.create_index(
        "slot_key",
        unique=True,
        name="uniq_pending_slot_key",
        partialFilterExpression={"status": "pending"},
    )
    # The outbox: marked messages by (due_at, _id); small, since the publisher
    # clears the mark within seconds.
    await messages.create_index(
        [("due_at", ASCENDING), ("_id", ASCENDING)],
        name="outbox_due",
        partialFilterExpression={"publish_pending": True},
    )
    # due_pending (the sweeper): published pending messages by due_at. Led by the
    # mark so its key pattern differs from outbox_due's (servers before 5.0 refuse
    # two indexes with one key pattern, whatever their partial filters).
    await messages.create_index(
        [("publish_pending", ASCENDING), ("due_at", ASCENDING), ("_id", ASCENDING)],
        name="pending_due",
        partialFilterExpression={"status": "pending"},
    )
    # count_messages (by status); the sweeper.
    await messages.create_index(
        [("status", ASCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)],
        name="status_scheduled",
    )
    # list_messages (user history, newest first), pending_for_user.
    await messages.create_index(
        [("user_id", ASCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)],
        name="user_scheduled",
    )
    # Small partial indexes for the sweeper's and the operator's views.
    await messages.create_index(
        [("claimed_at", ASCENDING), ("_id", ASCENDING)],
        name="sending_claimed",
        partialFilterExpression={"status": "sending"},
    )
    await messages.create_index(
        [("updated_at", DESCENDING), ("_id", DESCENDING)],
        name="failed_updated",
        partialFilterExpression={"status": "failed"},
    )

    devices = db["devices"]
    await devices.create_index(
        [("user_id", ASCENDING), ("device_id", ASCENDING)],
        unique=True,
        name="uniq_active_user_device",
        partialFilterExpression={"active": True},
    )
    await devices.create_index(
        "push_token",
        unique=True,
        name="uniq_active_push_token",
        partialFilterExpression={"active": True},
    )
    await devices.create_index([("user_id", ASCENDING), ("active", ASCENDING)], name="user")
    await devices.create_index("push_token", name="push_token")
    # The dashboard's "deactivated today" (adapters/mongo/ops_views.py).
    await devices.create_index(
        "updated_at", name="deactivated", partialFilterExpression={"active": False}
    )

    await db["reminders"].create_index("user_id", name="user")
    await db["preferences"].create_index("user_id", name="user")

    tickets = db["tickets"]
    await tickets.create_index(
        [("receipt_status", ASCENDING), ("sent_at", ASCENDING)], name="receipt_sent"
    )
    await tickets.create_index("message_id", name="message")
    await tickets.create_index("sent_at", name="sent")  # the dashboard's recent sends

    # Live consumer processes per group (adapters/mongo/presence.py).
    await db["presence"].create_index(
        [("group", ASCENDING), ("beat_at", ASCENDING)], name="group_beat"
    )

    # Message templates (adapters/mongo/templates.py): one document per version; this
    # unique index keeps two concurrent PUTs from taking the same version.
    await db["templates"].create_index(
        [
            ("event_type", ASCENDING),
            ("channel", ASCENDING),
            ("locale", ASCENDING),
            ("version", DESCENDING),
        ],
        unique=True,
        name="uniq_template_version",
    )

    # The in-app inbox (adapters/mongo/inbox.py): one item per (user, message id); a
    # user's items by seq (the list, newest first, and a stream's resume).
    inbox = db["inbox"]
    await inbox.create_index(
        [("user_id", ASCENDING), ("message_id", ASCENDING)], unique=True, name="uniq_user_message"
    )
    await inbox.create_index([("user_id", ASCENDING), ("seq", DESCENDING)], name="user_seq")
    # Unread items (the unread filter, the count, read-all): read_at is null until read.
    await inbox.create_index(
        [("user_id", ASCENDING), ("read_at", ASCENDING), ("seq", DESCENDING)], name="user_read_seq"
    )

    # Business events (adapters/mongo/events.py): _id is the event id (one per id); the
    # open ones oldest first for the fan-out loop; listed recipients paged by user id.
    await db["events"].create_index(
        [("state", ASCENDING), ("created_at", ASCENDING), ("_id", ASCENDING)], name="state_created"
    )
    await db["event_recipients"].create_index(
        [("event_id", ASCENDING), ("user_id", ASCENDING)], name="event_user"
    )

    # Contacts, suppressions and provider-event dedup (adapters/mongo/contacts.py): each
    # unique index is the port's key; a contact is also found by user alone (the API's list).
    await db["contacts"].create_index(
        [("user_id", ASCENDING), ("channel", ASCENDING)], unique=True, name="uniq_user_channel"
    )
    await db["suppressions"].create_index(
        [("channel", ASCENDING), ("address", ASCENDING)], unique=True, name="uniq_channel_address"
    )
    await db["provider_events"].create_index(
        [("provider", ASCENDING), ("event_id", ASCENDING)], unique=True, name="uniq_provider_event"
    )

    # Status webhooks (adapters/mongo/webhooks.py): the journal rides in the changed
    # document's `wh` array, present only while entries wait; the emitter finds them here.
    for collection in ("messages", "inbox"):
        await db[collection].create_index(
            [("wh.at", ASCENDING)],
            name="webhook_journal",
            partialFilterExpression={"wh": {"$exists": True}},
        )
