"""Issue 3's acceptance, end to end on the embedded broker: store on disk, consumer,
receipt poller, and the Expo sandbox over HTTP. Time is a FakeClock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

from structlog.testing import capture_logs

from tepat.domain.models import Message, MessageStatus, User
from tepat.metrics import REGISTRY
from tepat.ports.push import PushProvider, PushRequest, ReceiptResult, SendResult
from tepat.runtime import Runtime
from tepat.services.sending.push_channel import PushBatcher, PushChannel
from tests.support.pipeline import pipeline
from tests.support.waiting import drive, eventually, stays_false

# 2027-03-01 is a Monday; London is on GMT (UTC+0) until 2027-03-28.
START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


async def _plan_day(p, day_start: datetime = START) -> None:  # type: ignore[no-untyped-def]
    await p.rt.creator.plan_window(day_start, day_start + timedelta(hours=24))


async def test_reminder_reaches_the_sandbox_at_its_instant(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START) as p:
        _, device = await p.add_user("ana", reminders=[("breakfast", "meal", time(9, 0))])
        await _plan_day(p)
        p.clock.set(NINE - timedelta(seconds=1))
        assert await stays_false(lambda: bool(p.received_for(device.push_token)))
        p.clock.set(NINE)
        await eventually(lambda: bool(p.received_for(device.push_token)), what="arrival")
        [got] = p.received_for(device.push_token)
        assert datetime.fromisoformat(got["received_at"]) == NINE
        assert got["title"] == "meal time" and got["status"] == "ok"
        [m] = await p.messages("ana")
        await eventually(lambda: _is(p, m.id, MessageStatus.SENT), what="recorded as sent")


async def _one_off(p, user: User, send_at: datetime) -> Message:  # type: ignore[no-untyped-def]
    """A `custom` one-off due at ``send_at``, accepted as the API accepts one."""
    from tepat.domain.planning import plan_oneoff, request_fingerprint

    msg = plan_oneoff(
        user,
        p.rt.categories.get("custom"),
        "k1",
        "Hi",
        "there",
        {},
        send_at,
        p.clock.now(),
        request_fingerprint({"k": 1}),
    )
    created = (await p.rt.store.insert_messages([msg])).created
    await p.rt.enqueuer.enqueue(created)
    return msg


async def test_one_off_due_at_send_at(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START) as p:
        user, device = await p.add_user("ben")
        send_at = START + timedelta(minutes=10)
        await _one_off(p, user, send_at)
        p.clock.set(send_at - timedelta(seconds=1))
        assert await stays_false(lambda: bool(p.received_for(device.push_token)))
        p.clock.set(send_at)
        await eventually(lambda: bool(p.received_for(device.push_token)))
        assert (
            datetime.fromisoformat(p.received_for(device.push_token)[0]["received_at"]) == send_at
        )


async def test_opt_out_or_dead_device_after_planning_skips(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START) as p:
        await p.add_user("cat", reminders=[("r", "mood", time(9, 0))])
        _, d2 = await p.add_user("dan", reminders=[("r", "mood", time(9, 0))])
        await _plan_day(p)
        await p.rt.store.set_preferences("cat", {"mood": False})
        await p.rt.store.deactivate_device("dan", d2.device_id, "user logged out")
        p.clock.set(NINE)
        [m1], [m2] = await p.messages("cat"), await p.messages("dan")

        async def closed() -> bool:
            return (await p.status_of(m1.id)) is MessageStatus.SKIPPED and (
                await p.status_of(m2.id)
            ) is MessageStatus.SKIPPED

        await eventually(closed, what="both skipped")
        assert (await p.rt.store.get_message(m1.id)).status_reason == "opted_out"  # type: ignore[union-attr]
        assert (await p.rt.store.get_message(m2.id)).status_reason == "no_active_device"  # type: ignore[union-attr]
        assert p.sandbox.received() == []


async def test_processed_45_minutes_late_is_missed(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        await p.add_user("eve", reminders=[("r", "hydration", time(9, 0))])
        await _plan_day(p)
        p.clock.set(NINE + timedelta(minutes=45))  # the consumer was down
        p.start_consumer()
        [m] = await p.messages("eve")
        await eventually(lambda: _is(p, m.id, MessageStatus.MISSED), what="missed")
        assert p.sandbox.received() == []


async def _is(p, message_id: str, status: MessageStatus) -> bool:  # type: ignore[no-untyped-def]
    return (await p.status_of(message_id)) is status


async def test_dead_token_in_receipt_deactivates_and_next_day_is_skipped(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START) as p:
        _, device = await p.add_user("fay", reminders=[("r", "sleep", time(9, 0))])
        p.sandbox.script_token(device.push_token, receipt_error="DeviceNotRegistered")
        await p.rt.creator.plan_window(START, START + timedelta(hours=48))
        first, second = sorted(await p.messages("fay"), key=lambda m: m.scheduled_at)
        p.clock.set(NINE)
        await eventually(lambda: p.sent_with_tickets(first.id), what="sent, ticket stored")
        p.clock.set(NINE + timedelta(minutes=16))  # past TEPAT_RECEIPT_DELAY_SECONDS (900)
        await p.rt.receipts.poll_all()
        assert (await p.status_of(first.id)) is MessageStatus.FAILED
        [dev] = await p.rt.store.list_devices("fay")
        assert not dev.active
        p.clock.set(NINE + timedelta(days=1))
        await eventually(lambda: _is(p, second.id, MessageStatus.SKIPPED), what="next day skipped")
        assert (await p.rt.store.get_message(second.id)).status_reason == "no_active_device"  # type: ignore[union-attr]
        assert len(p.received_for(device.push_token)) == 1


async def test_429_then_500_then_every_safety_message_sent_exactly_once(tmp_path: Path) -> None:
    """Safety retries a maybe-sent request (a 5xx); these 5xx came before Expo accepted,
    so the retry is the only copy."""
    async with pipeline(tmp_path, start=START) as p:
        tokens = []
        for i in range(30):
            _, d = await p.add_user(f"u{i:02d}", reminders=[("r", "safety", time(9, 0))])
            tokens.append(d.push_token)
        await _plan_day(p)
        p.sandbox.fail_next(3, status=429, retry_after=2)
        p.sandbox.fail_next(3, status=500)
        p.clock.set(NINE)

        async def all_sent() -> bool:
            for i in range(30):
                [m] = await p.messages(f"u{i:02d}")
                if m.status is not MessageStatus.SENT:
                    return False
            return True

        await drive(p.clock, all_sent, step=timedelta(seconds=5), what="all sent")
        ok = [r["to"] for r in p.sandbox.received() if r["status"] == "ok"]
        assert sorted(ok) == sorted(tokens)  # each once
        assert (
            p.sandbox.stats()["too_many_requests"] >= 1 and p.sandbox.stats()["server_errors"] >= 1
        )


async def test_429_then_500_twice_then_accepted_delivers_a_one_off_once(tmp_path: Path) -> None:
    """Issue 19 (10): Expo's transient 500s are retried as Expo asks, not closed
    outcome_unknown; the `custom` one-off reaches the phone once."""
    async with pipeline(tmp_path, start=START) as p:
        user, device = await p.add_user("ona")
        msg = await _one_off(p, user, NINE)
        before = _maybe_sent_count("custom", "retried_5xx")
        p.sandbox.fail_next(1, status=429, retry_after=1)
        p.sandbox.fail_next(2, status=500)
        p.clock.set(NINE)

        sent = lambda: _is(p, msg.id, MessageStatus.SENT)  # noqa: E731
        await drive(p.clock, sent, step=timedelta(seconds=5), what="one-off sent")
        assert len(p.received_for(device.push_token)) == 1
        assert p.sandbox.stats()["server_errors"] == 2
        assert _maybe_sent_count("custom", "retried_5xx") - before == 2


async def test_a_5xx_after_expo_accepted_is_retried_and_counted_as_a_possible_duplicate(
    tmp_path: Path,
) -> None:
    """The rare case Expo's retry guidance costs: it had handed the notification on before
    failing. Retried even for a `close` category (a second copy), and counted."""
    async with pipeline(tmp_path, start=START) as p:
        _, device = await p.add_user("mia", reminders=[("r", "meal", time(9, 0))])
        await _plan_day(p)
        before = _maybe_sent_count("meal", "retried_5xx")
        p.sandbox.fail_after_accept(1, "error", status=502)
        p.clock.set(NINE)
        [meal] = await p.messages("mia")

        sent = lambda: _is(p, meal.id, MessageStatus.SENT)  # noqa: E731
        await drive(p.clock, sent, step=timedelta(seconds=5), what="meal re-sent")
        assert len(p.received_for(device.push_token)) == 2
        assert _maybe_sent_count("meal", "retried_5xx") - before == 1


async def test_answer_lost_after_expo_accepted_closes_meal_and_retries_safety(
    tmp_path: Path,
) -> None:
    """The one duplicate window: Expo accepted, the connection dropped mid-answer.
    `meal` does not risk a duplicate: failed, outcome_unknown (counted, and visible in the
    API), one copy. `safety` prefers a duplicate to a missing alert: retried, two copies."""
    async with pipeline(tmp_path, start=START) as p:
        _, meal_device = await p.add_user("mia", reminders=[("r", "meal", time(9, 0))])
        _, safety_device = await p.add_user("sam", reminders=[("r", "safety", time(9, 30))])
        await _plan_day(p)
        closed_before = _maybe_sent_count("meal", "closed")
        p.sandbox.fail_after_accept(1, "drop", status=500)
        p.clock.set(NINE)
        [meal] = await p.messages("mia")
        await eventually(lambda: _is(p, meal.id, MessageStatus.FAILED), what="meal closed")
        closed = await p.rt.store.get_message(meal.id)
        assert closed is not None and closed.status_reason == "outcome_unknown"
        assert len(p.received_for(meal_device.push_token)) == 1
        assert _maybe_sent_count("meal", "closed") - closed_before == 1

        p.sandbox.fail_after_accept(1, "drop", status=500)
        p.clock.set(NINE + timedelta(minutes=30))
        [alert] = await p.messages("sam")

        async def sent() -> bool:
            return await _is(p, alert.id, MessageStatus.SENT)

        await drive(p.clock, sent, step=timedelta(seconds=5), what="safety re-sent")
        assert len(p.received_for(safety_device.push_token)) == 2


def _maybe_sent_count(category: str, action: str) -> float:
    value = REGISTRY.get_sample_value(
        "tepat_maybe_sent_total", {"category": category, "action": action}
    )
    return value or 0.0


async def test_permanent_error_fails_and_is_listed_as_dead_letter(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START) as p:
        _, device = await p.add_user("gus", reminders=[("r", "meal", time(9, 0))])
        p.sandbox.script_token(device.push_token, ticket_error="MessageTooBig")
        await _plan_day(p)
        p.clock.set(NINE)
        [m] = await p.messages("gus")
        await eventually(lambda: _is(p, m.id, MessageStatus.FAILED), what="failed")
        [dead] = await p.rt.store.dead_letters(limit=10)
        assert dead.id == m.id and "MessageTooBig" in (dead.status_reason or "")
        assert dead.attempts == 1


def push_batcher(rt: Runtime) -> PushBatcher:
    push = rt.dispatcher.channels._channels["push"]
    assert isinstance(push, PushChannel)
    return push.batchers["expo"]


class _GatedPush:
    """Wraps the real Expo client; holds every send until the gate opens."""

    def __init__(self, inner: PushProvider, gate: asyncio.Event) -> None:
        self._inner, self._gate = inner, gate
        self.max_batch, self.max_receipt_batch = inner.max_batch, inner.max_receipt_batch
        self.waiting = 0

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        self.waiting += 1
        await self._gate.wait()
        return await self._inner.send(batch)

    async def receipts(self, ids: Sequence[str]) -> ReceiptResult:
        return await self._inner.receipts(ids)

    def set_rate_share(self, share: float) -> None:
        pass

    async def close(self) -> None:
        await self._inner.close()


async def test_consumer_killed_mid_batch_loses_nothing_and_sends_once(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        tokens = []
        for i in range(150):  # two provider requests' worth
            _, d = await p.add_user(f"k{i:03d}", reminders=[("r", "meal", time(9, 0))])
            tokens.append(d.push_token)
        await _plan_day(p)
        batcher = push_batcher(p.rt)  # every send goes through it
        real = batcher._push
        gate = asyncio.Event()
        gated = _GatedPush(real, gate)
        batcher._push = gated
        doomed, _ = p.start_consumer()
        p.clock.set(NINE)
        await eventually(lambda: gated.waiting >= 1, what="a batch in the provider call")
        doomed.cancel()  # the process dies before its request reaches Expo
        await asyncio.gather(doomed, return_exceptions=True)
        p.consumers.clear()
        batcher._push = real
        p.start_consumer()

        async def all_sent() -> bool:
            for i in range(150):
                [m] = await p.messages(f"k{i:03d}")
                if m.status is not MessageStatus.SENT:
                    return False
            return True

        async def sweep_and_check() -> bool:
            await p.rt.sweeper.sweep_once()
            return await all_sent()

        await drive(p.clock, sweep_and_check, step=timedelta(minutes=1), what="all sent")
        ok = [r["to"] for r in p.sandbox.received() if r["status"] == "ok"]
        assert sorted(ok) == sorted(tokens)


async def test_three_consecutive_failures_deactivate_and_a_success_resets(tmp_path: Path) -> None:
    async with pipeline(tmp_path, start=START) as p:
        _, device = await p.add_user("hal", reminders=[("r", "mood", time(9, 0))])
        await p.rt.creator.plan_window(START, START + timedelta(days=5))
        days = sorted(await p.messages("hal"), key=lambda m: m.scheduled_at)
        outcomes = ["ProviderError", None, "ProviderError", "ProviderError", "ProviderError"]

        async def run_day(n: int) -> None:
            error = outcomes[n]
            p.sandbox.script_token(device.push_token, receipt_error=error)
            p.clock.set(NINE + timedelta(days=n))
            await eventually(lambda: p.sent_with_tickets(days[n].id), what=f"day {n} ticketed")
            p.clock.set(NINE + timedelta(days=n, minutes=16))
            await p.rt.receipts.poll_all()

        with capture_logs() as logs:
            for n in range(4):  # fail, succeed (reset), fail, fail: two in a row
                await run_day(n)
                [dev] = await p.rt.store.list_devices("hal")
                assert dev.active, f"deactivated after day {n}"
            await run_day(4)  # the third consecutive failure
        [dev] = await p.rt.store.list_devices("hal")
        assert not dev.active
        assert [(await p.status_of(m.id)) for m in days] == [
            MessageStatus.FAILED,
            MessageStatus.DELIVERED,
            MessageStatus.FAILED,
            MessageStatus.FAILED,
            MessageStatus.FAILED,
        ]
        # Each message's trail in the log: its send, then its receipt, by its id.
        trail = [
            (e["event"], e["message_id"], e.get("receipt"), e.get("outcome"))
            for e in logs
            if e["event"] in ("send recorded", "receipt recorded")
            and e["user_id"] == "hal"
            and e["channel"] == "push"
        ]
        assert trail == [
            line
            for m, error in zip(days, outcomes, strict=True)
            for line in (
                ("send recorded", m.id, None, "sent"),
                ("receipt recorded", m.id, error or "ok", "failed" if error else "delivered"),
            )
        ]


async def test_answer_arriving_after_the_lease_ran_out_is_recorded_and_not_sent_again(
    tmp_path: Path,
) -> None:
    """A throttled or slow request outlives the lease; the sweeper puts the message back.
    When the answer (accepted) comes before the re-driven batch is claimed, the message
    is recorded sent, and the re-driven batch claims nothing."""
    async with pipeline(tmp_path, start=START, consumer=False, sending_lease_seconds=60) as p:
        _, device = await p.add_user("lea", reminders=[("r", "meal", time(9, 0))])
        await _plan_day(p)
        batcher = push_batcher(p.rt)
        gate = asyncio.Event()
        gated = _GatedPush(batcher._push, gate)
        batcher._push = gated
        p.clock.set(NINE)
        [m] = await p.messages("lea")
        claimed = await p.rt.store.claim([m.id], p.clock.now())  # consumer A
        sending = asyncio.create_task(p.rt.dispatcher.channels.process(claimed))
        await eventually(lambda: gated.waiting >= 1, what="the request in flight")
        p.clock.set(NINE + timedelta(seconds=61))
        assert await p.rt.sweeper.sweep_once() == 1  # lease ran out: back to pending
        assert await p.status_of(m.id) is MessageStatus.PENDING
        gate.set()  # the answer arrives: accepted
        await sending
        assert await p.status_of(m.id) is MessageStatus.SENT
        p.start_consumer()  # consumer B gets the re-driven batch
        assert await stays_false(lambda: len(p.received_for(device.push_token)) > 1)
        assert len(p.received_for(device.push_token)) == 1
