"""The operator's read-only queries: the dashboard's, and the metrics' oldest due message."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SendSample:
    """One notification the provider accepted (one ticket): for rates and lateness."""

    category: str
    scheduled_at: datetime  # the message's (lateness counts from it)
    sent_at: datetime  # the ticket's


class OpsViewRepository(Protocol):
    """Small read-only queries for the operator dashboard (``tepat/services/dashboard.py``)
    and the store gauges (``tepat/metrics.py``)."""

    async def recent_sends(self, since: datetime, limit: int) -> list[SendSample]:
        """Tickets sent at or after ``since``, newest first (equal instants in any order),
        at most ``limit``, each with its message's category and scheduled instant."""

    async def failures_since(self, since: datetime) -> dict[str, int]:
        """Messages that ended ``failed`` at or after ``since``, counted by ``status_reason``
        (``""`` for none)."""

    async def devices_deactivated_since(self, since: datetime) -> dict[str, int]:
        """Device bindings deactivated at or after ``since``, counted by reason
        (``""`` for none)."""

    async def oldest_due_unsent(self, now: datetime) -> datetime | None:
        """The earliest ``due_at`` of a message due at or before ``now`` and not answered
        yet (``pending`` or ``sending``); None when there is none."""

    async def live_members(self, since: datetime) -> dict[str, int]:
        """Members of each presence group (``PresenceRepository.heartbeat``) that beat at
        or after ``since``, by group; groups with none left out. Reads only: the reader
        does not join a group."""
