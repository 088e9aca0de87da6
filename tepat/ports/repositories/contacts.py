"""Contact points (e-mail, SMS) and suppressions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from tepat.domain.contacts import Contact, Suppression, SuppressionReason


class ContactRepository(Protocol):
    """Contact points and suppressions, addresses normalised (the store compares
    strings): one contact per (user, channel), one suppression per (channel, address)."""

    async def set_contact(
        self, user_id: str, channel: str, address: str | None, verified: bool, now: datetime
    ) -> None:
        """Set the user's contact point on ``channel`` (``"email"`` or ``"sms"``),
        replacing any; ``address`` None removes it (removing none is no error)."""

    async def contacts_for_users(self, user_ids: Sequence[str], channel: str) -> dict[str, Contact]:
        """Each listed user's contact on ``channel`` (users without one are absent)."""

    async def list_contacts(self, user_id: str) -> list[Contact]:
        """Every contact point of one user, by channel."""

    async def add_suppression(
        self,
        channel: str,
        address: str,
        reason: SuppressionReason,
        now: datetime,
        source: str | None = None,
    ) -> bool:
        """Suppress ``address`` on ``channel``; True if it was not suppressed before (of
        concurrent adds, exactly one). An existing one keeps its ``added_at``, and its
        reason unless ``tepat.domain.contacts.overrides`` says the new one replaces it."""

    async def lift_suppression(
        self, channel: str, address: str, reason: SuppressionReason | None = None
    ) -> bool:
        """Remove the suppression; True if there was one. With ``reason``, only a
        suppression for that reason is lifted (a START reply lifts a STOP, not a hard
        bounce)."""

    async def suppressions_for(
        self, channel: str, addresses: Sequence[str]
    ) -> dict[str, Suppression]:
        """The suppressions among ``addresses`` on ``channel``, by address."""

    async def list_suppressions(
        self, channel: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[Suppression]:
        """Suppressions (of one channel when given) by (channel, address), those after
        the key ``after`` = (channel, address) only: a keyset page of at most ``limit``."""
