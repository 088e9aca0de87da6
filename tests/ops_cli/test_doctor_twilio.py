"""`tepat doctor`'s Twilio check: the credentials fetched against the Twilio sandbox over
HTTP (nothing sent), and no line at all when SMS is not configured."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from tepat.config import Settings
from tepat.doctor import Status, twilio_check
from tepat.sandbox.server import RunningTwilioSandbox, running_sandbox
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox


@pytest.fixture
def server() -> Iterator[RunningTwilioSandbox]:
    with running_sandbox(TwilioSandbox()) as running:
        yield running


def twilio(url: str, token: str = DEFAULT_AUTH_TOKEN, **extra: object) -> Settings:
    return Settings(
        twilio_account_sid=DEFAULT_ACCOUNT_SID,
        twilio_auth_token=SecretStr(token),
        twilio_from="+14155550100",
        twilio_url=url,
        **extra,  # type: ignore[arg-type]
    )


async def test_no_line_without_twilio() -> None:
    assert await twilio_check(Settings(), wait=5) is None


async def test_the_sandbox_with_the_right_credentials(server: RunningTwilioSandbox) -> None:
    check = await twilio_check(twilio(server.base_url), wait=5)
    assert check is not None and check.status is Status.WARN
    assert "accepts the account SID and auth token" in check.detail
    assert "TEPAT_PUBLIC_URL is unset" in check.detail
    check = await twilio_check(twilio(server.base_url, public_url="https://t.example"), wait=5)
    assert check is not None and check.status is Status.WARN
    assert "not Twilio itself" in check.detail and "TEPAT_TWILIO_URL=" in check.hint
    assert server.sandbox.received() == []  # nothing was sent
    assert server.sandbox.stats()["requests"] == 2


async def test_wrong_credentials_fail(server: RunningTwilioSandbox) -> None:
    check = await twilio_check(twilio(server.base_url, token="0" * 32), wait=5)
    assert check is not None and check.status is Status.FAIL
    assert "refused the account SID and auth token (HTTP 401)" in check.detail
    assert "TEPAT_TWILIO_AUTH_TOKEN" in check.hint
    assert "0" * 32 not in check.line()


async def test_unreachable_fails() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    check = await twilio_check(twilio(f"http://127.0.0.1:{port}"), wait=5)
    assert check is not None and check.status is Status.FAIL
    assert check.detail.startswith(f"cannot reach http://127.0.0.1:{port}")
    assert "TEPAT_TWILIO_URL" in check.hint


async def test_the_second_account_is_checked_with_its_own_credentials(
    server: RunningTwilioSandbox,
) -> None:
    """Failover's second account: the same fetch, against its own URL and credentials,
    and its own line; none when it is not configured."""
    first = twilio("http://127.0.0.1:1", public_url="https://t.example")
    assert await twilio_check(first, wait=5, secondary=True) is None
    second = first.model_copy(
        update={
            "twilio_secondary_account_sid": DEFAULT_ACCOUNT_SID,
            "twilio_secondary_auth_token": SecretStr(DEFAULT_AUTH_TOKEN),
            "twilio_secondary_url": server.base_url,
        }
    )
    check = await twilio_check(second, wait=5, secondary=True)
    assert check is not None and check.name == "twilio_secondary", check
    assert check.status is Status.WARN and "accepts the account SID" in check.detail
    assert "TEPAT_TWILIO_SECONDARY_URL=" in check.hint
    wrong = second.model_copy(update={"twilio_secondary_auth_token": SecretStr("0" * 32)})
    check = await twilio_check(wrong, wait=5, secondary=True)
    assert check is not None and check.status is Status.FAIL
    assert "TEPAT_TWILIO_SECONDARY_AUTH_TOKEN" in check.hint
    assert server.sandbox.stats()["requests"] == 2
