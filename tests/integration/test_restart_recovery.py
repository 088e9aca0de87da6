"""Messages a process left ``sending``, and the lease that re-drives them.

Where one process owns the store (SQLite + the embedded broker, ``tepat serve``),
the next start re-drives them at once; on a shared broker only the lease does, since
a live consumer may hold them. A batch that waits long in this process (a throttled
rate) keeps its lease, so the sweeper does not send it a second time.
Time is a FakeClock; the store is SQLite on disk, kept across the "crash".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from consumers.worker import run_lease_renewal
from tepat import metrics
from tepat.adapters.embedded_broker import EmbeddedBroker
from tepat.clock import FakeClock
from tepat.domain.models import MessageStatus
from tests.support.pipeline import Pipeline, pipeline
from tests.support.waiting import drive, eventually, stays_false

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
USERS = 50
LEASE = timedelta(seconds=300)  # TEPAT_SENDING_LEASE_SECONDS' default
RESTART_NOTE = "re-driving messages the previous process left sending, at once"


def _redriven(cause: str) -> float:
    value = metrics.REGISTRY.get_sample_value("tepat_sending_redriven_total", {"cause": cause})
    return value or 0.0


async def _add_users(p: Pipeline, n: int) -> list[str]:
    tokens = []
    for i in range(n):
        _, device = await p.add_user(f"u{i:02d}", reminders=[("r", "meal", time(9, 0))])
        tokens.append(device.push_token)
    await p.rt.creator.plan_window(START, START + timedelta(hours=24))
    return tokens


async def _crash_with_all_sending(tmp_path: Path) -> tuple[list[str], list[str]]:
    """A process claims every 9:00 message and dies before any request leaves: they stay
    ``sending`` in the store. Returns their ids and the users' push tokens."""
    async with pipeline(tmp_path, start=START, consumer=False) as p:
        tokens = await _add_users(p, USERS)
        p.clock.set(NINE)
        ids = [m.id for i in range(USERS) for m in await p.messages(f"u{i:02d}")]
        assert len(await p.rt.store.claim(ids, p.clock.now())) == USERS
    return ids, tokens


async def _statuses(p: Pipeline, ids: list[str]) -> set[MessageStatus]:
    return {m.status for m in await p.rt.store.get_messages(ids)}


@asynccontextmanager
async def _a_batch_in_hand(p: Pipeline) -> AsyncIterator[None]:
    """The lease renewal running and the consumer started at 9:00: one batch claimed and
    in hand, its requests queued in the rate limiter."""
    stop = asyncio.Event()
    renewal = asyncio.create_task(run_lease_renewal(p.rt, stop))
    p.start_consumer()
    p.clock.set(NINE)
    await eventually(lambda: len(p.rt.dispatcher.claims) == 1, what="the batch claimed")
    try:
        yield
    finally:
        stop.set()
        await renewal


def _sent_once(p: Pipeline, tokens: list[str]) -> bool:
    ok = sorted(r["to"] for r in p.sandbox.received() if r["status"] == "ok")
    return ok == sorted(tokens)


async def test_embedded_restart_sends_what_the_crash_left_sending_at_once(tmp_path: Path) -> None:
    ids, tokens = await _crash_with_all_sending(tmp_path)
    restart = NINE + timedelta(seconds=5)
    before = _redriven("restart")
    with capture_logs() as logs:
        async with pipeline(tmp_path, start=restart, consumer=False) as p:
            assert p.rt.embedded_broker
            await p.rt.recover_at_start()  # as `tepat serve` starts (processes.run_parts)
            p.start_consumer()
            await eventually(lambda: _sent_once(p, tokens), what="every message sent")

            async def recorded() -> bool:
                return await _statuses(p, ids) == {MessageStatus.SENT}

            await eventually(recorded, what="every message recorded sent")
            # At the restart's instant: the clock never moved, let alone by the lease.
            assert p.clock.now() == restart
    assert _redriven("restart") - before == USERS  # each one a possible duplicate
    notes = [e for e in logs if e["event"] == RESTART_NOTE]
    assert len(notes) == 1, notes
    assert notes[0]["count"] == USERS
    assert "embedded broker" in notes[0]["why"]
    assert "duplicate" in notes[0]["why"]


