"""One message's status change as a batch of one, for every store adapter.

Each store writes :meth:`MessageRepository.transition_many` (its one conditional update
per change, duplicate slots refused); a single :meth:`transition` is that batch with one
change, so its rules cannot drift from the batch's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import StatusChange


class TransitionOne(ABC):
    @abstractmethod
    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int: ...

    async def transition(
        self,
        message_id: str,
        to: MessageStatus,
        now: datetime,
        *,
        expect: Sequence[MessageStatus],
        reason: str | None = None,
        ticket_id: str | None = None,
        last_error: str | None = None,
        scheduled_at: datetime | None = None,
        release_live_key: bool = False,
        due_at: datetime | None = None,
    ) -> bool:
        change = StatusChange(
            message_id, to, reason, ticket_id, last_error, scheduled_at, release_live_key, due_at
        )
        return await self.transition_many([change], now, expect=expect) > 0
