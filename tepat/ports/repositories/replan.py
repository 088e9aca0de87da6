"""One user's re-plan in two store calls instead of seven: the reads it starts from, and
the writes it ends with. Each does exactly the single-record methods it names, in order
(in one transaction where the store has them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tepat.domain.models import Message, Reminder
from tepat.ports.repositories.messages import InsertResult
from tepat.ports.repositories.users import PlanMark, PlanTarget


@dataclass(frozen=True, slots=True)
class ReplanStart:
    version: int  # the re-plan's own, fresh plan version
    target: PlanTarget
    reminders: list[Reminder]
    pending: list[Message]


class ReplanRepository(Protocol):
    async def start_replan(self, user_id: str) -> ReplanStart | None:
        """Atomically increment the user's ``plan_version`` (two re-plans never get the
        same version), then, read after it, the user's plan target, reminders and pending
        messages (None when the user does not exist)."""

    async def finish_replan(
        self, user_id: str, planned: Sequence[Message], mark: PlanMark
    ) -> tuple[InsertResult, list[Message]]:
        """:meth:`~tepat.ports.repositories.messages.MessageRepository.insert_messages`
        of ``planned``, then ``mark`` (compare-and-set, as
        :meth:`~tepat.ports.repositories.users.UserRepository.set_plan_marks`), then the
        user's pending messages as those writes left them."""
