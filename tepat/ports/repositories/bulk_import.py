"""The bulk import: many users' records written at once (``POST /v1/bulk/users``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tepat.domain.models import Device, Message, Reminder, User
from tepat.ports.repositories.users import PlanMark, PlanTarget


@dataclass(frozen=True, slots=True)
class NewUsersPlan:
    """The plan of the users an import expects to create (none was stored when it read):
    their messages and planning marks, made from exactly the records it writes. The
    marks' stamps are not known yet: the store uses the one its write leaves."""

    messages: Sequence[Message]
    marks: Sequence[PlanMark]


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
    # The NewUsersPlan went in with the records, for the users the write created.
    planned: bool = False


class BulkImportRepository(Protocol):
    """Writes of many users' records at once (the bulk import), each in one round trip or
    transaction where the database allows, with the same per-record rules as the
    single writes above."""

    async def write_records(
        self,
        users: Sequence[User],
        devices: Sequence[Device],
        reminders: Sequence[Reminder],
        plan: Callable[[], NewUsersPlan] | None = None,
    ) -> RecordsWritten:
        """:meth:`UserRepository.upsert_user` for each user, then
        :meth:`DeviceRepository.register_device` for each device in input order (a token
        named twice ends bound to the later device), then
        :meth:`ReminderRepository.upsert_reminder` for each reminder (users before what
        hangs off them), in one transaction where the database allows (see
        :class:`RecordsWritten`). Where it does, ``plan()``'s messages and marks of the
        users this write creates go in the same transaction (``planned``): nothing can
        change those users in between, so their marks hold; the messages of a user it
        did not create (a concurrent import did) are left out. Elsewhere, or when the
        plan is larger than one transaction should hold, ``planned`` is false and the
        caller plans after the write."""

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        """:meth:`UserRepository.get_plan_target` for each (unknown users are absent)."""
