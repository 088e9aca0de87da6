"""Business events on MongoDB: ``events`` (``_id`` the event id) and ``event_recipients``.

MongoDB has no transaction here, so a listed event is written in three steps: the event
as ``accepting`` (its unique ``_id`` decides which concurrent request creates it), its
recipients (idempotent: ``_id`` is (event, user)), then ``fanning_out``. The fan-out loop
takes only ``fanning_out`` events, so it never sees a partial list; a crash between the
steps leaves ``accepting``, and a retry of the same request finishes the steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from operator import itemgetter

from pymongo import ReturnDocument

from tepat.adapters.event_fields import EVENT_FIELDS, STORED_EVENT_FIELDS, new_event
from tepat.adapters.mongo.base import ID_ONLY, MongoBase, doc_id
from tepat.adapters.mongo.codecs import bson_dt, decoder, encoder, opt_bson_dt, read_dt
from tepat.domain.events import Event, EventState, event_key_range

_RECIPIENT_CHUNK = 5000


_event_doc = encoder(
    Event,
    "event_id",
    **STORED_EVENT_FIELDS,
    # As JSON text: the caller's keys may hold "." or "$", which field names may not.
    data=lambda data: json.dumps(dict(data), ensure_ascii=False, separators=(",", ":")),
    occurred_at=bson_dt,
    send_at=opt_bson_dt,
    counts=dict,
    created_at=bson_dt,
    updated_at=bson_dt,
)


_event = decoder(
    Event,
    "event_id",
    **EVENT_FIELDS,
    occurred_at=read_dt,
    send_at=read_dt,
    counts=lambda counts: {k: int(v) for k, v in (counts or {}).items()},
    created_at=read_dt,
    updated_at=read_dt,
)


class EventsMixin(MongoBase):
    async def _put_recipients(self, event_id: str, ids: Sequence[str]) -> None:
        for i in range(0, len(ids), _RECIPIENT_CHUNK):
            docs = [
                {"_id": f"{event_id}|{u}", "event_id": event_id, "user_id": u}
                for u in ids[i : i + _RECIPIENT_CHUNK]
            ]
            await self._insert_new("event_recipients", docs)  # a retry's: already there

    async def create_event(self, event: Event, user_ids: Sequence[str]) -> tuple[Event, bool]:
        events = self._db["events"]
        ids = sorted(set(user_ids))
        state = EventState.ACCEPTING if ids else EventState.FANNING_OUT
        doc = _event_doc(new_event(event, state, self._clock.now()))
        created = await self._insert_if_new("events", doc)
        if not created:
            stored = await events.find_one({"_id": event.event_id})
            if (
                stored is None
                or stored["state"] != EventState.ACCEPTING.value
                or stored["request_hash"] != event.request_hash
            ):
                return _event(stored) if stored else event, False
        if ids:
            await self._put_recipients(event.event_id, ids)
            await events.update_one(
                {"_id": event.event_id, "state": EventState.ACCEPTING.value},
                {"$set": {"state": EventState.FANNING_OUT.value}},
            )
        stored = await events.find_one({"_id": event.event_id})
        assert stored is not None
        return _event(stored), created

    async def get_event(self, event_id: str) -> Event | None:
        return await self._fetch_one(_event, "events", {"_id": event_id})

    async def events_fanning_out(self, limit: int) -> list[Event]:
        fanning_out = {"state": EventState.FANNING_OUT.value}
        return await self._fetch(
            _event, "events", fanning_out, sort=["created_at", "_id"], limit=limit
        )

    async def event_recipients(
        self, event_id: str, all_users: bool, after: str, limit: int
    ) -> list[str]:
        if all_users:
            users = {"_id": {"$gt": after}}
            return await self._fetch(
                doc_id, "users", users, projection=ID_ONLY, sort=["_id"], limit=limit
            )
        return await self._fetch(
            itemgetter("user_id"),
            "event_recipients",
            {"event_id": event_id, "user_id": {"$gt": after}},
            projection={"user_id": True},
            sort=["user_id"],
            limit=limit,
        )

    async def advance_event(
        self,
        event_id: str,
        after: str,
        to: str,
        recipients: int,
        counts: Mapping[str, int],
        done: bool,
        now: datetime,
    ) -> bool:
        inc: dict[str, int] = {"recipients": recipients}
        inc.update({f"counts.{k}": n for k, n in counts.items() if n})
        state = EventState.DONE if done else EventState.FANNING_OUT
        # One findAndModify conditional on the cursor: a page done twice moves it once.
        doc = await self._db["events"].find_one_and_update(
            {"_id": event_id, "cursor": after, "state": EventState.FANNING_OUT.value},
            {
                "$set": {"cursor": to, "state": state.value, "updated_at": bson_dt(now)},
                "$inc": inc,
            },
            return_document=ReturnDocument.AFTER,
        )
        return doc is not None

    async def event_message_counts(self, event_id: str) -> dict[tuple[str, str, str], int]:
        low, high = event_key_range(event_id)
        groups = await self._count(
            "messages",
            {"dedup_key": {"$gte": low, "$lt": high}},
            channel="$channel",
            status="$status",
            reason="$status_reason",
        )
        return {
            (g.get("channel") or "push", g["status"], g.get("reason") or ""): n for g, n in groups
        }
