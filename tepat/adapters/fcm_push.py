"""Firebase Cloud Messaging (HTTP v1) as a :class:`~tepat.ports.push.PushProvider`.

FCM v1 takes one message per request (``POST /v1/projects/{id}/messages:send``), so a
batch of :attr:`FcmPushProvider.max_batch` goes out as that many concurrent requests
(HTTP/2 streams, over as many connections as FCM's 100 streams a connection need), at most
``max_connections`` at a time, under the project's rate (a token
bucket on the injected clock that adapts to 429s, :mod:`tepat.adapters.adaptive_rate`).
Access tokens come from :mod:`tepat.adapters.fcm_auth`.

FCM answers at send time, so there is nothing to poll: the name FCM gives an accepted
message is its ticket, and :meth:`FcmPushProvider.receipts` reports every such ticket
delivered to FCM (the same final state Expo's receipt gives).

How answers become outcomes (FCM's ``error.details[].errorCode``, else ``error.status``):

====================== ========================================= =========================
answer                 outcome                                   why
====================== ========================================= =========================
200 ``{"name"}``       ``TicketOk(name)``
UNREGISTERED (404)     permanent, deactivate the device          the app left the device
INVALID_ARGUMENT (400) permanent; deactivate if about the token  the same message fails
                                                                 the same way
SENDER_ID_MISMATCH     permanent, deactivate the device          the token is another
(403)                                                            project's
QUOTA_EXCEEDED (429)   TryAgain, throttled                       the rate adapts down
UNAVAILABLE (503)      TryAgain, not sent                        refused without acting
INTERNAL (500), 5xx    TryAgain, ``server_error``                FCM asks to retry 500
401                    a new token, once; then ``Rejected``      a lapsed or revoked token
THIRD_PARTY_AUTH_ERROR ``Rejected``                              the APNs/web credentials
                                                                 in Firebase are wrong
other 4xx              permanent refusal
network error/timeout  TryAgain, maybe sent once the request     as Expo's
                       went out whole (``h2_client``)
====================== ========================================= =========================

A 429 or 5xx is retried on FCM's terms (:data:`FCM_TERMS`, FCM's guidance on retries):
never sooner than its ``Retry-After``, nor than :data:`MIN_RETRY_SECONDS`; exponential
backoff from there (the push channel's policy with its base raised to it); and not once
the message is an hour past due, whatever ``TEPAT_MAX_RETRY_AGE_SECONDS`` allows.

The port answers a batch either per message (``Tickets``) or as a whole (``TryAgain`` /
``Rejected``): when no message of the batch got a ticket or a refusal of its own, the
batch's answer is the whole one (the merged ``TryAgain``, or ``Rejected``); otherwise a
message that failed for the moment keeps its own ``TryAgain`` beside the others' tickets
(:func:`tepat.adapters.push_answers.batch_result`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from tepat.adapters.adaptive_rate import AdaptiveRate
from tepat.adapters.apns_push import apns_expiration
from tepat.adapters.expo_outcomes import json_object, parse_retry_after
from tepat.adapters.fcm_auth import FcmAuth
from tepat.adapters.h2_client import H2Client, H2Response, Headers
from tepat.adapters.push_answers import Answer, AnsweredAtSend, batch_result, compact_json
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock
from tepat.domain.retry import ProviderTerms
from tepat.ports.push import (
    GateClosed,
    PushRequest,
    Rejected,
    SendResult,
    TicketError,
    TicketOk,
    Tickets,
)
from tepat.ports.try_again import TryAgain

log = logging.getLogger(__name__)

MAX_BATCH = 500
MIN_RETRY_SECONDS = 10.0
FCM_TERMS = ProviderTerms(base_seconds=MIN_RETRY_SECONDS, max_age=timedelta(hours=1))
_DEACTIVATE = frozenset({"UNREGISTERED", "SENDER_ID_MISMATCH"})
_FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def fcm_body(request: PushRequest, now: datetime) -> bytes:
    """The request's body, ``{"message": ...}``: FCM v1's message for a
    :class:`~tepat.ports.push.PushRequest` sent at ``now``; its time to live is both
    Android's ``ttl`` and the APNs expiry FCM passes on."""
    expiration = None
    if request.ttl_seconds is not None:
        expiration = apns_expiration(request.ttl_seconds, now)
    head = compact_json(
        {
            "token": request.push_token,
            "notification": {"title": request.title, "body": request.body},
            # FCM's data is a map of strings only.
            "data": {
                str(k): v if isinstance(v, str) else compact_json(v)
                for k, v in request.data.items()
            },
        }
    )
    tail = _delivery(request.priority, request.ttl_seconds, request.sound, expiration)
    return f'{{"message":{head[:-1]}{tail}'.encode()


