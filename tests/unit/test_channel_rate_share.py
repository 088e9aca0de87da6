"""Consumer processes share e-mail and SMS providers' rates as they share Expo's."""

from __future__ import annotations

from datetime import UTC, datetime

from tepat.adapters.smtp_email import SmtpConfig, SmtpEmailChannel
from tepat.adapters.smtp_message import parse_from
from tepat.adapters.twilio_sms import TwilioSmsChannel
from tepat.clock import FakeClock
from tepat.domain.categories import Categories
from tepat.domain.retry import RetryPolicy
from tepat.services.sending.channel_sender import ChannelSender


async def _nothing() -> None:
    return None


async def test_a_share_of_the_rate_reaches_the_email_and_sms_buckets() -> None:
    clock = FakeClock(datetime(2027, 1, 1, tzinfo=UTC))
    sms = TwilioSmsChannel(
        account_sid="AC" + "a" * 32,
        auth_token="t" * 32,
        clock=clock,
        from_number="+15005550006",
        rate=10.0,
    )
    sender_address = parse_from("Tepat <no-reply@tepat.example>")
    email = SmtpEmailChannel(
        SmtpConfig(host="smtp.example", sender=sender_address, rate=50.0), clock
    )
    sender = ChannelSender(
        None,  # type: ignore[arg-type]  # no store call here
        Categories(),
        clock,
        {"sms": sms, "email": email},
        retry=RetryPolicy(),
        flush=_nothing,
    )
    sender.set_rate_share(0.5)
    assert (sms.limiter.rate, email.bucket.rate) == (5.0, 25.0)
    sender.set_rate_share(1.0)  # a process left: back to the whole rate, never above
    assert (sms.limiter.rate, email.bucket.rate) == (10.0, 50.0)
    await sms.close()
    await email.close()
