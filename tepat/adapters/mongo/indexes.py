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


_UNIQUE = {"unique": True}
_PENDING = {"partialFilterExpression": {"status": "pending"}}
_ACTIVE = {"unique": True, "partialFilterExpression": {"active": True}}
_JOURNALED = {"partialFilterExpression": {"wh": {"$exists": True}}}
A, D = ASCENDING, DESCENDING

# (collection, name, keys, options). Names are explicit so a later spec change fails
# loudly (IndexOptionsConflict) instead of piling up near-duplicate indexes.
INDEXES: tuple[tuple[str, str, str | list[tuple[str, int]], dict[str, Any]], ...] = (
    ("messages", "uniq_dedup_key", "dedup_key", _UNIQUE),
    (
        "messages",
        "uniq_live_key",
        "live_key",
        {**_UNIQUE, "partialFilterExpression": {"live_key": {"$type": "string"}}},
    ),
    ("messages", "uniq_pending_slot_key", "slot_key", {**_UNIQUE, **_PENDING}),
    # The outbox: marked messages by (due_at, _id); small, since the publisher
    # clears the mark within seconds.
    (
        "messages",
        "outbox_due",
        [("due_at", A), ("_id", A)],
        {"partialFilterExpression": {"publish_pending": True}},
    ),
    # due_pending (the sweeper): published pending messages by due_at. Led by the
    # mark so its key pattern differs from outbox_due's (servers before 5.0 refuse
    # two indexes with one key pattern, whatever their partial filters).
    ("messages", "pending_due", [("publish_pending", A), ("due_at", A), ("_id", A)], _PENDING),
    # count_messages (by status); the sweeper.
    ("messages", "status_scheduled", [("status", A), ("scheduled_at", A), ("_id", A)], {}),
    # list_messages (user history, newest first), pending_for_user.
    ("messages", "user_scheduled", [("user_id", A), ("scheduled_at", A), ("_id", A)], {}),
    # Small partial indexes for the sweeper's and the operator's views.
    (
        "messages",
        "sending_claimed",
        [("claimed_at", A), ("_id", A)],
        {"partialFilterExpression": {"status": "sending"}},
    ),
    (
        "messages",
        "failed_updated",
        [("updated_at", D), ("_id", D)],
        {"partialFilterExpression": {"status": "failed"}},
    ),
    ("devices", "uniq_active_user_device", [("user_id", A), ("device_id", A)], _ACTIVE),
    ("devices", "uniq_active_push_token", "push_token", _ACTIVE),
    ("devices", "user", [("user_id", A), ("active", A)], {}),
    ("devices", "push_token", "push_token", {}),
    # The dashboard's "deactivated today" (adapters/mongo/ops_views.py).
    ("devices", "deactivated", "updated_at", {"partialFilterExpression": {"active": False}}),
    ("reminders", "user", "user_id", {}),
    ("preferences", "user", "user_id", {}),
    ("tickets", "receipt_sent", [("receipt_status", A), ("sent_at", A)], {}),
    ("tickets", "message", "message_id", {}),
    ("tickets", "sent", "sent_at", {}),  # the dashboard's recent sends
    # Live consumer processes per group (adapters/mongo/presence.py).
    ("presence", "group_beat", [("group", A), ("beat_at", A)], {}),
    # Message templates (adapters/mongo/templates.py): one document per version; this
    # unique index keeps two concurrent PUTs from taking the same version.
    (
        "templates",
        "uniq_template_version",
        [("event_type", A), ("channel", A), ("locale", A), ("version", D)],
        _UNIQUE,
    ),
    # The in-app inbox (adapters/mongo/inbox.py): one item per (user, message id); a
    # user's items by seq (the list, newest first, and a stream's resume).
    ("inbox", "uniq_user_message", [("user_id", A), ("message_id", A)], _UNIQUE),
    ("inbox", "user_seq", [("user_id", A), ("seq", D)], {}),
    # Unread items (the unread filter, the count, read-all): read_at is null until read.
    ("inbox", "user_read_seq", [("user_id", A), ("read_at", A), ("seq", D)], {}),
    # Business events (adapters/mongo/events.py): _id is the event id (one per id); the
    # open ones oldest first for the fan-out loop; listed recipients paged by user id.
    ("events", "state_created", [("state", A), ("created_at", A), ("_id", A)], {}),
    ("event_recipients", "event_user", [("event_id", A), ("user_id", A)], {}),
    # Contacts, suppressions and provider-event dedup (adapters/mongo/contacts.py): each
    # unique index is the port's key; a contact is also found by user alone (the API's list).
    ("contacts", "uniq_user_channel", [("user_id", A), ("channel", A)], _UNIQUE),
    ("suppressions", "uniq_channel_address", [("channel", A), ("address", A)], _UNIQUE),
    ("provider_events", "uniq_provider_event", [("provider", A), ("event_id", A)], _UNIQUE),
    # Status webhooks (adapters/mongo/webhooks.py): the journal rides in the changed
    # document's `wh` array, present only while entries wait; the emitter finds them here.
    ("messages", "webhook_journal", [("wh.at", A)], _JOURNALED),
    ("inbox", "webhook_journal", [("wh.at", A)], _JOURNALED),
)


async def create_indexes(db: Any) -> None:
    # create_index with an identical spec is a no-op on the server, so open() is idempotent.
    for collection, name, keys, options in INDEXES:
        await db[collection].create_index(keys, name=name, **options)
