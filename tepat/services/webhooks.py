"""Status webhooks: managing subscriptions, and turning the status journal into deliveries.

:class:`WebhookEmitter` makes one delivery message per (journal entry, subscription that
wants it), inserts them, and only then drops the entries: a crash in between inserts the
same deliveries again, which their unique (subscription, event) keys turn into nothing.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

import structlog

from tepat.clock import Clock
from tepat.domain.errors import DomainError
from tepat.domain.models import Message
from tepat.domain.webhooks import (
    SECRET_BYTES,
    STATUS_EVENT_TYPES,
    WEBHOOK_USER,
    StatusChangeEntry,
    WebhookSecret,
    WebhookSubscription,
    business_event_id,
    check_categories,
    check_event_types,
    check_url,
    delivery_message,
    new_secret,
    rotate,
    status_payload,
)
from tepat.ports.repositories.messages import MessageRepository
from tepat.ports.repositories.webhooks import WebhookRepository

log = structlog.get_logger("tepat.webhooks")

JOURNAL_PAGE = 500
# Messages per insert: one delivery per (entry, subscription).
INSERT_CHUNK = 1000


class SubscriptionNotFound(LookupError):
    pass


class WebhookService:
    """The admin API's use cases (``api/routes/webhooks.py``)."""

    def __init__(
        self,
        store: WebhookRepository,
        clock: Clock,
        categories: Iterable[str],
        *,
        allow_http: bool = False,
        check_target: Callable[[str], Awaitable[None]] | None = None,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        """``check_target``: resolves a URL's host and raises DomainError("url") when it
        is internal (``tepat/adapters/webhook_target.py``; the channel checks again at
        every send)."""
        self._store = store
        self._check_target = check_target
        self._clock = clock
        self._categories = tuple(categories)
        self._allow_http = allow_http
        self._random = random_bytes

    async def create(
        self,
        url: str,
        event_types: Sequence[str],
        categories: Sequence[str] = (),
        description: str = "",
    ) -> WebhookSubscription:
        now = self._clock.now()
        url = check_url(url, self._allow_http)
        if self._check_target is not None:
            await self._check_target(url)
        sub = WebhookSubscription(
            id="wh_" + secrets.token_hex(12),
            url=url,
            event_types=check_event_types(event_types),
            categories=check_categories(categories, self._categories),
            secrets=(WebhookSecret(new_secret(self._random(SECRET_BYTES)), created_at=now),),
            created_at=now,
            updated_at=now,
            description=description,
        )
        if not await self._store.create_webhook_subscription(sub):  # 96 random bits: never
            raise RuntimeError("subscription id collision")
        return sub

    async def get(self, subscription_id: str) -> WebhookSubscription:
        sub = await self._store.get_webhook_subscription(subscription_id)
        if sub is None:
            raise SubscriptionNotFound(subscription_id)
        return sub

    async def list_all(self) -> list[WebhookSubscription]:
        return await self._store.list_webhook_subscriptions()

    async def delete(self, subscription_id: str) -> None:
        if not await self._store.delete_webhook_subscription(subscription_id):
            raise SubscriptionNotFound(subscription_id)

    async def rotate_secret(self, subscription_id: str) -> WebhookSubscription:
        """A new current secret; the previous ones keep signing for 24 hours."""
        for _ in range(5):  # compare-and-set: a concurrent rotation makes us read again
            sub = await self.get(subscription_id)
            rotated = rotate(sub, new_secret(self._random(SECRET_BYTES)), self._clock.now())
            if await self._store.update_webhook_subscription(rotated, expect_version=sub.version):
                return rotated
        raise DomainError("subscription", "updated concurrently; try again")

    async def enable(self, subscription_id: str) -> WebhookSubscription:
        """Back on after a 410 disabled it (the receiver is back)."""
        for _ in range(5):
            sub = await self.get(subscription_id)
            if sub.enabled:
                return sub
            on = dataclasses.replace(
                sub,
                enabled=True,
                disabled_reason=None,
                updated_at=self._clock.now(),
                version=sub.version + 1,
            )
            if await self._store.update_webhook_subscription(on, expect_version=sub.version):
                return on
        raise DomainError("subscription", "updated concurrently; try again")


class WebhookRecords(WebhookRepository, MessageRepository, Protocol): ...


class WebhookEmitter:
    def __init__(self, store: WebhookRecords, clock: Clock, page: int = JOURNAL_PAGE) -> None:
        self._store = store
        self._clock = clock
        self._page = page

    async def emit_once(self) -> int:
        """One page of the journal turned into deliveries; how many entries it took."""
        entries = await self._store.webhook_journal(self._page)
        if not entries:
            return 0
        subs = [s for s in await self._store.list_webhook_subscriptions() if s.enabled]
        deliveries = await self._deliveries(entries, subs) if subs else []
        for start in range(0, len(deliveries), INSERT_CHUNK):
            await self._store.insert_messages(deliveries[start : start + INSERT_CHUNK])
        await self._store.drop_webhook_journal(entries)
        if deliveries:
            log.debug(
                "webhook deliveries created", entries=len(entries), deliveries=len(deliveries)
            )
        return len(entries)

    async def _deliveries(
        self, entries: Sequence[StatusChangeEntry], subs: Sequence[WebhookSubscription]
    ) -> list[Message]:
        wanted = [
            e for e in entries if e.user_id != WEBHOOK_USER and e.status in STATUS_EVENT_TYPES
        ]
        messages = {m.id: m for m in await self._store.get_messages([e.message_id for e in wanted])}
        now = self._clock.now()
        out: list[Message] = []
        for e in wanted:
            event_type = STATUS_EVENT_TYPES[e.status]
            targets = [s for s in subs if s.wants(event_type, e.category)]
            if not targets:
                continue
            subject = messages.get(e.message_id)
            channel = e.channel or (subject.channel if subject is not None else "push")
            event_id = business_event_id(subject.dedup_key) if subject is not None else None
            payload = status_payload(e, channel, event_id)
            out.extend(delivery_message(s.id, e, payload, now) for s in targets)
        return out
