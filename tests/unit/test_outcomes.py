"""The pure rules of what a provider's answer makes of a message (tepat/domain/outcomes.py)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from tepat.domain.categories import OUTCOME_UNKNOWN, MaybeSentPolicy
from tepat.domain.models import Message, MessageStatus
from tepat.domain.outcomes import (
    Next,
    Stage,
    after_accepted,
    after_delivered,
    after_failure,
    after_refused,
    expected_from,
    maybe_sent_matters,
)
from tepat.domain.retry import RetryPolicy

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
RETRY = RetryPolicy(base_seconds=1.0, cap_seconds=300.0, max_attempts=3)


class Top(random.Random):
    """Draws the top of the jitter range: the delay is the backoff's ceiling."""

    def uniform(self, a: float, b: float) -> float:
        return b


def message(attempts: int = 1, scheduled_at: datetime = NOW) -> Message:
    return Message(
        "m1", "ana", "meal", "lunch", "Lunch", "Time to eat", scheduled_at, "UTC", "k", None,
        attempts=attempts, status=MessageStatus.SENDING,
    )  # fmt: skip


def failure(
    m: Message,
    *,
    policy: MaybeSentPolicy = MaybeSentPolicy.CLOSE,
    retry_after: float | None = None,
    maybe_sent: bool = False,
    now: datetime = NOW,
    not_tried: bool = False,
) -> Next:
    return after_failure(
        m,
        "503 busy",
        policy=policy,
        retry=RETRY,
        retry_after=retry_after,
        maybe_sent=maybe_sent,
        now=now,
        rng=Top(),
        not_tried=not_tried,
    )


def test_accepted_keeps_the_provider_id_and_delivered_is_final() -> None:
    assert after_accepted("tk-1") == Next(MessageStatus.SENT, ticket_id="tk-1")
    assert after_delivered() == Next(MessageStatus.DELIVERED)


def test_refused_fails_with_the_providers_reason() -> None:
    assert after_refused("550 5.1.1 no such user") == Next(
        MessageStatus.FAILED, "550 5.1.1 no such user", last_error="550 5.1.1 no such user"
    )


def test_not_sent_goes_back_to_pending_after_the_backoff() -> None:
    # Attempt 2's ceiling is 2 s (base 1 s, doubled once); Top draws it.
    got = failure(message(attempts=2))
    assert got == Next(
        MessageStatus.PENDING, last_error="503 busy", due_at=NOW + timedelta(seconds=2)
    )


def test_retry_after_is_a_floor_not_a_ceiling() -> None:
    assert failure(message(attempts=1), retry_after=30.0).due_at == NOW + timedelta(seconds=30)
    # A Retry-After below the drawn backoff changes nothing.
    assert failure(message(attempts=2), retry_after=0.5).due_at == NOW + timedelta(seconds=2)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (MaybeSentPolicy.CLOSE, Next(MessageStatus.FAILED, OUTCOME_UNKNOWN, last_error="503 busy")),
        (
            MaybeSentPolicy.RETRY,
            Next(MessageStatus.PENDING, last_error="503 busy", due_at=NOW + timedelta(seconds=1)),
        ),
    ],
)
def test_maybe_sent_follows_the_category_policy(policy: MaybeSentPolicy, expected: Next) -> None:
    assert failure(message(), policy=policy, maybe_sent=True) == expected


def test_not_sent_is_retried_whatever_the_maybe_sent_policy() -> None:
    assert failure(message(), policy=MaybeSentPolicy.CLOSE).to is MessageStatus.PENDING


def test_gives_up_at_the_attempt_limit_and_past_the_age_limit() -> None:
    gave_up = Next(
        MessageStatus.FAILED, "gave up after 3 attempts: 503 busy", last_error="503 busy"
    )
    assert failure(message(attempts=3)) == gave_up
    old = message(attempts=1, scheduled_at=NOW - RETRY.max_age - timedelta(seconds=1))
    assert failure(old).reason == "gave up after 1 attempts: 503 busy"
    # A maybe-sent answer under a retry policy gives up the same way.
    assert failure(message(attempts=3), policy=MaybeSentPolicy.RETRY, maybe_sent=True) == gave_up


def test_a_webhooks_maybe_sent_is_no_maybe_sent() -> None:
    assert maybe_sent_matters("email", True)
    assert maybe_sent_matters("push", True)
    assert not maybe_sent_matters("webhook", True)
    assert not maybe_sent_matters("email", False)


@pytest.mark.parametrize(
    ("next_", "stage", "expect"),
    [
        (after_accepted(None), Stage.ACCEPTED, {MessageStatus.SENDING, MessageStatus.PENDING}),
        (after_delivered(), Stage.ACCEPTED, {MessageStatus.SENDING, MessageStatus.PENDING}),
        (after_refused("no"), Stage.CLOSED, {MessageStatus.SENDING}),
        (failure(message()), Stage.RETRY, {MessageStatus.SENDING}),
    ],
)
def test_stages_in_write_order_and_what_each_is_written_over(
    next_: Next, stage: Stage, expect: set[MessageStatus]
) -> None:
    """A late acceptance is written over a re-driven ``pending``; nothing else is."""
    assert next_.stage is stage
    assert set(expected_from(stage)) == expect
    assert list(Stage) == [Stage.ACCEPTED, Stage.CLOSED, Stage.RETRY]


def test_a_wait_behind_an_open_breaker_gives_back_its_attempt() -> None:
    """The provider was never called: the attempt the claim counted is not spent, so an
    outage longer than the attempts allow leaves the message waiting, not failed."""
    last = message(attempts=RETRY.max_attempts)
    assert failure(last).to is MessageStatus.FAILED
    waits = failure(last, retry_after=30.0, not_tried=True)
    assert (waits.to, waits.attempts) == (MessageStatus.PENDING, RETRY.max_attempts - 1)
    assert waits.due_at == NOW + timedelta(seconds=30)
    assert failure(message(attempts=1)).attempts is None  # a real try keeps its count
    # The age limit still holds: an outage longer than max_age ends it.
    old = message(attempts=1, scheduled_at=NOW - RETRY.max_age - timedelta(seconds=1))
    assert failure(old, not_tried=True).to is MessageStatus.FAILED
