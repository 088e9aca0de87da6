"""A stand-in for Expo's push API, for tests and demos: same paths, limits, shapes and error codes.

What it mimics (docs.expo.dev/push-notifications/sending-notifications, GUIDE.md §6):

* ``POST /--/api/v2/push/send`` takes one message object or an array; ``to`` may be a string or
  a list, and a list becomes one ticket per recipient. Tickets come back in request order; a
  single object with a single ``to`` gets a single ticket object as ``data``, as Expo does.
* More than 100 notifications in a request: HTTP 400 ``PUSH_TOO_MANY_NOTIFICATIONS``. A
  message whose payload (the message without ``to``, as compact UTF-8 JSON) exceeds 4096 bytes:
  an error ticket ``MessageTooBig``. A recipient that is not an Expo push token: an error ticket
  ``DeviceNotRegistered`` worded like Expo's (``"…" is not a registered push notification
  recipient``), with the token in ``details.expoPushToken``.
* ``POST /--/api/v2/push/getReceipts`` with ``{"ids": […]}``: more than 1000 ids is HTTP 400
  ``PUSH_TOO_MANY_RECEIPTS``; a receipt appears once ``receipt_delay`` has passed on the
  injected clock and disappears after ``receipt_ttl`` (Expo keeps them about a day); unknown
  ids are simply absent.
* Request bodies may be gzip-compressed; responses are gzipped for clients that accept it.
* With an access token configured, requests without ``Authorization: Bearer <token>`` get
  HTTP 401 ``UNAUTHORIZED``.
* With a rate limit (notifications/s, token bucket on the clock), requests beyond it get HTTP 429
  ``TOO_MANY_REQUESTS`` with a ``Retry-After`` header.

What it adds for tests: per-token scripted ticket/receipt errors, "the next N requests fail
with 429/500", a log of every notification received, and counters. The same controls exist as
methods on :class:`ExpoSandbox` (in-process) and as HTTP endpoints under ``/_sandbox/``.
"""

from __future__ import annotations

import gzip
import json
import math
import threading
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock, SystemClock
from tepat.domain.validation import is_expo_push_token

SEND_PATH = "/--/api/v2/push/send"
RECEIPTS_PATH = "/--/api/v2/push/getReceipts"

MAX_NOTIFICATIONS_PER_REQUEST = 100
MAX_RECEIPT_IDS_PER_REQUEST = 1000
MAX_PAYLOAD_BYTES = 4096

#: Error codes Expo puts in ``details.error`` of tickets and receipts.
TICKET_ERROR_CODES = frozenset(
    {
        "DeviceNotRegistered",
        "MessageTooBig",
        "MessageRateExceeded",
        "MismatchSenderId",
        "InvalidCredentials",
        "ProviderError",
        "ExpoError",
        "DeveloperError",
    }
)


def payload_size(message: Mapping[str, Any]) -> int:
    """Bytes of what Expo forwards to APNs/FCM: the message without ``to``, as compact JSON."""
    body = {k: v for k, v in message.items() if k != "to"}
    return len(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _error_message(code: str, token: str) -> str:
    messages = {
        "DeviceNotRegistered": f'"{token}" is not a registered push notification recipient',
        "MessageTooBig": "Message too big: the total notification payload exceeds 4096 bytes",
        "MessageRateExceeded": f'Too many messages are being sent to "{token}"; slow down',
        "MismatchSenderId": "The FCM sender id does not match the one the token was issued for",
        "InvalidCredentials": "The push notification credentials for this project are invalid",
        "ProviderError": "The push notification provider returned an error",
        "ExpoError": "The Expo push notification service could not process this message",
        "DeveloperError": "The message is invalid",
    }
    return messages.get(code, f"Push notification error {code}")


def _error_item(code: str, token: str, message: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"error": code}
    if code == "DeviceNotRegistered":
        details["expoPushToken"] = token
    return {
        "status": "error",
        "message": message or _error_message(code, token),
        "details": details,
    }


def _request_errors(code: str, message: str, status: int, **headers: str) -> JSONResponse:
    return JSONResponse({"errors": [{"code": code, "message": message}]}, status, headers=headers)


@dataclass(frozen=True, slots=True)
class TokenScript:
    """What the sandbox does with one token: fail its ticket, or accept it and fail its receipt."""

    ticket_error: str | None = None
    receipt_error: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"ticket_error": self.ticket_error, "receipt_error": self.receipt_error}


