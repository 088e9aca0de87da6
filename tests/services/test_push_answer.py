"""A push message is one answer, whatever its devices said (push_channel.py answer_of)."""

from __future__ import annotations

from tepat.adapters.push_answers import batch_result
from tepat.ports.channel import Accepted, Refused
from tepat.ports.push import Rejected, TicketError, TicketOk, Tickets
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


def test_a_notifications_own_try_again_keeps_its_flags_in_the_messages_answer() -> None:
    got = answer_of([GONE, TryAgain("429", retry_after=7.0, throttled=True, server_error=True)])
    assert got == TryAgain(
        "DeviceNotRegistered: gone; 429", retry_after=7.0, throttled=True, server_error=True
    )


def test_a_batch_beside_a_ticket_keeps_each_notifications_try_again() -> None:
    lost = TryAgain("ReadTimeout after the request was sent", maybe_sent=True)
    got = batch_result([TicketOk("tk-1"), lost, Rejected("bad")])
    assert got == Tickets([TicketOk("tk-1"), lost, TicketError("Rejected", "bad", permanent=True)])
    # With no ticket nor refusal of its own, the batch's answer is the whole one.
    assert batch_result([lost, TryAgain("503", retry_after=3.0)]) == TryAgain(
        lost.reason, retry_after=3.0, maybe_sent=True
    )
