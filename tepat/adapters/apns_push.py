"""Apple Push Notification service (HTTP/2, token auth) as a ``PushProvider``.

APNs takes one notification per request (``POST /3/device/{token}``) and wants many
concurrent streams on one connection rather than many connections, so a batch goes out
as that many streams, at most ``max_streams`` at a time, on one HTTP/2 connection while
APNs allows that many on it (another opens only past that). Every request carries the one
provider token of :mod:`tepat.adapters.apns_auth`.

APNs answers at send time: there are no receipts to poll (``max_receipt_batch`` is 0).

How answers become outcomes (the ``reason`` of APNs's JSON body):

============================== ================================= ===========================
answer                         outcome                           why
============================== ================================= ===========================
200                            ``TicketOk(apns-id)``
410 Unregistered               permanent, deactivate the device  the app left the device
400 BadDeviceToken,            permanent, deactivate the device  the token can never work
DeviceTokenNotForTopic                                           for this app
other 4xx (PayloadTooLarge     permanent refusal                 the same request fails the
413, BadTopic, ...)                                              same way
403 ExpiredProviderToken,      a new provider token, once; then  a lapsed token; then the
InvalidProviderToken; other    ``Rejected``                      key, key id or team is
403                                                              wrong
429 TooManyRequests            TryAgain, throttled, after        too many to one device
                               :data:`THROTTLED_BACKOFF_SECONDS`
503 (ServiceUnavailable,       TryAgain, not sent                refused without acting
Shutdown)
500, other 5xx                 TryAgain, ``server_error``        Apple asks to retry
network error/timeout          TryAgain, maybe sent once the     as Expo's
                               request went out whole
                               (``h2_client``)
============================== ================================= ===========================

A token of the wrong shape or a payload over 4096 bytes is refused without a request.
How the answers of a batch's notifications make its answer:
:func:`tepat.adapters.push_answers.batch_result`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from tepat.adapters.apns_auth import ProviderToken
from tepat.adapters.expo_outcomes import json_object, parse_retry_after
from tepat.adapters.h2_client import H2Client, H2Response, Headers
from tepat.adapters.push_answers import Answer, AnsweredAtSend, compact_json, send_together
from tepat.clock import Clock
from tepat.domain.errors import DomainError
from tepat.domain.validation import check_push_token
from tepat.ports.push import (
    PushRequest,
    Rejected,
    SendResult,
    TicketError,
    TicketOk,
)
from tepat.ports.try_again import TryAgain

log = logging.getLogger(__name__)

PRODUCTION_URL = "https://api.push.apple.com"
SEND_PATH = "/3/device/{token}"
MAX_BATCH = 100
MAX_PAYLOAD_BYTES = 4096
MAX_COLLAPSE_ID_BYTES = 64
#: APNs's 429 says "too many to this device" and comes without a Retry-After.
THROTTLED_BACKOFF_SECONDS = 10.0
_DEACTIVATE = frozenset({"BadDeviceToken", "Unregistered", "DeviceTokenNotForTopic"})
_STALE_TOKEN = frozenset({"ExpiredProviderToken", "InvalidProviderToken"})
_CONFIGURATION = frozenset({"BadTopic", "MissingTopic", "TopicDisallowed", "BadCertificate"})
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def to_apns_payload(request: PushRequest) -> dict[str, Any]:
    """The JSON body: the request's data as custom keys beside ``aps``."""
    aps: dict[str, Any] = {"alert": {"title": request.title, "body": request.body}}
    if request.sound is not None:
        aps["sound"] = request.sound
    return {**request.data, "aps": aps}


def apns_expiration(ttl_seconds: int, now: datetime) -> str:
    """``apns-expiration`` for a time to live (APNs direct, and APNs through FCM)."""
    # 0: deliver once, now or never; otherwise a UNIX time to give up at.
    return str(int(now.timestamp()) + ttl_seconds if ttl_seconds else 0)


def apns_headers(request: PushRequest, now: datetime) -> list[tuple[str, str]]:
    """The headers of one notification that are its own (those of every notification:
    :meth:`ApnsPushProvider._fixed`)."""
    headers = []
    if request.ttl_seconds is not None:
        headers.append(("apns-expiration", apns_expiration(request.ttl_seconds, now)))
    message_id = request.message_id
    if len(message_id.encode()) <= MAX_COLLAPSE_ID_BYTES:
        # A second copy of one message (sent again after a maybe-sent answer) replaces
        # the first on the device instead of showing twice.
        headers.append(("apns-collapse-id", message_id))
    # APNs echoes an apns-id it was given, so a ticket names its message.
    if _CANONICAL_UUID.fullmatch(message_id):
        headers.append(("apns-id", message_id))
    else:
        with contextlib.suppress(ValueError):
            headers.append(("apns-id", str(uuid.UUID(message_id))))
    return headers