@functools.lru_cache(maxsize=64)
def _delivery(
    priority: str, ttl_seconds: int | None, sound: str | None, expiration: str | None
) -> str:
    """The end of a body, ``,"android":…,"apns":…}}``: the same for every message of one
    priority, time to live and sound sent in one second, so encoded once for them."""
    android: dict[str, Any] = {"priority": "normal" if priority == "normal" else "high"}
    apns_headers = {"apns-priority": "5" if priority == "normal" else "10"}
    if ttl_seconds is not None and expiration is not None:
        android["ttl"] = f"{ttl_seconds}s"
        apns_headers["apns-expiration"] = expiration
    apns: dict[str, Any] = {"headers": apns_headers}
    if sound is not None:
        android["notification"] = {"sound": sound}
        apns["payload"] = {"aps": {"sound": sound}}
    return f",{compact_json({'android': android, 'apns': apns})[1:]}}}"


# FCM's accepted answer, ``{"name": "projects/…/messages/…"}``, read without a JSON parser.
_NAME = re.compile(rb'\s*\{\s*"name"\s*:\s*"([^"\\]+)"\s*\}\s*')


def fcm_error(response: H2Response) -> tuple[str, str, bool]:
    """(FCM's error code, its message, whether it is about the token) of an error answer."""
    error = json_object(response).get("error")
    error = error if isinstance(error, Mapping) else {}
    code = str(error.get("status") or f"HTTP_{response.status_code}")
    about_token = False
    details = error.get("details")
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, Mapping):
            continue
        if detail.get("@type") == _FCM_ERROR and detail.get("errorCode"):
            code = str(detail["errorCode"])
        if detail.get("@type") == _BAD_REQUEST:
            violations = detail.get("fieldViolations")
            about_token |= any(
                isinstance(v, Mapping) and "token" in str(v.get("field", ""))
                for v in (violations if isinstance(violations, list) else [])
            )
    message = str(error.get("message") or response.text[:200] or response.reason_phrase)
    about_token |= "registration token" in message.lower()
    return code, message, about_token


def classify(response: H2Response, now: Any) -> Answer:
    """One message's answer (``now``: when it came, for a dated ``Retry-After``)."""
    status = response.status_code
    if status == 200:
        if plain := _NAME.fullmatch(response.content):
            return TicketOk(plain[1].decode())
        try:
            name = response.json().get("name")
        except (ValueError, AttributeError):
            name = None
        if isinstance(name, str) and name:
            return TicketOk(name)
        # FCM took it; only its name is lost.
        return TryAgain(
            f"FCM answered 200 without a name: {response.text[:200]!r}", maybe_sent=True
        )
    code, message, about_token = fcm_error(response)
    reason = f"{code}: {message}"
    retry_after = parse_retry_after(response.headers.get("retry-after"), now)
    wait = max(MIN_RETRY_SECONDS, retry_after or 0.0)
    if status == 429 or code == "QUOTA_EXCEEDED":
        return TryAgain(reason, wait, throttled=True, terms=FCM_TERMS)
    if status == 503 or code == "UNAVAILABLE":
        return TryAgain(reason, wait, terms=FCM_TERMS)
    if status >= 500:
        return TryAgain(reason, wait, server_error=True, terms=FCM_TERMS)
    if status == 401 or code == "THIRD_PARTY_AUTH_ERROR":
        log.error("FCM refused our credentials (%s); check TEPAT_FCM_CREDENTIALS_FILE", reason)
        return Rejected(reason)
    deactivate = code in _DEACTIVATE or (code == "INVALID_ARGUMENT" and about_token)
    return TicketError(code, message, permanent=True, deactivate_device=deactivate)


