"""Reminders and notification preferences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter, itemgetter

from tepat.adapters.mongo.base import MongoBase
from tepat.adapters.mongo.codecs import pair_id, reminder_from_doc, reminder_upsert
from tepat.adapters.mongo.users import PLAN_CHANGED
from tepat.adapters.store_results import grouped
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
        key = {"_id": pair_id(user_id, reminder_id)}
        return await self._fetch_one(reminder_from_doc, "reminders", key)

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
        reminders = await self._fetch_in(
            reminder_from_doc, "reminders", "user_id", user_ids, sort=["user_id", "reminder_id"]
        )
        return grouped(reminders, attrgetter("user_id"))

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
        docs = await self._fetch_in(
            dict, "preferences", "user_id", user_ids, sort=["user_id", "category"]
        )
        return {
            user_id: {d["category"]: bool(d["enabled"]) for d in prefs}
            for user_id, prefs in grouped(docs, itemgetter("user_id")).items()
        }
