"""Provider callbacks recorded once (SES, Twilio)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class ProviderEventRepository(Protocol):
    """Provider-callback dedup: one record per (provider, event id), held by a unique key
    (``tepat/services/provider_events.py``)."""

    async def record_provider_event(self, provider: str, event_id: str, now: datetime) -> bool:
        """True the first time (``provider``, ``event_id``) is recorded, False ever after
        (a unique key, not a read before the write: of two processes, one)."""

    async def provider_event_seen(self, provider: str, event_id: str) -> bool:
        """Whether (``provider``, ``event_id``) was recorded: a callback already acted
        on and recorded is not acted on again."""
