"""FCM direct, as an app drives it: a deployment configured with a service account
(``TEPAT_FCM_*``) accepts ``kind: fcm`` devices, and a notification reaches the FCM
sandbox over real HTTP through the whole send path; FCM's UNREGISTERED deactivates the
device, and the next notification is not sent to it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.fcm import FcmSandbox
from tepat.sandbox.server import running_sandbox
from tests.api.conftest import ADMIN, make_settings
from tests.api.helpers import create_user, drain_due, notification_body, ok
from tests.support.fake_push import FakePush

ALICE = "/v1/users/alice"
TOKEN = "cAbC1:APA91bH-alice_phone"


@pytest.fixture
def fcm(clock: FakeClock) -> Iterator[tuple[FcmSandbox, str]]:
    sandbox = FcmSandbox(clock=clock)
    with running_sandbox(sandbox) as server:
        yield sandbox, server.base_url


@pytest.fixture
async def rt(
    tmp_path: Path, clock: FakeClock, push: FakePush, fcm: tuple[FcmSandbox, str]
) -> AsyncIterator[Runtime]:
    sandbox, base_url = fcm
    account = tmp_path / "service-account.json"
    account.write_text(json.dumps(sandbox.service_account(base_url, "proj-1")))
    settings = make_settings(tmp_path).model_copy(
        update={"fcm_credentials_file": str(account), "fcm_url": base_url}
    )
    async with open_runtime(settings, clock=clock, push=push) as r:
        yield r


async def test_a_notification_reaches_fcm_and_unregistered_deactivates_the_device(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush, fcm: tuple[FcmSandbox, str]
) -> None:
    sandbox, _ = fcm
    await create_user(client, "alice")
    device = {"push_token": TOKEN, "kind": "fcm"}
    await ok(await client.put(f"{ALICE}/devices/phone", json=device, headers=ADMIN))

    await ok(await client.post(f"{ALICE}/notifications", json=notification_body(), headers=ADMIN))
    await drain_due(rt)
    (received,) = sandbox.received()
    assert received["message"]["token"] == TOKEN
    assert received["message"]["notification"] == {"title": "Hello", "body": "A one-off"}
    assert push.requests == []  # nothing went to Expo

    sandbox.script_token(TOKEN, "UNREGISTERED")
    body = notification_body(idempotency_key="k-2")
    await ok(await client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))
    await drain_due(rt)
    (listed,) = (await client.get(f"{ALICE}/devices", headers=ADMIN)).json()["devices"]
    assert (listed["kind"], listed["active"]) == ("fcm", False)

    sandbox.clear_received()
    body = notification_body(idempotency_key="k-3")
    await ok(await client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))
    await drain_due(rt)
    assert sandbox.received() == []