class FcmPushProvider(AnsweredAtSend, H2Client):
    max_batch: int = MAX_BATCH

    def __init__(
        self,
        auth: FcmAuth,
        *,
        clock: Clock,
        project_id: str | None = None,
        base_url: str = "https://fcm.googleapis.com",
        max_connections: int = 1000,
        rate_limit: float = 10_000.0,
        critical_reserve: float = 0.0,
        timeout: float = 15.0,
    ) -> None:
        project = project_id or auth.project_id
        if not project:
            raise ValueError("no FCM project id: set it or use a service account file with one")
        self.auth = auth
        self.clock = clock
        self._send_path = f"/v1/projects/{project}/messages:send"
        self._headers: tuple[str, Headers] = ("", ())  # the token they carry, the headers
        self.limiter = TokenBucket(
            rate_limit,
            clock,
            capacity=min(rate_limit, float(MAX_BATCH)),
            critical_reserve=critical_reserve,
            provider="fcm",
        )
        self.adaptive = AdaptiveRate(self.limiter, rate_limit, clock)
        # HTTP/2, as Firebase's own SDKs send: the requests multiplexed as streams
        # (``max_connections``: streams in flight, on all connections). Over HTTP/1.1 each would
        # need a connection of its own (4 ms of CPU a message at 50 through httpx's pool,
        # bench/README.md).
        super().__init__(
            base_url, max_streams=max_connections, timeout=timeout, user_agent="tepat-fcm-push/0.1"
        )

    async def close(self) -> None:
        await super().close()
        self.auth.close()

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        if len(batch) > MAX_BATCH:
            raise ValueError(f"at most {MAX_BATCH} notifications per send, got {len(batch)}")
        if not batch:
            return Tickets([])
        await self.limiter.acquire(len(batch), sum(r.critical for r in batch))
        token = await self.auth.token()  # a refresh is one more wait
        if isinstance(token, TryAgain | Rejected):
            return token
        closed = {r.message_id for r in batch if not r.still_sendable()}
        if closed:
            raise GateClosed(closed)
        sent_at = self.clock.now()
        answers = await self._post_all(batch, token)
        throttled = [a for a in answers if isinstance(a, TryAgain) and a.throttled]
        if throttled:
            wait = max(a.retry_after or 0.0 for a in throttled)
            self.adaptive.throttled_by_provider(wait, sent_at, len(batch))
        accepted = sum(isinstance(a, TicketOk) for a in answers)
        if accepted:
            self.adaptive.accepted(accepted, sent_at)
        self.max_batch = self.adaptive.request_size(MAX_BATCH)
        return batch_result(answers)

    async def _post_all(self, batch: Sequence[PushRequest], token: str) -> list[Answer]:
        answers = await self._post(batch, token)
        stale = [i for i, a in enumerate(answers) if _unauthenticated(a)]
        if stale:
            # The token lapsed or was revoked early: one new token, one more try.
            fresh = await self.auth.token(stale=token)
            again: list[Answer]
            if isinstance(fresh, TryAgain | Rejected):
                again = [fresh] * len(stale)
            else:
                again = await self._post([batch[i] for i in stale], fresh)
                if refused := next((a for a in again if isinstance(a, Rejected)), None):
                    log.error("FCM refused a new access token too (%s)", refused.reason)
            for i, answer in zip(stale, again, strict=True):
                answers[i] = answer
        return answers

    async def _post(self, batch: Sequence[PushRequest], token: str) -> list[Answer]:
        if self._headers[0] != token:
            authorization = ("authorization", f"Bearer {token}")
            self._headers = (token, (authorization, ("content-type", "application/json")))
        headers, now = self._headers[1], self.clock.now()
        posts = [(self._send_path, headers, (), True, fcm_body(r, now)) for r in batch]
        responses = await self._post_many("FCM", posts)
        now = self.clock.now()
        return [r if isinstance(r, TryAgain) else _answer(r, now) for r in responses]

    def set_rate_share(self, share: float) -> None:
        self.adaptive.set_share(share)
        self.max_batch = self.adaptive.request_size(MAX_BATCH)


def _answer(response: H2Response, now: datetime) -> Answer:
    if response.status_code == 401:
        code, message, _ = fcm_error(response)
        if code != "THIRD_PARTY_AUTH_ERROR":
            return Rejected(f"UNAUTHENTICATED: {message}")
    return classify(response, now)


def _unauthenticated(answer: Answer) -> bool:
    return isinstance(answer, Rejected) and answer.reason.startswith("UNAUTHENTICATED")
