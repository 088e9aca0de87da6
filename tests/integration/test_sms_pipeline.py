"""SMS end to end: the send path (outbox, consumer, channel sender, TwilioSmsChannel) to the
Twilio sandbox over HTTP, and its signed callbacks and replies back into the API over HTTP.

The API is served by uvicorn on the test's loop (the runtime's), the sandbox in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from api.app import create_app
from consumers.worker import run_consumer
from scheduler.jobs import run_outbox
from tepat.config import Settings
from tepat.domain.contacts import SuppressionReason
from tepat.domain.models import Message, MessageStatus, User
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.runner import base_url, bind_free_port, serving_app
from tepat.sandbox.server import RunningTwilioSandbox, running_sandbox
from tepat.sandbox.twilio import (
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    TwilioSandbox,
)
from tepat.sandbox.twilio_wire import NumberScript
from tests.support.waiting import eventually

ADMIN_KEY = "sms-pipeline-admin-key-0123456789abcdef"
ANA, BEN, CAI = "+14155552671", "+14155552672", "+14155552673"


@dataclass
class Pipeline:
    rt: Runtime
    sandbox: TwilioSandbox
    api_url: str
    seq: int = 0

    async def sms(self, user: str, body: str = "Invoice 8841 is overdue.") -> str:
        self.seq += 1
        message_id = f"sms-{self.seq}"
        now = self.rt.clock.now()
        message = Message(
            id=message_id,
            user_id=user,
            category="custom",
            label="invoice.overdue",
            title="",
            body=body,
            scheduled_at=now,
            timezone="UTC",
            dedup_key=f"d-{message_id}",
            live_key=f"l-{message_id}",
            channel="sms",
        )
        await self.rt.store.insert_messages([message])
        await self.rt.outbox.flush()
        return message_id

    async def status(self, message_id: str) -> tuple[MessageStatus, str | None]:
        m = await self.rt.store.get_message(message_id)
        assert m is not None
        return m.status, m.status_reason

    async def reaches(self, message_id: str, status: MessageStatus, what: str) -> None:
        async def there() -> bool:
            return (await self.status(message_id))[0] is status

        await eventually(there, timeout=20, what=what)


@pytest.fixture
def twilio() -> Iterator[RunningTwilioSandbox]:
    with running_sandbox(TwilioSandbox()) as running:
        yield running


@pytest.fixture
async def pipeline(tmp_path: Path, twilio: RunningTwilioSandbox) -> AsyncIterator[Pipeline]:
    sock = bind_free_port()
    api_url = base_url(sock)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/t.db",
        broker_url="embedded://",
        admin_api_key=SecretStr(ADMIN_KEY),
        metrics_port=0,
        twilio_account_sid=DEFAULT_ACCOUNT_SID,
        twilio_auth_token=SecretStr(DEFAULT_AUTH_TOKEN),
        twilio_from="+14155550100",
        twilio_url=twilio.base_url,
        twilio_rate=1000,
        public_url=api_url,
    )
    async with open_runtime(settings) as rt:
        for user, phone in (("ana", ANA), ("ben", BEN), ("cai", CAI)):
            await rt.store.upsert_user(User(user, "UTC"))
            await rt.store.set_contact(user, "sms", phone, True, rt.clock.now())
        async with serving_app(create_app(rt, ADMIN_KEY), sock=sock):
            stop = asyncio.Event()
            loops = [
                asyncio.create_task(run_consumer(rt, stop)),
                asyncio.create_task(run_outbox(rt, stop)),
            ]
            try:
                yield Pipeline(rt, twilio.sandbox, api_url)
            finally:
                stop.set()
                await asyncio.gather(*loops, return_exceptions=True)


async def test_an_sms_is_sent_then_delivered_by_its_signed_callbacks(pipeline: Pipeline) -> None:
    message_id = await pipeline.sms("ana")
    await pipeline.reaches(message_id, MessageStatus.DELIVERED, "the SMS delivered")
    [got] = pipeline.sandbox.received()
    assert (got["to"], got["body"]) == (ANA, "Invoice 8841 is overdue.")
    m = await pipeline.rt.store.get_message(message_id)
    assert m is not None and m.ticket_id == got["sid"]
    # Every callback verified (200), none refused.
    await eventually(lambda: len(pipeline.sandbox.callbacks()) == 3, what="three callbacks")
    assert [c["http_status"] for c in pipeline.sandbox.callbacks()] == [200, 200, 200]


async def test_an_undelivered_sms_fails_with_twilios_code(pipeline: Pipeline) -> None:
    pipeline.sandbox.script_number(BEN, NumberScript(status="undelivered", error_code=30003))
    message_id = await pipeline.sms("ben")
    await pipeline.reaches(message_id, MessageStatus.FAILED, "the SMS failed")
    assert await pipeline.status(message_id) == (MessageStatus.FAILED, "twilio_30003")


async def test_refusals_suppress_and_the_next_sms_is_skipped(pipeline: Pipeline) -> None:
    pipeline.sandbox.script_number(CAI, NumberScript(api_error=21610))
    first = await pipeline.sms("cai")
    await pipeline.reaches(first, MessageStatus.FAILED, "the refused SMS failed")
    assert await pipeline.status(first) == (MessageStatus.FAILED, "twilio_21610")

    async def suppressed() -> bool:
        found = await pipeline.rt.store.suppressions_for("sms", [CAI])
        return CAI in found and found[CAI].reason == SuppressionReason.STOP

    await eventually(suppressed, what="the number suppressed")
    second = await pipeline.sms("cai")
    await pipeline.reaches(second, MessageStatus.SKIPPED, "the next SMS skipped")
    assert await pipeline.status(second) == (MessageStatus.SKIPPED, "suppressed")
    assert len(pipeline.sandbox.received()) == 0


async def test_stop_and_start_replies_through_twilio(pipeline: Pipeline) -> None:
    inbound = f"{pipeline.api_url}/v1/providers/twilio/inbound"
    assert await pipeline.sandbox.inbound(inbound, ANA, "STOP") == 200
    stopped = await pipeline.sms("ana")
    await pipeline.reaches(stopped, MessageStatus.SKIPPED, "skipped after STOP")
    assert await pipeline.status(stopped) == (MessageStatus.SKIPPED, "suppressed")
    assert await pipeline.sandbox.inbound(inbound, ANA, "START") == 200
    started = await pipeline.sms("ana")
    await pipeline.reaches(started, MessageStatus.DELIVERED, "delivered after START")
    assert [r["to"] for r in pipeline.sandbox.received()] == [ANA]


async def test_too_long_fails_before_twilio(pipeline: Pipeline) -> None:
    message_id = await pipeline.sms("ana", "ж" * 202)  # 4 UCS-2 segments, 3 allowed
    await pipeline.reaches(message_id, MessageStatus.FAILED, "the long SMS failed")
    assert await pipeline.status(message_id) == (MessageStatus.FAILED, "too_many_segments")
    assert pipeline.sandbox.stats()["requests"] == 0
