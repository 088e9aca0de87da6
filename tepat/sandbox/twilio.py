"""A stand-in for Twilio's Messages API, for tests and demos: same path, auth, shapes, codes.

What it mimics (twilio.com/docs/messaging/api/message-resource, /docs/api/errors,
/docs/usage/webhooks/webhooks-security):

* ``GET /2010-04-01/Accounts/{AccountSid}.json``: the Account resource, behind the same
  authentication (``tepat doctor`` checks the credentials with it).
* ``POST /2010-04-01/Accounts/{AccountSid}/Messages.json``, form-encoded ``To``, ``From``
  or ``MessagingServiceSid``, ``Body``, ``StatusCallback``; HTTP Basic auth with the
  account SID and auth token (anything else: 401, code 20003, as Twilio's JSON error).
* 201 with a Message resource: ``sid`` ``SM…``, ``status`` ``queued`` (``accepted`` through
  a Messaging Service), ``num_segments`` counted as GSM-7 or UCS-2.
* Refusals as Twilio words them, HTTP 400 ``{code, message, more_info, status}``: 21604 /
  21603 / 21602 (To / From / Body missing), 21617 (body over 1600 characters), 21212 (bad
  From), 21211 (To is not a valid E.164 number: checked with ``phonenumbers``), 21610 (To
  has replied STOP: see :meth:`TwilioSandbox.inbound`), and per number (scripted) 21211,
  21408 (region not enabled), 21610, 21614 (not a mobile number).
* Over the configured rate (requests/s, token bucket on the clock): 429, code 20429.
* With ``StatusCallback``: the status callbacks Twilio would POST there, form-encoded and
  signed with ``X-Twilio-Signature`` (tepat/adapters/twilio_signature.py): ``queued``,
  ``sent``, ``delivered``; or ``queued``, ``sent``, ``undelivered`` / ``queued``, ``failed``
  with an ``ErrorCode`` (scripted per number). Twilio makes one attempt per callback; so
  does the sandbox, and it logs the receiver's answer.

What it adds for tests, on top of the sandbox kit's faults, log, counters and ``/_sandbox/``
controls (:mod:`tepat.sandbox.provider`): per-number scripts, callbacks delayed on the clock,
reversed or duplicated, a signed inbound message (``STOP``) posted to a URL, and a log of
every callback posted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hmac
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tepat.adapters.twilio_signature import twilio_signature
from tepat.clock import Clock
from tepat.domain.contacts import normalise_phone
from tepat.domain.errors import DomainError
from tepat.domain.sms import count_segments
from tepat.sandbox.faults import FailNext
from tepat.sandbox.provider import FakeProvider, SandboxState, Stats
from tepat.sandbox.twilio_wire import (
    ACCOUNT_PATH,
    API_VERSION,
    MAX_BODY_CHARS,
    MESSAGES_PATH,
    NumberScript,
    account_resource,
    error_response,
    message_resource,
)
from tepat.services.twilio_callbacks import START_WORDS, STOP_WORDS

# Twilio's formats: "AC"/"SM"/"MG" + 32 hex digits; an auth token is 32 hex digits.
DEFAULT_ACCOUNT_SID = "AC" + "5a" * 16
DEFAULT_AUTH_TOKEN = "0123456789abcdef" * 2
# The number a Messaging Service picks when the request names no From.
SERVICE_FROM = "+15005550006"


class CallbackOrder(enum.StrEnum):
    IN_ORDER = "in_order"
    REVERSED = "reversed"  # the final status first, then the older ones
    DUPLICATED = "duplicated"  # every callback posted twice


@dataclass(slots=True)
class _Callback:
    due: datetime
    url: str
    params: list[tuple[str, str]]


@dataclass(slots=True)
class _Stats(Stats):
    accepted: int = 0
    refused: int = 0
    callbacks_posted: int = 0
    callbacks_failed: int = 0
    inbound_posted: int = 0


@dataclass(slots=True)
class _State(SandboxState):
    callbacks: list[dict[str, Any]] = field(default_factory=list)
    pending: list[_Callback] = field(default_factory=list)
    unsubscribed: set[str] = field(default_factory=set)
    stats: _Stats = field(default_factory=_Stats)


class TwilioSandbox(FakeProvider[_State]):
    _scripts_key = "numbers"
    _script_type = NumberScript

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        account_sid: str = DEFAULT_ACCOUNT_SID,
        auth_token: str = DEFAULT_AUTH_TOKEN,
        rate_limit: float | None = None,
        callback_delay_seconds: float = 0.0,
        callback_order: CallbackOrder | str = CallbackOrder.IN_ORDER,
        scripts: Mapping[str, NumberScript] | None = None,
        stall_limit_seconds: float = 60.0,
        callback_timeout_seconds: float = 10.0,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.callback_delay = timedelta(seconds=callback_delay_seconds)
        self.callback_order = CallbackOrder(callback_order)
        self.callback_timeout_seconds = callback_timeout_seconds
        # The callback poster runs on the serving loop, started by the first request.
        self._poster: asyncio.Task[None] | None = None
        routes = [
            Route(MESSAGES_PATH, self._create_message, methods=["POST"]),
            Route(ACCOUNT_PATH, self._fetch_account, methods=["GET"]),
            Route("/_sandbox/callbacks", self._callbacks_route, methods=["GET"]),
            Route("/_sandbox/inbound", self._inbound_route, methods=["POST"]),
        ]
        super().__init__(_State, scripts, clock, rate_limit, stall_limit_seconds, routes)

    # ---- controls (also reachable over HTTP at /_sandbox/...) ----

    def script_number(self, number: str, script: NumberScript | None) -> None:
        self._set_script(number, script)

    def fail_next(self, count: int, status: int = 429) -> None:
        """Answer the next ``count`` requests with 429 (code 20429) or a 5xx (20500),
        before anything is accepted."""
        if count < 0 or not (status == 429 or 500 <= status <= 599):
            raise ValueError("fail_next needs count >= 0 and status 429 or 5xx")
        self._refuse_next(count, status)

    def set_callbacks(
        self, *, delay_seconds: float | None = None, order: CallbackOrder | str | None = None
    ) -> None:
        if delay_seconds is not None:
            if delay_seconds < 0:
                raise ValueError("delay_seconds must be >= 0")
            self.callback_delay = timedelta(seconds=delay_seconds)
        if order is not None:
            self.callback_order = CallbackOrder(order)

    def unsubscribe(self, number: str, unsubscribed: bool = True) -> None:
        """Mark ``number`` as having replied STOP (21610 from now on) or START."""
        with self._lock:
            if unsubscribed:
                self._state.unsubscribed.add(number)
            else:
                self._state.unsubscribed.discard(number)

    def callbacks(self) -> list[dict[str, Any]]:
        """Every status callback posted (params, signature, the receiver's HTTP status)."""
        with self._lock:
            return [dict(c) for c in self._state.callbacks]

    def pending_callbacks(self) -> int:
        with self._lock:
            return len(self._state.pending)

    def _script_from(self, outcome: dict[str, Any]) -> NumberScript:
        return NumberScript(**outcome)

    def _describe_own(self) -> dict[str, Any]:
        return {
            "account_sid": self.account_sid,
            "unsubscribed": sorted(self._state.unsubscribed),
            "callback_delay_seconds": self.callback_delay.total_seconds(),
            "callback_order": str(self.callback_order),
        }

    def _apply_own_script(self, spec: dict[str, Any]) -> None:
        """Twilio's keys of a ``POST /_sandbox/script`` body, every one optional::

        {"numbers": {"+14155550100": {"api_error": 21211},
                     "+14155550101": {"status": "undelivered", "error_code": 30003}},
         "unsubscribed": ["+14155550103"], "subscribed": ["+14155550103"],
         "next_429": 2, "next_500": 1,
         "callback_delay_seconds": 2, "callback_order": "reversed"}
        """
        for number in spec.get("unsubscribed") or []:
            self.unsubscribe(str(number))
        for number in spec.get("subscribed") or []:
            self.unsubscribe(str(number), False)
        for status in (429, 500):
            if spec.get(f"next_{status}"):
                self.fail_next(int(spec[f"next_{status}"]), status)
        delay = spec.get("callback_delay_seconds")
        self.set_callbacks(
            delay_seconds=float(delay) if delay is not None else None,
            order=spec.get("callback_order"),
        )

    async def _callbacks_route(self, request: Request) -> Response:
        return JSONResponse({"callbacks": self.callbacks(), "pending": self.pending_callbacks()})

    async def _inbound_route(self, request: Request) -> Response:
        """``POST {"url": …, "from": "+1…", "body": "STOP", "to"?: …}``: Twilio posts an
        inbound message (signed) to ``url``; answers with the receiver's HTTP status."""
        try:
            spec = await request.json()
            if not isinstance(spec, dict):
                raise ValueError("expected a JSON object")
            url, from_, body = str(spec["url"]), str(spec["from"]), str(spec["body"])
            to = SERVICE_FROM if spec.get("to") is None else str(spec["to"])
        except (ValueError, KeyError) as e:
            return self._bad_script(f"expected {{url, from, body}}: {e}")
        return JSONResponse({"http_status": await self.inbound(url, from_, body, to)})

    async def inbound(self, url: str, from_: str, body: str, to: str = SERVICE_FROM) -> int:
        """Post an inbound message from ``from_`` to ``url`` as Twilio would (signed), and
        apply Twilio's own opt-out: STOP words make ``from_`` unsubscribed (21610), START
        words lift it. Returns the receiver's HTTP status."""
        word = body.strip().upper()
        opt_out = "STOP" if word in STOP_WORDS else "START" if word in START_WORDS else None
        if opt_out:
            self.unsubscribe(from_, opt_out == "STOP")
        sid = "SM" + uuid.uuid4().hex
        params = self._message_params(
            sid,
            from_,
            to,
            "received",
            Body=body,
            NumMedia="0",
            NumSegments=str(max(1, count_segments(body).segments)),
            SmsMessageSid=sid,
        )
        if opt_out:
            params.append(("OptOutType", opt_out))
        status, _ = await self._post_signed(url, params)
        with self._lock:
            self._state.stats.inbound_posted += 1
        return status

    def _message_params(
        self, sid: str, from_: str, to: str, status: str, **more: str
    ) -> list[tuple[str, str]]:
        """The form Twilio posts about a message (a status callback, an inbound message)."""
        return [
            ("AccountSid", self.account_sid),
            ("ApiVersion", API_VERSION),
            ("From", from_),
            ("MessageSid", sid),
            ("SmsSid", sid),
            ("SmsStatus", status),
            ("To", to),
            *more.items(),
        ]

    # ---- the Messages API ----

    def _refusal(self, failure: FailNext) -> Response:
        if failure.status == 429:
            return error_response(20429)
        return self._server_error(failure.status)

    def _server_error(self, status: int) -> Response:
        response = error_response(20500)
        response.status_code = status
        return response

    def _unauthorized(self) -> Response:
        return error_response(20003, headers={"WWW-Authenticate": 'Basic realm="Twilio API"'})

    def _bad_script(self, message: str) -> Response:
        return JSONResponse(
            {"code": 20001, "message": message, "more_info": "", "status": 400}, status_code=400
        )

    def _authorized(self, request: Request) -> bool:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return (
            hmac.compare_digest(user, self.account_sid)
            and hmac.compare_digest(password, self.auth_token)
            and request.path_params.get("AccountSid") == self.account_sid
        )

    async def _fetch_account(self, request: Request) -> Response:
        """``GET /2010-04-01/Accounts/{sid}.json``: what ``tepat doctor`` asks to check
        the credentials; no message is sent, and no scripted refusal is used up."""
        if (refused := self._gate(request, refusals=False)) is not None:
            return refused
        return JSONResponse(account_resource(self.account_sid, self.clock.now()))

    def _refuse(self, code: int, to: str = "", from_: str = "") -> Response:
        with self._lock:
            self._state.stats.refused += 1
        return error_response(code, to=to, from_=from_)

    async def _create_message(self, request: Request) -> Response:
        if (refused := self._gate(request)) is not None:
            return refused
        if self._over_rate(1):
            return error_response(20429)
        # form-encoded, as Twilio takes it (no multipart, so no python-multipart)
        raw = (await request.body()).decode("utf-8", "replace")
        form = dict(parse_qsl(raw, keep_blank_values=True))
        to = form.get("To", "").strip()
        from_ = form.get("From", "").strip() or None
        service = form.get("MessagingServiceSid", "").strip() or None
        body = form.get("Body", "")
        callback = form.get("StatusCallback", "").strip() or None
        if not to:
            return self._refuse(21604)
        if from_ is None and service is None:
            return self._refuse(21603)
        if not body:
            return self._refuse(21602)
        if len(body) > MAX_BODY_CHARS:
            return self._refuse(21617)
        if from_ is not None and not _valid_sender(from_):
            return self._refuse(21212, from_=from_)
        if not _valid_e164(to):
            return self._refuse(21211, to=to)
        with self._lock:
            script = self._state.scripts.get(to, NumberScript())
            unsubscribed = to in self._state.unsubscribed
        if script.api_error is not None:
            return self._refuse(script.api_error, to=to)
        if unsubscribed:
            return self._refuse(21610)
        now = self.clock.now()
        segments = count_segments(body)
        message = {
            "sid": "SM" + uuid.uuid4().hex,
            "to": to,
            "from": from_,
            "messaging_service_sid": service,
            "body": body,
            "status_callback": callback,
            "num_segments": segments.segments,
            "encoding": str(segments.encoding),
            "date_created": now.isoformat(),
            "final_status": script.status,
            "error_code": script.error_code,
        }
        self._accept(message, now)
        answer = JSONResponse(message_resource(self.account_sid, message, now), status_code=201)
        return await self.lose_or_answer(answer, request)

    def _accept(self, message: dict[str, Any], now: datetime) -> None:
        callback = message["status_callback"]
        with self._lock:
            self._state.stats.accepted += 1
            self._state.received.append(message)
            if callback:
                self._schedule(message, callback, now)
        loop, poster = asyncio.get_running_loop(), self._poster
        if callback and (poster is None or poster.done() or poster.get_loop() is not loop):
            self._poster = loop.create_task(self._post_callbacks(), name="twilio-callbacks")

    def _schedule(self, message: dict[str, Any], url: str, now: datetime) -> None:
        """Queue ``message``'s callbacks (the caller holds the lock)."""
        final, error_code = message["final_status"], message["error_code"]
        statuses = ["queued", "failed"] if final == "failed" else ["queued", "sent", final]
        sid, to, from_ = message["sid"], message["to"], message["from"] or SERVICE_FROM
        steps = []
        for status in statuses:
            params = self._message_params(sid, from_, to, status, MessageStatus=status)
            if message["messaging_service_sid"]:
                params.append(("MessagingServiceSid", message["messaging_service_sid"]))
            if status in ("undelivered", "failed") and error_code is not None:
                params.append(("ErrorCode", str(error_code)))
            steps.append(params)
        if self.callback_order is CallbackOrder.REVERSED:
            steps.reverse()
        elif self.callback_order is CallbackOrder.DUPLICATED:
            steps = [p for step in steps for p in (step, step)]
        for i, params in enumerate(steps):
            due = now + self.callback_delay * (i + 1)
            self._state.pending.append(_Callback(due, url, params))
        self._state.pending.sort(key=lambda c: c.due)  # stable: in order of scheduling

    async def _post_callbacks(self) -> None:
        """Post callbacks as they fall due on the clock, one at a time, in due order."""
        while True:
            now = self.clock.now()
            with self._lock:
                due = [c for c in self._state.pending if c.due <= now]
                self._state.pending = [c for c in self._state.pending if c.due > now]
            for callback in due:
                status, error = await self._post_signed(callback.url, callback.params)
                with self._lock:
                    stats = self._state.stats
                    stats.callbacks_posted += 1
                    if error or not 200 <= status < 300:
                        stats.callbacks_failed += 1
                    self._state.callbacks.append(
                        {
                            "url": callback.url,
                            "params": dict(callback.params),
                            "http_status": status,
                            "error": error,
                        }
                    )
            # Polled: the clock may be a test's FakeClock advanced from another thread.
            await asyncio.sleep(0.02)

    async def _post_signed(self, url: str, params: list[tuple[str, str]]) -> tuple[int, str | None]:
        headers = {"X-Twilio-Signature": twilio_signature(self.auth_token, url, params)}
        try:
            async with httpx.AsyncClient(timeout=self.callback_timeout_seconds) as client:
                response = await client.post(url, data=dict(params), headers=headers)
            return response.status_code, None
        except httpx.HTTPError as e:
            return 0, f"{type(e).__name__}: {e}"


def _valid_e164(number: str) -> bool:
    try:
        return number.startswith("+") and normalise_phone(number, "To") == number
    except DomainError:
        return False


def _valid_sender(sender: str) -> bool:
    """An E.164 number, a short code (3-8 digits), or an alphanumeric sender id (up to 11
    characters, at least one letter)."""
    if sender.startswith("+"):
        return _valid_e164(sender) or sender == SERVICE_FROM
    if sender.isdigit():
        return 3 <= len(sender) <= 8
    return (
        len(sender) <= 11
        and any(c.isalpha() for c in sender)
        and all(c.isalnum() or c == " " for c in sender)
    )
