"""Reminders: a user's recurring reminders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tepat.domain.models import Reminder


class ReminderRepository(Protocol):
    async def upsert_reminder(self, reminder: Reminder) -> tuple[Reminder, bool]:
        """Create or replace (a replace keeps the stored ``created_at``); returns the
        stored reminder and whether this write inserted it. The write itself decides, so
        of concurrent upserts of one new reminder exactly one reports the insert."""

    async def get_reminder(self, user_id: str, reminder_id: str) -> Reminder | None: ...

    async def delete_reminder(self, user_id: str, reminder_id: str) -> bool: ...

    async def list_reminders(self, user_id: str) -> list[Reminder]: ...

    async def reminders_for_users(self, user_ids: Sequence[str]) -> dict[str, list[Reminder]]: ...
