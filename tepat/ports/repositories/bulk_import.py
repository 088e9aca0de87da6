"""The bulk import: many users' records written at once (``POST /v1/bulk/users``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tepat.domain.models import Device, Reminder, User
from tepat.ports.repositories.users import PlanTarget


@dataclass(frozen=True, slots=True)
class RecordsWritten:
    """What :meth:`BulkImportRepository.write_records` did: ``created``, in input order,
    whether the write created each user (exactly one of several concurrent imports of a new
    user sees ``True``; the same id twice: only the first), and for users it created, their
    change stamp as the write left them, where the store reads it in the same transaction
    (SQLite; empty where it cannot). A later :class:`PlanTarget` with that stamp means
    nothing planning reads changed since: the user has exactly the reminders written."""

    created: list[bool]
    stamps: dict[str, int] = field(default_factory=dict)


class BulkImportRepository(Protocol):
    """Writes of many users' records at once (the bulk import), each in one round trip or
    transaction where the database allows, with the same per-record rules as the
    single writes above."""

    async def write_records(
        self, users: Sequence[User], devices: Sequence[Device], reminders: Sequence[Reminder]
    ) -> RecordsWritten:
        """:meth:`UserRepository.upsert_user` for each user, then
        :meth:`DeviceRepository.register_device` for each device in input order (a token
        named twice ends bound to the later device), then
        :meth:`ReminderRepository.upsert_reminder` for each reminder (users before what
        hangs off them), in one transaction where the database allows (see
        :class:`RecordsWritten`)."""

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        """:meth:`UserRepository.get_plan_target` for each (unknown users are absent)."""
