"""SMTP replies to typed outcomes, and the e-mail a message becomes (pure)."""

from __future__ import annotations

import dataclasses
import email
import email.policy
from datetime import UTC, datetime

import pytest

from tepat.adapters.smtp_message import build_email, list_unsubscribe, parse_from
from tepat.adapters.smtp_outcomes import enhanced_status, outcome_for_reply
from tepat.domain.email_events import message_id_from_header
from tepat.domain.models import Message
from tepat.ports.channel import Refused
from tepat.ports.try_again import TryAgain
from tests.support.messages import email_message

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("code", "text", "stage", "expected"),
    [
        (421, "4.7.0 Too many connections", "rcpt", TryAgain("smtp_421", throttled=True)),
        (450, "4.2.1 Mailbox busy", "rcpt", TryAgain("smtp_450")),
        (451, "Local error in processing", "data", TryAgain("smtp_451")),
        (452, "4.5.3 Too many recipients", "rcpt", TryAgain("smtp_452", throttled=True)),
        (451, "4.7.1 Rate limit exceeded", "mail", TryAgain("smtp_451", throttled=True)),
        (550, "5.1.1 No such user", "rcpt", Refused("smtp_550", suppress="hard_bounce")),
        (550, "Mailbox unavailable", "rcpt", Refused("smtp_550", suppress="hard_bounce")),
        (551, "User not local", "rcpt", Refused("smtp_551", suppress="hard_bounce")),
        (553, "Mailbox name not allowed", "rcpt", Refused("smtp_553", suppress="hard_bounce")),
        (554, "5.1.2 Bad destination system", "data", Refused("smtp_554", "hard_bounce")),
        (550, "5.2.1 Mailbox disabled", "rcpt", Refused("smtp_550", suppress="hard_bounce")),
        (550, "5.7.1 Rejected as spam", "data", Refused("smtp_550")),
        (552, "5.2.2 Mailbox full", "rcpt", Refused("smtp_552")),
        (554, "Transaction failed", "data", Refused("smtp_554")),
        (550, "5.1.8 Bad sender", "mail", Refused("smtp_550_sender")),
        (354, "go ahead", "rcpt", TryAgain("smtp_354")),
    ],
)
def test_reply_to_outcome(code: int, text: str, stage: str, expected: object) -> None:
    assert outcome_for_reply(code, text, stage) == expected  # type: ignore[arg-type]


def test_enhanced_status() -> None:
    assert enhanced_status("5.1.1 <x@y>: no such user") == (5, 1, 1)
    assert enhanced_status("  4.7.0 slow down") == (4, 7, 0)
    assert enhanced_status("Mailbox unavailable 5.1.1") is None
    assert enhanced_status("3.1.1 nonsense") is None


def message(title: str = "Paid", html: str | None = None) -> Message:
    return email_message("0123456789abcdef01234567", title, "Body", html, START)


def test_a_line_break_in_the_title_never_starts_a_header() -> None:
    mail = build_email(
        message("Paid\r\nBcc: everyone@example.com"),
        "a@example.com",
        parse_from("x@y.example"),
        START,
    )
    assert mail["Subject"] == "Paid Bcc: everyone@example.com"
    assert mail["Bcc"] is None


def test_message_id_round_trip() -> None:
    sender = parse_from("Shop <no-reply@shop.example>")
    mail = build_email(message(), "a@example.com", sender, START)
    assert mail["Message-ID"] == "<0123456789abcdef01234567@shop.example>"
    assert message_id_from_header(mail["Message-ID"]) == "0123456789abcdef01234567"
    assert message_id_from_header("not a message id") is None
    assert message_id_from_header("<a@b@c>") is None


def test_list_unsubscribe_without_mailto() -> None:
    assert list_unsubscribe("https://t.example/u/tok", None) == "<https://t.example/u/tok>"


@pytest.mark.parametrize(
    "value", ["", "no at sign", "a@b", "a@b.example, c@d.example", "x\n@y.example", "@y.example"]
)
def test_parse_from_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        parse_from(value)


def test_parse_from_display_name() -> None:
    sender = parse_from("Tepat Shop <no-reply@shop.example>")
    assert (sender.display_name, sender.address, sender.domain) == (
        "Tepat Shop",
        "no-reply@shop.example",
        "shop.example",
    )


def test_non_ascii_subject_and_parts_are_encoded() -> None:
    m = message("Pagamento recebido ✓ — 8841", html="<p>Olá, <b>Ana</b> 👋</p>")
    m = dataclasses.replace(m, body="Olá Ana 👋")
    raw = build_email(m, "ana@example.com", parse_from("Loja <no-reply@loja.example>"), START)
    data = raw.as_bytes()
    assert data.isascii()  # 7-bit on the wire: any relay takes it
    parsed = email.message_from_bytes(data, policy=email.policy.default)
    assert parsed["Subject"] == "Pagamento recebido ✓ — 8841"
    text, html = parsed.get_body(("plain",)), parsed.get_body(("html",))
    assert text is not None and text.get_content().strip() == "Olá Ana 👋"
    assert html is not None and "👋" in html.get_content()
