"""The webhook ``Channel``: POST each status event, signed (Standard Webhooks), to its
subscription's URL.

A delivery message's target is its subscription id; the subscription and its secrets are
read from the store at send time, so a rotated secret signs from the next attempt on, a
changed URL is used at once and a deleted or disabled subscription gets nothing more.

Outcomes as the spec's "Delivery success and failure" suggests (``_outcome``): only a 2xx
delivers, and a 410 Gone disables the subscription. The retries are the shared ones
(``tepat/services/sending/channel_sender.py``) on :data:`WEBHOOK_RETRY`: a receiver down for an hour
loses nothing; one down for three days is given up on (``failed``, the reason says why).
A duplicate is harmless (the ``webhook-id`` is the event's stable id, for the receiver
to dedup on), so an answer lost after the request went out is retried, never closed.

Every connection goes only to an address checked at that moment
(``tepat/adapters/webhook_target.py``): a host that resolves to a loopback, private,
link-local or otherwise internal address is ``Refused("url_refused: ...")`` unless
allow-listed. Only the receiver's status code is kept (``http_500``), never its body:
what an internal service answers must not come back through the API.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import httpx
import structlog

from tepat.adapters.expo_outcomes import parse_retry_after
from tepat.adapters.webhook_target import GuardedTransport, TargetRefused
from tepat.clock import Clock
from tepat.domain.errors import DomainError
from tepat.domain.webhooks import (
    WEBHOOK_CHANNEL,
    WEBHOOK_RETRY,
    Delivery,
    TargetPolicy,
    WebhookSubscription,
    check_url,
    webhook_headers,
)
from tepat.ports.channel import ChannelOutcome, Delivered, Outgoing, Refused, Withheld
from tepat.ports.repositories.webhooks import WebhookRepository
from tepat.ports.try_again import TryAgain

__all__ = ["WEBHOOK_RETRY", "WebhookChannel"]

log = structlog.get_logger("tepat.webhooks")

USER_AGENT = "Tepat-Webhooks/1"
_THROTTLING = frozenset({429, 502, 503, 504})


class WebhookChannel:
    name = WEBHOOK_CHANNEL

    def __init__(
        self,
        store: WebhookRepository,
        clock: Clock,
        *,
        timeout_seconds: float = 15.0,
        allow_http: bool = False,
        allowed_targets: TargetPolicy | None = None,
        max_connections: int = 20,
        max_batch: int = 20,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._allow_http = allow_http
        self.max_batch = max_batch
        # No redirects: the spec counts a 3xx as a failure (update the URL instead), and
        # following one would let a receiver point Tepat anywhere.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds),
            limits=httpx.Limits(max_connections=max_connections),
            follow_redirects=False,
            transport=transport
            or GuardedTransport(allowed_targets or TargetPolicy(), max_connections),
            headers={"user-agent": USER_AGENT},
        )

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome | Withheld]:
        ids = list(dict.fromkeys(item.target for item in items))
        found = await asyncio.gather(*(self._store.get_webhook_subscription(i) for i in ids))
        subs = dict(zip(ids, found, strict=True))
        return list(await asyncio.gather(*(self._send_one(i, subs[i.target]) for i in items)))

    async def close(self) -> None:
        await self._client.aclose()

    async def _send_one(
        self, item: Outgoing, sub: WebhookSubscription | None
    ) -> ChannelOutcome | Withheld:
        if not item.still_sendable():  # the subscription lookup took its time
            return Withheld()
        if sub is None:
            return Refused("subscription_deleted")
        if not sub.enabled:
            return Refused(f"subscription_disabled: {sub.disabled_reason or 'disabled'}")
        delivery = Delivery.from_content(item.message.content)
        if delivery is None:
            return Refused("not_a_webhook_delivery")
        try:
            url = check_url(sub.url, self._allow_http)
        except DomainError as e:
            return Refused(f"url_refused: {e.message}")
        now = self._clock.now()
        secrets = sub.signing_secrets(now)
        if not secrets:  # every secret expired: never send unsigned
            return Refused("no_signing_secret")
        headers = webhook_headers(secrets, delivery.event_id, int(now.timestamp()), delivery.body)
        try:
            response = await self._client.post(url, content=delivery.body.encode(), headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            if isinstance(e.__cause__, TargetRefused):
                log.warning(
                    "webhook target refused", subscription=sub.id, reason=e.__cause__.reason
                )
                return Refused(f"url_refused: {e.__cause__.reason}")
            # Nothing reached the receiver.
            return TryAgain("connect_error")
        except httpx.TimeoutException:
            return TryAgain("timeout", maybe_sent=True)
        except httpx.HTTPError as e:
            return TryAgain(f"network_error: {type(e).__name__}", maybe_sent=True)
        return await self._outcome(sub, response)

    async def _outcome(self, sub: WebhookSubscription, response: httpx.Response) -> ChannelOutcome:
        code = response.status_code
        if 200 <= code < 300:
            return Delivered()
        if code == 410:
            await self._disable(sub, "gone")
            return Refused("gone")
        reason = f"http_{code}"
        if code in _THROTTLING:
            wait = parse_retry_after(response.headers.get("retry-after"), self._clock.now())
            wait = None if wait is None else min(wait, WEBHOOK_RETRY.cap_seconds)
            return TryAgain(reason, retry_after=wait, throttled=True)
        return TryAgain(reason, maybe_sent=code >= 500)

    async def _disable(self, sub: WebhookSubscription, why: str) -> None:
        """The spec: a 410 means the receiver wants no more; stop sending to it. A
        concurrent update (a rotation) wins; the next 410 disables it then."""
        now = self._clock.now()
        off = dataclasses.replace(
            sub, enabled=False, disabled_reason=why, updated_at=now, version=sub.version + 1
        )
        if await self._store.update_webhook_subscription(off, expect_version=sub.version):
            log.warning("webhook subscription disabled", subscription=sub.id, reason=why)
