"""Business events and their fan-out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from tepat.domain.events import Event


class EventRepository(Protocol):
    """Business events and their fan-out (``tepat/domain/events.py``): one row per
    ``event_id``, the listed recipients beside it, and a cursor that only moves forward."""

    async def create_event(self, event: Event, user_ids: Sequence[str]) -> tuple[Event, bool]:
        """Store ``event`` with its listed recipients (none for all users): ``(event,
        True)``; if ``event_id`` exists, the stored event and ``False``, its recipients
        completed if it is still ``accepting`` with the same ``request_hash`` (a retry
        finishes what a crash cut short). Concurrent calls create one."""

    async def get_event(self, event_id: str) -> Event | None: ...

    async def events_fanning_out(self, limit: int) -> list[Event]:
        """Events whose fan-out is not done, oldest first."""

    async def event_recipients(
        self, event_id: str, all_users: bool, after: str, limit: int
    ) -> list[str]:
        """The next ``limit`` recipient ids above ``after``, in order: every user's when
        ``all_users``, else the event's listed ids (known users or not)."""

    async def advance_event(
        self,
        event_id: str,
        after: str,
        to: str,
        recipients: int,
        counts: Mapping[str, int],
        done: bool,
        now: datetime,
    ) -> bool:
        """Compare-and-set: only if the event is fanning out with cursor ``after``, move
        the cursor to ``to``, add ``recipients`` and ``counts`` and set ``done``. A page
        done twice (a crash, two loops) is counted once. Returns whether it moved."""

    async def event_message_counts(self, event_id: str) -> dict[tuple[str, str, str], int]:
        """The event's messages (keys under ``event_key_range``) by (channel, status,
        reason or "")."""
