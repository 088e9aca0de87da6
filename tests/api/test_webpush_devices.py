"""Web Push, as an app drives it: a deployment configured with a VAPID key
(``TEPAT_WEBPUSH_*``) accepts ``kind: webpush`` devices whose token is the browser's
subscription, and a notification reaches the Web Push sandbox encrypted to that
subscription; the push service's 410 Gone deactivates the device, and the next
notification is not sent to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.runtime import Runtime, open_runtime
from tepat.sandbox.server import running_sandbox
from tepat.sandbox.webpush import WebPushSandbox
from tests.api.conftest import ADMIN, make_settings
from tests.api.helpers import create_user, drain_due, notification_body, ok
from tests.support.fake_push import FakePush

ALICE = "/v1/users/alice"


@pytest.fixture
def webpush(clock: FakeClock) -> Iterator[tuple[WebPushSandbox, str]]:
    sandbox = WebPushSandbox(clock=clock)
    with running_sandbox(sandbox) as server:
        yield sandbox, server.base_url


@pytest.fixture
async def rt(
    tmp_path: Path, clock: FakeClock, push: FakePush, webpush: tuple[WebPushSandbox, str]
) -> AsyncIterator[Runtime]:
    sandbox, base_url = webpush
    key = tmp_path / "vapid.pem"
    key.write_text(sandbox.vapid_key())
    settings = make_settings(tmp_path).model_copy(
        update={
            "webpush_vapid_private_key_file": str(key),
            "webpush_vapid_subject": "mailto:ops@tepat.test",
            "webpush_url": base_url,
        }
    )
    async with open_runtime(settings, clock=clock, push=push) as r:
        yield r


async def test_a_notification_reaches_the_browser_and_gone_deactivates_the_device(
    client: httpx.AsyncClient, rt: Runtime, push: FakePush, webpush: tuple[WebPushSandbox, str]
) -> None:
    sandbox, _ = webpush
    await create_user(client, "alice")
    device = {"push_token": sandbox.subscribe("laptop"), "kind": "webpush"}
    await ok(await client.put(f"{ALICE}/devices/laptop", json=device, headers=ADMIN))

    await ok(await client.post(f"{ALICE}/notifications", json=notification_body(), headers=ADMIN))
    await drain_due(rt)
    (received,) = sandbox.received()
    assert received["subscription"] == "laptop"
    assert received["payload"]["title"] == "Hello"
    assert received["payload"]["body"] == "A one-off"
    assert push.requests == []  # nothing went to Expo

    sandbox.script_subscription("laptop", 410)
    body = notification_body(idempotency_key="k-2")
    await ok(await client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))
    await drain_due(rt)
    (listed,) = (await client.get(f"{ALICE}/devices", headers=ADMIN)).json()["devices"]
    assert (listed["kind"], listed["active"]) == ("webpush", False)

    sandbox.clear_received()
    body = notification_body(idempotency_key="k-3")
    await ok(await client.post(f"{ALICE}/notifications", json=body, headers=ADMIN))
    await drain_due(rt)
    assert sandbox.received() == []
