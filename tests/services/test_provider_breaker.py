"""A provider behind its circuit breaker (tepat/adapters/breaker_guard.py): it goes down,
the breaker opens and stops calling it, its messages wait, and once it is back they go;
none is lost, and each transition is one log line and a metric."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tepat import metrics
from tepat.adapters.breaker_guard import GuardedChannel, GuardedPush, ProviderBreaker
from tepat.clock import FakeClock
from tepat.domain.breaker import BreakerSettings
from tepat.domain.models import Message, MessageStatus, User, slot_key_for
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing
from tepat.ports.push import PushRequest, SendResult
from tepat.ports.repositories.messages import Counts
from tepat.ports.try_again import TryAgain
from tepat.runtime import Runtime, open_runtime
from tepat.services import accounts
from tepat.services.dashboard import channel_lines
from tests.api.conftest import make_settings
from tests.support.fake_push import FakePush
from tests.support.messages import AT, make_message

DOWN = TryAgain("network error talking to Expo before the request was sent")
COOL_DOWN = 30.0


class FlakyPush(FakePush):
    """Answers ``DOWN`` to every request while ``down``, without sending anything."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.calls = 0

    async def send(self, batch: Sequence[PushRequest]) -> SendResult:
        self.calls += 1
        if self.down:
            return DOWN
        return await super().send(batch)


def transitions(provider: str, channel: str = "push") -> dict[str, float]:
    labels = {"channel": channel, "provider": provider}
    return {
        to: metrics.REGISTRY.get_sample_value(
            "tepat_provider_breaker_transitions_total", {**labels, "to": to}
        )
        or 0.0
        for to in ("open", "half_open", "closed")
    }


def state(provider: str, channel: str = "push") -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "tepat_provider_breaker_state", {"channel": channel, "provider": provider}
    )


def request(i: int) -> PushRequest:
    return PushRequest(f"m{i}", "ExponentPushToken[a]", "Title", "Body")


def test_a_guarded_push_provider_asks_for_the_batch_size_its_provider_asks_for_now() -> None:
    """Expo's and FCM's adaptive rate shrink ``max_batch`` while throttled: the guard
    reads it through, so the batcher cuts smaller requests too."""
    push = FlakyPush()
    settings = BreakerSettings(threshold=2, cool_down=timedelta(seconds=COOL_DOWN))
    guarded = GuardedPush(push, ProviderBreaker("push", "sizing", settings, FakeClock(AT)))
    push.max_batch = 100
    assert guarded.max_batch == 100
    push.max_batch = 37
    assert guarded.max_batch == 37
    assert guarded.max_receipt_batch == push.max_receipt_batch


async def test_a_push_provider_that_goes_down_and_comes_back() -> None:
    clock = FakeClock(AT)
    push = FlakyPush()
    settings = BreakerSettings(threshold=2, cool_down=timedelta(seconds=COOL_DOWN))
    guarded = GuardedPush(push, ProviderBreaker("push", "flaky-push", settings, clock))
    assert state("flaky-push") == 0
    push.down = True
    with capture_logs() as logs:
        assert await guarded.send([request(1)]) == DOWN
        assert await guarded.send([request(2)]) == DOWN  # the second in a row opens it
        clock.advance(10)
        refused = await guarded.send([request(3)])
        assert push.calls == 2, "not called while open"
        assert isinstance(refused, TryAgain)
        assert (refused.retry_after, refused.maybe_sent) == (20.0, False)
        assert refused.reason == "breaker_open: flaky-push is failing"

        clock.advance(20)
        assert await guarded.send([request(3)]) == DOWN  # the probe: still down
        assert state("flaky-push") == 1
        push.down = False
        clock.advance(COOL_DOWN)
        assert (await guarded.send([request(3)])).outcomes  # type: ignore[union-attr]
        assert await guarded.send([request(4)]) != DOWN

    assert [r.message_id for r in push.requests] == ["m3", "m4"]
    assert [
        (e["from"], e["to"], e["reason"]) for e in logs if e["event"] == "provider_breaker"
    ] == [
        ("closed", "open", "2 provider-side failures in a row"),
        ("open", "half_open", "cool-down over: probing"),
        ("half_open", "open", "probe failed"),
        ("open", "half_open", "cool-down over: probing"),
        ("half_open", "closed", "probe succeeded"),
    ]
    assert {(e["channel"], e["provider"]) for e in logs if e["event"] == "provider_breaker"} == {
        ("push", "flaky-push")
    }
    assert transitions("flaky-push") == {"open": 2, "half_open": 2, "closed": 1}
    assert state("flaky-push") == 0


