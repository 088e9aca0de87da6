"""The system under test: Tepat's real services in-process, driven on a fake clock.

One :class:`System` per example: a fresh store (from the contract suite's
factories), the embedded broker, the real dispatcher through the consumer's
``handle_delivery``, the sweeper, the receipt poller, the creator, the HTTP API
(over httpx's ASGI transport, with the admin key) and the Expo sandbox over
real HTTP. Time only moves in :meth:`System.advance_to`, which walks from event
to event (every broker due instant, and the periodic jobs' ticks) so that every
batch is taken at its instant, as a consumer that is always running would.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import httpx
from pydantic import SecretStr

from api.app import create_app
from consumers.worker import handle_delivery
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.batches import decode_batch
from tepat.domain.events import EventState
from tepat.domain.inbox import InboxItem
from tepat.domain.models import Message, MessageStatus
from tepat.ports.broker import Delivery
from tepat.ports.push import PushProvider
from tepat.ports.repositories.messages import MessageQuery
from tepat.ports.store import Store
from tepat.runtime import Runtime, make_push_provider, open_runtime
from tepat.sandbox.expo import ExpoSandbox
from tepat.services.events import EventService
from tests.model.faults import (
    CHANNEL_FAULTS,
    DELIVERY_FAULTS,
    ChannelSend,
    Crash,
    Fault,
    Faults,
    FaultyChannel,
    FaultyPush,
    FaultyStore,
    FaultyTransport,
    RecordingChannel,
    Taint,
    crash,
)
from tests.model.reference import CONTACT_CHANNELS, EVENT_PAGE, EVENT_TYPES
from tests.support.store_factories import STORE_FACTORIES

ADMIN_KEY = "model-admin-key-0123456789abcdef"
SWEEP_EVERY = 30  # seconds, TEPAT_SWEEP_INTERVAL_SECONDS's default
RECEIPTS_EVERY = 300
PLAN_EVERY = 600  # TEPAT_PLAN_INTERVAL_SECONDS's default
STUCK_PUMP_SECONDS = 30.0  # real seconds: a batch that takes longer is waiting on the fake clock
# Real seconds after which time passes although not every batch in hand waits on the
# clock directly (one waits on a send that waits on it: a 429's pause).
CLOCK_GRACE = 0.2
OCCURRED_AT = "2027-01-01T00:00:00+00:00"  # every event's; the model varies the rest


def event_types_setting() -> dict[str, Any]:
    """TEPAT_EVENT_TYPES for the model's event types (tests/model/reference.py)."""
    return {
        t.name: {
            "category": t.category,
            "priority": t.priority,
            "channels": [{"channel": c, "when": w} for c, w in t.routes],
        }
        for t in EVENT_TYPES.values()
    }


def template_parts(channel: str) -> dict[str, str]:
    """Every channel's text is the event's ``what`` (the model's ``EventRequest.text``)."""
    if channel == "sms":
        return {"body": "{{ what }}"}
    return {"title": "{{ what }}", "body": "{{ what }}"}


@dataclass
class Arrival:
    token: str
    message_id: str
    at: datetime
    body: str
    category: str


