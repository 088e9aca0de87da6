"""The one recorder's write order (tepat/services/sending/recording.py), every channel alike.

Terminal outcomes first (acceptances also over ``pending``: a late answer counts), then
the suppressions a refusal named, then retries and the outbox flush; a failure to
write the retries costs a later retry only: it is logged, not raised, and nothing is
flushed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from tepat.clock import FakeClock
from tepat.domain.categories import DEFAULT_CATEGORIES, Categories
from tepat.domain.models import Message, MessageStatus
from tepat.domain.retry import RetryPolicy
from tepat.ports.channel import Accepted, Delivered, Refused
from tepat.ports.repositories.messages import StatusChange
from tepat.ports.store import Store
from tepat.ports.try_again import TryAgain
from tepat.services.sending.recording import Answer, OutcomeRecorder

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
S = MessageStatus


class WriteLog:
    """The two store calls the recorder makes, logged in order."""

    def __init__(self, fail_retries: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_retries = fail_retries

    async def transition_many(
        self, changes: Sequence[StatusChange], now: datetime, *, expect: Sequence[MessageStatus]
    ) -> int:
        if self.fail_retries and any(c.to is S.PENDING for c in changes):
            raise ConnectionError("store went away")
        self.calls.append(("write", [(c.message_id, c.to) for c in changes], set(expect)))
        return len(changes)

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