async def test_on_a_shared_broker_what_was_left_sending_waits_for_the_lease(
    tmp_path: Path,
) -> None:
    """Configured with ActiveMQ, a start re-drives nothing: another consumer, alive, may
    hold those messages. (The broker itself is the embedded one here: the decision is
    the configuration's, and no test may depend on the shared broker staying up.)"""
    ids, tokens = await _crash_with_all_sending(tmp_path)
    restart = NINE + timedelta(seconds=5)
    clock = FakeClock(restart)
    before = _redriven("lease_expired"), _redriven("restart")
    with capture_logs() as logs:
        async with pipeline(
            tmp_path,
            start=restart,
            clock=clock,
            broker=EmbeddedBroker(clock),
            consumer=False,
            broker_url="stomp://127.0.0.1:61613",
        ) as p:
            assert not p.rt.embedded_broker
            await p.rt.recover_at_start()
            p.start_consumer()
            assert await stays_false(lambda: bool(p.sandbox.received()))
            assert await _statuses(p, ids) == {MessageStatus.SENDING}
            p.clock.set(NINE + LEASE - timedelta(seconds=1))
            assert await p.rt.sweeper.sweep_once() == 0  # the lease still holds
            p.clock.set(NINE + LEASE + timedelta(seconds=1))
            assert await p.rt.sweeper.sweep_once() == USERS
            await eventually(lambda: _sent_once(p, tokens), what="sent after the lease")
    assert _redriven("lease_expired") - before[0] == USERS
    assert _redriven("restart") == before[1]
    assert not [e for e in logs if e["event"] == RESTART_NOTE]


async def test_a_batch_held_by_the_rate_limiter_past_the_lease_is_not_redriven(
    tmp_path: Path,
) -> None:
    """20 notifications at 0.1/s leave over 190 s, three 60 s leases: the batch in hand
    keeps its lease, the sweeper finds nothing to re-drive, each goes once."""
    lease = 60
    async with pipeline(
        tmp_path, start=START, consumer=False, sending_lease_seconds=lease, expo_rate_limit=0.1
    ) as p:
        tokens = await _add_users(p, 20)
        redriven: list[int] = []
        async with _a_batch_in_hand(p):

            async def sweep_and_check() -> bool:
                redriven.append(await p.rt.sweeper.sweep_once())
                return _sent_once(p, tokens)

            await drive(
                p.clock, sweep_and_check, step=timedelta(seconds=5), settle=0.1, what="all sent"
            )
            assert p.clock.now() - NINE > timedelta(seconds=3 * lease)  # it did wait that long
            assert sum(redriven) == 0


def _lapsed_unsent() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "tepat_lease_lapsed_unsent_total", {"channel": "push"}
    )
    return value or 0.0


async def test_a_batch_whose_lease_ran_out_in_the_rate_limiter_is_left_to_the_sweeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store is overloaded: renewals fail while a batch waits ~200 s in the rate
    limiter, so its 60 s lease runs out and the sweeper re-drives it. The consumer then
    does not send it when the limiter lets it go; the re-driven copy is sent, once."""
    lease = 60
    async with pipeline(
        tmp_path, start=START, consumer=False, sending_lease_seconds=lease, expo_rate_limit=0.1
    ) as p:
        tokens = await _add_users(p, 20)
        overloaded = True
        renew = p.rt.store.renew_claims

        async def renew_unless_overloaded(message_ids: Sequence[str], now: datetime) -> int:
            if overloaded:
                raise TimeoutError("the store is overloaded")
            return await renew(message_ids, now)

        monkeypatch.setattr(p.rt.store, "renew_claims", renew_unless_overloaded)
        lapsed_before = _lapsed_unsent()
        redriven: list[int] = []
        async with _a_batch_in_hand(p):

            async def sweep_and_check() -> bool:
                nonlocal overloaded
                redriven.append(await p.rt.sweeper.sweep_once())
                if sum(redriven):
                    overloaded = False  # the store recovers once the sweeper re-drove the batch
                return _sent_once(p, tokens)

            await drive(
                p.clock, sweep_and_check, step=timedelta(seconds=5), settle=0.1, what="all sent"
            )
            sent_at = p.clock.now()

            # Long enough for any other request still in the limiter (200 s each) to go.
            async def sweep_for_five_more_leases() -> bool:
                redriven.append(await p.rt.sweeper.sweep_once())
                return p.clock.now() - sent_at > timedelta(seconds=5 * lease)

            await drive(p.clock, sweep_for_five_more_leases, settle=0.01, what="five more leases")
            assert _sent_once(p, tokens)
            # The first claim was re-driven and not sent by its claimant. (A claim of the
            # re-driven copy may be held back too while the first is still in hand: the
            # gate knows messages, not claims, and errs on the side of one more lease.)
            assert sum(redriven) >= 20
            assert _lapsed_unsent() - lapsed_before >= 20