class Relay:
    """An e-mail channel whose relay answers ``failing`` while ``down``."""

    name = "email"
    max_batch = 10

    def __init__(self, *, down: bool = True, failing: TryAgain = TryAgain("smtp_connect")) -> None:
        self.down = down
        self.failing = failing
        self.sent: list[Outgoing] = []
        self.shares: list[float] = []

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome]:
        if self.down:
            return [self.failing for _ in items]
        self.sent.extend(items)
        return [Accepted(f"<{i}@x>") for i, _ in enumerate(items)]

    def set_rate_share(self, share: float) -> None:
        self.shares.append(share)

    async def close(self) -> None:
        pass


async def test_a_channel_behind_its_breaker_keeps_its_own_parts() -> None:
    clock = FakeClock(AT)
    relay = Relay()
    settings = BreakerSettings(threshold=1, cool_down=timedelta(seconds=COOL_DOWN))
    guarded = GuardedChannel(relay, ProviderBreaker("email", "flaky-relay", settings, clock))
    item = Outgoing(make_message("k1", nominal_at=AT, due_at=AT), "ana@example.com")
    assert await guarded.send([item]) == [TryAgain("smtp_connect")]
    answers = await guarded.send([item, item])
    assert [a.retry_after for a in answers if isinstance(a, TryAgain)] == [COOL_DOWN] * 2
    relay.down = False
    clock.advance(COOL_DOWN)
    assert await guarded.send([item]) == [Accepted("<0@x>")]
    assert state("flaky-relay", "email") == 0
    guarded.set_rate_share(0.5)  # the sender looks it up by name
    assert (guarded.name, guarded.max_batch, relay.shares) == ("email", 10, [0.5])


@pytest.fixture
def expo() -> FlakyPush:
    return FlakyPush()


@pytest.fixture
async def rt(tmp_path: Path, expo: FlakyPush) -> AsyncIterator[Runtime]:
    settings = make_settings(tmp_path).model_copy(
        update={"breaker_threshold": 2, "breaker_cool_down_seconds": COOL_DOWN}
    )
    async with open_runtime(settings, clock=FakeClock(AT), push=expo) as r:
        await r.store.upsert_user(User("u1", "UTC"))
        await accounts.register_device(r, "u1", "phone", "ExponentPushToken[a]")
        yield r


_keys = itertools.count()


async def send_new(rt: Runtime) -> Message:
    now = rt.clock.now()
    key = f"k{next(_keys)}"
    m = make_message(key, live_key=key, nominal_at=now, due_at=now)  # one slot each
    m = dataclasses.replace(m, slot_key=slot_key_for(m))
    await rt.store.insert_messages([m])
    await rt.dispatcher.channels.process(await rt.store.claim([m.id], now))
    return m


async def stored(rt: Runtime, m: Message) -> Message:
    got = await rt.store.get_message(m.id)
    assert got is not None
    return got


async def test_through_the_send_path_messages_wait_while_open_then_go(
    rt: Runtime, expo: FlakyPush
) -> None:
    assert isinstance(rt.clock, FakeClock)
    before = transitions("expo")
    expo.down = True
    first = [await send_new(rt), await send_new(rt)]  # these two open the breaker
    waiting = await send_new(rt)
    assert expo.calls == 2, "the third never reached the provider"
    again = await stored(rt, waiting)
    assert again.status is MessageStatus.PENDING
    assert again.last_error == "breaker_open: expo is failing"
    # Its claim counted an attempt; the breaker's refusal gave it back (the provider
    # was never called), so an outage spends the message's age limit, not its attempts.
    assert again.attempts == 0
    assert [(await stored(rt, m)).attempts for m in first] == [1, 1]
    # It waits at least until the breaker probes again.
    assert again.due >= rt.clock.now() + timedelta(seconds=COOL_DOWN)
    assert breakers_on_the_dashboard(rt)["expo"] == "open"

    expo.down = False
    rt.clock.set(max([again.due] + [(await stored(rt, m)).due for m in first]))
    everything = [*first, waiting]
    now = rt.clock.now()
    await rt.dispatcher.channels.process(await rt.store.claim([m.id for m in everything], now))
    assert [(await stored(rt, m)).status for m in everything] == [MessageStatus.SENT] * 3
    assert sorted(r.message_id for r in expo.requests) == sorted(m.id for m in everything)
    after = transitions("expo")
    assert {to: after[to] - before[to] for to in after} == {"open": 1, "half_open": 1, "closed": 1}
    assert breakers_on_the_dashboard(rt)["expo"] == "closed"


def breakers_on_the_dashboard(rt: Runtime) -> dict[str, str]:
    (push,) = [line for line in channel_lines(rt.channels, Counts()) if line.channel == "push"]
    return push.breakers