@dataclass(slots=True)
class _Ticket:
    token: str
    created_at: datetime
    receipt: dict[str, Any]


@dataclass(slots=True)
class _Stats:
    requests: int = 0
    send_requests: int = 0
    receipt_requests: int = 0
    notifications: int = 0
    tickets_ok: int = 0
    tickets_error: int = 0
    gzip_requests: int = 0
    too_many_requests: int = 0
    server_errors: int = 0
    unauthorized: int = 0
    bad_requests: int = 0


@dataclass(slots=True)
class _FailNext:
    status: int
    remaining: int
    retry_after: float | None
    code: str


@dataclass(slots=True)
class _State:
    tickets: dict[str, _Ticket] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    scripts: dict[str, TokenScript] = field(default_factory=dict)
    fail_next: list[_FailNext] = field(default_factory=list)
    stats: _Stats = field(default_factory=_Stats)


class _BadRequest(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ExpoSandbox:
    """The state of one fake Expo project, and the ASGI app that serves it (:attr:`app`).

    Safe to drive from a test thread while a server thread serves requests.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        receipt_delay_seconds: float = 0.0,
        receipt_ttl_seconds: float = 86_400.0,
        access_token: str | None = None,
        rate_limit: float | None = None,
        scripts: Mapping[str, TokenScript] | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.receipt_delay = timedelta(seconds=receipt_delay_seconds)
        self.receipt_ttl = timedelta(seconds=receipt_ttl_seconds)
        self.access_token = access_token
        self._lock = threading.Lock()
        self._state = _State(scripts=dict(scripts or {}))
        self._bucket: TokenBucket | None = None
        self.set_rate_limit(rate_limit)
        self.app = self._build_app()

    # ---- controls (also reachable over HTTP at /_sandbox/...) ----

    def script_token(
        self, token: str, *, ticket_error: str | None = None, receipt_error: str | None = None
    ) -> None:
        """Fail ``token``'s ticket with ``ticket_error``, or its receipt with ``receipt_error``.

        Both ``None`` removes the script: the token succeeds again.
        """
        for code in (ticket_error, receipt_error):
            if code is not None and code not in TICKET_ERROR_CODES:
                raise ValueError(
                    f"unknown Expo error {code!r} (one of {sorted(TICKET_ERROR_CODES)})"
                )
        with self._lock:
            if ticket_error is None and receipt_error is None:
                self._state.scripts.pop(token, None)
            else:
                self._state.scripts[token] = TokenScript(ticket_error, receipt_error)

    def clear_scripts(self) -> None:
        with self._lock:
            self._state.scripts.clear()
            self._state.fail_next.clear()

    def fail_next(
        self,
        count: int,
        status: int = 429,
        retry_after: float | None = 1.0,
        code: str | None = None,
    ) -> None:
        """Answer the next ``count`` push API requests (send or receipts) with HTTP ``status``.

        ``code`` is the ``errors[0].code``; by default ``TOO_MANY_REQUESTS`` for 429,
        ``INTERNAL_SERVER_ERROR`` for 5xx and ``BAD_REQUEST`` for other 4xx.
        """
        if count < 0 or not 400 <= status <= 599:
            raise ValueError("fail_next needs count >= 0 and a 4xx or 5xx status")
        if code is None:
            code = {429: "TOO_MANY_REQUESTS"}.get(
                status, "INTERNAL_SERVER_ERROR" if status >= 500 else "BAD_REQUEST"
            )
        with self._lock:
            if count:
                self._state.fail_next.append(_FailNext(status, count, retry_after, code))

    def set_rate_limit(self, rate: float | None) -> None:
        """Notifications per second beyond which requests get 429 (``None``: unlimited)."""
        self._bucket = TokenBucket(rate, self.clock) if rate else None
        self.rate_limit = rate

    def set_receipt_delay(self, seconds: float) -> None:
        self.receipt_delay = timedelta(seconds=seconds)

    def received(self) -> list[dict[str, Any]]:
        """Every notification received (one entry per recipient), oldest first."""
        with self._lock:
            return [dict(r) for r in self._state.received]

    def clear_received(self) -> None:
        with self._lock:
            self._state.received.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return asdict(self._state.stats)

    def reset(self) -> None:
        """Forget everything: tickets, received notifications, scripts, counters."""
        with self._lock:
            self._state = _State()
        self.set_rate_limit(self.rate_limit)

    # ---- the push API ----

    def _build_app(self) -> Starlette:
        routes = [
            Route(SEND_PATH, self._send, methods=["POST"]),
            Route(RECEIPTS_PATH, self._get_receipts, methods=["POST"]),
            Route("/_sandbox/received", self._http_received, methods=["GET", "DELETE"]),
            Route("/_sandbox/stats", self._http_stats, methods=["GET"]),
            Route("/_sandbox/script", self._http_script, methods=["GET", "POST"]),
            Route("/_sandbox/reset", self._http_reset, methods=["POST"]),
        ]
        return Starlette(routes=routes, middleware=[Middleware(GZipMiddleware, minimum_size=500)])

    def _gate(self, request: Request) -> Response | None:
        """Scripted outages and authentication, before anything is read. Counts the request."""
        with self._lock:
            stats = self._state.stats
            stats.requests += 1
            if request.headers.get("content-encoding", "").lower() == "gzip":
                stats.gzip_requests += 1
            pending = self._state.fail_next
            if pending:
                failure = pending[0]
                failure.remaining -= 1
                if failure.remaining <= 0:
                    pending.pop(0)
                headers = {}
                if failure.retry_after is not None:
                    headers["Retry-After"] = str(math.ceil(failure.retry_after))
                if failure.status == 429:
                    stats.too_many_requests += 1
                elif failure.status >= 500:
                    stats.server_errors += 1
                else:
                    stats.bad_requests += 1
                return _request_errors(
                    failure.code,
                    f"Scripted failure {failure.status} {failure.code}",
                    failure.status,
                    **headers,
                )
            if self.access_token is not None:
                auth = request.headers.get("authorization", "")
                if auth != f"Bearer {self.access_token}":
                    stats.unauthorized += 1
                    return _request_errors(
                        "UNAUTHORIZED",
                        "The bearer token is invalid or missing; this project requires an "
                        "access token for push notifications",
                        401,
                    )
        return None

    async def _read_json(self, request: Request) -> Any:
        raw = await request.body()
        encoding = request.headers.get("content-encoding", "identity").lower()
        try:
            if encoding == "gzip":
                raw = gzip.decompress(raw)
            elif encoding == "deflate":
                raw = zlib.decompress(raw)
            elif encoding not in ("", "identity"):
                raise _BadRequest("VALIDATION_ERROR", f"unsupported Content-Encoding {encoding!r}")
        except (OSError, EOFError, zlib.error) as e:
            raise _BadRequest("VALIDATION_ERROR", f"could not decode {encoding} body: {e}") from e
        try:
            return json.loads(raw)
        except ValueError as e:
            raise _BadRequest("VALIDATION_ERROR", f"the request body must be JSON: {e}") from e

    def _bad_request(self, e: _BadRequest) -> JSONResponse:
        with self._lock:
            self._state.stats.bad_requests += 1
        return _request_errors(e.code, e.message, 400)

    async def _send(self, request: Request) -> Response:
        if (refused := self._gate(request)) is not None:
            return refused
        try:
            body = await self._read_json(request)
            messages = _parse_messages(body)
        except _BadRequest as e:
            return self._bad_request(e)
        count = sum(len(recipients) for _, recipients in messages)
        if count > MAX_NOTIFICATIONS_PER_REQUEST:
            return self._bad_request(
                _BadRequest(
                    "PUSH_TOO_MANY_NOTIFICATIONS",
                    f"You are trying to send {count} push notifications in one request; "
                    f"at most {MAX_NOTIFICATIONS_PER_REQUEST} are allowed",
                )
            )
        bucket = self._bucket
        if bucket is not None and count:
            wait = bucket.try_acquire(count)
            if wait > 0:
                with self._lock:
                    self._state.stats.too_many_requests += 1
                return _request_errors(
                    "TOO_MANY_REQUESTS",
                    f"You are exceeding the limit of {self.rate_limit:g} notifications per second",
                    429,
                    **{"Retry-After": str(math.ceil(wait))},
                )
        encoding = request.headers.get("content-encoding")
        tickets = self._issue_tickets(messages, encoding)
        with self._lock:
            self._state.stats.send_requests += 1
        single = isinstance(body, dict) and isinstance(body.get("to"), str)
        return JSONResponse({"data": tickets[0] if single else tickets})

    def _issue_tickets(
        self, messages: list[tuple[dict[str, Any], list[str]]], encoding: str | None
    ) -> list[dict[str, Any]]:
        now = self.clock.now()
        tickets: list[dict[str, Any]] = []
        with self._lock:
            state = self._state
            for message, recipients in messages:
                size = payload_size(message)
                for token in recipients:
                    script = state.scripts.get(token, TokenScript())
                    ticket: dict[str, Any]
                    if not is_expo_push_token(token):
                        ticket = _error_item("DeviceNotRegistered", token)
                    elif size > MAX_PAYLOAD_BYTES:
                        ticket = _error_item(
                            "MessageTooBig",
                            token,
                            f"Message too big: the notification payload is {size} bytes, "
                            f"over the limit of {MAX_PAYLOAD_BYTES} bytes",
                        )
                    elif script.ticket_error is not None:
                        ticket = _error_item(script.ticket_error, token)
                    else:
                        ticket_id = str(uuid.uuid4())
                        receipt = (
                            _error_item(script.receipt_error, token)
                            if script.receipt_error is not None
                            else {"status": "ok"}
                        )
                        state.tickets[ticket_id] = _Ticket(token, now, receipt)
                        ticket = {"status": "ok", "id": ticket_id}
                    tickets.append(ticket)
                    state.stats.notifications += 1
                    if ticket["status"] == "ok":
                        state.stats.tickets_ok += 1
                    else:
                        state.stats.tickets_error += 1
                    state.received.append(_received_entry(message, token, ticket, now, encoding))
        return tickets

    async def _get_receipts(self, request: Request) -> Response:
        if (refused := self._gate(request)) is not None:
            return refused
        try:
            body = await self._read_json(request)
            ids = body.get("ids") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise _BadRequest("VALIDATION_ERROR", '"ids" must be an array of strings')
        except _BadRequest as e:
            return self._bad_request(e)
        if len(ids) > MAX_RECEIPT_IDS_PER_REQUEST:
            return self._bad_request(
                _BadRequest(
                    "PUSH_TOO_MANY_RECEIPTS",
                    f"You are trying to get {len(ids)} push receipts in one request; "
                    f"at most {MAX_RECEIPT_IDS_PER_REQUEST} are allowed",
                )
            )
        now = self.clock.now()
        data: dict[str, Any] = {}
        with self._lock:
            self._state.stats.receipt_requests += 1
            for ticket_id in ids:
                ticket = self._state.tickets.get(ticket_id)
                if ticket is None:
                    continue
                ready = ticket.created_at + self.receipt_delay
                if ready <= now < ticket.created_at + self.receipt_ttl:
                    data[ticket_id] = dict(ticket.receipt)
        return JSONResponse({"data": data})

    # ---- HTTP controls ----

    async def _http_received(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.clear_received()
            return Response(status_code=204)
        return JSONResponse({"received": self.received()})

    async def _http_stats(self, request: Request) -> Response:
        return JSONResponse(self.stats())

    async def _http_reset(self, request: Request) -> Response:
        self.reset()
        return Response(status_code=204)

    async def _http_script(self, request: Request) -> Response:
        """``POST`` JSON, every key optional::

            {"tokens": {"ExponentPushToken[a]": {"ticket_error": "DeviceNotRegistered"},
                        "ExponentPushToken[b]": {"receipt_error": "DeviceNotRegistered"},
                        "ExponentPushToken[c]": null},          # null: remove the script
             "clear": true,                                       # drop all scripts first
             "next_429": 2, "next_500": 1, "retry_after": 3,
             "fail_next": {"count": 1, "status": 400, "code": "PUSH_TOO_MANY_EXPERIENCE_IDS"},
             "rate_limit": 600, "receipt_delay_seconds": 900}

        ``GET`` shows the current scripts.
        """
        if request.method == "GET":
            return JSONResponse(self._describe_scripts())
        try:
            spec = await request.json()
            self._apply_script(spec)
        except (ValueError, TypeError) as e:
            return _request_errors("VALIDATION_ERROR", str(e), 400)
        return JSONResponse(self._describe_scripts())

    def _apply_script(self, spec: Any) -> None:
        if not isinstance(spec, dict):
            raise ValueError("the script must be a JSON object")
        if spec.get("clear"):
            self.clear_scripts()
        tokens = spec.get("tokens") or {}
        if not isinstance(tokens, dict):
            raise ValueError('"tokens" must map tokens to {"ticket_error", "receipt_error"}')
        for token, outcome in tokens.items():
            outcome = outcome or {}
            if not isinstance(outcome, dict):
                raise ValueError(f"script for {token!r} must be an object or null")
            self.script_token(
                token,
                ticket_error=outcome.get("ticket_error"),
                receipt_error=outcome.get("receipt_error"),
            )
        retry_after = spec.get("retry_after", 1.0)
        if retry_after is not None:
            retry_after = float(retry_after)
        if spec.get("next_429"):
            self.fail_next(int(spec["next_429"]), 429, retry_after)
        if spec.get("next_500"):
            self.fail_next(int(spec["next_500"]), 500, retry_after)
        if fail := spec.get("fail_next"):
            if not isinstance(fail, dict):
                raise ValueError('"fail_next" must be {"count", "status", "code", "retry_after"}')
            self.fail_next(
                int(fail.get("count", 1)),
                int(fail.get("status", 500)),
                fail.get("retry_after"),
                fail.get("code"),
            )
        if "rate_limit" in spec:
            rate = spec["rate_limit"]
            self.set_rate_limit(float(rate) if rate else None)
        if "receipt_delay_seconds" in spec:
            self.set_receipt_delay(float(spec["receipt_delay_seconds"]))

    def _describe_scripts(self) -> dict[str, Any]:
        with self._lock:
            return {
                "tokens": {t: s.as_dict() for t, s in self._state.scripts.items()},
                "fail_next": [
                    {
                        "status": f.status,
                        "code": f.code,
                        "remaining": f.remaining,
                        "retry_after": f.retry_after,
                    }
                    for f in self._state.fail_next
                ],
                "rate_limit": self.rate_limit,
                "receipt_delay_seconds": self.receipt_delay.total_seconds(),
            }


def _parse_messages(body: Any) -> list[tuple[dict[str, Any], list[str]]]:
    """Messages with their recipients, in request order; 400 VALIDATION_ERROR when malformed."""
    items = body if isinstance(body, list) else [body]
    parsed: list[tuple[dict[str, Any], list[str]]] = []
    for index, message in enumerate(items):
        where = f'"[{index}]"' if isinstance(body, list) else '"value"'
        if not isinstance(message, dict):
            raise _BadRequest("VALIDATION_ERROR", f"{where} must be of type object")
        to = message.get("to")
        if isinstance(to, str):
            recipients = [to]
        elif isinstance(to, list) and to and all(isinstance(t, str) for t in to):
            recipients = list(to)
        else:
            raise _BadRequest(
                "VALIDATION_ERROR", f"{where}.to must be a push token or a non-empty array of them"
            )
        parsed.append((message, recipients))
    return parsed


def _received_entry(
    message: Mapping[str, Any],
    token: str,
    ticket: Mapping[str, Any],
    now: datetime,
    encoding: str | None,
) -> dict[str, Any]:
    details = ticket.get("details") or {}
    return {
        "to": token,
        "title": message.get("title"),
        "subtitle": message.get("subtitle"),
        "body": message.get("body"),
        "data": message.get("data"),
        "sound": message.get("sound"),
        "priority": message.get("priority"),
        "ttl": message.get("ttl"),
        "channel_id": message.get("channelId"),
        "category_id": message.get("categoryId"),
        "ticket_id": ticket.get("id"),
        "status": ticket["status"],
        "error": details.get("error"),
        "payload_bytes": payload_size(message),
        "content_encoding": encoding,
        "received_at": now.isoformat(),
    }
