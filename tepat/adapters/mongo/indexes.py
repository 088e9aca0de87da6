"""Collections and their indexes.

Every uniqueness the ports promise (``tepat/ports/repositories/messages.py``,
``devices.py``) comes from a unique index created here (on :meth:`MongoStore.open`),
never from check-then-insert. A message without a live key (or whose key was released
on cancel) has the *field absent*: we ``$unset`` rather than set ``null`` so "no live
key" has one representation, written the same way by insert and by cancel, and so
queries and the partial filter (``{$type: "string"}``) never have to care about a
stored ``null``. The pending slot is computed in the domain (``slot_key_for``), so a
deferral or retry, which never changes it, can collide only with a duplicate intent.

:func:`migrate` brings a database written by an earlier version to this shape
(idempotent, safe with several processes opening at once).
"""

from __future__ import annotations

from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from tepat.adapters.mongo.base import sort_spec
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


def _partial(expression: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Index options for the documents matching ``expression`` only."""
    return {**options, "partialFilterExpression": expression}


_UNIQUE: dict[str, Any] = {"unique": True}
_PENDING = _partial({"status": "pending"})
_ACTIVE = _partial({"active": True}, **_UNIQUE)
_JOURNALED = _partial({"wh": {"$exists": True}})

# (collection, name, keys as sort_spec names them, options). Names are explicit so a later
# spec change fails loudly (IndexOptionsConflict) instead of piling up near-duplicate indexes.
INDEXES: tuple[tuple[str, str, list[str], dict[str, Any]], ...] = (
    ("messages", "uniq_dedup_key", ["dedup_key"], _UNIQUE),
    (
        "messages",
        "uniq_live_key",
        ["live_key"],
        _partial({"live_key": {"$type": "string"}}, **_UNIQUE),
    ),
    ("messages", "uniq_pending_slot_key", ["slot_key"], {**_UNIQUE, **_PENDING}),
    # The outbox: marked messages by (due_at, _id); small, since the publisher
    # clears the mark within seconds.
    ("messages", "outbox_due", ["due_at", "_id"], _partial({"publish_pending": True})),
    # due_pending (the sweeper): published pending messages by due_at. Led by the
    # mark so its key pattern differs from outbox_due's (servers before 5.0 refuse
    # two indexes with one key pattern, whatever their partial filters).
    ("messages", "pending_due", ["publish_pending", "due_at", "_id"], _PENDING),
    # count_messages (by status); the sweeper.
    ("messages", "status_scheduled", ["status", "scheduled_at", "_id"], {}),
    # list_messages (user history, newest first), pending_for_user.
    ("messages", "user_scheduled", ["user_id", "scheduled_at", "_id"], {}),
    # Small partial indexes for the sweeper's and the operator's views.
    ("messages", "sending_claimed", ["claimed_at", "_id"], _partial({"status": "sending"})),
    ("messages", "failed_updated", ["-updated_at", "-_id"], _partial({"status": "failed"})),
    ("devices", "uniq_active_user_device", ["user_id", "device_id"], _ACTIVE),
    ("devices", "uniq_active_push_token", ["push_token"], _ACTIVE),
    ("devices", "user", ["user_id", "active"], {}),
    ("devices", "push_token", ["push_token"], {}),
    # A dead token dropped as a fallback (deactivate_token).
    (
        "devices",
        "fallback_token",
        ["fallback_token"],
        _partial({"fallback_token": {"$type": "string"}}),
    ),
    # The dashboard's "deactivated today" (adapters/mongo/ops_views.py).
    ("devices", "deactivated", ["updated_at"], _partial({"active": False})),
    ("reminders", "user", ["user_id"], {}),
    ("preferences", "user", ["user_id"], {}),
    ("tickets", "receipt_sent", ["receipt_status", "sent_at"], {}),
    ("tickets", "message", ["message_id"], {}),
    ("tickets", "sent", ["sent_at"], {}),  # the dashboard's recent sends
    # Live consumer processes per group (adapters/mongo/presence.py).
    ("presence", "group_beat", ["group", "beat_at"], {}),
    # Message templates (adapters/mongo/templates.py): one document per version; this
    # unique index keeps two concurrent PUTs from taking the same version.
    (
        "templates",
        "uniq_template_version",
        ["event_type", "channel", "locale", "-version"],
        _UNIQUE,
    ),
    # The in-app inbox (adapters/mongo/inbox.py): one item per (user, message id); a
    # user's items by seq (the list, newest first, and a stream's resume).
    ("inbox", "uniq_user_message", ["user_id", "message_id"], _UNIQUE),
    ("inbox", "user_seq", ["user_id", "-seq"], {}),
    # Unread items (the unread filter, the count, read-all): read_at is null until read.
    ("inbox", "user_read_seq", ["user_id", "read_at", "-seq"], {}),
    # Business events (adapters/mongo/events.py): _id is the event id (one per id); the
    # open ones oldest first for the fan-out loop; listed recipients paged by user id.
    ("events", "state_created", ["state", "created_at", "_id"], {}),
    ("event_recipients", "event_user", ["event_id", "user_id"], {}),
    # Contacts, suppressions and provider-event dedup (adapters/mongo/contacts.py): each
    # unique index is the port's key; a contact is also found by user alone (the API's list).
    ("contacts", "uniq_user_channel", ["user_id", "channel"], _UNIQUE),
    ("suppressions", "uniq_channel_address", ["channel", "address"], _UNIQUE),
    ("provider_events", "uniq_provider_event", ["provider", "event_id"], _UNIQUE),
    # Status webhooks (adapters/mongo/webhooks.py): the journal rides in the changed
    # document's `wh` array, present only while entries wait; the emitter finds them here.
    ("messages", "webhook_journal", ["wh.at"], _JOURNALED),
    ("inbox", "webhook_journal", ["wh.at"], _JOURNALED),
    # The registry of apps (adapters/mongo/apps.py): a key's _id is its hash (the lookup
    # of every request); its id, which revokes it, is unique too; an app's keys by age.
    ("app_keys", "uniq_key_id", ["key_id"], _UNIQUE),
    ("app_keys", "app_created", ["app_id", "created_at", "key_id"], {}),
)


async def create_indexes(db: Any) -> None:
    # create_index with an identical spec is a no-op on the server, so open() is idempotent.
    for collection, name, keys, options in INDEXES:
        await db[collection].create_index(sort_spec(keys), name=name, **options)
