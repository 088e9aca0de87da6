"""Users and their devices."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import DuplicateKeyError

from tepat.adapters.mongo.base import ID_ONLY, MongoBase, doc_id
from tepat.adapters.mongo.codecs import (
    bson_dt,
    device_activation,
    device_from_doc,
    pair_id,
    read_dt_required,
    user_fields,
    user_from_doc,
)
from tepat.adapters.store_results import grouped, keyset_pages
from tepat.domain.errors import PushTokenInUse
from tepat.domain.models import Device, User
from tepat.ports.repositories.devices import REPLACED, DeviceFailure
from tepat.ports.repositories.users import PlanMark, PlanTarget

# Every round lets at least one contender for a token through, so N registrations of one
# token at once need up to N rounds (the contract test runs 8).
_REGISTER_ATTEMPTS = 10

#: Every write that can change what planning makes of a user bumps their change
#: stamp and drops their mark (ports/store.py, UserRepository): a standing mark is never stale.
PLAN_CHANGED: dict[str, Any] = {
    "$inc": {"plan_stamp": 1},
    "$unset": {"plan_from": "", "plan_next_at": "", "plan_fp": ""},
}


def user_upsert(user: User, now: datetime) -> dict[str, Any]:
    """The update that creates or replaces ``user`` (``upsert_user``, the bulk import)."""
    fields = user_fields(user, now)
    # Never down: a re-plan may have taken a newer version since the caller read.
    # ($max on an absent field sets it, so a new user takes the given version.)
    plan_version = fields.pop("plan_version")
    return {
        "$set": fields,
        "$max": {"plan_version": plan_version},
        # Only a new user takes the given created_at: replacing keeps the original.
        "$setOnInsert": {"created_at": bson_dt(user.created_at or now)},
        **PLAN_CHANGED,
    }


def deactivation(reason: str, at: datetime) -> dict[str, Any]:
    """The update that ends an active binding for ``reason`` at ``at`` (a BSON instant)."""
    return {"$set": {"active": False, "deactivated_reason": reason, "updated_at": at}}


def _ceil_ms(value: datetime) -> datetime:
    down = bson_dt(value)
    return down if down == value else down + timedelta(milliseconds=1)


def _plan_target(doc: Mapping[str, Any]) -> PlanTarget:
    user = user_from_doc(doc)
    stamp = int(doc.get("plan_stamp") or 0)
    mark = None
    if doc.get("plan_next_at") is not None and doc.get("plan_from") is not None:
        mark = PlanMark(
            user.user_id,
            stamp,
            read_dt_required(doc["plan_from"]),
            read_dt_required(doc["plan_next_at"]),
            str(doc.get("plan_fp")),
        )
    return PlanTarget(user, stamp, mark)


class UsersMixin(MongoBase):
    async def upsert_user(self, user: User) -> tuple[User, bool]:
        users = self._db["users"]
        # The write's upsert result says whether it inserted (a findAndModify pre-image
        # cannot: see MongoBase._upsert); the read after it gives the stored user, whose
        # plan_version may be higher than the one written.
        result = await users.update_one(
            {"_id": user.user_id}, user_upsert(user, self._clock.now()), upsert=True
        )
        doc = await users.find_one({"_id": user.user_id})
        stored = user if doc is None else user_from_doc(doc)  # None: deleted meanwhile
        return stored, result.upserted_id is not None

    async def get_user(self, user_id: str) -> User | None:
        return await self._fetch_one(user_from_doc, "users", {"_id": user_id})

    async def get_users(self, user_ids: Sequence[str]) -> dict[str, User]:
        users = await self._fetch_in(user_from_doc, "users", "_id", user_ids)
        return {u.user_id: u for u in users}

    def iter_users(self, batch_size: int = 1000) -> AsyncIterator[list[User]]:
        size = max(1, batch_size)  # limit(0) would mean "everything"

        def page(after: str) -> Awaitable[list[User]]:
            after_id = {"_id": {"$gt": after}}
            return self._fetch(user_from_doc, "users", after_id, sort=["_id"], limit=size)

        return keyset_pages(page, attrgetter("user_id"), "", size)

    def users_to_plan(
        self,
        start: datetime,
        end: datetime,
        fingerprint: str,
        batch_size: int = 1000,
        after: str = "",
        until: str | None = None,
    ) -> AsyncIterator[list[PlanTarget]]:
        size = max(1, batch_size)
        # Keyset on _id, the mark tested by the server: a run with nothing new walks
        # the _id index once and receives nothing (no index on the mark: it would
        # be rewritten at every run for every user).
        needs = {
            "$or": [
                {"plan_next_at": None},
                {"plan_fp": {"$ne": fingerprint}},
                # BSON keeps milliseconds: a stored bound is never wider than
                # the mark (plan_from rounded up, plan_next_at down), and the
                # window's end rounds up so "ends before it" stays true.
                {"plan_from": {"$gt": bson_dt(start)}},
                {"plan_next_at": {"$lt": _ceil_ms(end)}},
            ]
        }
        upto: dict[str, Any] = {} if until is None else {"$lte": until}

        def page(after: str) -> Awaitable[list[PlanTarget]]:
            query: dict[str, Any] = {"_id": {"$gt": after, **upto}, **needs}
            return self._fetch(_plan_target, "users", query, sort=["_id"], limit=size)

        return keyset_pages(page, attrgetter("user.user_id"), after, size)

    async def set_plan_marks(self, marks: Sequence[PlanMark]) -> int:
        if not marks:
            return 0
        ops = [
            UpdateOne(
                # A user written before stamps existed has none: it reads as 0.
                {"_id": m.user_id, "plan_stamp": m.stamp if m.stamp else {"$in": [0, None]}},
                {
                    "$set": {
                        "plan_from": _ceil_ms(m.plan_from),
                        "plan_next_at": bson_dt(m.plan_next_at),
                        "plan_fp": m.fingerprint,
                    }
                },
            )
            for m in marks
        ]
        result = await self._db["users"].bulk_write(ops, ordered=False)
        return int(result.modified_count)

    async def user_id_bounds(self, parts: int) -> list[str]:
        if parts <= 1:
            return []
        step = await self._db["users"].count_documents({}) // parts
        if step == 0:
            return []
        # Walks the ids once, a range at a time (ids only): cheap next to the plan.
        bounds: list[str] = []
        for _ in range(1, parts):
            flt: dict[str, Any] = {"_id": {"$gt": bounds[-1]}} if bounds else {}
            ids = await self._fetch(
                doc_id, "users", flt, projection=ID_ONLY, sort=["_id"], limit=step
            )
            if len(ids) < step:
                break
            bounds.append(ids[-1])
        return bounds

    async def register_device(
        self, device: Device, *, from_other_users: bool = True
    ) -> tuple[Device, bool]:
        devices = self._db["devices"]
        key = pair_id(device.user_id, device.device_id)
        now = bson_dt(device.updated_at or self._clock.now())
        token = device.push_token
        held: dict[str, Any] = {"_id": {"$ne": key}, "active": True, "push_token": token}
        if not from_other_users:
            # Only this user's other devices give the token up. Another user's binding
            # made after this check makes step 2 hit the unique index, and the retry
            # finds it here.
            held["user_id"] = device.user_id
        # Read before the loop, so the window between its steps 1 and 2 stays as narrow
        # as it can. The insert is told by the write itself; a reactivation by this read,
        # so two overlapping re-registrations of one inactive device may both report it.
        prior = await devices.find_one({"_id": key}, projection={"active": True})
        activation = device_activation(device, now)
        for attempt in range(_REGISTER_ATTEMPTS):
            if not from_other_users and await devices.find_one(
                {"active": True, "push_token": token, "user_id": {"$ne": device.user_id}}
            ):
                raise PushTokenInUse()
            # A device id is scoped to its user (the _id), so only the token can be
            # held elsewhere: step 1 ends that binding (a token that moves is the
            # same phone after a new login), step 2 takes the token. Another
            # registration of the same token can slip in between; the index then
            # rejects our step 2 and we simply run both steps again.
            await devices.update_many(held, deactivation(REPLACED, now))
            try:
                doc, inserted = await self._upsert("devices", key, activation)
            except DuplicateKeyError:
                if attempt == _REGISTER_ATTEMPTS - 1:
                    raise
                # Jittered: contenders that collided in lockstep must not retry in it.
                await asyncio.sleep(random.uniform(0, min(0.2, 0.01 * 2**attempt)))
                continue
            return device_from_doc(doc), inserted or (prior is not None and not prior["active"])
        raise AssertionError("unreachable")  # pragma: no cover

    async def deactivate_device(self, user_id: str, device_id: str, reason: str) -> bool:
        active = {"_id": pair_id(user_id, device_id), "active": True}
        return bool(await self._update("devices", active, self._deactivation(reason)))

    async def deactivate_token(self, push_token: str, reason: str) -> int:
        active = {"push_token": push_token, "active": True}
        dead = await self._update("devices", active, self._deactivation(reason), many=True)
        no_fallback = {"fallback_kind": None, "fallback_token": None}
        update = {"$set": {**no_fallback, "updated_at": bson_dt(self._clock.now())}}
        return dead + await self._update(
            "devices", {"fallback_token": push_token}, update, many=True
        )

    def _deactivation(self, reason: str) -> dict[str, Any]:
        return deactivation(reason, bson_dt(self._clock.now()))

    async def list_devices(self, user_id: str) -> list[Device]:
        by_user = {"user_id": user_id}
        return await self._fetch(device_from_doc, "devices", by_user, sort=["device_id"])

    async def active_devices(self, user_ids: Sequence[str]) -> dict[str, list[Device]]:
        devices = await self._fetch_in(
            device_from_doc,
            "devices",
            "user_id",
            user_ids,
            {"active": True},
            sort=["user_id", "device_id"],
        )
        return grouped(devices, attrgetter("user_id"))

    async def record_device_outcome(
        self, push_token: str, ok: bool, max_failures: int, reason: str
    ) -> DeviceFailure:
        devices = self._db["devices"]
        active = {"push_token": push_token, "active": True}
        now = bson_dt(self._clock.now())
        if ok:
            # Only write when there is a streak to reset: success is the hot path.
            await devices.update_one(
                {**active, "consecutive_failures": {"$ne": 0}},
                {"$set": {"consecutive_failures": 0, "updated_at": now}},
            )
            return DeviceFailure(deactivated=False, consecutive_failures=0)
        # $inc is atomic, so concurrent failures each count; whoever reaches the
        # threshold deactivates, and the active:true filter lets only one of them win.
        doc = await devices.find_one_and_update(
            active,
            {"$inc": {"consecutive_failures": 1}, "$set": {"updated_at": now}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return DeviceFailure(deactivated=False, consecutive_failures=0)
        failures = int(doc["consecutive_failures"])
        if failures < max_failures:
            return DeviceFailure(deactivated=False, consecutive_failures=failures)
        still = {"_id": doc["_id"], "active": True}
        done = await self._update("devices", still, self._deactivation(reason))
        return DeviceFailure(deactivated=bool(done), consecutive_failures=failures)