class System:
    def __init__(
        self, store_name: str, tmp: Path, sandbox: ExpoSandbox, sandbox_url: str, start: datetime
    ) -> None:
        self.store_name = store_name
        self.tmp = tmp
        self.sandbox = sandbox
        self.sandbox_url = sandbox_url
        self.clock = FakeClock(start)
        self.taints: dict[str, list[Taint]] = {}  # message id -> every fault that touched it
        self.faults = Faults(self._on_fault)
        self.faults.on_crash = self._kill_consumer
        self._consumer: asyncio.Future[None] | None = None  # the batch being handled
        self._handlers: list[asyncio.Future[None]] = []  # one per batch in hand
        self.crashes = 0
        self._stack = AsyncExitStack()
        self._seen_received = 0
        self.rt: Runtime
        self.http: httpx.AsyncClient
        self.real_store: Store

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.sandbox.reset()
        self.sandbox.clock = self.clock
        self.sandbox.set_receipt_delay(0)
        self.real_store = await self._stack.enter_async_context(
            STORE_FACTORIES[self.store_name](self.tmp)
        )
        if hasattr(self.real_store, "_clock"):
            # Stamps (created_at, updated_at) on the example's time, not the wall clock's.
            cast(Any, self.real_store)._clock = self.clock
        settings = Settings(
            database_url=f"sqlite:///{self.tmp}/unused.db",
            broker_url="embedded://",
            expo_url=self.sandbox_url,
            expo_rate_limit=1_000_000,
            receipt_delay_seconds=60,
            event_types=event_types_setting(),
            # Providers configured so that routes may name e-mail and SMS; their
            # adapters are replaced by recording ones (_install_channels).
            smtp_host="smtp.model.invalid",
            smtp_tls="none",
            smtp_from="tepat@example.com",
            public_url="https://tepat.example.com",
            unsubscribe_secret=SecretStr("model-unsubscribe-secret-0123456789"),
            twilio_account_sid="AC" + "0" * 32,
            twilio_auth_token=SecretStr("model-twilio-token-0123456789abcdef"),
            twilio_from="+15005550006",
        )

        push = make_push_provider(settings, self.clock)
        client = cast(Any, push)._client
        transport = FaultyTransport(client._transport)
        client._transport = transport
        store = cast(Store, _Unclosable(FaultyStore(self.real_store, self.faults)))
        faulty_push = FaultyPush(push, self.faults, self.sandbox, transport)
        self.rt = await self._stack.enter_async_context(
            open_runtime(
                settings, clock=self.clock, store=store, push=cast(PushProvider, faulty_push)
            )
        )
        # Retry jitter from a seeded generator: the same example replays the same way.
        self.rt.dispatcher.channels.recorder.seed(random.Random(0))
        await self._install_channels()
        app = create_app(self.rt, ADMIN_KEY)
        self.http = await self._stack.enter_async_context(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://tepat.test",
                headers={"X-API-Key": ADMIN_KEY},
            )
        )
        self.events: EventService = app.state.events
        self.events.page_size = EVENT_PAGE
        for t in EVENT_TYPES.values():
            for channel, _ in t.routes:
                r = await self.http.put(
                    f"/v1/templates/{t.name}/{channel}/en", json=template_parts(channel)
                )
                assert r.status_code in (200, 201), r.text
        await self.rt.creator.plan_ahead()
        await self.pump()

    async def _install_channels(self) -> None:
        """E-mail and SMS through recording adapters, the real inbox adapter, each behind
        scripted faults, in the runtime's one ChannelSender (its channel map is set here,
        replacing the SMTP and Twilio adapters the settings made)."""
        sender = cast(Any, self.rt.dispatcher.channels)
        channels: dict[str, Any] = sender._channels
        self.recorders = {name: RecordingChannel(name, self.clock) for name in CONTACT_CHANNELS}
        for name, recorder in self.recorders.items():
            replaced = channels.get(name)
            if replaced is not None:
                await replaced.close()
            channels[name] = FaultyChannel(recorder, self.faults, CHANNEL_FAULTS)
        # The inbox stores an item or finds it there: a crash after it is the only fault.
        channels["inbox"] = FaultyChannel(
            channels["inbox"], self.faults, frozenset({Fault.CHANNEL_CRASH_AFTER_SEND})
        )
        sender.recorder.seed(random.Random(0))
        self._seen_sends = dict.fromkeys(self.recorders, 0)

    async def close(self) -> None:
        await self._stack.aclose()

    # ------------------------------------------------------------ faults

    def _on_fault(self, fault: Fault, ids: Sequence[str], taint: Taint | None) -> None:
        if taint is not None:
            self._taint(ids, taint)

    def _kill_consumer(self) -> None:
        """The consumer process died: every task of it stops, whichever task crashed,
        and its push batcher's queued and in-flight requests with it (they would
        otherwise go out later, from the next consumer, as no dead process does)."""
        if self._consumer is not None and not self._consumer.done():
            self._consumer.cancel()
        self.rt.dispatcher.channels.abandon()

    def _taint(self, ids: Sequence[str], taint: Taint) -> None:
        for i in ids:
            self.taints.setdefault(i, []).append(taint)

    # ------------------------------------------------------------ time

    async def advance_to(self, target: datetime) -> None:
        """Move time to ``target``, stopping at every broker due instant and every job tick
        at which a job has something to do."""
        while True:
            await self.pump()
            now = self.clock.now()
            candidates = [
                await self._next_receipts(now),
                _next_multiple(now, PLAN_EVERY),
                await self._next_sweep(now),
                await self._next_publish(now),
            ]
            due = self._broker_next_due()
            if due is not None:
                # Whole seconds only: a batch is due at its second, and items inside it
                # at their own instant within it (the dispatcher waits for those).
                candidates.append(_ceil_second(max(due, now + timedelta(microseconds=1))))
            nxt = min(c for c in candidates if c is not None)
            if nxt > target:
                break
            self.clock.set(nxt)
            await self._ticks(nxt)
        if target > self.clock.now():
            self.clock.set(target)
        await self.pump()

    async def _next_publish(self, now: datetime) -> datetime | None:
        """When the outbox loop (every second in a real process) publishes the first
        message still marked: a batch still filling goes once due within publish_soon."""
        outbox = getattr(self.rt, "outbox", None)
        first = await self.real_store.unpublished(1)
        if outbox is None or not first:
            return None
        at = due_of(first[0]) - outbox.publish_soon
        return _ceil_second(max(at, now + timedelta(microseconds=1)))

    async def _next_receipts(self, now: datetime) -> datetime | None:
        """The first receipt poller tick at which a ticket is old enough to poll; ticks
        before that would find none (and a day of them costs as much as its plan runs)."""
        far = now + timedelta(days=800)
        first = await self.real_store.tickets_awaiting_receipt(sent_before=far, limit=1)
        if not first:
            return None
        return _next_multiple(max(first[0].sent_at + self.rt.receipts.delay, now), RECEIPTS_EVERY)

    async def _next_sweep(self, now: datetime) -> datetime | None:
        """The first sweeper tick at which it can find something: a pending message past
        the grace, or a sending one past the lease. Ticks before that would find nothing."""
        far = now + timedelta(days=800)
        sweeper = self.rt.sweeper
        times = [due_of(m) + sweeper.grace for m in await self.real_store.due_pending(far, 1)]
        times += [
            m.claimed_at + sweeper.lease
            for m in await self.real_store.stuck_sending(far, 1000)
            if m.claimed_at is not None
        ]
        if not times:
            return None
        return _next_multiple(max(min(times), now), SWEEP_EVERY)

    async def _ticks(self, now: datetime) -> None:
        second = int(now.timestamp())
        if now.microsecond or second % SWEEP_EVERY:
            return
        await self.pump()
        if second % PLAN_EVERY == 0:
            await self.plan_run()
        await self.rt.sweeper.sweep_once()
        if second % RECEIPTS_EVERY == 0:
            await self.rt.receipts.poll_all()

    async def plan_run(self) -> None:
        """The scheduler's plan-ahead; a crash in it (an armed fault) ends the run, and
        the scheduler's next run goes on."""
        self.faults.planning = True
        try:
            await self.rt.creator.plan_ahead()
        except Crash:
            pass  # the scheduler's next run goes on
        finally:
            self.faults.planning = False

    # ------------------------------------------------------------ events

    async def fan_out_page(self, event_id: str, concurrent: bool = False) -> bool | None:
        """One page of the event, as the scheduler's fan-out loop does it (twice at once:
        two schedulers). Whether its cursor moved (an armed crash before the cursor move
        stops one of them), or None when the event is not fanning out."""
        event = await self.real_store.get_event(event_id)
        if event is None or event.state != EventState.FANNING_OUT:
            return None

        async def one() -> bool:
            try:
                await self.events.fan_out_page(event)
            except Crash:
                return False
            return True

        self.faults.fanning_out = True
        try:
            if concurrent:
                # Both write the page; the cursor moves once (compare-and-set) unless
                # both died, and an armed crash stops only the first to get there.
                return any(await asyncio.gather(one(), one()))
            return await one()
        finally:
            self.faults.fanning_out = False

    def _broker_next_due(self) -> datetime | None:
        next_due = getattr(self.rt.broker, "_next_due", None)
        if next_due is None:
            return None
        return cast(datetime | None, next_due(self.rt.queues))

    # ------------------------------------------------------------ consuming

    async def _flush_outbox(self) -> None:
        outbox = getattr(self.rt, "outbox", None)
        if outbox is not None:
            await outbox.flush()

    async def pump(self) -> None:
        """Hand every batch due now to a consumer, until none is left."""
        queues = self.rt.queues
        for _ in range(200):
            await self._flush_outbox()
            ready = sum(s.ready for s in await self.rt.broker.stats(queues))
            if ready == 0:
                return
            taken: list[Delivery] = []
            try:
                async with self.rt.broker.consume(queues, prefetch=ready) as deliveries:
                    iterator = deliveries.__aiter__()
                    taken = [await iterator.__anext__() for _ in range(ready)]
                    # Every batch in hand at once, as the consumer works on them: one
                    # held until a later instant of its second must not hold up the
                    # others (a crash then takes every batch in hand down with it).
                    await self._letting_time_pass(self._handle_all(taken))
            except (Crash, asyncio.CancelledError):
                if not self.faults.crashed:
                    raise
                self.faults.crashed = False
                self.crashes += 1  # the broker takes the dead consumer's deliveries back
                await self._taint_on_the_wire(taken)
        raise AssertionError("the queues never emptied (a batch keeps coming back)")

    async def _taint_on_the_wire(self, taken: Sequence[Delivery]) -> None:
        """The dead consumer's messages still ``sending`` that it had handed to a
        provider: the sweeper re-drives them after the lease, and they may go again (the
        documented duplicate window). Whichever of its tasks died, a send of another
        batch in hand may have been on the wire (push and the other channels go at once)."""
        ids = sorted({i for d in taken for i in decode_batch(d.queue, d.body).ids})
        if ids:
            left = await self.real_store.get_messages(ids)
            self._taint(
                [
                    m.id
                    for m in left
                    if m.status is MessageStatus.SENDING and self.faults.handed_since_claim(m.id)
                ],
                Taint.DUPLICATE,
            )

    async def _letting_time_pass(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work``; whenever it waits on the clock (a batch held until its last item's
        instant within the second, a retry's jitter), move the clock to that instant,
        as a consumer that is always running would see it pass."""
        task = asyncio.ensure_future(work)
        self._consumer = task
        started = time.monotonic()
        stalled_since: float | None = None
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=0.002)
                waiting = [s[0] for s in getattr(self.clock, "_sleepers", []) if not s[2].done()]
                if not task.done() and waiting:
                    # Only once every batch in hand waits on the clock: one still doing
                    # its store work or its requests (real time) must not see the time
                    # of a later instant held by another. Waiting on the clock less
                    # directly (a send paused by a 429), it moves after a grace.
                    stalled_since = stalled_since or time.monotonic()
                    if self._all_on_clock() or time.monotonic() - stalled_since > CLOCK_GRACE:
                        self.clock.set(max(self.clock.now(), min(waiting)))
                        stalled_since = None
                if time.monotonic() - started > STUCK_PUMP_SECONDS:
                    task.cancel()
                    raise AssertionError("a batch took more than 30 s of real time")
        finally:
            self._consumer = None
        await task

    def _all_on_clock(self) -> bool:
        """Every batch in hand is waiting on the fake clock itself."""
        sleeping = {id(s[2]) for s in getattr(self.clock, "_sleepers", []) if not s[2].done()}
        return all(
            t.done() or id(getattr(t, "_fut_waiter", None)) in sleeping for t in self._handlers
        )

    async def _handle_all(self, deliveries: Sequence[Delivery]) -> None:
        handlers: list[asyncio.Future[None]] = [
            asyncio.ensure_future(self._handle(d)) for d in deliveries
        ]
        self._handlers = handlers
        try:
            await asyncio.gather(*handlers)
        except BaseException:
            if self.faults.crashed:
                # The consumer died with other batches in hand: theirs are the dead
                # process's too (gather leaves them running; one not started yet would
                # never run its own except clause), so they come back late, re-driven.
                for handler, delivery in zip(handlers, deliveries, strict=True):
                    if not handler.done():
                        self._taint(decode_batch(delivery.queue, delivery.body).ids, Taint.LATE)
                        handler.cancel()
                await asyncio.gather(*handlers, return_exceptions=True)
            raise
        finally:
            self._handlers = []

    async def _handle(self, delivery: Delivery) -> None:
        batch = decode_batch(delivery.queue, delivery.body)
        fault = self.faults.take_any(DELIVERY_FAULTS)
        # The consumer's view of the runtime: once it has died, its acks and nacks
        # never reach the broker (the broker takes its deliveries back instead).
        rt = cast(Runtime, _ConsumerRuntime(self.rt, self.faults))
        try:
            if fault is Fault.LOSE:
                self._taint(batch.ids, Taint.LATE)
                await self.rt.broker.ack(delivery)
            elif fault is Fault.REDELIVER:
                await handle_delivery(rt, delivery)
                await self.rt.broker.publish(delivery.queue, delivery.body, 0.0)
            elif fault is Fault.CONCURRENT:
                await asyncio.gather(
                    handle_delivery(rt, delivery), self.rt.dispatcher.handle(batch)
                )
            elif fault is Fault.CRASH_BEFORE_ACK:
                await self.rt.dispatcher.handle(batch)
                raise crash(self.faults, "before ack")
            else:
                await handle_delivery(rt, delivery)
        except BaseException as e:
            if not self.faults.crashed:
                raise
            # Whatever the dead consumer held is re-driven by the sweeper, late. What its
            # code made of its own death (a cancelled request failing the batch) is moot.
            self._taint(batch.ids, Taint.LATE)
            if isinstance(e, Crash | asyncio.CancelledError):
                raise
            raise Crash(f"died; its code then raised {type(e).__name__}") from e
        if self.faults.crashed:
            # It died in a task of its own (a send) and its code went on to nack.
            self._taint(batch.ids, Taint.LATE)
            raise Crash("died while sending")

    # ------------------------------------------------------------ observing

    def new_arrivals(self) -> list[Arrival]:
        received = self.sandbox.received()
        fresh = received[self._seen_received :]
        self._seen_received = len(received)
        out = []
        for r in fresh:
            if r["status"] != "ok":
                continue
            data = r.get("data") or {}
            out.append(
                Arrival(
                    token=r["to"],
                    message_id=str(data.get("tepat_message_id")),
                    at=datetime.fromisoformat(r["received_at"]),
                    body=str(r["body"]),
                    category=str(data.get("category")),
                )
            )
        return out

    def new_channel_sends(self) -> list[ChannelSend]:
        """What the e-mail and SMS providers took since the last call."""
        out: list[ChannelSend] = []
        for name, recorder in self.recorders.items():
            out += recorder.sent[self._seen_sends[name] :]
            self._seen_sends[name] = len(recorder.sent)
        return out

    async def inbox_items(self, user_ids: Sequence[str]) -> list[InboxItem]:
        out: list[InboxItem] = []
        for user_id in user_ids:
            out += await self.real_store.list_inbox(user_id, 1000)
        return out

    async def messages(self, user_ids: Sequence[str]) -> list[Message]:
        out: list[Message] = []
        for user_id in user_ids:
            cursor = None
            while True:
                page = await self.real_store.list_messages(
                    MessageQuery(user_id, limit=200, cursor=cursor)
                )
                out += page.items
                cursor = page.next_cursor
                if cursor is None:
                    break
        return out

    async def devices(self, user_ids: Sequence[str]) -> dict[tuple[str, str], tuple[str, bool]]:
        out: dict[tuple[str, str], tuple[str, bool]] = {}
        for user_id in user_ids:
            for d in await self.real_store.list_devices(user_id):
                out[(d.user_id, d.device_id)] = (d.push_token, d.active)
        return out

    async def call(self, fn: Callable[[], Any]) -> httpx.Response:
        return cast(httpx.Response, await fn())


class _ConsumerRuntime:
    """The runtime as one consumer sees it: acks and nacks of a dead one are lost."""

    def __init__(self, rt: Runtime, faults: Faults) -> None:
        self._rt = rt
        self.broker = _ConsumerBroker(rt.broker, faults)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rt, name)


class _ConsumerBroker:
    def __init__(self, inner: Any, faults: Faults) -> None:
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def ack(self, delivery: Delivery) -> None:
        if not self._faults.crashed:
            await self._inner.ack(delivery)

    async def nack(self, delivery: Delivery, reason: str) -> None:
        if not self._faults.crashed:
            await self._inner.nack(delivery, reason)


class _Unclosable:
    """The store as the runtime sees it; the factory that made it closes it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None


def due_of(m: Message) -> datetime:
    """When the message is next dispatched (``due`` where the store keeps it)."""
    due = getattr(m, "due", None)
    return due if isinstance(due, datetime) else m.scheduled_at


def _next_multiple(now: datetime, seconds: int) -> datetime:
    """The first instant after ``now`` that is a whole multiple of ``seconds``."""
    return datetime.fromtimestamp((math.floor(now.timestamp() / seconds) + 1) * seconds, UTC)


def _ceil_second(t: datetime) -> datetime:
    whole = t.replace(microsecond=0)
    return whole if whole == t else whole + timedelta(seconds=1)