def apns_reason(response: H2Response) -> str:
    reason = json_object(response).get("reason")
    return str(reason) if reason else f"HTTP_{response.status_code}"


def classify(response: H2Response, now: datetime) -> Answer:
    """One notification's answer (see the module's table)."""
    status = response.status_code
    if status == 200:
        apns_id = response.headers.get("apns-id")
        if apns_id:
            return TicketOk(apns_id)
        return TryAgain("APNs answered 200 without an apns-id", maybe_sent=True)
    reason = apns_reason(response)
    text = f"{status} {reason}"
    retry_after = parse_retry_after(response.headers.get("retry-after"), now)
    if status == 429:
        return TryAgain(text, retry_after or THROTTLED_BACKOFF_SECONDS, throttled=True)
    if status == 503:
        return TryAgain(text, retry_after)
    if status >= 500:
        return TryAgain(text, retry_after, server_error=True)
    if status == 403:
        log.error("APNs refused our provider token (%s); check TEPAT_APNS_KEY_*/TEAM_ID", text)
        return Rejected(text)
    if reason in _CONFIGURATION:
        log.error("APNs refused the topic (%s); check TEPAT_APNS_TOPIC", text)
    return TicketError(reason, text, permanent=True, deactivate_device=reason in _DEACTIVATE)


class ApnsPushProvider(AnsweredAtSend, H2Client):
    """No rate ceiling to share: APNs publishes none, the streams of one connection bound it."""

    max_batch: int = MAX_BATCH

    def __init__(
        self,
        token: ProviderToken,
        *,
        topic: str,
        clock: Clock,
        base_url: str = PRODUCTION_URL,
        max_streams: int = 1000,
        timeout: float = 15.0,
    ) -> None:
        self.token = token
        self.topic = topic
        self.clock = clock
        self._fixed_headers: dict[tuple[str, str], Headers] = {}
        # One connection, its streams multiplexed, as Apple asks (``http://``, the
        # sandbox: h2c with prior knowledge).
        super().__init__(
            base_url, max_streams=max_streams, timeout=timeout, user_agent="tepat-apns-push/0.1"
        )

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        bodies: dict[int, bytes] = {}  # each request's, encoded once: checked, then sent

        def refused(request: PushRequest) -> TicketError | None:
            refusal, bodies[id(request)] = _refused_before_sending(request)
            return refusal

        return await send_together(batch, MAX_BATCH, refused, partial(self._send_all, bodies))

    async def _send_all(
        self, bodies: dict[int, bytes], requests: list[PushRequest]
    ) -> list[Answer]:
        token = self.token.current()
        responses = await self._post(requests, bodies, token)
        stale = [
            i
            for i, r in enumerate(responses)
            if isinstance(r, H2Response) and r.status_code == 403 and apns_reason(r) in _STALE_TOKEN
        ]
        if stale:
            again = await self._post([requests[i] for i in stale], bodies, self.token.renew(token))
            for i, response in zip(stale, again, strict=True):
                responses[i] = response
        now = self.clock.now()
        return [r if isinstance(r, TryAgain) else classify(r, now) for r in responses]

    async def _post(
        self, requests: list[PushRequest], bodies: dict[int, bytes], token: str
    ) -> list[H2Response | TryAgain]:
        now = self.clock.now()
        posts = [
            (
                SEND_PATH.format(token=r.push_token),
                self._fixed(token, r.priority),
                apns_headers(r, now),
                False,  # a path per device: not worth a place in HPACK's table
                bodies[id(r)],
            )
            for r in requests
        ]
        return await self._post_many("APNs", posts)

    def _fixed(self, token: str, priority: str) -> Headers:
        """The headers every notification of one priority carries, built once."""
        if (headers := self._fixed_headers.get((token, priority))) is None:
            if len(self._fixed_headers) > 4:
                self._fixed_headers.clear()  # those of tokens renewed since
            headers = self._fixed_headers[token, priority] = (
                ("apns-topic", self.topic),
                ("apns-push-type", "alert"),
                # 5 lets the device save power (delivered in groups); 10 is "now".
                ("apns-priority", "5" if priority == "normal" else "10"),
                ("authorization", f"bearer {token}"),
            )
        return headers


def _refused_before_sending(request: PushRequest) -> tuple[TicketError | None, bytes]:
    """Why ``request`` is not sent, if it is not; its body."""
    body = compact_json(to_apns_payload(request)).encode()
    try:
        check_push_token(request.push_token, "apns")
    except DomainError as e:
        refusal = TicketError("BadDeviceToken", e.message, permanent=True, deactivate_device=True)
        return refusal, body
    if len(body) > MAX_PAYLOAD_BYTES:
        message = f"payload is {len(body)} bytes, over APNs's {MAX_PAYLOAD_BYTES}; not sent"
        return TicketError("PayloadTooLarge", message, permanent=True), body
    return None, body
