"""Every route issue 19 touched x every kind of credential, each answer asserted.

Credentials, in column order: the admin key, app key ``billing`` (every event type),
app key ``marketing`` (``order.paid`` only), alice's token, bob's token, none. Every
path names alice or an event of billing's; a fresh scene for each cell.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.runtime import Runtime
from tests.api.conftest import ADMIN, bearer
from tests.api.helpers import api_with, notification_body, ok, reminder_body, scene
from tests.api.test_hostile_users import APP_SETTINGS, BILLING, BOB_TOKEN, MARKETING, event

CREDENTIALS = ["admin", "billing", "marketing", "alice", "bob", "none"]

# (method, path, body): statuses in CREDENTIALS order
MATRIX: list[tuple[str, str, Any, tuple[int, ...]]] = [
    ("GET", "/v1/users/alice", None, (200, 403, 403, 200, 403, 401)),
    ("PUT", "/v1/users/alice", {"timezone": "Asia/Jakarta"}, (200, 403, 403, 200, 403, 401)),
    (
        "PUT",
        "/v1/users/alice/devices/phone-2",
        {"push_token": "ExponentPushToken[p2]"},
        (200, 403, 403, 200, 403, 401),
    ),
    (
        "PUT",
        "/v1/users/alice/devices/phone-3",
        {"push_token": BOB_TOKEN},
        (200, 403, 403, 409, 403, 401),
    ),
    ("GET", "/v1/users/alice/devices", None, (200, 403, 403, 200, 403, 401)),
    ("DELETE", "/v1/users/alice/devices/phone-1", None, (204, 403, 403, 204, 403, 401)),
    (
        "PUT",
        "/v1/users/alice/reminders/dinner",
        reminder_body(local_time="19:00"),
        (201, 403, 403, 201, 403, 401),
    ),
    ("GET", "/v1/users/alice/reminders", None, (200, 403, 403, 200, 403, 401)),
    ("DELETE", "/v1/users/alice/reminders/lunch", None, (204, 403, 403, 204, 403, 401)),
    (
        "PUT",
        "/v1/users/alice/contacts/sms",
        {"address": "+6281234567890"},
        (200, 403, 403, 200, 403, 401),
    ),
    (
        "PUT",
        "/v1/users/alice/contacts/sms",
        {"address": "+6281234567890", "verified": True},
        (200, 403, 403, 403, 403, 401),
    ),
    ("GET", "/v1/users/alice/contacts", None, (200, 403, 403, 200, 403, 401)),
    ("DELETE", "/v1/users/alice/contacts/email", None, (204, 403, 403, 204, 403, 401)),
    (
        "POST",
        "/v1/users/alice/notifications",
        notification_body(),
        (201, 403, 403, 403, 403, 401),
    ),
    ("GET", "/v1/users/alice/messages", None, (200, 403, 403, 200, 403, 401)),
    ("POST", "/v1/events", event("ev-new"), (202, 202, 202, 403, 403, 401)),
    ("POST", "/v1/events", event("otp-new", "otp.requested"), (202, 202, 403, 403, 403, 401)),
    # billing's event "ev-b" is stored as "billing:ev-b"
    ("GET", "/v1/events/ev-b", None, (404, 200, 404, 403, 403, 401)),
    ("GET", "/v1/events/billing:ev-b", None, (200, 404, 404, 403, 403, 401)),
    ("GET", "/v1/templates", None, (200, 403, 403, 403, 403, 401)),
    ("GET", "/v1/webhooks", None, (200, 403, 403, 403, 403, 401)),
    ("GET", "/v1/suppressions", None, (200, 403, 403, 403, 403, 401)),
]


def _headers(credential: str, clock: FakeClock) -> dict[str, str]:
    return {
        "admin": ADMIN,
        "billing": BILLING,
        "marketing": MARKETING,
        "alice": bearer("alice", clock),
        "bob": bearer("bob", clock),
        "none": {},
    }[credential]


@pytest.mark.parametrize("credential", CREDENTIALS)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    MATRIX,
    ids=[f"{m} {p} {i}" for i, (m, p, _, _) in enumerate(MATRIX)],
)
async def test_each_credential_gets_its_answer(
    rt: Runtime,
    clock: FakeClock,
    method: str,
    path: str,
    body: Any,
    expected: tuple[int, ...],
    credential: str,
) -> None:
    async with api_with(rt, **APP_SETTINGS) as client:
        await _scene(client)
        r = await client.request(method, path, json=body, headers=_headers(credential, clock))
        want = expected[CREDENTIALS.index(credential)]
        assert r.status_code == want, r.text
        if want >= 400:
            assert r.headers["content-type"].startswith("application/problem+json")


async def _scene(client: httpx.AsyncClient) -> None:
    """alice (a device, a reminder, an e-mail address), bob (a device), billing's event."""
    await scene(client)
    await ok(
        await client.put(
            "/v1/users/bob/devices/phone", json={"push_token": BOB_TOKEN}, headers=ADMIN
        )
    )
    await ok(
        await client.put(
            "/v1/users/alice/contacts/email", json={"address": "ana@example.com"}, headers=ADMIN
        )
    )
    await ok(await client.post("/v1/events", json=event("ev-b"), headers=BILLING))
