"""Failover to a secondary provider (tepat/services/sending/failover.py): what the
primary fails to send for provider-side reasons goes through the secondary at once; a
recipient's refusal and a 429 never do, and an ambiguous answer only where the
category's maybe_sent policy retries (then counted as a possible duplicate)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tepat import metrics
from tepat.adapters.breaker_guard import GuardedChannel, ProviderBreaker
from tepat.clock import FakeClock
from tepat.domain.breaker import BreakerSettings
from tepat.domain.categories import OUTCOME_UNKNOWN, Categories
from tepat.domain.models import MessageStatus, User, slot_key_for
from tepat.domain.retry import RetryPolicy
from tepat.ports.channel import Accepted, Outgoing, Refused
from tepat.ports.push import TicketError
from tepat.ports.repositories.messages import Counts
from tepat.ports.try_again import TryAgain
from tepat.runtime import Runtime, open_runtime
from tepat.services import accounts
from tepat.services.dashboard import channel_lines
from tepat.services.sending.channel_sender import ChannelSender
from tepat.services.sending.failover import FailoverChannel
from tests.api.conftest import make_settings
from tests.services.test_provider_breaker import COOL_DOWN, FlakyPush, Relay, state, stored
from tests.support.fake_push import FakePush
from tests.support.messages import AT, make_message

LOST = TryAgain("smtp_no_reply", maybe_sent=True)


def failovers(
    possible_duplicate: str, to: str = "second", channel: str = "email", from_: str = "first"
) -> float:
    labels = {"channel": channel, "from": from_, "to": to}
    sample = metrics.REGISTRY.get_sample_value(
        "tepat_failovers_total", {**labels, "possible_duplicate": possible_duplicate}
    )
    return sample or 0.0


def pair(primary: Relay, secondary: Relay) -> FailoverChannel:
    return FailoverChannel(primary, secondary, Categories(), "first", "second")


def item(key: str = "k1", category: str = "meal") -> Outgoing:
    m = make_message(key, nominal_at=AT, due_at=AT, channel="email", category=category)
    return Outgoing(m, "ana@example.com")


async def test_what_the_primary_fails_to_send_goes_through_the_secondary() -> None:
    primary, secondary = Relay(), Relay(down=False)
    before = failovers("false")
    answers = await pair(primary, secondary).send([item("a"), item("b")])
    assert answers == [Accepted("<0@x>"), Accepted("<1@x>")]
    assert [o.message.id for o in secondary.sent] == [item("a").message.id, item("b").message.id]
    assert failovers("false") == before + 2


@pytest.mark.parametrize(
    "answer",
    [
        Refused("invalid_number"),  # the recipient's: the secondary would refuse it too
        TryAgain("429 Too Many Requests", retry_after=5, throttled=True),  # working as designed
        Accepted("<ok@x>"),
    ],
)
async def test_a_refusal_a_429_or_an_acceptance_never_fails_over(
    answer: Refused | TryAgain | Accepted,
) -> None:
    primary, secondary = Relay(failing=answer), Relay(down=False)  # type: ignore[arg-type]
    assert await pair(primary, secondary).send([item()]) == [answer]
    assert secondary.sent == []


async def test_an_ambiguous_answer_fails_over_only_where_its_category_retries() -> None:
    """``safety`` retries a maybe-sent message (a possible duplicate, counted); ``meal``
    closes it (the primary may have sent it)."""
    primary, secondary = Relay(failing=LOST), Relay(down=False)
    before = failovers("true")
    safety, meal = item("s", "safety"), item("m", "meal")
    assert await pair(primary, secondary).send([safety, meal]) == [Accepted("<0@x>"), LOST]
    assert [o.message.id for o in secondary.sent] == [safety.message.id]
    assert failovers("true") == before + 1


async def test_with_both_breakers_open_the_primarys_answer_stands() -> None:
    clock = FakeClock(AT)
    settings = BreakerSettings(threshold=1, cool_down=timedelta(seconds=COOL_DOWN))
    primary, secondary = Relay(), Relay()
    both = FailoverChannel(
        GuardedChannel(primary, ProviderBreaker("email", "first-relay", settings, clock)),
        GuardedChannel(secondary, ProviderBreaker("email", "second-relay", settings, clock)),
        Categories(),
        "first",
        "second",
    )
    assert await both.send([item()]) == [TryAgain("smtp_connect")]  # both open now
    (closed,) = await both.send([item()])
    assert isinstance(closed, TryAgain) and closed.not_tried
    assert closed.reason == "breaker_open: first-relay is failing"
    secondary.down = False
    clock.advance(COOL_DOWN)  # the secondary's probe sends it; the primary's too, and fails
    assert await both.send([item()]) == [Accepted("<0@x>")]
    assert (state("first-relay", "email"), state("second-relay", "email")) == (1, 0)


async def test_failing_over_is_logged_when_it_starts_and_ends_not_per_message() -> None:
    primary, secondary = Relay(), Relay(down=False)
    channel = pair(primary, secondary)
    with capture_logs() as logs:
        for _ in range(3):
            await channel.send([item(), item()])
        primary.down = False
        await channel.send([item()])
        await channel.send([item()])
    events = [(e["event"], e.get("failed_over")) for e in logs if e["event"].startswith("fail")]
    assert events == [("failover_started", None), ("failover_ended", 6)]
    assert not channel.route.failing_over


async def test_through_the_send_path_an_ambiguous_answer_follows_the_maybe_sent_policy(
    tmp_path: Path,
) -> None:
    """``safety`` (retry): failed over at once, sent by the secondary; ``meal`` (close):
    failed as outcome_unknown, never sent again."""
    settings = make_settings(tmp_path)
    async with open_runtime(settings, clock=FakeClock(AT)) as rt:
        now = rt.clock.now()
        await rt.store.upsert_user(User("u1", "UTC"))
        await rt.store.set_contact("u1", "email", "u1@example.com", True, now)
        primary, secondary = Relay(failing=LOST), Relay(down=False)
        sender = ChannelSender(
            rt.store,
            rt.categories,
            rt.clock,
            {"email": FailoverChannel(primary, secondary, rt.categories, "first", "second")},
            retry=RetryPolicy(base_seconds=1.0, max_attempts=3),
            flush=rt.outbox.flush_quietly,
        )
        messages = [
            make_message(key, live_key=key, category=category, channel="email", due_at=now)
            for key, category in (("safe", "safety"), ("meal", "meal"))
        ]
        messages = [dataclasses.replace(m, slot_key=slot_key_for(m)) for m in messages]
        await rt.store.insert_messages(messages)
        await sender.process(await rt.store.claim([m.id for m in messages], now))
        safe, meal = [await stored(rt, m) for m in messages]
        assert safe.status is MessageStatus.SENT
        assert (meal.status, meal.status_reason) == (MessageStatus.FAILED, OUTCOME_UNKNOWN)
        assert [o.message.id for o in secondary.sent] == [safe.id]


# ---------------------------------------------------------------- push, per device

FCM_TOKEN = "fcm-token-of-the-phone"


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = make_settings(tmp_path).model_copy(update={"breaker_threshold": 1})
    expo, fcm = FlakyPush(), FakePush()
    async with open_runtime(
        settings, clock=FakeClock(AT), push=expo, push_providers={"fcm": fcm}
    ) as r:
        await r.store.upsert_user(User("u1", "UTC"))
        await r.store.upsert_user(User("u2", "UTC"))
        await accounts.register_device(
            r, "u1", "phone", "ExponentPushToken[a]", fallback=("fcm", FCM_TOKEN)
        )
        await accounts.register_device(r, "u2", "phone", "ExponentPushToken[b]")
        yield r


def providers(rt: Runtime) -> tuple[FlakyPush, FakePush]:
    push = rt.dispatcher.channels._channels["push"]
    expo, fcm = (push._providers[kind].inner for kind in ("expo", "fcm"))  # type: ignore[attr-defined]
    return expo, fcm


def push_failovers(rt: Runtime) -> dict[str, int]:
    """The dashboard's push row's failovers, by route."""
    (push,) = [line for line in channel_lines(rt.channels, Counts()) if line.channel == "push"]
    return push.failovers


_keys = itertools.count()


async def send_to(rt: Runtime, *users: str) -> list[MessageStatus]:
    now = rt.clock.now()
    messages = [
        make_message(f"{u}-{next(_keys)}", user_id=u, nominal_at=now, due_at=now) for u in users
    ]
    messages = [dataclasses.replace(m, slot_key=slot_key_for(m)) for m in messages]
    await rt.store.insert_messages(messages)
    await rt.dispatcher.channels.process(await rt.store.claim([m.id for m in messages], now))
    return [(await stored(rt, m)).status for m in messages]


async def test_a_device_with_a_fallback_token_gets_it_through_fcm_while_expo_is_down(
    rt: Runtime,
) -> None:
    expo, fcm = providers(rt)
    expo.down = True
    before = failovers("false", "fcm", "push", "expo")
    on_dashboard = push_failovers(rt).get("expo → fcm", 0)
    # u1's phone: its FCM token; u2's (no fallback): waits for Expo.
    assert await send_to(rt, "u1", "u2") == [MessageStatus.SENT, MessageStatus.PENDING]
    assert await send_to(rt, "u1") == [MessageStatus.SENT]  # the breaker is open now
    assert [r.push_token for r in fcm.requests] == [FCM_TOKEN, FCM_TOKEN]
    assert failovers("false", "fcm", "push", "expo") == before + 2
    assert push_failovers(rt) == {"expo → fcm": on_dashboard + 2}
    device = (await accounts.list_devices(rt, "u1"))[0]
    assert (device.fallback_kind, device.fallback_token, device.active) == ("fcm", FCM_TOKEN, True)


async def test_a_device_the_primary_refuses_is_not_sent_to_its_fallback(rt: Runtime) -> None:
    expo, fcm = providers(rt)
    expo.refuse_with = TicketError("DeviceNotRegistered", "gone", True, deactivate_device=True)
    assert await send_to(rt, "u1") == [MessageStatus.FAILED]
    assert fcm.requests == []


async def test_failing_over_ends_once_the_primary_answers_any_device(rt: Runtime) -> None:
    """The last failed-over message may be long sent: a phone without a fallback that
    Expo answers again ends it too."""
    expo, _ = providers(rt)
    expo.down = True
    assert isinstance(rt.clock, FakeClock)
    with capture_logs() as logs:
        assert await send_to(rt, "u1") == [MessageStatus.SENT]
        expo.down = False
        rt.clock.advance(COOL_DOWN)  # the breaker (opened by the first failure) probes
        assert await send_to(rt, "u2") == [MessageStatus.SENT]
    events = [(e["event"], e.get("failed_over")) for e in logs if e["event"].startswith("fail")]
    assert events == [("failover_started", None), ("failover_ended", 1)]


async def test_a_dead_fallback_token_is_dropped_and_the_phone_kept(rt: Runtime) -> None:
    """FCM's dead-token answer to a failed-over send: the phone loses its fallback (the
    next outage cannot reach it through FCM), its Expo binding stays active."""
    expo, fcm = providers(rt)
    expo.down = True
    fcm.refuse_with = TicketError("UNREGISTERED", "gone", True, deactivate_device=True)
    with capture_logs() as logs:
        assert await send_to(rt, "u1") == [MessageStatus.FAILED]
    [device] = await accounts.list_devices(rt, "u1")
    assert (device.push_token, device.active) == ("ExponentPushToken[a]", True)
    assert (device.fallback_kind, device.fallback_token) == (None, None)
    dropped = ("fallback token dropped", "device deactivated")
    assert [e["event"] for e in logs if e["event"] in dropped] == ["fallback token dropped"]
    assert await send_to(rt, "u1") == [MessageStatus.PENDING]  # waits for Expo now
    assert len(fcm.requests) == 1
