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
    """What ``write_records`` did: ``created``, in input order, whether the write created
    each user (of concurrent imports of a new user exactly one), and the change stamps of
    the users it created as it left them, where the store reads them in the transaction:
    a later :class:`PlanTarget` with that stamp has exactly the reminders written."""

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
        """``upsert_user`` for each user, ``register_device`` for each device in input
        order, then ``upsert_reminder`` for each reminder, in one transaction where the
        database allows. There, ``plan()``'s messages and marks of the users this write
        creates go in too (``planned``): nothing can change those users in between, so
        their marks hold. Elsewhere, or for a plan too large for one transaction, the
        caller plans after the write."""

    async def get_plan_targets(self, user_ids: Sequence[str]) -> dict[str, PlanTarget]:
        """Each user with their change stamp and standing mark (unknown users are absent)."""
