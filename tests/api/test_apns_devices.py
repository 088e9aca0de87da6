"""APNs direct, as an app drives it: a deployment configured with an auth key
(``TEPAT_APNS_*``) accepts ``kind: apns`` devices, and a notification reaches the APNs
sandbox over HTTP/2 through the whole send path; APNs's 410 Unregistered deactivates the
device, and the next notification is not sent to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.apns import ApnsSandbox
from tepat.sandbox.server import running_sandbox
from tests.api.conftest import ADMIN, make_settings
from tests.api.helpers import create_user, drain_due, notification_body, ok
from tests.support.fake_push import FakePush

ALICE = "/v1/users/alice"
TOKEN = "ab" * 32


@pytest.fixture
def apns(clock: FakeClock) -> Iterator[tuple[ApnsSandbox, str]]:
    sandbox = ApnsSandbox(clock=clock)
    with running_sandbox(sandbox) as server:
        yield sandbox, server.base_url


@pytest.fixture
async def rt(
    tmp_path: Path, clock: FakeClock, push: FakePush, apns: tuple[ApnsSandbox, str]
) -> AsyncIterator[Runtime]:
    sandbox, base_url = apns
    key = tmp_path / "AuthKey.p8"
    key.write_text(sandbox.signing_key("KEYID12345"))
    settings = make_settings(tmp_path).model_copy(
        update={
            "apns_key_file": str(key),
            "apns_key_id": "KEYID12345",
            "apns_team_id": sandbox.team_id,
            "apns_topic": sandbox.topic,
            "apns_url": base_url,
        }
    )
    async with open_runtime(settings, clock=clock, push=push) as r:
        yield r


async def test_a_notification_reaches_apns_and_unregistered_deactivates_the_device(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush, apns: tuple[ApnsSandbox, str]
) -> None:
    sandbox, _ = apns
    await create_user(client, "alice")
    device = {"push_token": TOKEN, "kind": "apns"}
    await ok(await client.put(f"{ALICE}/devices/phone", json=device, headers=ADMIN))

    await ok(await client.post(f"{ALICE}/notifications", json=notification_body(), headers=ADMIN))
    await drain_due(rt)
    (received,) = sandbox.received()
    assert received["token"] == TOKEN
    assert received["payload"]["aps"]["alert"] == {"title": "Hello", "body": "A one-off"}
    assert received["headers"]["apns-topic"] == sandbox.topic
    assert push.requests == []  # nothing went to Expo

    sandbox.script_token(TOKEN, "Unregistered")
    body = notification_body(idempotency_key="k-2")
    await ok(await client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))
    await drain_due(rt)
    (listed,) = (await client.get(f"{ALICE}/devices", headers=ADMIN)).json()["devices"]
    assert (listed["kind"], listed["active"]) == ("apns", False)

    sandbox.clear_received()
    body = notification_body(idempotency_key="k-3")
    await ok(await client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))
    await drain_due(rt)
    assert sandbox.received() == []
