"""A message goes to each active device through the provider of that device's kind
(``Device.kind``): one user with an Expo and an FCM device, each provider a fake."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tepat.clock import FakeClock
from tepat.domain.errors import DomainError
from tepat.domain.models import Device, Message, MessageStatus, User, slot_key_for
from tepat.ports.push import TicketError
from tepat.runtime import Runtime, open_runtime
from tepat.services import accounts
from tests.api.conftest import make_settings
from tests.support.fake_push import FakePush
from tests.support.messages import AT, make_message

FCM_TOKEN = "fcm-instance:APA91bH-token_1"


class FakeFcm(FakePush):
    """Answers at send time: no receipts to poll, so none of its tickets are kept."""

    max_receipt_batch = 0


@pytest.fixture
def expo() -> FakePush:
    return FakePush()


@pytest.fixture
def fcm() -> FakeFcm:
    return FakeFcm()


@pytest.fixture
async def rt(tmp_path: Path, expo: FakePush, fcm: FakeFcm) -> AsyncIterator[Runtime]:
    settings = make_settings(tmp_path)
    clock = FakeClock(AT)
    async with open_runtime(settings, clock=clock, push=expo, push_providers={"fcm": fcm}) as r:
        await r.store.upsert_user(User("u1", "UTC"))
        await accounts.register_device(r, "u1", "phone", "ExponentPushToken[a]")
        await accounts.register_device(r, "u1", "pixel", FCM_TOKEN, kind="fcm")
        yield r


async def send(rt: Runtime) -> Message:
    m = make_message("k1", nominal_at=AT, due_at=AT)
    m = dataclasses.replace(m, slot_key=slot_key_for(m))
    await rt.store.insert_messages([m])
    await rt.dispatcher.channels.process(await rt.store.claim([m.id], AT))
    stored = await rt.store.get_message(m.id)
    assert stored is not None
    return stored


async def test_each_device_gets_the_message_through_its_kinds_provider(
    rt: Runtime, expo: FakePush, fcm: FakeFcm
) -> None:
    m = await send(rt)
    assert [r.push_token for r in expo.requests] == ["ExponentPushToken[a]"]
    assert [r.push_token for r in fcm.requests] == [FCM_TOKEN]
    assert m.status is MessageStatus.SENT
    # Only Expo's ticket waits for a receipt: FCM's answer was final.
    assert [t.device_id for t in await rt.store.tickets_for_message(m.id)] == ["phone"]


async def test_a_dead_token_deactivates_only_its_device(rt: Runtime, fcm: FakeFcm) -> None:
    fcm.refuse_with = TicketError("UNREGISTERED", "gone", permanent=True, deactivate_device=True)
    m = await send(rt)
    assert m.status is MessageStatus.SENT  # the Expo device took it
    devices = {d.device_id: d for d in await rt.store.list_devices("u1")}
    assert (devices["pixel"].active, devices["pixel"].deactivated_reason) == (
        False,
        "UNREGISTERED",
    )
    assert devices["phone"].active


async def test_a_device_whose_kind_lost_its_provider_is_refused_and_kept(
    tmp_path: Path,
) -> None:
    # Registered while an APNs provider was configured; this process has none.
    async with open_runtime(make_settings(tmp_path), clock=FakeClock(AT), push=FakePush()) as rt:
        await rt.store.upsert_user(User("u1", "UTC"))
        now = rt.clock.now()
        await rt.store.register_device(
            Device("u1", "iphone", "ab" * 32, kind="apns", created_at=now)
        )
        m = await send(rt)
        assert m.status is MessageStatus.FAILED
        assert "no apns push provider" in (m.last_error or "")
        [d] = await rt.store.list_devices("u1")
        assert d.active


async def test_registration_refuses_a_kind_without_a_provider_or_a_misshapen_token(
    rt: Runtime,
) -> None:
    with pytest.raises(DomainError) as no_provider:
        await accounts.register_device(rt, "u1", "iphone", "ab" * 32, kind="apns")
    assert no_provider.value.field == "kind"
    with pytest.raises(DomainError) as unknown:
        await accounts.register_device(rt, "u1", "iphone", "ab" * 32, kind="pager")
    assert unknown.value.field == "kind"
    with pytest.raises(DomainError) as misshapen:
        await accounts.register_device(rt, "u1", "pixel", "ExponentPushToken[a]", kind="fcm")
    assert misshapen.value.field == "push_token"
