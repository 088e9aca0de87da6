"""Many users' records in a few round trips (the bulk import).

The same documents and rules as the single writes (``users.py``, ``reminders.py``),
sent as ``insert_many`` / ``bulk_write`` batches. Whether a user was created is
decided by the ``_id`` index (an insert that one concurrent import wins), never by
an earlier read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from tepat.adapters.mongo.base import ID_ONLY, doc_id, only_duplicates
from tepat.adapters.mongo.codecs import (
    bson_dt,
    device_activation,
    pair_id,
    reminder_upsert,
    user_fields,
)
from tepat.adapters.mongo.users import (
    PLAN_CHANGED,
    UsersMixin,
    _plan_target,
    deactivation,
    user_upsert,
)
from tepat.domain.models import Device, Reminder, User
from tepat.ports.repositories.bulk_import import NewUsersPlan, RecordsWritten
from tepat.ports.repositories.devices import REPLACED
from tepat.ports.repositories.users import PlanTarget


class BulkMixin(UsersMixin):
    async def _upsert_users(self, users: Sequence[User]) -> list[bool]:
        if not users:
            return []
        coll = self._db["users"]
        now = self._clock.now()
        ids = [u.user_id for u in users]
        existing = set(await self._fetch_in(doc_id, "users", "_id", ids, projection=ID_ONLY))
        # The first occurrence of each user not seen yet is inserted whole; the index
        # refuses it when a concurrent import got there first, and then it is an update.
        first: dict[str, int] = {}
        for i, u in enumerate(users):
            if u.user_id not in existing and u.user_id not in first:
                first[u.user_id] = i
        inserts = list(first.values())
        docs = [
            {
                "_id": users[i].user_id,
                **user_fields(users[i], now),
                "created_at": bson_dt(users[i].created_at or now),
            }
            for i in inserts
        ]
        rejected = await self._insert_new("users", docs)
        inserted = {inserts[j] for j in range(len(inserts)) if j not in rejected}
        updates = [
            UpdateOne({"_id": u.user_id}, user_upsert(u, now), upsert=True)
            for i, u in enumerate(users)
            if i not in inserted
        ]
        if updates:
            # Ordered: the same user twice ends as the later item says.
            await coll.bulk_write(updates, ordered=True)
        return [i in inserted for i in range(len(users))]

    async def _register_devices(self, devices: Sequence[Device]) -> None:
        if not devices:
            return
        keys = [pair_id(d.user_id, d.device_id) for d in devices]
        tokens = [d.push_token for d in devices]
        if len(set(keys)) < len(keys) or len(set(tokens)) < len(tokens):
            # A device or token named twice: the order decides who ends with it.
            for d in devices:
                await self.register_device(d)
            return
        coll = self._db["devices"]
        now = self._clock.now()
        # Step 1, as register_device: every other active binding of these tokens ends.
        # (A binding this batch re-registers may lose its old token here; step 2
        # reactivates it with its new one.)
        await coll.update_many(
            {
                "active": True,
                "push_token": {"$in": tokens},
                "$nor": [{"_id": k, "push_token": t} for k, t in zip(keys, tokens, strict=True)],
            },
            deactivation(REPLACED, bson_dt(now)),
        )
        ops = [
            UpdateOne({"_id": k}, device_activation(d, bson_dt(d.updated_at or now)), upsert=True)
            for k, d in zip(keys, devices, strict=True)
        ]
        try:
            await coll.bulk_write(ops, ordered=False)
        except BulkWriteError as exc:
            # A concurrent registration took one of the tokens between the steps: those
            # devices go the single way, which retries until its two steps hold.
            for i in sorted(only_duplicates(exc)):
                await self.register_device(devices[i])

    async def _upsert_reminders(self, reminders: Sequence[Reminder]) -> None:
        if not reminders:
            return
        now = self._clock.now()
        ops = [
            UpdateOne(
                {"_id": pair_id(r.user_id, r.reminder_id)}, reminder_upsert(r, now), upsert=True
            )
            for r in reminders
        ]
        await self._db["reminders"].bulk_write(ops, ordered=True)
        # As upsert_reminder, after the write: each user's planning mark drops, so a
        # plan run that read them before it cannot leave a mark that skips these.
        await self._db["users"].update_many(
            {"_id": {"$in": sorted({r.user_id for r in reminders})}}, PLAN_CHANGED
        )

    async def write_records(
        self,
        users: Sequence[User],
        devices: Sequence[Device],
        reminders: Sequence[Reminder],
        plan: Callable[[], NewUsersPlan] | None = None,
    ) -> RecordsWritten:
        # No transaction across collections here: each batch as its own method writes it,
        # in the order the port asks (users before what hangs off them). No stamps: a
        # read after these writes could already see another writer's change. Nor the
        # plan, for the same reason: the caller plans after the write.
        created = await self._upsert_users(users)
        await self._register_devices(devices)
        await self._upsert_reminders(reminders)
        return RecordsWritten(created)

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        targets = await self._fetch_in(_plan_target, "users", "_id", user_ids)
        return {t.user.user_id: t for t in targets}
