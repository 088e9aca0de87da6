"""How Expo's answers become typed outcomes (:mod:`tepat.ports.push`) for the Expo client.

A whole request that fails becomes ``TryAgain`` or ``Rejected``, and ``TryAgain`` says
whether Expo may have acted on the request anyway (``maybe_sent``). Expo's documentation
asks senders to retry 429 and 5xx answers with exponential backoff, so those are retried
whatever the category's ``maybe_sent`` policy says; only an answer truly lost after the
request went out is "maybe sent" and left to that policy:

================================================ ========== ==================================
what happened                                    maybe_sent why
================================================ ========== ==================================
connect error, refused or timeout; pool timeout  no         no byte went out
any error before the body was written completely no         Expo never had a whole request
429 (with its ``Retry-After``), 408, 503         no         refused without acting
read timeout; connection dropped or protocol     yes        the request went out; Expo may
error after the body went out; unreadable body              have accepted it
other 5xx (``server_error``)                     no         Expo documents it as retryable;
                                                            the rare duplicate (Expo failed
                                                            after handing on) is counted
200 that is not JSON                             yes        accepted, only the tickets lost
================================================ ========== ==================================

"Body written completely" comes from httpcore's ``trace`` extension, not from the exception
type (see :class:`SendProgress`).

How ticket errors are classified (``details.error``):

===================== ========= ========== ==================================================
code                  permanent deactivate why
===================== ========= ========== ==================================================
DeviceNotRegistered   yes       yes        the token is dead; Expo asks us to stop using it
MessageTooBig         yes       no         the same payload will always be too big
MessageRateExceeded   no        no         too many to this one device: back off, retry later
InvalidCredentials    yes       no         project configuration (APNs/FCM keys): logged as an
MismatchSenderId      yes       no         error; retrying cannot help and the device is fine
DeveloperError        yes       no         Expo says the request itself is wrong; resending
                                           the same message fails the same way
ExpoError             no        no         a fault inside Expo's service: transient
ProviderError         no        no         APNs/FCM failed or is unavailable: transient
(unknown / missing)   no        no         be safe: retry within the retry policy's bounds
===================== ========= ========== ==================================================

Retrying a non-permanent error is bounded by :class:`tepat.domain.retry.RetryPolicy`, so a
code that never clears still ends the message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from tepat.adapters.h2_client import H2Response
from tepat.ports.push import Rejected, TicketError
from tepat.ports.try_again import TryAgain

log = logging.getLogger("tepat.adapters.expo_push")

DEVICE_NOT_REGISTERED = "DeviceNotRegistered"
_PERMANENT = frozenset(
    {
        DEVICE_NOT_REGISTERED,
        "MessageTooBig",
        "InvalidCredentials",
        "MismatchSenderId",
        "DeveloperError",
    }
)
CONFIGURATION_ERRORS = frozenset({"InvalidCredentials", "MismatchSenderId"})

#: Failures that happen before any byte of a request is written: nothing can have been sent.
BEFORE_SENDING = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
    httpx.ProxyError,
)

#: Seconds an idle pooled HTTP connection may be reused (httpx's default is 5). A server
#: closes a keep-alive connection idle for its own timeout; a request written into it as
#: it closes gets no answer after its body went out, which :class:`SendProgress` must call
#: maybe sent (the server cannot be proven not to have read it). So the client lets go of
#: an idle connection well before the server does: common idle timeouts are 5 s (uvicorn,
#: hypercorn, Node, Apache; the sandboxes and Tepat's own API), 2 s (gunicorn), 60-75 s
#: (nginx, AWS ALB), about 10 min (Google's load balancers); equal ones raced in a bench
#: run under load (100 notifications closed outcome_unknown). A connection the server
#: closed while idle is seen closed before any byte is written and replaced by httpcore.
KEEPALIVE_EXPIRY_SECONDS = 1.5


def classify_ticket_error(code: str, message: str, *, rate_backoff: float) -> TicketError:
    if code in CONFIGURATION_ERRORS:
        log.error(
            "Expo refused a notification for a configuration problem (%s): %s. Fix the push "
            "credentials of the Expo project; devices are left untouched.",
            code,
            message,
        )
    return TicketError(
        code=code,
        message=message,
        permanent=code in _PERMANENT,
        deactivate_device=code == DEVICE_NOT_REGISTERED,
        retry_after=rate_backoff if code == "MessageRateExceeded" else None,
    )


def item_error(item: Mapping[str, Any]) -> tuple[str, str]:
    details = item.get("details")
    code = details.get("error") if isinstance(details, Mapping) else None
    return (str(code) if code else "Unknown", str(item.get("message") or "no message from Expo"))


def json_object(response: httpx.Response | H2Response) -> Mapping[str, Any]:
    """A provider's answer read as a JSON object; empty when it is not one."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, Mapping) else {}


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def classify_response(response: httpx.Response, now: datetime) -> Any:
    """The parsed body of a usable 200, or TryAgain/Rejected for the whole request."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    errors = body.get("errors") if isinstance(body, Mapping) else None
    first = (
        errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], Mapping) else {}
    )
    code = str(first.get("code") or f"HTTP_{response.status_code}")
    text = str(first.get("message") or response.text[:200] or response.reason_phrase)
    reason = f"{code}: {text}"
    status = response.status_code
    retry_after = parse_retry_after(response.headers.get("retry-after"), now)

    if status == 429 or code == "TOO_MANY_REQUESTS":
        # Refused: nothing was accepted. The send rate adapts to it (adaptive_rate.py).
        return TryAgain(reason, retry_after, throttled=True)
    if status in (408, 503):
        # 408: the server gave up waiting for the request: it never had it whole. 503,
        # "Service Unavailable" (RFC 9110 §15.6.4): the server is unable to handle the
        # request, so it did not; an overload or maintenance storm is not an unknown
        # outcome, and closing everything it touches as outcome_unknown would lose it all.
        return TryAgain(reason, retry_after)
    if status >= 500:
        # Expo asks for 5xx answers to be retried with backoff: the transient, common case.
        # Expo may rarely have handed some notifications on before failing; the recorder
        # counts each such retry as a possible duplicate (server_error), and closing them
        # instead would lose every notification of an outage.
        return TryAgain(reason, retry_after, server_error=True)
    if status in (401, 403):
        log.error("Expo refused our credentials (%s); check TEPAT_EXPO_ACCESS_TOKEN", reason)
        return Rejected(reason)
    if status != 200:
        return Rejected(reason)
    if errors:
        # A 200 carrying request errors: treat it as the documented whole-request failure.
        return Rejected(reason)
    if body is None:
        # A 200 means Expo took the request; only its tickets are lost.
        return TryAgain(f"Expo answered 200 without JSON: {response.text[:200]!r}", maybe_sent=True)
    return body


class SendProgress:
    """How far one request got, from httpcore's ``trace`` extension (one per request).

    The request counts as sent once its body was written out completely; until then Expo
    cannot have a request to act on (a body cut short does not parse). The exception type
    alone cannot tell: httpcore swallows a write error and reports what it then fails to
    read (``RemoteProtocolError``, ``ReadError``), so a body that never went out whole
    surfaces as an error that usually means "after sending".
    """

    __slots__ = ("body_sent", "traced")

    def __init__(self) -> None:
        self.traced = False
        self.body_sent = False

    async def trace(self, event: str, info: Mapping[str, Any]) -> None:
        self.traced = True
        if event.endswith("send_request_body.complete"):
            self.body_sent = True

    def maybe_sent(self, error: httpx.HTTPError) -> bool:
        # A transport that does not trace (a mock, a custom one): assume the worst once
        # connecting is behind us.
        return not isinstance(error, BEFORE_SENDING) and (self.body_sent or not self.traced)

    def failure(self, error: httpx.HTTPError, provider: str = "Expo") -> TryAgain:
        """The outcome of a request that raised instead of answering."""
        maybe_sent = self.maybe_sent(error)
        what = "timeout" if isinstance(error, httpx.TimeoutException) else "network error"
        when = "after the request was sent" if maybe_sent else "before the request was sent"
        return TryAgain(
            f"{what} talking to {provider} {when}: {type(error).__name__}: {error}",
            maybe_sent=maybe_sent,
        )
