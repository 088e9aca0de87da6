"""Fault injection around the real store, push provider and HTTP transport.

Each wrapper passes every call through until a fault is armed; an armed fault
fires once, at the next call it applies to, and reports the message ids it
touched (``on_fault``) so that the model can relax what it demands of them.

A consumer crash is :class:`Crash`, a ``BaseException``: the production code's
``except Exception`` handlers do not see it, exactly as they would not see the
process dying. The harness then drops the consumer, so the broker hands its
unacked deliveries back, as it does when a connection is lost.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx

from tepat.clock import Clock
from tepat.domain.models import MessageStatus
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Refused
from tepat.ports.push import PushRequest, ReceiptResult, SendResult
from tepat.ports.try_again import TryAgain
from tepat.sandbox.expo import ExpoSandbox


class Crash(BaseException):
    """The consumer process died here."""


def crash(faults: Faults, where: str) -> Crash:
    # The flag lets the harness tell this crash from a cancellation it caused. Where the
    # send runs in a task of its own (the push batcher's), Crash ends only that task:
    # ``on_crash`` stops the consumer too, as the process dying would. Left to itself the
    # consumer would see an abandoned request, which the dispatcher rightly reports as an
    # ordinary send failure (ConnectionAbortedError: a hard stop, the batch is nacked).
    faults.crashed = True
    faults.on_crash()
    return Crash(where)


class Taint(enum.Enum):
    LATE = "late"  # re-driven or retried: arrives later, within the missed window
    DUPLICATE = "duplicate"  # crashed after the provider accepted: the one documented duplicate
    MAYBE_SENT = "maybe sent"  # a timeout after the request went out
    REFUSED = "refused"  # the provider refused it for good: it ends failed, never arrives


class Fault(enum.Enum):
    CRASH_AFTER_CLAIM = "crash after claim"
    CRASH_AFTER_ACCEPT = "crash after the provider accepted"
    CRASH_BEFORE_RECORD = "crash on the record write"
    CRASH_BEFORE_ACK = "crash before ack"
    LOSE = "broker loses a batch"
    REDELIVER = "broker redelivers a batch"
    CONCURRENT = "two consumers get the same batch"
    HTTP_429 = "provider 429"
    HTTP_500 = "provider 500"
    READ_TIMEOUT = "read timeout after the request went out"
    CONNECT_TIMEOUT = "connect timeout"
    # The scheduler dies in a plan run after writing a page's messages, before its
    # planning marks: the next run must still plan everything (marks only save work).
    CRASH_PLAN_BEFORE_MARKS = "plan run dies before writing its marks"
    # The event fan-out dies after a page's writes, before its cursor moves: the page is
    # done again, and its keys make every write a no-op the second time.
    CRASH_FANOUT_BEFORE_CURSOR = "event fan-out dies before moving its cursor"
    # A channel adapter (e-mail, SMS; the crash also the inbox) answers for one send call:
    CHANNEL_TRY_AGAIN = "channel: try again (nothing sent)"
    CHANNEL_MAYBE_SENT = "channel: try again, maybe sent (the reply was lost)"
    CHANNEL_REFUSED = "channel: refused"
    CHANNEL_CRASH_AFTER_SEND = "channel: the consumer dies after the provider took it"


RETRY_AFTER_429 = 1  # seconds, the scripted 429's Retry-After

DELIVERY_FAULTS = frozenset({Fault.CRASH_BEFORE_ACK, Fault.LOSE, Fault.REDELIVER, Fault.CONCURRENT})
SEND_FAULTS = frozenset({Fault.HTTP_429, Fault.HTTP_500, Fault.READ_TIMEOUT, Fault.CONNECT_TIMEOUT})
CHANNEL_FAULTS = frozenset(
    {
        Fault.CHANNEL_TRY_AGAIN,
        Fault.CHANNEL_MAYBE_SENT,
        Fault.CHANNEL_REFUSED,
        Fault.CHANNEL_CRASH_AFTER_SEND,
    }
)

OnFault = Callable[[Fault, Sequence[str], Taint | None], None]


class Faults:
    """The faults armed for the next opportunity, and who to tell when one fires."""

    def __init__(self, on_fault: OnFault) -> None:
        self.armed: set[Fault] = set()
        self.on_fault = on_fault
        self.fired: list[Fault] = []
        self.sent_since_claim = False
        self.crashed = False
        self.planning = False  # inside a scheduled plan run (not an API re-plan)
        self.fanning_out = False  # inside the harness's event fan-out
        self.on_crash: Callable[[], None] = lambda: None
        # Order of the last claim and of the last hand-off to a provider, per message:
        # a consumer dying between them leaves a message that may be on the wire.
        self._tick = 0
        self.claimed: dict[str, int] = {}
        self.handed: dict[str, int] = {}

    def note(self, into: dict[str, int], ids: Sequence[str]) -> None:
        self._tick += 1
        for i in ids:
            into[i] = self._tick

    def handed_since_claim(self, message_id: str) -> bool:
        return self.handed.get(message_id, -1) > self.claimed.get(message_id, 0)

    def take(self, fault: Fault) -> bool:
        if fault in self.armed:
            self.armed.discard(fault)
            self.fired.append(fault)
            return True
        return False

    def take_any(self, faults: frozenset[Fault]) -> Fault | None:
        for fault in sorted(self.armed & faults, key=lambda f: f.value):
            self.take(fault)
            return fault
        return None


class FaultyStore:
    """The real store, crashing the consumer after a claim or on the write of an outcome."""

    def __init__(self, inner: Any, faults: Faults) -> None:
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def claim(self, message_ids: Sequence[str], now: Any, due_before: Any = None) -> Any:
        claimed = await self._inner.claim(message_ids, now, due_before)
        self._faults.sent_since_claim = False
        self._faults.note(self._faults.claimed, [m.id for m in claimed])
        if claimed and self._faults.take(Fault.CRASH_AFTER_CLAIM):
            self._faults.on_fault(Fault.CRASH_AFTER_CLAIM, [m.id for m in claimed], Taint.LATE)
            raise crash(self._faults, "after claim")
        return claimed

    async def set_plan_marks(self, marks: Sequence[Any]) -> Any:
        if self._faults.planning and marks and self._faults.take(Fault.CRASH_PLAN_BEFORE_MARKS):
            self._faults.on_fault(Fault.CRASH_PLAN_BEFORE_MARKS, [], None)
            raise Crash("plan run, before its marks")
        return await self._inner.set_plan_marks(marks)

    async def advance_event(self, *args: Any, **kw: Any) -> Any:
        if self._faults.fanning_out and self._faults.take(Fault.CRASH_FANOUT_BEFORE_CURSOR):
            self._faults.on_fault(Fault.CRASH_FANOUT_BEFORE_CURSOR, [], None)
            raise Crash("fan-out, before its cursor")
        return await self._inner.advance_event(*args, **kw)

    async def transition_many(self, changes: Sequence[Any], now: Any, **kw: Any) -> Any:
        recording = self._faults.sent_since_claim and any(
            c.to in (MessageStatus.SENT, MessageStatus.DELIVERED, MessageStatus.FAILED)
            for c in changes
        )
        if recording and self._faults.take(Fault.CRASH_BEFORE_RECORD):
            ids = [c.message_id for c in changes]
            self._faults.on_fault(Fault.CRASH_BEFORE_RECORD, ids, Taint.DUPLICATE)
            raise crash(self._faults, "before record")
        return await self._inner.transition_many(changes, now, **kw)


class FaultyPush:
    """The real Expo client (to the sandbox over HTTP) with scripted failures."""

    def __init__(
        self, inner: Any, faults: Faults, sandbox: ExpoSandbox, transport: FaultyTransport
    ) -> None:
        self._inner = inner
        self._faults = faults
        self._sandbox = sandbox
        self._transport = transport
        self.max_batch: int = inner.max_batch
        self.max_receipt_batch: int = inner.max_receipt_batch
        self._paused_until: datetime | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        ids = sorted({r.message_id for r in batch})
        self._faults.note(self._faults.handed, ids)
        now = self._sandbox.clock.now()
        if self._paused_until is not None and now <= self._paused_until:
            # A 429's Retry-After holds back every request of the project, not only the
            # refused one (the client pauses its shared bucket, as Expo asks): what goes
            # out meanwhile is legitimately late, by up to Retry-After.
            self._faults.on_fault(Fault.HTTP_429, ids, Taint.LATE)
        fault = self._faults.take_any(SEND_FAULTS)
        if fault is Fault.HTTP_429:
            self._sandbox.fail_next(1, status=429, retry_after=RETRY_AFTER_429)
            self._paused_until = now + timedelta(seconds=RETRY_AFTER_429)
            self._faults.on_fault(fault, ids, Taint.LATE)
        elif fault is Fault.HTTP_500:
            # Expo asks for 5xx to be retried (issue 19): never closed outcome_unknown.
            self._sandbox.fail_next(1, status=500, retry_after=None)
            self._faults.on_fault(fault, ids, Taint.LATE)
        elif fault is Fault.READ_TIMEOUT:
            self._transport.read_timeout = True
            self._faults.on_fault(fault, ids, Taint.MAYBE_SENT)
        elif fault is Fault.CONNECT_TIMEOUT:
            self._transport.connect_timeout = True
            self._faults.on_fault(fault, ids, Taint.LATE)
        result: SendResult = await self._inner.send(batch)
        self._faults.sent_since_claim = True
        if self._faults.take(Fault.CRASH_AFTER_ACCEPT):
            self._faults.on_fault(Fault.CRASH_AFTER_ACCEPT, ids, Taint.DUPLICATE)
            raise crash(self._faults, "after the provider accepted")
        return result

    async def receipts(self, ticket_ids: Sequence[str]) -> ReceiptResult:
        result: ReceiptResult = await self._inner.receipts(ticket_ids)
        return result

    async def close(self) -> None:
        await self._inner.close()


@dataclass(frozen=True)
class ChannelSend:
    """One item a channel adapter was given (and, for e-mail and SMS, took)."""

    channel: str
    message_id: str
    target: str
    at: datetime
    body: str
    category: str


class RecordingChannel:
    """An e-mail or SMS provider that takes everything (``Accepted``) and remembers it."""

    max_batch = 100

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        self.sent: list[ChannelSend] = []

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome]:
        now = self._clock.now()
        for item in items:
            m = item.message
            self.sent.append(ChannelSend(self.name, m.id, item.target, now, m.body, m.category))
        return [Accepted(f"{self.name}-{item.message.id}") for item in items]

    async def close(self) -> None:
        return None


class FaultyChannel:
    """A channel adapter with scripted answers for one send call: try again (nothing
    sent), try again although it may have been sent (the provider took it, the reply was
    lost), refused, or the consumer dying once the provider took it."""

    def __init__(self, inner: Any, faults: Faults, armed: frozenset[Fault]) -> None:
        self._inner = inner
        self._faults = faults
        self._armed = armed
        self.name: str = inner.name
        self.max_batch: int = inner.max_batch

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome]:
        ids = [item.message.id for item in items]
        self._faults.note(self._faults.handed, ids)
        fault = self._faults.take_any(self._armed)
        if fault is Fault.CHANNEL_TRY_AGAIN:
            self._faults.on_fault(fault, ids, Taint.LATE)
            return [TryAgain("scripted 421", retry_after=None) for _ in items]
        if fault is Fault.CHANNEL_REFUSED:
            self._faults.on_fault(fault, ids, Taint.REFUSED)
            return [Refused("scripted 554") for _ in items]
        outcomes: list[ChannelOutcome] = await self._inner.send(items)
        self._faults.sent_since_claim = True
        if fault is Fault.CHANNEL_MAYBE_SENT:
            self._faults.on_fault(fault, ids, Taint.MAYBE_SENT)
            return [TryAgain("scripted lost reply", maybe_sent=True) for _ in items]
        if fault is Fault.CHANNEL_CRASH_AFTER_SEND:
            self._faults.on_fault(fault, ids, Taint.DUPLICATE)
            raise crash(self._faults, f"after the {self.name} provider took it")
        return outcomes

    async def close(self) -> None:
        await self._inner.close()


class FaultyTransport(httpx.AsyncBaseTransport):
    """Between the Expo client and the sandbox: time out before or after the request goes out."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner
        self.read_timeout = False
        self.connect_timeout = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.connect_timeout:
            self.connect_timeout = False
            raise httpx.ConnectTimeout("scripted connect timeout", request=request)
        response = await self._inner.handle_async_request(request)
        if self.read_timeout:
            self.read_timeout = False
            await response.aread()  # the sandbox has acted on it: the answer is what is lost
            await response.aclose()
            raise httpx.ReadTimeout("scripted read timeout", request=request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
