"""`tepat doctor`'s SMTP check against a real SMTP server (aiosmtpd): connect, TLS and
login, nothing sent; each failure names what to fix; no line without e-mail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tepat.config import Settings
from tepat.doctor import Check, Status, smtp_check
from tests.support.selfsigned import SelfSigned, self_signed
from tests.support.smtp_server import SmtpServer, free_port

pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")


@pytest.fixture(scope="module")
def cert() -> SelfSigned:
    return self_signed()


def smtp(port: int, **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "smtp_host": "127.0.0.1",
        "smtp_port": port,
        "smtp_tls": "none",
        "smtp_from": "no-reply@shop.example",
        "public_url": "https://tepat.example",
        "unsubscribe_secret": SecretStr("s" * 32),
    }
    values.update(extra)
    return Settings(**values)


async def test_no_line_without_email() -> None:
    assert await smtp_check(Settings(), wait=5) is None


async def login_check(
    cert: SelfSigned, tmp_path: Path, password: str
) -> tuple[Check | None, SmtpServer]:
    """The check against a STARTTLS server that takes ``user``/``pass``, logging in with
    ``password``; and the server, for what it saw."""
    ca, _ = cert.write(tmp_path, "ca")
    with SmtpServer("starttls", cert, tmp_path, auth=("user", "pass")) as server:
        settings = smtp(
            server.port,
            smtp_tls="starttls",
            smtp_ca_file=str(ca),
            smtp_username="user",
            smtp_password=SecretStr(password),
        )
        return await smtp_check(settings, wait=5), server


async def test_starttls_and_login_pass_and_send_nothing(cert: SelfSigned, tmp_path: Path) -> None:
    check, server = await login_check(cert, tmp_path, "pass")
    assert check is not None and check.status is Status.OK, check
    assert "accepts the login; nothing sent" in check.detail
    assert server.logins == ["user"] and server.received == []


async def test_a_wrong_password_names_the_credentials(cert: SelfSigned, tmp_path: Path) -> None:
    check, _ = await login_check(cert, tmp_path, "wrong-password")
    assert check is not None and check.status is Status.FAIL
    assert "refused the login (535" in check.detail
    assert "TEPAT_SMTP_PASSWORD" in check.hint
    assert "wrong-password" not in check.line()


async def test_an_untrusted_certificate_names_the_ca_file(cert: SelfSigned, tmp_path: Path) -> None:
    with SmtpServer("starttls", cert, tmp_path) as server:
        check = await smtp_check(smtp(server.port, smtp_tls="starttls"), wait=5)
    assert check is not None and check.status is Status.FAIL, check
    assert "certificate does not verify" in check.detail
    assert "TEPAT_SMTP_CA_FILE" in check.hint


async def test_starttls_against_a_plain_relay_names_the_tls_setting() -> None:
    with SmtpServer() as server:
        check = await smtp_check(smtp(server.port, smtp_tls="starttls"), wait=5)
    assert check is not None and check.status is Status.FAIL, check
    assert "TEPAT_SMTP_TLS" in check.hint


async def test_unreachable_fails() -> None:
    check = await smtp_check(smtp(free_port()), wait=5)
    assert check is not None and check.status is Status.FAIL
    assert "TEPAT_SMTP_HOST" in check.hint


async def test_the_second_relay_is_checked_with_its_url(cert: SelfSigned, tmp_path: Path) -> None:
    """Failover's second relay: the same connect and login, at its URL's host, port and
    credentials (TLS the first relay's), on its own line; none when it is not set."""
    ca, _ = cert.write(tmp_path, "ca")
    first = smtp(free_port(), smtp_tls="starttls", smtp_ca_file=str(ca))
    assert await smtp_check(first, wait=5, secondary=True) is None
    with SmtpServer("starttls", cert, tmp_path, auth=("user", "pass")) as server:
        url = f"smtp://user:{{}}@127.0.0.1:{server.port}"
        second = first.model_copy(update={"smtp_secondary_url": url.format("pass")})
        check = await smtp_check(second, wait=5, secondary=True)
        assert check is not None and check.name == "smtp_secondary", check
        assert check.status is Status.OK and "accepts the login" in check.detail
        wrong = first.model_copy(update={"smtp_secondary_url": url.format("wrong")})
        check = await smtp_check(wrong, wait=5, secondary=True)
        assert check is not None and check.status is Status.FAIL
        assert "TEPAT_SMTP_SECONDARY_URL" in check.hint
        assert server.logins == ["user"] and server.received == []
