"""SMS through Twilio's Messages API as a :class:`~tepat.ports.channel.Channel` (``sms``).

One form-encoded ``POST /2010-04-01/Accounts/{sid}/Messages.json`` per message, HTTP
Basic auth with the account SID and auth token (twilio.com/docs/messaging/api/message-resource).
No Twilio SDK: it is synchronous, and the request is a form post.

* The body is counted in segments first (tepat/domain/sms.py): more than
  ``TEPAT_SMS_MAX_SEGMENTS`` is ``Refused("too_many_segments")`` without a request.
* A token bucket on the injected clock keeps to ``TEPAT_TWILIO_RATE`` requests/s (Twilio
  queues what a sender number cannot send at once, and answers 20429 past its API limit).
* ``StatusCallback`` is ``{TEPAT_PUBLIC_URL}/v1/providers/twilio/status?m=<message id>``,
  so a callback names its message without a lookup by SID (api/routes/providers_twilio.py).
  Without a public URL there are no callbacks and an SMS stays ``sent``.
* Outcomes, never exceptions (:meth:`TwilioSmsChannel._classify` says why each): a refusal
  that says the number cannot take SMS suppresses it (:data:`SUPPRESS_ON`), and an answer
  that may follow a created message is ``maybe_sent``, left to the category's policy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from tepat.adapters.expo_outcomes import json_object, parse_retry_after
from tepat.adapters.http_pool import PooledClient
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock
from tepat.domain.errors import DomainError
from tepat.domain.queues import may_use_critical_reserve
from tepat.domain.sms import check_segments
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Refused, Withheld
from tepat.ports.try_again import TryAgain

log = logging.getLogger("tepat.twilio")

STATUS_CALLBACK_PATH = "/v1/providers/twilio/status"

# Refusals that say the number itself cannot take SMS: later messages to it are skipped.
SUPPRESS_ON: Mapping[int, str] = {21211: "invalid", 21614: "invalid", 21610: "stop"}
THROTTLED = 20429


def status_callback_url(public_url: str, message_id: str) -> str:
    return f"{public_url.rstrip('/')}{STATUS_CALLBACK_PATH}?m={quote(message_id, safe='')}"


class TwilioSmsChannel(PooledClient):
    name = "sms"
    max_batch = 20

    def __init__(
        self,
        *,
        account_sid: str,
        auth_token: str,
        clock: Clock,
        from_number: str | None = None,
        messaging_service_sid: str | None = None,
        base_url: str = "https://api.twilio.com",
        public_url: str | None = None,
        rate: float = 10.0,
        critical_reserve: float = 0.0,
        max_segments: int = 3,
        timeout: float = 10.0,
        max_connections: int = 4,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if from_number is None and messaging_service_sid is None:
            raise ValueError("a From number or a Messaging Service SID is needed")
        self.account_sid = account_sid
        self.from_number = from_number
        self.messaging_service_sid = messaging_service_sid
        self.public_url = public_url.rstrip("/") if public_url else None
        self.max_segments = max_segments
        self.clock = clock
        self.limiter = TokenBucket(
            rate, clock, critical_reserve=critical_reserve, provider="twilio"
        )
        self._path = f"/2010-04-01/Accounts/{quote(account_sid, safe='')}/Messages.json"
        super().__init__(
            max_connections,
            timeout=timeout,
            transport=transport,
            base_url=base_url.rstrip("/"),
            auth=httpx.BasicAuth(account_sid, auth_token),
            headers={"Accept": "application/json", "User-Agent": "tepat-twilio-sms/0.1"},
        )

    async def check_account(self) -> httpx.Response:
        """``GET /2010-04-01/Accounts/{sid}.json``: 200 when the credentials hold, 401
        when not; sends nothing (``tepat doctor``). Raises httpx errors."""
        return await self._client.get(self._path.removesuffix("/Messages.json") + ".json")

    def set_rate_share(self, share: float) -> None:
        self.limiter.set_share(share)

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome | Withheld]:
        return list(await asyncio.gather(*(self._send_one(item) for item in items)))

    def form(self, item: Outgoing) -> dict[str, str]:
        data = {"To": item.target, "Body": item.message.body}
        if self.messaging_service_sid is not None:
            data["MessagingServiceSid"] = self.messaging_service_sid
        if self.from_number is not None:
            data["From"] = self.from_number
        if self.public_url is not None:
            data["StatusCallback"] = status_callback_url(self.public_url, item.message.id)
        return data

    async def _send_one(self, item: Outgoing) -> ChannelOutcome | Withheld:
        try:
            check_segments(item.message.body, self.max_segments, "body")
        except DomainError as e:
            reason = "empty_body" if not item.message.body else "too_many_segments"
            log.info("SMS %s not sent: %s", item.message.id, e.message)
            return Refused(reason)
        data = self.form(item)
        # Other traffic waits for its share before a connection (TokenBucket.pass_share).
        await self.limiter.pass_share(1, may_use_critical_reserve(item.message))
        async with self._slots:
            await self.limiter.acquire_ceiling(1)
            if not item.still_sendable():
                return Withheld()
            # Inside this slot, after the waits above: not _post_in_slot.
            response = await self._post_traced(self._path, "Twilio", data=data)
        return response if isinstance(response, TryAgain) else self._classify(response)

    def _classify(self, response: httpx.Response) -> ChannelOutcome:
        body = json_object(response)
        status = response.status_code
        code = _int(body.get("code"))
        text = str(body.get("message") or response.reason_phrase or "")
        if status in (200, 201):
            sid = body.get("sid")
            return Accepted(str(sid) if sid else None)
        if status == 429 or code == THROTTLED:
            retry_after = parse_retry_after(response.headers.get("retry-after"), self.clock.now())
            if retry_after:
                self.limiter.pause(retry_after)
            return TryAgain(f"twilio_{code or 20429}: {text}", retry_after, throttled=True)
        if status == 503:
            # Twilio's error 20503 asks for a retry with back-off: nothing was created.
            return TryAgain(f"twilio_http_{status}: {text}")
        if status >= 500:
            # Error 20500: retrying a 500 on a send "may deliver multiple messages".
            return TryAgain(f"twilio_http_{status}: {text}", maybe_sent=True)
        if status in (401, 403):
            # A configuration problem: retried, so nothing is lost while an operator fixes it.
            log.error(
                "Twilio refused the credentials (HTTP %s, code %s: %s): check"
                " TEPAT_TWILIO_ACCOUNT_SID and TEPAT_TWILIO_AUTH_TOKEN",
                status,
                code,
                text,
            )
            return TryAgain(f"twilio_{code or status}: {text}")
        reason = f"twilio_{code}" if code is not None else f"twilio_http_{status}"
        return Refused(reason, suppress=SUPPRESS_ON.get(code) if code is not None else None)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
