"""Collections and their indexes.

Every guarantee the port promises comes from a unique index created here (on
:meth:`MongoStore.open`), never from check-then-insert:

- ``messages.dedup_key`` unique;
- ``messages.live_key`` unique where it is a string. A message without a live
  key (or whose key was released on cancel) has the *field absent*: we ``$unset``
  rather than set ``null`` so "no live key" has one representation, written the
  same way by insert and by cancel, and so queries and the partial filter
  (``{$type: "string"}``) never have to care about a stored ``null``;
- pending messages unique per (user_id, device_key, category, label,
  scheduled_at), partial on ``{status: "pending"}``; ``device_key`` is the
  device id, or ``"*"`` for "all of the user's devices", because a partial
  unique index treats a missing field as ``null`` and we want that slot explicit;
- devices: one active document per ``device_id`` and per ``push_token``
  (partial on ``{active: true}``).
"""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING


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
        [
            ("user_id", ASCENDING),
            ("device_key", ASCENDING),
            ("category", ASCENDING),
            ("label", ASCENDING),
            ("scheduled_at", ASCENDING),
        ],
        unique=True,
        name="uniq_pending_slot",
        partialFilterExpression={"status": "pending"},
    )
    # due_pending / iter_pending / count by status.
    await messages.create_index(
        [("status", ASCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)],
        name="status_scheduled",
    )
    # list_messages (user history, newest first) and cancel_pending.
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
        "device_id",
        unique=True,
        name="uniq_active_device_id",
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

    await db["reminders"].create_index("user_id", name="user")
    await db["preferences"].create_index("user_id", name="user")

    tickets = db["tickets"]
    await tickets.create_index(
        [("receipt_status", ASCENDING), ("sent_at", ASCENDING)], name="receipt_sent"
    )
    await tickets.create_index("message_id", name="message")
