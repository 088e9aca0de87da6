"""Failover end to end, over HTTP to real sandboxes on the fake clock: the primary
provider down (every request a 503), a recipient with a secondary still gets their
notification once, through it, at once; one without waits, then goes once the primary is
back. Push: Expo down, a phone with an FCM fallback token. SMS: two Twilio accounts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

from pydantic import SecretStr

from tepat.clock import FakeClock
from tepat.config import Settings
from tepat.domain.models import Message, MessageStatus, User
from tepat.sandbox.fcm import FcmSandbox
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.twilio import DEFAULT_ACCOUNT_SID, DEFAULT_AUTH_TOKEN, TwilioSandbox
from tepat.services import accounts
from tests.support.pipeline import pipeline
from tests.support.waiting import drive, eventually, stays_false

START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)
NINE = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
OUTAGE = 10_000  # requests refused: the whole test long
FCM_TOKEN = "fcm-token-of-anas-phone"


async def test_expo_down_a_phone_with_an_fcm_token_gets_it_once_the_other_waits(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START)
    with running_sandbox(FcmSandbox(clock=clock)) as fcm:
        account = tmp_path / "fcm.json"
        account.write_text(json.dumps(fcm.sandbox.service_account(fcm.base_url, "proj-1")))
        async with pipeline(
            tmp_path,
            clock=clock,
            fcm_credentials_file=str(account),
            fcm_url=fcm.base_url,
            breaker_threshold=2,
        ) as p:
            _, ana = await p.add_user("ana", reminders=[("r", "meal", time(9, 0))])
            _, ben = await p.add_user("ben", reminders=[("r", "meal", time(9, 0))])
            await accounts.register_device(
                p.rt, "ana", ana.device_id, ana.push_token, fallback=("fcm", FCM_TOKEN)
            )
            await p.rt.creator.plan_window(START, START + timedelta(hours=24))
            p.sandbox.fail_next(OUTAGE, status=503)
            p.clock.set(NINE)
            [for_ana], [for_ben] = await p.messages("ana"), await p.messages("ben")

            async def ana_sent() -> bool:
                return await p.status_of(for_ana.id) is MessageStatus.SENT

            await eventually(ana_sent, what="ana's notification sent through FCM")
            assert p.clock.now() == NINE  # in the same attempt: no retry delay

            async def ben_is(status: MessageStatus) -> bool:
                return await p.status_of(for_ben.id) is status

            async def ben_waits_for_a_retry() -> bool:
                # Pending after its first try, or already claimed for the retry when its
                # backoff was shorter than TEPAT_CLAIM_AHEAD_SECONDS (sent at its instant,
                # which this clock has not reached).
                m = await p.rt.store.get_message(for_ben.id)
                assert m is not None
                return (m.status, m.attempts) in (
                    (MessageStatus.PENDING, 1),
                    (MessageStatus.SENDING, 2),
                )

            # Expo stays down a minute: ben's (no fallback) waits, unsent.
            await eventually(ben_waits_for_a_retry, what="ben's first try")
            for _ in range(6):
                p.clock.advance(timedelta(seconds=10))
                assert await stays_false(lambda: ben_is(MessageStatus.SENT), window=0.2)
            assert p.received_for(ben.push_token) == []

            p.sandbox.clear_scripts()  # Expo is back

            async def ben_sent() -> bool:
                return await ben_is(MessageStatus.SENT)

            await drive(p.clock, ben_sent, step=timedelta(seconds=5), what="ben's sent")
            assert [r["message"]["token"] for r in fcm.sandbox.received()] == [FCM_TOKEN]
            assert [r["status"] for r in p.received_for(ben.push_token)] == ["ok"]
            assert p.received_for(ana.push_token) == []


SECOND_SID = "AC" + "b" * 32
SECOND_TOKEN = "second-account-auth-token"
ANA, BEN = "+14155552671", "+14155552672"


async def test_twilio_down_an_sms_goes_through_the_second_account(tmp_path: Path) -> None:
    clock = FakeClock(NINE)
    first = TwilioSandbox(clock=clock)
    second = TwilioSandbox(clock=clock, account_sid=SECOND_SID, auth_token=SECOND_TOKEN)
    with running_sandbox(first) as one, running_sandbox(second) as two:
        settings = Settings(
            database_url=f"sqlite:///{tmp_path}/t.db",
            broker_url="embedded://",
            twilio_account_sid=DEFAULT_ACCOUNT_SID,
            twilio_auth_token=SecretStr(DEFAULT_AUTH_TOKEN),
            twilio_from="+14155550100",
            twilio_url=one.base_url,
            twilio_secondary_account_sid=SECOND_SID,
            twilio_secondary_auth_token=SecretStr(SECOND_TOKEN),
            twilio_secondary_url=two.base_url,
            twilio_rate=1000,
            breaker_threshold=2,
        )
        async with pipeline(tmp_path, clock=clock, **settings.model_dump()) as p:
            await p.rt.store.upsert_user(User("ana", "UTC"))
            await p.rt.store.set_contact("ana", "sms", ANA, True, clock.now())
            first.fail_next(OUTAGE, status=503)
            ids = []
            for n in range(3):
                message = Message(
                    id=f"sms-{n}",
                    user_id="ana",
                    category="custom",
                    label="invoice.overdue",
                    title="",
                    body=f"Invoice {n} is overdue.",
                    scheduled_at=clock.now(),
                    timezone="UTC",
                    dedup_key=f"d-{n}",
                    live_key=f"l-{n}",
                    channel="sms",
                )
                await p.rt.store.insert_messages([message])
                ids.append(message.id)
            await p.rt.outbox.flush()

            async def all_sent() -> bool:
                return all([await p.status_of(i) is MessageStatus.SENT for i in ids])

            await eventually(all_sent, what="every SMS sent through the second account")
            assert sorted(m["body"] for m in second.received()) == [
                f"Invoice {n} is overdue." for n in range(3)
            ]
            assert first.received() == []
            assert await stays_false(lambda: len(second.received()) > 3)
