"""Presence: which processes of a group are alive."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

# A member counts as live this long after its last beat (the consumers beat every 2 s).
LIVE_TTL = timedelta(seconds=7)
# A member silent for this many TTLs is deleted, not just ignored.
FORGET_AFTER_TTLS = 10


class PresenceRepository(Protocol):
    """Which processes of a group are alive (consumers sharing one rate ceiling)."""

    async def heartbeat(self, group: str, member: str, now: datetime, ttl: timedelta) -> int:
        """Record ``member`` of ``group`` alive at ``now``; return how many members
        (itself included) beat within ``ttl``. Members silent for long are forgotten."""

    async def leave(self, group: str, member: str) -> None: ...
