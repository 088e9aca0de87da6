"""The e-mail channel against a real SMTP server (aiosmtpd, started by each test).

Plain SMTP, STARTTLS and implicit TLS with a certificate made in the test (trusted
through ``TEPAT_SMTP_CA_FILE``), authentication, and the replies that decide outcomes:
250, 421, 550 5.1.1, a 5.7.1 policy block, a reply lost after the content.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import SecretStr

from tepat.adapters.smtp_email import SmtpConfig, SmtpEmailChannel
from tepat.adapters.smtp_message import parse_from
from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.models import Message
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Refused, Withheld
from tepat.ports.try_again import TryAgain
from tepat.wiring import build_email_channel
from tests.support.messages import email_message
from tests.support.selfsigned import SelfSigned, self_signed
from tests.support.smtp_server import SmtpServer, free_port
from tests.support.waiting import eventually, stays_false

START = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
SECRET = "unsubscribe-secret-0123456789abcdef0123456789"
FROM = "Tepat Shop <no-reply@shop.example>"

# aiosmtpd warns when AUTH is offered outside STARTTLS: its implicit-TLS server.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")


def message(mid: str = "0123456789abcdef01234567", html: str | None = "<p>Paid</p>") -> Message:
    return email_message(mid, "Order 8841 paid", "Your order 8841 is paid.", html, START)


def settings(port: int, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "smtp_host": "127.0.0.1",
        "smtp_port": port,
        "smtp_tls": "none",
        "smtp_from": FROM,
        "smtp_timeout": 10,
        "public_url": "https://tepat.example",
        "unsubscribe_secret": SecretStr(SECRET),
    }
    values.update(extra)
    return Settings(**values)


def channel(port: int, clock: FakeClock | None = None, **extra: Any) -> SmtpEmailChannel:
    built = build_email_channel(settings(port, **extra), clock or FakeClock(START))
    assert isinstance(built, SmtpEmailChannel)
    return built


async def send_one(m: Message, to: str, port: int, **extra: Any) -> ChannelOutcome:
    """``m`` to ``to`` through a channel of its own (``extra``: its settings), closed after."""
    email = channel(port, **extra)
    try:
        [outcome] = await email.send([Outgoing(m, to)])
    finally:
        await email.close()
    assert not isinstance(outcome, Withheld)  # nothing here stops it being sent
    return outcome


async def send_with_login(
    cert: SelfSigned, tmp_path: Path, tls: Literal["starttls", "implicit"], password: str
) -> tuple[ChannelOutcome, SmtpServer]:
    """One message through a relay over ``tls`` that trusts our CA and takes ``relay-user``
    with ``relay-pass``, logging in with ``password``; and the relay, for what it saw."""
    ca_file, _ = cert.write(tmp_path, "ca")
    with SmtpServer(tls, cert, tmp_path, auth=("relay-user", "relay-pass")) as server:
        outcome = await send_one(
            message(),
            "ana@example.com",
            server.port,
            smtp_tls=tls,
            smtp_ca_file=str(ca_file),
            smtp_username="relay-user",
            smtp_password=SecretStr(password),
        )
    return outcome, server


@pytest.fixture
def server() -> Iterator[SmtpServer]:
    with SmtpServer() as s:
        yield s


@pytest.fixture(scope="module")
def cert() -> SelfSigned:
    return self_signed()


async def test_both_parts_headers_and_message_id(server: SmtpServer) -> None:
    email = channel(server.port, unsubscribe_mailto="unsubscribe@shop.example")
    url = "https://tepat.example/u/abc.def"
    try:
        [outcome] = await email.send([Outgoing(message(), "ana@example.com", url)])
    finally:
        await email.close()
    assert outcome == Accepted(provider_id="<0123456789abcdef01234567@shop.example>")
    [got] = server.received
    assert got.mail_from == "no-reply@shop.example"
    assert got.rcpt_tos == ["ana@example.com"]
    mail = got.mail
    assert mail.get_content_type() == "multipart/alternative"
    assert mail["Subject"] == "Order 8841 paid"
    assert mail["To"] == "ana@example.com"
    assert mail["From"] == FROM
    assert mail["Message-ID"] == "<0123456789abcdef01234567@shop.example>"
    assert mail["X-Tepat-Message-Id"] == "0123456789abcdef01234567"
    assert mail["List-Unsubscribe"] == (
        "<https://tepat.example/u/abc.def>,"
        " <mailto:unsubscribe@shop.example?subject=unsubscribe%20abc.def>"
    )
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text = mail.get_body(("plain",))
    html = mail.get_body(("html",))
    assert text is not None and text.get_content().strip() == "Your order 8841 is paid."
    assert html is not None and html.get_content().strip() == "<p>Paid</p>"


async def test_list_unsubscribe_on_the_wire_is_angle_bracketed_uris_folded_at_whitespace(
    server: SmtpServer,
) -> None:
    """RFC 2369/8058 readers parse the raw header: ``<https://...>``, never encoded-words
    (which the email package makes of any value longer than a line)."""
    email = channel(server.port, unsubscribe_mailto="unsubscribe@shop.example")
    token = "v1." + "a" * 40 + "." + "b" * 43  # as long as a real token
    url = f"https://tepat.example/u/{token}"
    try:
        await email.send([Outgoing(message(), "ana@example.com", url)])
    finally:
        await email.close()
    [got] = server.received
    head = got.data.split(b"\r\n\r\n", 1)[0]
    assert b"=?" not in head
    assert (
        b"\r\nList-Unsubscribe: <" + url.encode() + b">,\r\n"
        b" <mailto:unsubscribe@shop.example?subject=unsubscribe%20" + token.encode() + b">\r\n"
    ) in head
    assert b"\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" in head


async def test_text_only_and_no_unsubscribe_headers_without_url(server: SmtpServer) -> None:
    outcome = await send_one(message(html=None), "ana@example.com", server.port)
    assert isinstance(outcome, Accepted)
    mail = server.received[0].mail
    assert mail.get_content_type() == "text/plain"
    assert mail.get_content().strip() == "Your order 8841 is paid."
    assert mail["List-Unsubscribe"] is None and mail["List-Unsubscribe-Post"] is None


async def test_421_is_try_again_and_the_retry_keeps_the_message_id(server: SmtpServer) -> None:
    server.replies["busy@example.com"] = "421 4.7.0 Try again later, closing connection"
    email = channel(server.port)
    try:
        [first] = await email.send([Outgoing(message(), "busy@example.com")])
        assert first == TryAgain(reason="smtp_421", maybe_sent=False, throttled=True)
        assert server.received == []
        del server.replies["busy@example.com"]
        [second] = await email.send([Outgoing(message(), "busy@example.com")])
    finally:
        await email.close()
    assert isinstance(second, Accepted)
    assert server.received[0].mail["Message-ID"] == "<0123456789abcdef01234567@shop.example>"
    # 421 closes the connection: the retry opened another.
    assert server.handler.connections == 2


async def test_450_mailbox_busy_is_try_again_not_throttled(server: SmtpServer) -> None:
    server.replies["full@example.com"] = "450 4.2.1 Mailbox busy"
    outcome = await send_one(message(), "full@example.com", server.port)
    assert outcome == TryAgain(reason="smtp_450", maybe_sent=False, throttled=False)


async def test_550_unknown_user_is_refused_with_suppress_and_the_connection_kept(
    server: SmtpServer,
) -> None:
    server.replies["dead@example.com"] = "550 5.1.1 <dead@example.com>: Recipient unknown"
    email = channel(server.port)
    try:
        outcomes = await email.send(
            [Outgoing(message("aa" * 12), "dead@example.com")],
        )
        outcomes += await email.send([Outgoing(message("bb" * 12), "ana@example.com")])
    finally:
        await email.close()
    assert outcomes[0] == Refused(reason="smtp_550", suppress="hard_bounce")
    assert isinstance(outcomes[1], Accepted)
    assert [r.rcpt_tos for r in server.received] == [["ana@example.com"]]
    assert server.handler.connections == 1  # RSET after the refusal; the next one reused it


async def test_policy_block_after_data_fails_without_suppressing(server: SmtpServer) -> None:
    server.handler.data_replies["ana@example.com"] = "550 5.7.1 Message rejected as spam"
    outcome = await send_one(message(), "ana@example.com", server.port)
    assert outcome == Refused(reason="smtp_550", suppress=None)


async def test_reply_lost_after_the_content_is_maybe_sent(server: SmtpServer) -> None:
    server.handler.drop_data_for.add("ana@example.com")
    email = channel(server.port)
    try:
        [outcome] = await email.send([Outgoing(message(), "ana@example.com")])
        assert outcome == TryAgain(reason="smtp_no_reply", maybe_sent=True)
        server.handler.drop_data_for.clear()
        [again] = await email.send([Outgoing(message(), "ana@example.com")])
    finally:
        await email.close()
    assert isinstance(again, Accepted)
    # The relay may have it twice; both under one Message-ID, so the receiving side can
    # tell (and our bounce handling maps either to the same message).
    assert {r.mail["Message-ID"] for r in server.received} == {
        "<0123456789abcdef01234567@shop.example>"
    }


async def test_a_batch_goes_out_over_a_few_reused_connections(server: SmtpServer) -> None:
    email = channel(server.port, smtp_connections=3)
    items = [Outgoing(message(f"{i:024x}"), f"user{i}@example.com") for i in range(12)]
    try:
        outcomes = await email.send(items)
    finally:
        await email.close()
    assert all(isinstance(o, Accepted) for o in outcomes)
    assert sorted(r.rcpt_tos[0] for r in server.received) == sorted(i.target for i in items)
    assert 1 <= server.handler.connections <= 3


async def test_relay_down_is_try_again_never_an_exception() -> None:
    outcome = await send_one(message(), "ana@example.com", free_port())
    assert outcome == TryAgain(reason="smtp_connect")


async def test_a_connection_the_relay_dropped_while_idle_is_opened_again() -> None:
    port = free_port()
    email = channel(port)
    try:
        with SmtpServer(port=port) as first:
            [one] = await email.send([Outgoing(message("aa" * 12), "ana@example.com")])
        assert isinstance(one, Accepted) and len(first.received) == 1
        # The relay restarted: the pooled connection is dead, nothing was sent on it.
        with SmtpServer(port=port) as second:
            [two] = await email.send([Outgoing(message("bb" * 12), "ana@example.com")])
    finally:
        await email.close()
    assert isinstance(two, Accepted)
    assert len(second.received) == 1


async def test_the_rate_limit_paces_sends_on_the_clock(server: SmtpServer) -> None:
    clock = FakeClock(START)
    email = channel(server.port, clock, smtp_rate=2)
    items = [Outgoing(message(f"{i:024x}"), f"user{i}@example.com") for i in range(3)]
    try:
        task = asyncio.create_task(email.send(items))
        await eventually(lambda: len(server.received) == 2, what="the bucket's two")
        assert await stays_false(lambda: len(server.received) > 2)
        clock.advance(0.5)  # one more token at 2/s
        outcomes = await task
    finally:
        await email.close()
    assert all(isinstance(o, Accepted) for o in outcomes)
    assert len(server.received) == 3


async def test_starttls_with_a_self_signed_relay_and_auth(cert: SelfSigned, tmp_path: Path) -> None:
    outcome, server = await send_with_login(cert, tmp_path, "starttls", "relay-pass")
    assert isinstance(outcome, Accepted)
    assert server.logins == ["relay-user"]
    assert len(server.received) == 1


async def test_starttls_refuses_a_relay_it_does_not_trust(cert: SelfSigned, tmp_path: Path) -> None:
    with SmtpServer("starttls", cert, tmp_path) as server:
        # no CA file: the system's CAs
        outcome = await send_one(message(), "ana@example.com", server.port, smtp_tls="starttls")
        assert outcome == TryAgain(reason="smtp_connect")
        assert server.received == []


async def test_wrong_password_is_try_again(cert: SelfSigned, tmp_path: Path) -> None:
    outcome, server = await send_with_login(cert, tmp_path, "starttls", "wrong")
    # Our configuration, not the message: retried (and logged), never failed.
    assert outcome == TryAgain(reason="smtp_connect_535")
    assert server.received == []


async def test_implicit_tls_with_auth(cert: SelfSigned, tmp_path: Path) -> None:
    outcome, server = await send_with_login(cert, tmp_path, "implicit", "relay-pass")
    assert isinstance(outcome, Accepted)
    assert server.logins == ["relay-user"]
    assert server.received[0].mail["Subject"] == "Order 8841 paid"


async def test_a_non_ascii_local_part_is_refused_without_a_connection(
    server: SmtpServer,
) -> None:
    outcome = await send_one(message(), "josé@example.com", server.port)
    assert outcome == Refused(reason="smtp_address_not_ascii")
    assert server.handler.connections == 0


def test_no_channel_without_a_host() -> None:
    assert build_email_channel(Settings(), FakeClock(START)) is None


def test_a_login_without_tls_is_refused_unless_allowed() -> None:
    sender = parse_from("Shop <no-reply@shop.example>")
    with pytest.raises(ValueError, match="in clear"):
        SmtpConfig("relay.example", sender, tls="none", username="u", password="p")
    allowed = SmtpConfig(
        "relay.example", sender, tls="none", username="u", password="p", allow_plaintext_auth=True
    )
    assert allowed.username == "u"
