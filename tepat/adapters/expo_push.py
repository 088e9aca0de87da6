"""The Expo push API as a :class:`~tepat.ports.push.PushProvider`: a small async client on httpx.

Why not the official ``exponent-server-sdk``: it is sync-only, refuses ``ExpoPushToken[…]``,
breaks on list ``to``, has no gzip or retry, and drops the auth header on one call (GUIDE §6).

What this client does, following docs.expo.dev/push-notifications/sending-notifications:

* Checks each notification before sending: a malformed token or a payload over 4096 bytes
  becomes that notification's error outcome without a request, and the rest still go.
* Stays under the project's rate (600 notifications/s) with a token bucket on the injected
  clock, so that it waits rather than provoking 429s; at most ``max_connections`` requests are
  in flight (Expo asks for about 6). When Expo accepts less, the rate adapts
  (:mod:`tepat.adapters.adaptive_rate`) and ``max_batch`` shrinks below 100 while the rate
  is under 200/s, so that one request is never more than half a second of it.
* Gzips request bodies over 1 KiB, as Expo's Node SDK does, and accepts gzip responses.
* Never raises for provider-side trouble: how a failed request and a ticket error become
  outcomes (tables included) is :mod:`tepat.adapters.expo_outcomes`.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from tepat.adapters.adaptive_rate import AdaptiveRate
from tepat.adapters.expo_outcomes import (
    CONFIGURATION_ERRORS,
    DEVICE_NOT_REGISTERED,
    classify_response,
    classify_ticket_error,
    item_error,
)
from tepat.adapters.http_pool import PooledClient
from tepat.adapters.push_answers import compact_json
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock
from tepat.domain.validation import is_expo_push_token
from tepat.ports.push import (
    GateClosed,
    PushRequest,
    Receipt,
    ReceiptError,
    ReceiptOk,
    ReceiptResult,
    Receipts,
    Rejected,
    SendResult,
    TicketError,
    TicketOk,
    TicketOutcome,
    Tickets,
)
from tepat.ports.try_again import TryAgain

log = logging.getLogger(__name__)

SEND_PATH = "/--/api/v2/push/send"
RECEIPTS_PATH = "/--/api/v2/push/getReceipts"
MAX_BATCH = 100
MAX_RECEIPT_BATCH = 1000
MAX_PAYLOAD_BYTES = 4096
GZIP_OVER_BYTES = 1024
#: How long to leave a device alone after ``MessageRateExceeded`` (Expo: "slowly retry").
DEVICE_RATE_BACKOFF_SECONDS = 60.0


_projects: dict[tuple[str, str | None, float, float, int], AdaptiveRate] = {}


def _shared_project(
    base_url: str, access_token: str | None, rate: float, critical_reserve: float, clock: Clock
) -> AdaptiveRate:
    """One bucket and its adaptive rate per Expo project and clock, in this process.

    Expo's limit is per project, so two providers with the same credential must not each
    believe they have the whole budget, nor each find it on their own after a 429. The
    bucket keeps a reference to its clock, so the clock's ``id`` in the key cannot be
    reused while the entry lives.
    """
    key = (base_url.rstrip("/"), access_token, rate, critical_reserve, id(clock))
    project = _projects.get(key)
    if project is None or project.bucket.clock is not clock:
        # A burst of at most one batch: a full bucket of 600 on top of 600/s would let twice
        # the limit through in the first second.
        bucket = TokenBucket(
            rate,
            clock,
            capacity=min(rate, float(MAX_BATCH)),
            critical_reserve=critical_reserve,
            provider="expo",
        )
        project = _projects[key] = AdaptiveRate(bucket, bucket.rate, clock)
    return project


def to_expo_message(request: PushRequest, *, channel_per_category: bool = False) -> dict[str, Any]:
    """The Expo message for a :class:`~tepat.ports.push.PushRequest` (fields Expo documents)."""
    message: dict[str, Any] = {
        "to": request.push_token,
        "title": request.title,
        "body": request.body,
    }
    if request.data:
        message["data"] = dict(request.data)
    if request.sound is not None:
        message["sound"] = request.sound
    if request.priority:
        message["priority"] = request.priority
    if request.ttl_seconds is not None:
        message["ttl"] = request.ttl_seconds
    if request.category and channel_per_category:
        # One Android channel per Tepat category lets users mute a category in system
        # settings, but Android drops notifications for a channel the app never created,
        # so this is opt-in for apps that create them.
        message["channelId"] = request.category
    return message


def payload_size(message: Mapping[str, Any]) -> int:
    """Bytes Expo forwards to APNs/FCM: the message without ``to``, as compact UTF-8 JSON."""
    return len(compact_json({k: v for k, v in message.items() if k != "to"}).encode())


class ExpoPushProvider(PooledClient):
    #: How many notifications a caller should put in one request now: Expo's 100, less
    #: while the provider allows under two requests of 100 a second (see
    #: :meth:`AdaptiveRate.request_size`). :meth:`send` still takes up to 100.
    max_batch: int = MAX_BATCH
    max_receipt_batch: int = MAX_RECEIPT_BATCH

    def __init__(
        self,
        base_url: str = "https://exp.host",
        *,
        access_token: str | None = None,
        max_connections: int = 6,
        rate_limit: float = 600.0,
        critical_reserve: float = 0.0,
        clock: Clock,
        timeout: float = 15.0,
        limiter: TokenBucket | None = None,
        device_rate_backoff: float = DEVICE_RATE_BACKOFF_SECONDS,
        channel_per_category: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.clock = clock
        if limiter is None:
            self.adaptive = _shared_project(
                self.base_url, access_token, rate_limit, critical_reserve, clock
            )
        else:  # a bucket of the caller's own: its adaptive rate is this client's alone
            self.adaptive = AdaptiveRate(limiter, limiter.rate, clock)
        self.limiter = self.adaptive.bucket
        self.device_rate_backoff = device_rate_backoff
        self.channel_per_category = channel_per_category
        headers = {
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
            "User-Agent": "tepat-expo-push/0.1",
        }
        if access_token:
            headers["Authorization"] = f"Bearer {access_token}"
        super().__init__(
            max_connections,
            timeout=timeout,
            transport=transport,
            base_url=self.base_url,
            headers=headers,
        )

    # ---- send ----

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        """Send up to 100 notifications (:attr:`max_batch` is what to aim for now); outcomes
        come back in batch order."""
        if len(batch) > MAX_BATCH:
            # A caller bug, not a provider problem: the port promises batches of max_batch.
            # (Up to Expo's 100 still go: max_batch may have shrunk since the batch was cut.)
            raise ValueError(f"at most {MAX_BATCH} notifications per send, got {len(batch)}")
        outcomes: list[TicketOutcome | None] = [None] * len(batch)
        to_send: list[tuple[int, dict[str, Any]]] = []
        for index, request in enumerate(batch):
            if not is_expo_push_token(request.push_token):
                outcomes[index] = TicketError(
                    code=DEVICE_NOT_REGISTERED,
                    message=(
                        f"{request.push_token!r} is not an Expo push token "
                        "(ExponentPushToken[…] or ExpoPushToken[…]); not sent, it can never work"
                    ),
                    permanent=True,
                    deactivate_device=True,
                )
                continue
            message = to_expo_message(request, channel_per_category=self.channel_per_category)
            size = payload_size(message)
            if size > MAX_PAYLOAD_BYTES:
                outcomes[index] = TicketError(
                    code="MessageTooBig",
                    message=(
                        f"payload is {size} bytes, over Expo's {MAX_PAYLOAD_BYTES}-byte limit; "
                        "not sent"
                    ),
                    permanent=True,
                )
                continue
            to_send.append((index, message))

        if to_send:
            critical = sum(batch[i].critical for i, _ in to_send)
            await self.limiter.acquire(len(to_send), critical)
            closed = {batch[i].message_id for i, _ in to_send if not batch[i].still_sendable()}
            if closed:
                raise GateClosed(closed)
            # When it left, not when it was answered: a 429 for a request that left before
            # the rate came down is part of the episode that brought it down.
            sent_at = self.clock.now()
            result = await self._post(SEND_PATH, [m for _, m in to_send])
            if isinstance(result, TryAgain) and result.throttled:
                self.adaptive.throttled_by_provider(result.retry_after, sent_at, len(to_send))
                self.max_batch = self.adaptive.request_size(MAX_BATCH)
            if isinstance(result, TryAgain | Rejected):
                return result
            self.adaptive.accepted(len(to_send), sent_at)
            self.max_batch = self.adaptive.request_size(MAX_BATCH)
            tickets = self._parse_tickets(result, len(to_send))
            if isinstance(tickets, Rejected):
                return tickets
            for (index, _), outcome in zip(to_send, tickets, strict=True):
                outcomes[index] = outcome
        return Tickets([o for o in outcomes if o is not None])

    def set_rate_share(self, share: float) -> None:
        self.adaptive.set_share(share)
        self.max_batch = self.adaptive.request_size(MAX_BATCH)

    def _parse_tickets(self, body: Any, expected: int) -> list[TicketOutcome] | Rejected:
        data = body.get("data") if isinstance(body, Mapping) else None
        if isinstance(data, Mapping):  # a single ticket for a single message
            data = [data]
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else type(data).__name__
            log.error("Expo answered %s tickets for %d notifications: %.500r", got, expected, body)
            # We cannot tell which were accepted; resending could duplicate, so do not.
            return Rejected(f"Expo answered {got} tickets for {expected} notifications")
        tickets: list[TicketOutcome] = []
        for item in data:
            if isinstance(item, Mapping) and item.get("status") == "ok" and item.get("id"):
                tickets.append(TicketOk(str(item["id"])))
            elif isinstance(item, Mapping):
                code, message = item_error(item)
                tickets.append(
                    classify_ticket_error(code, message, rate_backoff=self.device_rate_backoff)
                )
            else:
                tickets.append(
                    TicketError("Unknown", f"unreadable ticket {item!r}", permanent=False)
                )
        return tickets

    # ---- receipts ----

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        """Receipts that are ready, asking in chunks of at most :attr:`max_receipt_batch` ids.

        A chunk that fails leaves its ids absent (they are asked again next poll) unless every
        chunk failed or one was rejected, which is returned as is.
        """
        ids = list(dict.fromkeys(ticket_ids))
        if not ids:
            return Receipts({})
        chunks = [
            ids[i : i + self.max_receipt_batch] for i in range(0, len(ids), self.max_receipt_batch)
        ]
        results = await asyncio.gather(*(self._receipt_chunk(c) for c in chunks))
        failures = [r for r in results if not isinstance(r, Receipts)]
        rejected = [f for f in failures if isinstance(f, Rejected)]
        if rejected or len(failures) == len(results):
            return (rejected or failures)[0]
        if failures:
            log.warning(
                "%d of %d receipt requests failed; those ids will be asked again",
                len(failures),
                len(results),
            )
        return Receipts(
            {t: r for res in results if isinstance(res, Receipts) for t, r in res.by_ticket.items()}
        )

    async def _receipt_chunk(self, ids: list[str]) -> ReceiptResult:
        body = await self._post(RECEIPTS_PATH, {"ids": ids})
        if isinstance(body, TryAgain | Rejected):
            return body
        data = body.get("data") if isinstance(body, Mapping) else None
        if not isinstance(data, Mapping):
            # Reading receipts is idempotent, so a garbled answer is worth another try.
            return TryAgain(f"unexpected receipts response: {body!r:.200}")
        wanted = set(ids)
        by_ticket: dict[str, Receipt] = {}
        for ticket_id, item in data.items():
            if ticket_id not in wanted or not isinstance(item, Mapping):
                continue
            if item.get("status") == "ok":
                by_ticket[ticket_id] = ReceiptOk()
            else:
                code, message = item_error(item)
                if code in CONFIGURATION_ERRORS:
                    log.error(
                        "Expo receipt %s reports a configuration problem (%s): %s",
                        ticket_id,
                        code,
                        message,
                    )
                by_ticket[ticket_id] = ReceiptError(
                    code=code, message=message, deactivate_device=code == DEVICE_NOT_REGISTERED
                )
        return Receipts(by_ticket)

    # ---- HTTP ----

    async def _post(self, path: str, payload: Any) -> Any:
        """POST JSON; the parsed body of a 200, or TryAgain/Rejected for the whole request."""
        raw = compact_json(payload).encode()
        headers = {"Content-Type": "application/json"}
        if len(raw) > GZIP_OVER_BYTES:
            raw = gzip.compress(raw, compresslevel=6)
            headers["Content-Encoding"] = "gzip"
        response = await self._post_in_slot(path, "Expo", content=raw, headers=headers)
        if isinstance(response, TryAgain):
            return response
        return classify_response(response, self.clock.now())
