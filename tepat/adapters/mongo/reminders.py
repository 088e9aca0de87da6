"""Reminders and notification preferences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pymongo import ASCENDING

from tepat.adapters.mongo.base import MongoBase
from tepat.adapters.mongo.codecs import pair_id, reminder_from_doc, reminder_upsert
from tepat.adapters.mongo.users import PLAN_CHANGED
from tepat.domain.models import Reminder


class RemindersMixin(MongoBase):
    async def upsert_reminder(self, reminder: Reminder) -> tuple[Reminder, bool]:
        key = pair_id(reminder.user_id, reminder.reminder_id)
        doc, inserted = await self._upsert(
            "reminders", key, reminder_upsert(reminder, self._clock.now())
        )
        await self._reminders_changed(reminder.user_id)
        return reminder_from_doc(doc), inserted

    async def get_reminder(self, user_id: str, reminder_id: str) -> Reminder | None:
        doc = await self._db["reminders"].find_one({"_id": pair_id(user_id, reminder_id)})
        return None if doc is None else reminder_from_doc(doc)

    async def delete_reminder(self, user_id: str, reminder_id: str) -> bool:
        result = await self._db["reminders"].delete_one({"_id": pair_id(user_id, reminder_id)})
        await self._reminders_changed(user_id)
        return bool(result.deleted_count)

    async def _reminders_changed(self, user_id: str) -> None:
        # After the reminder write: a plan run that read the user's stamp before it
        # either read the new reminders or finds its mark refused (set_plan_marks).
        await self._db["users"].update_one({"_id": user_id}, PLAN_CHANGED)

    async def list_reminders(self, user_id: str) -> list[Reminder]:
        return (await self.reminders_for_users([user_id])).get(user_id, [])

    async def reminders_for_users(self, user_ids: Sequence[str]) -> dict[str, list[Reminder]]:
        if not user_ids:
            return {}
        docs = await self._find(
            "reminders",
            {"user_id": {"$in": list(set(user_ids))}},
            sort=[("user_id", ASCENDING), ("reminder_id", ASCENDING)],
        )
        out: dict[str, list[Reminder]] = {}
        for d in docs:
            out.setdefault(d["user_id"], []).append(reminder_from_doc(d))
        return out

    # One document per (user, category): category names are free text, and a dotted
    # or $-prefixed name would be misread as a path inside a per-user subdocument.

    async def set_preferences(
        self, user_id: str, categories: Mapping[str, bool]
    ) -> dict[str, bool]:
        prefs = self._db["preferences"]
        for category, enabled in categories.items():
            await prefs.update_one(
                {"_id": f"{user_id}|{category}"},
                {"$set": {"user_id": user_id, "category": category, "enabled": bool(enabled)}},
                upsert=True,
            )
        return await self.get_preferences(user_id)

    async def get_preferences(self, user_id: str) -> dict[str, bool]:
        return (await self.preferences_for_users([user_id])).get(user_id, {})

    async def preferences_for_users(self, user_ids: Sequence[str]) -> dict[str, dict[str, bool]]:
        if not user_ids:
            return {}
        docs = await self._find(
            "preferences",
            {"user_id": {"$in": list(set(user_ids))}},
            sort=[("user_id", ASCENDING), ("category", ASCENDING)],
        )
        out: dict[str, dict[str, bool]] = {}
        for d in docs:
            out.setdefault(d["user_id"], {})[d["category"]] = bool(d["enabled"])
        return out
