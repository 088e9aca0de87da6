"""Status webhook subscriptions and their journal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tepat.domain.webhooks import StatusChangeEntry, WebhookSubscription


class WebhookRepository(Protocol):
    """Status webhook subscriptions and the journal of status changes waiting to become
    webhooks, written in the same write as the change: a message's move to ``sent``,
    ``delivered``, ``failed``, ``skipped`` or ``missed`` and an inbox item's first read,
    except for delivery messages themselves, while a subscription is enabled (MongoDB:
    seen within seconds in other processes, which cache whether one exists)."""

    async def create_webhook_subscription(self, sub: WebhookSubscription) -> bool:
        """Store a new subscription; False (nothing changed) if its id exists."""

    async def get_webhook_subscription(
        self, subscription_id: str
    ) -> WebhookSubscription | None: ...

    async def list_webhook_subscriptions(self) -> list[WebhookSubscription]:
        """Every subscription, enabled or not, by creation time then id."""

    async def update_webhook_subscription(
        self, sub: WebhookSubscription, expect_version: int
    ) -> bool:
        """Compare-and-set: replace the stored subscription (url, event types, categories,
        secrets, enabled, reason, version: all of ``sub``) only if its version is still
        ``expect_version``. Returns whether it did."""

    async def delete_webhook_subscription(self, subscription_id: str) -> bool: ...

    async def webhook_journal(self, limit: int) -> list[StatusChangeEntry]:
        """Up to ``limit`` journal entries, oldest first where the store knows the order."""

    async def drop_webhook_journal(self, entries: Sequence[StatusChangeEntry]) -> int:
        """Remove these entries (by ``key``) once turned into deliveries; returns how many."""
