"""A push message is one answer, whatever its devices said (push_channel.py answer_of)."""

from __future__ import annotations

from tepat.ports.channel import Accepted, Refused
from tepat.ports.push import Rejected, TicketError, TicketOk
from tepat.ports.try_again import TryAgain
from tepat.services.sending.push_channel import answer_of

GONE = TicketError("DeviceNotRegistered", "gone", permanent=True, deactivate_device=True)
BUSY = TicketError("MessageRateExceeded", "slow down", permanent=False, retry_after=30.0)


def test_one_accepted_device_makes_the_message_sent_with_its_ticket() -> None:
    assert answer_of([GONE, TicketOk("tk-2"), TicketOk("tk-3")]) == Accepted("tk-2")


def test_only_permanent_failures_refuse_it_with_every_reason() -> None:
    assert answer_of([GONE, Rejected("bad credentials")]) == Refused(
        "DeviceNotRegistered: gone; bad credentials"
    )


def test_one_temporary_failure_makes_it_worth_another_try_after_the_longest_wait() -> None:
    got = answer_of([GONE, BUSY, TryAgain("503", retry_after=5.0)])
    assert got == TryAgain(
        "DeviceNotRegistered: gone; MessageRateExceeded: slow down; 503", retry_after=30.0
    )


def test_maybe_sent_if_any_request_may_have_gone_through() -> None:
    got = answer_of([TryAgain("read timeout", maybe_sent=True), TryAgain("connect error")])
    assert isinstance(got, TryAgain) and got.maybe_sent
    not_sent = answer_of([TryAgain("connect error"), BUSY])
    assert isinstance(not_sent, TryAgain) and not not_sent.maybe_sent
