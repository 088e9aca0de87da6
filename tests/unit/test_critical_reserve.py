"""The critical reserve of a provider's token bucket, driven by FakeClock: no test sleeps.

Other traffic is held to ``(1 - reserve) * rate`` however much of it waits; critical
traffic finds the rest free at once; together they never pass the rate.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tepat.adapters.expo_push import ExpoPushProvider
from tepat.adapters.rate_limit import TokenBucket
from tepat.adapters.smtp_email import SmtpEmailChannel
from tepat.clock import FakeClock
from tepat.config import ConfigError, load_settings
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.categories import Categories
from tepat.domain.models import Message
from tepat.domain.queues import may_use_critical_reserve, queue_may_use_critical_reserve
from tepat.metrics import REGISTRY
from tepat.runtime import make_push_provider
from tepat.sandbox.fcm import FcmSandbox
from tepat.wiring import build_email_channel, build_fcm_provider, build_sms_channel

RATE = 100.0
RESERVE = 0.2
STEP = 0.01


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


@dataclass
class Traffic:
    """Requests of ``size`` tokens arriving at ``per_second``; when each came and went."""

    per_second: float
    size: int
    critical: bool
    arrived: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)

    def lateness(self) -> list[float]:
        return [s - a for a, s in zip(self.arrived, self.sent, strict=True)]


async def flood(
    bucket: TokenBucket, clock: FakeClock, seconds: float, *traffic: Traffic
) -> list[tuple[float, int]]:
    """Run ``traffic`` through ``bucket`` for ``seconds``; every (instant, tokens) let through."""
    start = clock.now()
    passed: list[tuple[float, int]] = []
    owed = [0.0] * len(traffic)

    def elapsed() -> float:
        return (clock.now() - start).total_seconds()

    async def one(kind: Traffic) -> None:
        kind.arrived.append(elapsed())
        index = len(kind.arrived) - 1
        kind.sent.append(-1.0)
        await bucket.acquire(kind.size, critical=kind.size if kind.critical else 0)
        kind.sent[index] = elapsed()
        passed.append((elapsed(), kind.size))

    tasks: list[asyncio.Task[None]] = []
    for _ in range(round(seconds / STEP)):
        for i, kind in enumerate(traffic):
            owed[i] += kind.per_second * STEP
            while owed[i] >= 1:
                owed[i] -= 1
                tasks.append(asyncio.create_task(one(kind)))
        await settle()
        clock.advance(STEP)
    await settle()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for kind in traffic:  # what was still waiting at the end
        kind.arrived[:] = [a for a, s in zip(kind.arrived, kind.sent, strict=True) if s >= 0]
        kind.sent[:] = [s for s in kind.sent if s >= 0]
    return passed


def most_in_a_second(passed: list[tuple[float, int]]) -> int:
    return max(sum(n for u, n in passed if t <= u < t + 1) for t, _ in passed)


async def test_other_traffic_at_five_times_the_ceiling_never_passes_its_share() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10, critical_reserve=RESERVE)
    bulk = Traffic(per_second=5 * RATE / 5, size=5, critical=False)
    passed = await flood(bucket, clock, 5.0, bulk)
    share = (1 - RESERVE) * RATE
    # A second's worth at most, plus the share's burst (8 tokens) once.
    assert most_in_a_second(passed) <= share + 8
    assert sum(n for _, n in passed) <= share * 5 + 8
    assert sum(n for _, n in passed) >= share * 5 - 10  # and it does get its share


async def test_critical_traffic_goes_at_once_while_other_traffic_floods() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10, critical_reserve=RESERVE)
    bulk = Traffic(per_second=5 * RATE / 5, size=5, critical=False)
    critical = Traffic(per_second=10, size=1, critical=True)
    passed = await flood(bucket, clock, 5.0, bulk, critical)
    assert len(critical.sent) >= 49
    assert max(critical.lateness()) <= STEP  # never queued behind the flood
    assert max(bulk.lateness()) > 3.0  # the flood does queue
    # Both from the one bucket: never more than the ceiling (and its burst) together.
    assert most_in_a_second(passed) <= RATE + 10


async def test_without_a_reserve_critical_traffic_queues_behind_the_flood() -> None:
    # What the reserve is for: the same flood through a bucket without one.
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10)
    bulk = Traffic(per_second=5 * RATE / 5, size=5, critical=False)
    critical = Traffic(per_second=10, size=1, critical=True)
    await flood(bucket, clock, 5.0, bulk, critical)
    assert max(critical.lateness()) > 1.0


async def test_critical_traffic_above_the_reserve_still_gets_the_whole_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10, critical_reserve=RESERVE)
    critical = Traffic(per_second=2 * RATE, size=1, critical=True)
    passed = await flood(bucket, clock, 3.0, critical)
    assert sum(n for _, n in passed) >= 3 * RATE  # not held to the reserve
    assert most_in_a_second(passed) <= RATE + 10


async def test_a_pause_holds_both_the_reserve_and_the_rest() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10, critical_reserve=RESERVE)
    bucket.pause(1.0)  # a provider's Retry-After
    # A full bucket each (10 tokens; the rest's is 8): each waits the pause, no more.
    other = asyncio.create_task(bucket.acquire(8))
    critical = asyncio.create_task(bucket.acquire(10, critical=10))
    await settle()
    clock.advance(0.99)
    await settle()
    assert not other.done() and not critical.done()
    clock.advance(0.01)
    await settle()
    assert critical.done() and not other.done()
    clock.advance(0.07)
    await settle()
    assert not other.done()  # passed the rest's pause, then queued behind the critical 10
    clock.advance(0.01)
    await settle()
    assert other.done()


async def test_the_share_follows_the_rate_set_by_a_share_or_an_adaptive_decrease() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10, critical_reserve=RESERVE)
    bucket.set_share(0.5)  # two consumer processes: 50/s, of which 40/s for other traffic
    bulk = Traffic(per_second=5 * RATE / 5, size=5, critical=False)
    passed = await flood(bucket, clock, 5.0, bulk)
    assert sum(n for _, n in passed) <= 0.5 * (1 - RESERVE) * RATE * 5 + 8


async def test_critical_tokens_taken_while_others_wait_count_as_reserve_use() -> None:
    clock = FakeClock()
    bucket = TokenBucket(RATE, clock, capacity=10, critical_reserve=RESERVE, provider="test")
    before = reserve_used("test")
    await bucket.acquire(1, critical=1)  # nothing else waits: not the reserve's
    assert reserve_used("test") == before
    waiting = asyncio.create_task(bucket.acquire(20))
    await settle()
    await bucket.acquire(2, critical=2)
    assert reserve_used("test") == before + 2
    waiting.cancel()


def reserve_used(provider: str) -> float:
    labels = {"app": DEFAULT_APP, "provider": provider}
    return REGISTRY.get_sample_value("tepat_critical_reserve_used_total", labels) or 0.0


@pytest.mark.parametrize("share", [-0.1, 1.0, 1.5])
def test_rejects_a_reserve_outside_zero_to_one(share: float) -> None:
    with pytest.raises(ValueError, match="critical_reserve"):
        TokenBucket(RATE, FakeClock(), critical_reserve=share)


def message(category: str, priority: str | None = None) -> Message:
    clock = FakeClock()
    return Message(
        "m1", "u1", category, "", "t", "b", clock.now(), "UTC", "d", None, priority=priority
    )


@pytest.mark.parametrize(
    ("category", "priority", "allowed"),
    [
        ("safety", None, True),
        ("meal", "critical", True),
        ("safety", "bulk", True),
        ("meal", None, False),
        ("marketing", "bulk", False),
        ("meal", "normal", False),
    ],
)
def test_only_critical_and_safety_messages_may_use_the_reserve(
    category: str, priority: str | None, allowed: bool
) -> None:
    assert may_use_critical_reserve(message(category, priority)) is allowed


@pytest.mark.parametrize("value", [-0.1, 1, 1.5, "most"])
def test_a_bad_setting_stops_with_one_line_naming_it(value: object) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(critical_reserve=value)
    assert str(e.value).startswith("tepat: bad configuration: TEPAT_CRITICAL_RESERVE: ")
    assert "\n" not in str(e.value)


async def test_the_setting_reaches_every_provider_bucket(tmp_path: Path) -> None:
    account = tmp_path / "sa.json"
    account.write_text(json.dumps(FcmSandbox().service_account("http://fcm.test", "p")))
    settings = load_settings(
        critical_reserve=0.3,
        fcm_credentials_file=str(account),
        twilio_account_sid="AC" + "0123456789abcdef" * 2,
        twilio_auth_token="t" * 32,
        twilio_from="+14155550100",
        smtp_host="127.0.0.1",
        smtp_from="no-reply@tepat.example",
        public_url="https://tepat.example",
        unsubscribe_secret="unsubscribe-secret-0123456789abcdef0123456789",
    )
    assert load_settings().critical_reserve == 0  # off unless set
    clock = FakeClock()
    expo = make_push_provider(settings, clock)
    fcm = build_fcm_provider(settings, clock)
    sms = build_sms_channel(settings, clock)
    email = build_email_channel(settings, clock)
    assert isinstance(expo, ExpoPushProvider) and fcm is not None and sms is not None
    assert isinstance(email, SmtpEmailChannel)
    buckets = [expo.limiter, fcm.limiter, sms.limiter, email.bucket]
    try:
        assert [(b.critical_reserve, b.provider) for b in buckets] == [
            (0.3, "expo"),
            (0.3, "fcm"),
            (0.3, "twilio"),
            (0.3, "smtp"),
        ]
    finally:
        for closing in (expo, fcm, sms, email):
            await closing.close()


@pytest.mark.parametrize(
    ("queue", "allowed"),
    [
        ("tepat.push.critical", True),
        ("tepat.sms.critical", True),
        ("tepat.safety", True),
        ("tepat.meal", False),
        ("tepat.sms.normal", False),  # safety SMS share it with the others
        ("tepat.webhooks", False),
    ],
)
def test_queues_whose_every_message_may_use_the_reserve(queue: str, allowed: bool) -> None:
    assert queue_may_use_critical_reserve(queue, Categories()) is allowed
