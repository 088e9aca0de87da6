"""The one recorder's write order (tepat/services/sending/recording.py), every channel alike.

Terminal outcomes first (acceptances also over ``pending``: a late answer counts), then
the suppressions a refusal named, then retries and the outbox flush; a failure to
write the retries costs a later retry only: it is logged, not raised, and nothing is
flushed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from structlog.testing import capture_logs

from tepat.clock import FakeClock
from tepat.domain.categories import DEFAULT_CATEGORIES, Categories
from tepat.domain.models import Message, MessageStatus
from tepat.domain.retry import ProviderTerms, RetryPolicy
from tepat.ports.channel import Accepted, Delivered, Refused
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.store import Store
from tepat.ports.try_again import TryAgain
from tepat.services.sending.recording import Answer, OutcomeRecorder

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
S = MessageStatus


class WriteLog:
    """The two store calls the recorder makes, logged in order."""

    def __init__(self, fail_retries: bool = False, applies: int | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_retries = fail_retries
        self.applies = applies  # how many of each write apply; None: all

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        if self.fail_retries and any(c.to is S.PENDING for c in changes):
            raise ConnectionError("store went away")
        self.calls.append(("write", [(c.message_id, c.to) for c in changes], set(expect)))
        return len(changes) if self.applies is None else self.applies

    async def add_suppression(self, channel: str, target: str, *_: Any, **__: Any) -> None:
        self.calls.append(("suppress", channel, target))


def message(mid: str) -> Message:
    return Message(
        mid, "ana", "meal", "", "t", "b", NOW, "UTC", f"k-{mid}", None, attempts=1
    )  # fmt: skip


def recorder(log: WriteLog) -> OutcomeRecorder:
    async def flush() -> None:
        log.calls.append(("flush",))

    return OutcomeRecorder(
        cast(Store, log),
        Categories(DEFAULT_CATEGORIES),
        FakeClock(NOW),
        retry=RetryPolicy(),
        flush=flush,
        rng=random.Random(0),
    )


ANSWERS = [
    Answer(message("retry"), TryAgain("503")),
    Answer(message("refused"), Refused("550 no such user", suppress="hard_bounce"), "x@y.z"),
    Answer(message("sent"), Accepted("p-1")),
    Answer(message("delivered"), Delivered()),
]


async def test_terminal_first_then_suppressions_then_retries_then_the_flush() -> None:
    log = WriteLog()
    await recorder(log).record("email", ANSWERS)
    assert log.calls == [
        (
            "write",
            [("sent", S.SENT), ("delivered", S.DELIVERED)],
            {S.SENDING, S.PENDING},
        ),
        ("write", [("refused", S.FAILED)], {S.SENDING}),
        ("suppress", "email", "x@y.z"),
        ("write", [("retry", S.PENDING)], {S.SENDING}),
        ("flush",),
    ]


async def test_retries_that_cannot_be_written_are_left_to_the_lease() -> None:
    log = WriteLog(fail_retries=True)
    await recorder(log).record("email", ANSWERS)
    assert [c[0] for c in log.calls] == ["write", "write", "suppress"]  # no flush


async def test_nothing_to_retry_flushes_nothing() -> None:
    log = WriteLog()
    await recorder(log).record("sms", [Answer(message("sent"), Accepted(None))])
    assert ("flush",) not in log.calls


def send_lines(logs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [
        (e["message_id"], e["outcome"], e.get("applied"))
        for e in logs
        if e["event"] == "send recorded"
    ]


async def test_one_line_per_answer_written_after_its_write() -> None:
    with capture_logs() as logs:
        await recorder(WriteLog()).record("email", ANSWERS)
    assert send_lines(logs) == [
        ("sent", "sent", None),
        ("delivered", "delivered", None),
        ("refused", "failed", None),
        ("retry", "retry", None),
    ]


async def test_a_write_that_changed_nothing_logs_no_send() -> None:
    # Every message had moved on (a second answer, a re-drive): nothing was recorded.
    with capture_logs() as logs:
        await recorder(WriteLog(applies=0)).record("email", ANSWERS)
    assert send_lines(logs) == []


async def test_a_partly_applied_write_says_so_on_each_line() -> None:
    # The store counts what it applied, not which: each line of the write says so.
    answers = [Answer(message("a"), Accepted("p-1")), Answer(message("b"), Accepted("p-2"))]
    with capture_logs() as logs:
        await recorder(WriteLog(applies=1)).record("sms", answers)
    assert send_lines(logs) == [("a", "sent", "1 of 2"), ("b", "sent", "1 of 2")]


async def test_retries_that_cannot_be_written_log_no_send() -> None:
    with capture_logs() as logs:
        await recorder(WriteLog(fail_retries=True)).record("email", ANSWERS)
    assert ("retry", "retry", None) not in send_lines(logs)


async def _no_flush() -> None:
    pass


class Top(random.Random):
    """Draws the top of the jitter range: the delay is the backoff's ceiling."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_a_providers_terms_hold_the_channels_retry_policy() -> None:
    """A TryAgain carrying FCM's terms backs off from 10 s, not the channel's 1 s, and is
    given up once the message is an hour past due, though the channel would wait two."""
    rec = OutcomeRecorder(
        cast(Store, WriteLog()),
        Categories(DEFAULT_CATEGORIES),
        FakeClock(NOW),
        retry=RetryPolicy(base_seconds=1.0, max_age=timedelta(hours=2)),
        flush=_no_flush,
        rng=Top(),
    )
    fcm = ProviderTerms(base_seconds=10.0, max_age=timedelta(hours=1))

    def after(again: TryAgain, now: datetime) -> tuple[MessageStatus, datetime | None]:
        n = rec.next_status("push", Answer(message("m"), again), now)
        return n.to, n.due_at

    assert after(TryAgain("500", terms=fcm), NOW) == (S.PENDING, NOW + timedelta(seconds=10))
    assert after(TryAgain("500"), NOW) == (S.PENDING, NOW + timedelta(seconds=1))
    late = NOW + timedelta(minutes=61)
    assert after(TryAgain("500", terms=fcm), late) == (S.FAILED, None)
    assert after(TryAgain("500"), late)[0] is S.PENDING
