"""A stand-in for Expo's push API, for tests and demos: same paths, limits, shapes and error codes.

What it mimics (docs.expo.dev/push-notifications/sending-notifications, docs/PRINCIPLES.md §6):

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
  ``TOO_MANY_REQUESTS`` with a ``Retry-After`` header. With a per-token limit, each access
  token (each Expo project; requests without one share a bucket) has a bucket of its own,
  as Expo limits each project: one project over its limit gets 429s, another does not.

What it adds for tests: the access token each notification came with (``access_token``
in ``/_sandbox/received``: which account sent it), per-token scripted ticket and receipt
errors, on top of the sandbox kit's faults, log, counters and ``/_sandbox/`` controls
(:mod:`tepat.sandbox.provider`, :mod:`tepat.sandbox.faults`). The wire format lives in
:mod:`tepat.sandbox.expo_wire`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.adapters.expo_push import (
    MAX_BATCH,
    MAX_RECEIPT_BATCH,
    RECEIPTS_PATH,
    SEND_PATH,
    payload_size,
)
from tepat.adapters.rate_limit import TokenBucket
from tepat.clock import Clock
from tepat.sandbox.expo_wire import (
    BadRequest,
    TokenScript,
    error_item,
    parse_messages,
    read_json,
    received_entry,
    refused_ticket,
    request_errors,
)
from tepat.sandbox.faults import FailNext
from tepat.sandbox.provider import FakeProvider, SandboxState, Stats


@dataclass(slots=True)
class _Ticket:
    token: str
    created_at: datetime
    receipt: dict[str, Any]


@dataclass(slots=True)
class _Stats(Stats):
    send_requests: int = 0
    receipt_requests: int = 0
    notifications: int = 0
    tickets_ok: int = 0
    tickets_error: int = 0
    gzip_requests: int = 0
    bad_requests: int = 0


@dataclass(slots=True)
class _State(SandboxState):
    tickets: dict[str, _Ticket] = field(default_factory=dict)
    stats: _Stats = field(default_factory=_Stats)
    token_429s: Counter[str] = field(default_factory=Counter)  # by access_token_label


class ExpoSandbox(FakeProvider[_State]):
    _scripts_key = "tokens"
    _script_type = TokenScript

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        receipt_delay_seconds: float = 0.0,
        receipt_ttl_seconds: float = 86_400.0,
        access_token: str | None = None,
        rate_limit: float | None = None,
        scripts: Mapping[str, TokenScript] | None = None,
        stall_limit_seconds: float = 60.0,
        token_rate_limit: float | None = None,
    ) -> None:
        self.receipt_delay = timedelta(seconds=receipt_delay_seconds)
        self.receipt_ttl = timedelta(seconds=receipt_ttl_seconds)
        self.access_token = access_token
        self.token_rate_limit = token_rate_limit
        self._token_buckets: dict[str, TokenBucket] = {}  # by access_token_label
        routes = [
            Route(SEND_PATH, self._send, methods=["POST"]),
            Route(RECEIPTS_PATH, self._get_receipts, methods=["POST"]),
        ]
        super().__init__(
            _State,
            scripts,
            clock,
            rate_limit,
            stall_limit_seconds,
            routes,
            middleware=[Middleware(GZipMiddleware, minimum_size=500)],
        )

    # ---- controls (also reachable over HTTP at /_sandbox/...) ----

    def script_token(
        self, token: str, *, ticket_error: str | None = None, receipt_error: str | None = None
    ) -> None:
        """Fail ``token``'s ticket with ``ticket_error``, or its receipt with ``receipt_error``.

        Both ``None`` removes the script: the token succeeds again.
        """
        outcome = {"ticket_error": ticket_error, "receipt_error": receipt_error}
        self._set_script(token, self._script_from(outcome))

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
        self._refuse_next(count, status, retry_after, code)

    def set_receipt_delay(self, seconds: float) -> None:
        self.receipt_delay = timedelta(seconds=seconds)

    def _apply_own_script(self, spec: dict[str, Any]) -> None:
        """Expo's keys of a ``POST /_sandbox/script`` body, every one optional::

        {"tokens": {"ExponentPushToken[a]": {"ticket_error": "DeviceNotRegistered"},
                    "ExponentPushToken[b]": {"receipt_error": "DeviceNotRegistered"}},
         "next_429": 2, "next_500": 1, "retry_after": 3,
         "fail_next": {"count": 1, "status": 400, "code": "PUSH_TOO_MANY_EXPERIENCE_IDS"},
         "receipt_delay_seconds": 900}
        """
        retry_after = None if (wait := spec.get("retry_after", 1.0)) is None else float(wait)
        for status in (429, 500):
            if spec.get(f"next_{status}"):
                self.fail_next(int(spec[f"next_{status}"]), status, retry_after)
        if fail := spec.get("fail_next"):
            if not isinstance(fail, dict):
                raise ValueError('"fail_next" must be {"count", "status", "code", "retry_after"}')
            self.fail_next(
                int(fail.get("count", 1)),
                int(fail.get("status", 500)),
                fail.get("retry_after"),
                fail.get("code"),
            )
        if "receipt_delay_seconds" in spec:
            self.set_receipt_delay(float(spec["receipt_delay_seconds"]))
        if "token_rate_limit" in spec:
            rate = spec["token_rate_limit"]
            self.set_token_rate_limit(float(rate) if rate else None)

    def reset(self) -> None:
        super().reset()
        self.set_token_rate_limit(self.token_rate_limit)

    def set_token_rate_limit(self, rate: float | None) -> None:
        """Notifications/s each access token may send before 429 (``None``: no such limit)."""
        with self._lock:
            self.token_rate_limit = rate
            self._token_buckets.clear()

    def _describe_own(self) -> dict[str, Any]:
        return {
            "receipt_delay_seconds": self.receipt_delay.total_seconds(),
            "token_rate_limit": self.token_rate_limit,
            # by access_token_label(token): never the token itself
            "too_many_requests_by_token": dict(self._state.token_429s),
        }

    # ---- Expo's words ----

    def _server_error(self, status: int) -> Response:
        message = f"Scripted failure {status} after accepting the request"
        return request_errors("INTERNAL_SERVER_ERROR", message, status)

    def _refusal(self, failure: FailNext) -> Response:
        if failure.status != 429 and failure.status < 500:
            self._state.stats.bad_requests += 1
        code = str(failure.code)
        message = f"Scripted failure {failure.status} {code}"
        return request_errors(code, message, failure.status, failure.retry_after)

    def _gate(self, request: Request, refusals: bool = True) -> Response | None:
        if request.headers.get("content-encoding", "").lower() == "gzip":
            with self._lock:
                self._state.stats.gzip_requests += 1
        return super()._gate(request, refusals)

    def _authorized(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        return self.access_token is None or auth == f"Bearer {self.access_token}"

    def _unauthorized(self) -> Response:
        return request_errors(
            "UNAUTHORIZED",
            "The bearer token is invalid or missing; this project requires an "
            "access token for push notifications",
            401,
        )

    def _bad_script(self, message: str) -> Response:
        return request_errors("VALIDATION_ERROR", message, 400)

    def _bad_request(self, code: str, message: str) -> JSONResponse:
        with self._lock:
            self._state.stats.bad_requests += 1
        return request_errors(code, message, 400)

    # ---- the push API ----

    async def _send(self, request: Request) -> Response:
        if (refused := self._gate(request)) is not None:
            return refused
        try:
            body = await read_json(request)
            messages = parse_messages(body)
        except BadRequest as e:
            return self._bad_request(e.code, e.message)
        count = sum(len(recipients) for _, recipients in messages)
        if count > MAX_BATCH:
            return self._bad_request(
                "PUSH_TOO_MANY_NOTIFICATIONS",
                f"You are trying to send {count} push notifications in one request; "
                f"at most {MAX_BATCH} are allowed",
            )
        if wait := self._over_rate(count):
            message = f"You are exceeding the limit of {self.rate_limit:g} notifications per second"
            return request_errors("TOO_MANY_REQUESTS", message, 429, wait)
        if wait := self._over_token_rate(request, count):
            message = (
                f"You are exceeding the limit of {self.token_rate_limit:g} notifications "
                "per second for this project"
            )
            return request_errors("TOO_MANY_REQUESTS", message, 429, wait)
        encoding = request.headers.get("content-encoding")
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ") or None
        tickets, accepted = self._issue_tickets(messages, encoding, bearer)
        with self._lock:
            self._state.stats.send_requests += 1
        single = isinstance(body, dict) and isinstance(body.get("to"), str)
        answer = JSONResponse({"data": tickets[0] if single else tickets})
        return await self.lose_or_answer(answer, request, accepted)

    def _over_token_rate(self, request: Request, count: int) -> float:
        """As :meth:`_over_rate`, on the bucket of the request's access token."""
        rate = self.token_rate_limit
        if not rate or not count:
            return 0.0
        label = access_token_label(request.headers.get("authorization", ""))
        with self._lock:
            bucket = self._token_buckets.get(label)
            if bucket is None:
                bucket = self._token_buckets[label] = TokenBucket(rate, self.clock)
        if wait := self._over_rate(count, bucket):
            with self._lock:
                self._state.token_429s[label] += 1
        return wait

    def _issue_tickets(
        self,
        messages: list[tuple[dict[str, Any], list[str]]],
        encoding: str | None,
        bearer: str | None,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The tickets answered, and the entries of the notifications accepted (each with
        the access token it came with: which account sent it)."""
        now = self.clock.now()
        tickets: list[dict[str, Any]] = []
        accepted: list[dict[str, Any]] = []
        with self._lock:
            state = self._state
            for message, recipients in messages:
                size = payload_size(message)
                for token in recipients:
                    script = state.scripts.get(token, TokenScript())
                    ticket = refused_ticket(token, size, script)
                    if ticket is None:
                        ticket_id = str(uuid.uuid4())
                        receipt = (
                            error_item(script.receipt_error, token)
                            if script.receipt_error is not None
                            else {"status": "ok"}
                        )
                        state.tickets[ticket_id] = _Ticket(token, now, receipt)
                        ticket = {"status": "ok", "id": ticket_id}
                    tickets.append(ticket)
                    entry = received_entry(message, token, ticket, now, encoding)
                    entry["access_token"] = bearer
                    state.received.append(entry)
                    state.stats.notifications += 1
                    if ticket["status"] == "ok":
                        state.stats.tickets_ok += 1
                        accepted.append(entry)
                    else:
                        state.stats.tickets_error += 1
        return tickets, accepted

    async def _get_receipts(self, request: Request) -> Response:
        if (refused := self._gate(request)) is not None:
            return refused
        try:
            body = await read_json(request)
            ids = body.get("ids") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise BadRequest("VALIDATION_ERROR", '"ids" must be an array of strings')
        except BadRequest as e:
            return self._bad_request(e.code, e.message)
        if len(ids) > MAX_RECEIPT_BATCH:
            return self._bad_request(
                "PUSH_TOO_MANY_RECEIPTS",
                f"You are trying to get {len(ids)} push receipts in one request; "
                f"at most {MAX_RECEIPT_BATCH} are allowed",
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


def access_token_label(authorization: str) -> str:
    """How the sandbox names an access token in its figures (``Bearer <token>`` or the
    token): a digest, so a token is never shown back."""
    token = authorization.removeprefix("Bearer ")
    return hashlib.sha256(token.encode()).hexdigest()[:12]
