"""A message's status change, for every store adapter: what it writes, and one as a batch.

Each store writes :meth:`MessageRepository.transition_many` (its one conditional update
per change, duplicate slots refused) from :func:`transition_fields`; a single
:meth:`transition` is that batch with one change, so its rules cannot drift from the batch's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tepat.domain.models import MessageStatus
from tepat.ports.repositories.messages import StatusChange


def transition_fields(change: StatusChange, now: datetime) -> dict[str, Any]:
    """What one change writes, by field, instants as they are (clearing ``live_key`` on
    ``release_live_key`` is each store's own). The optional fields only when given, so a
    later transition does not erase what an earlier one recorded; back to pending, onto
    the outbox, due when the caller says, in the same write."""
    fields: dict[str, Any] = {"status": change.to.value, "updated_at": now}
    optional = {
        "status_reason": change.reason,
        "ticket_id": change.ticket_id,
        "last_error": change.last_error,
        "scheduled_at": change.scheduled_at,
        "attempts": change.attempts,
    }
    fields.update((name, value) for name, value in optional.items() if value is not None)
    pending = change.to is MessageStatus.PENDING
    if pending:
        fields["due_at"] = change.due_at or change.scheduled_at or now
    fields["publish_pending"] = pending
    return fields


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
        **change: Any,  # the rest of StatusChange's fields, as the port names them
    ) -> bool:
        changes = [StatusChange(message_id, to, **change)]
        return await self.transition_many(changes, now, expect=expect) > 0
