"""A device registers with its kind (``expo``, ``fcm``, ``apns``, ``webpush``): the token
is checked for that kind, and a kind this deployment has no provider for is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest

from api.schemas import PushKind
from tepat.clock import FakeClock
from tepat.domain.models import PUSH_KINDS
from tepat.runtime import Runtime, open_runtime
from tests.api.conftest import ADMIN, error_fields, make_settings
from tests.api.helpers import create_user, ok
from tests.support.fake_push import FakePush

DEVICE = "/v1/users/alice/devices/d1"
SUBSCRIPTION = json.dumps(
    {"endpoint": "https://push.example/s/1", "keys": {"p256dh": "BNcR", "auth": "tBHI"}}
)
TOKENS = {
    "expo": "ExponentPushToken[a]",
    "fcm": "cAbC1:APA91bH-x_y",
    "apns": "ab" * 32,
    "webpush": SUBSCRIPTION,
}


@pytest.fixture
async def rt(tmp_path: Path, clock: FakeClock, push: FakePush) -> AsyncIterator[Runtime]:
    """A deployment with a provider for every kind."""
    direct = {kind: FakePush() for kind in PUSH_KINDS if kind != "expo"}
    settings = make_settings(tmp_path)
    async with open_runtime(settings, clock=clock, push=push, push_providers=direct) as r:
        yield r


@pytest.fixture(autouse=True)
async def _alice(client: httpx.AsyncClient) -> None:
    await create_user(client, "alice")


def test_the_schema_names_every_kind() -> None:
    assert get_args(PushKind) == PUSH_KINDS


@pytest.mark.parametrize("kind", PUSH_KINDS)
async def test_a_device_of_each_kind_round_trips(client: httpx.AsyncClient, kind: str) -> None:
    body = {"push_token": TOKENS[kind], "kind": kind}
    put = await ok(await client.put(DEVICE, json=body, headers=ADMIN))
    assert (put.json()["kind"], put.json()["push_token"]) == (kind, TOKENS[kind])
    listed = (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"]
    assert [(d["device_id"], d["kind"]) for d in listed] == [("d1", kind)]


async def test_the_kind_defaults_to_expo(client: httpx.AsyncClient) -> None:
    put = await ok(await client.put(DEVICE, json={"push_token": TOKENS["expo"]}, headers=ADMIN))
    assert put.json()["kind"] == "expo"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"push_token": TOKENS["expo"], "kind": "fcm"}, "push_token"),
        ({"push_token": TOKENS["fcm"]}, "push_token"),  # an FCM token named expo
        ({"push_token": TOKENS["fcm"], "kind": "apns"}, "push_token"),
        ({"push_token": "https://push.example/s/1", "kind": "webpush"}, "push_token"),
        ({"push_token": TOKENS["fcm"], "kind": "pager"}, "kind"),
        ({"push_token": TOKENS["fcm"], "kind": None}, "kind"),
    ],
)
async def test_a_token_is_checked_for_its_kind(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    r = await client.put(DEVICE, json=body, headers=ADMIN)
    assert error_fields(r) == {field}, r.text


def subscription(endpoint: str) -> str:
    return json.dumps({"endpoint": endpoint, "keys": {"p256dh": "BNcR", "auth": "tBHI"}})


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://10.0.0.1/push/1",
        "https://127.0.0.1:8443/push/1",
        "https://[::1]/push/1",
        "https://169.254.169.254/latest/meta-data/",
        "https://metadata.google.internal/push/1",
    ],
)
async def test_a_web_push_endpoint_tepat_may_not_reach_is_refused(
    client: httpx.AsyncClient, endpoint: str
) -> None:
    """The browser names the endpoint, so the user does: one on a private address is a
    422 naming ``push_token`` (the rule of webhooks' URLs), never registered."""
    body = {"push_token": subscription(endpoint), "kind": "webpush"}
    r = await client.put(DEVICE, json=body, headers=ADMIN)
    assert error_fields(r) == {"push_token"}, r.text
    assert "endpoint" in r.text and "TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS" in r.text
    assert (await client.get("/v1/users/alice/devices", headers=ADMIN)).json()["devices"] == []


async def test_a_web_push_endpoint_on_a_public_address_is_accepted(
    client: httpx.AsyncClient,
) -> None:
    body = {"push_token": subscription("https://93.184.215.14/push/1"), "kind": "webpush"}
    await ok(await client.put(DEVICE, json=body, headers=ADMIN))


async def test_the_bulk_import_keeps_each_devices_kind(client: httpx.AsyncClient) -> None:
    devices = [{"device_id": k, "push_token": TOKENS[k], "kind": k} for k in PUSH_KINDS]
    body = [{"user_id": "bulky", "timezone": "UTC", "devices": devices}]
    r = await ok(await client.post("/v1/bulk/users", json=body, headers=ADMIN))
    assert [i["status"] for i in r.json()["items"]] == ["created"], r.text
    listed = (await client.get("/v1/users/bulky/devices", headers=ADMIN)).json()["devices"]
    assert {d["device_id"]: d["kind"] for d in listed} == {k: k for k in PUSH_KINDS}


async def test_the_bulk_import_names_a_misshapen_token(client: httpx.AsyncClient) -> None:
    devices = [{"device_id": "p", "push_token": TOKENS["expo"], "kind": "apns"}]
    body = [{"user_id": "bulky", "timezone": "UTC", "devices": devices}]
    r = await client.post("/v1/bulk/users", json=body, headers=ADMIN)
    [item] = r.json()["items"]
    assert [e["field"] for e in item["problem"]["errors"]] == ["items[0].devices[0].push_token"]
